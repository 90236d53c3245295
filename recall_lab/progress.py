"""What a person sees while work runs: one implementation for `train`, `finetune`, `sweep`,
`place`, `demo`, `generate` and the Python API.

On a terminal, a rich bar (a run's steps, or a sweep's runs: done, running, failed) with an ETA.
Where stdout is not a terminal (CI, nohup, pipes, where a live bar prints nothing until the
end), a plain line at most every `PIPED_EVERY_S` seconds, and only when something other than
the clock changed: a sweep that waits on one long evaluation prints nothing new.

The ETA (`Eta`) comes from measured step times: each run's steps per second between its first
and its latest reported step (a run's first step carries its start-up: spawn, imports, building,
held-out sets; extrapolating from it gave a first ETA of 2 h for a 50-second demo), the start-up
and the final evaluation measured on the runs that finished, and the runs still queued laid out
on the workers. Before a second step of any run is timed there is no ETA; while work remains it
never reads "0s" (a run past its predicted end reads "finishing").

Every class takes `clock` (default `time.monotonic`), so tests drive the ETA and the piped
lines with a fake clock and no sleeps.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

PIPED_EVERY_S = 30.0  # piped: at most one progress line this often
POLL_S = 1.0  # how often the piped ticker looks whether a line is due

Clock = Callable[[], float]


def _dur(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def eta_text(seconds: float | None, remaining: bool = True) -> str:
    """"eta 2m30s"; "eta: timing the first steps" before any is timed; "eta: finishing" once
    the estimate has run out while work remains (never "0s" then); "" when nothing remains."""
    if not remaining:
        return ""
    if seconds is None:
        return "eta: timing the first steps"
    return f"eta {_dur(seconds)}" if seconds >= 1.0 else "eta: finishing"


# ---- the estimate -------------------------------------------------------------------------------

def makespan(busy: list[float], queued: list[float], workers: int) -> float:
    """When the last of `workers` is done: each busy worker's seconds left (`busy`; more of
    them than workers queue too), then each `queued` run's seconds, in order, to the worker
    that frees first (as the engine hands out runs)."""
    workers = max(1, workers)
    order = sorted(busy)
    free = order[:workers] + [0.0] * max(workers - len(order), 0)
    heapq.heapify(free)
    for cost in order[workers:] + list(queued):
        heapq.heappush(free, heapq.heappop(free) + cost)
    return max(free)


@dataclass
class _Timing:
    """What was seen of one run: when it started, its first and latest (time, step) report."""

    steps: int  # planned steps (updated by its reports)
    started: float | None = None
    first: tuple[float, int] | None = None
    last: tuple[float, int] | None = None
    ended: float | None = None

    def per_step(self) -> float | None:
        if self.first is None or self.last is None or self.last[1] <= self.first[1]:
            return None
        return (self.last[0] - self.first[0]) / (self.last[1] - self.first[1])


class Eta:
    """Seconds left of a set of runs (`planned`: run name -> steps) on `workers` workers, from
    their measured step times.

    - A run's seconds per step: between its first and its latest report (at least two steps).
      Runs not timed yet (queued ones) take the mean over the timed runs (all their steps over
      all their seconds).
    - Overheads measured on finished runs: before the first report (start-up) and after the
      last step (the best checkpoint on the test set, the length tests), averaged; zero until
      a run has finished.
    - A running run has its steps left at its own rate (less the time since its report) plus
      the final overhead; a queued run its steps at the mean rate plus both overheads. The
      queued runs go to the worker that frees first; the ETA is when the last worker is done.
    - A run that reports no steps (Ray's tasks) is timed from its summary when it finishes."""

    def __init__(self, planned: dict[str, int], workers: int = 1,
                 clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self.workers = max(1, workers)
        self.runs = {name: _Timing(int(steps)) for name, steps in planned.items()}
        self.done: set[str] = set()
        self.measured: dict[str, float] = {}  # from summaries: seconds per step

    def running(self, name: str) -> None:
        t = self.runs.setdefault(name, _Timing(0))
        if t.started is None:
            t.started = self.clock()

    def step(self, name: str, step: int, steps: int) -> None:
        now = self.clock()
        t = self.runs.setdefault(name, _Timing(steps))
        t.steps = steps
        if t.started is None:
            t.started = now
        if t.first is None:
            t.first = (now, step)
        t.last = (now, step)

    def finished(self, name: str, steps_done: int | None = None,
                 train_s: float | None = None, failed: bool = False) -> None:
        """A run ended; a failed one's end is no final evaluation: its overheads are not
        counted (its steps still are)."""
        t = self.runs.setdefault(name, _Timing(steps_done or 0))
        t.ended = None if failed else self.clock()
        if t.per_step() is None and steps_done and train_s:
            self.measured[name] = train_s / steps_done
        self.done.add(name)

    # -- the model
    def mean_per_step(self) -> float | None:
        secs = steps = 0.0
        for t in self.runs.values():
            if t.per_step() is not None:
                secs += t.last[0] - t.first[0]
                steps += t.last[1] - t.first[1]
        rates = list(self.measured.values())
        if steps > 0:
            return secs / steps
        return sum(rates) / len(rates) if rates else None

    def overheads(self) -> tuple[float, float]:
        """(start-up, end) seconds of a run, averaged over the finished runs that were timed."""
        heads, tails = [], []
        for name in self.done:
            t = self.runs[name]
            rate = t.per_step()
            if rate is None or t.ended is None:
                continue
            if t.started is not None:
                heads.append(max(t.first[0] - t.started - t.first[1] * rate, 0.0))
            tails.append(max(t.ended - t.last[0] - (t.steps - t.last[1]) * rate, 0.0))
        return (sum(heads) / len(heads) if heads else 0.0,
                sum(tails) / len(tails) if tails else 0.0)

    def remaining(self) -> bool:
        return len(self.done) < len(self.runs)

    def seconds_left(self) -> float | None:
        """None before any step is timed; 0 when nothing remains."""
        if not self.remaining():
            return 0.0
        mean = self.mean_per_step()
        if mean is None:
            return None
        head, tail = self.overheads()
        now = self.clock()
        busy, queued = [], []
        for name, t in self.runs.items():
            if name in self.done:
                continue
            if t.started is None:
                queued.append(t.steps * mean + head + tail)
                continue
            if t.last is None:  # starting up: what is left of the start-up, then its steps
                left = max(head - (now - t.started), 0.0) + t.steps * mean
            else:
                at, step = t.last
                left = max((t.steps - step) * (t.per_step() or mean) - (now - at), 0.0)
            busy.append(left + tail)
        return makespan(busy, queued, self.workers)

    def text(self) -> str:
        return eta_text(self.seconds_left(), self.remaining())


# ---- piped lines --------------------------------------------------------------------------------

class Ticker:
    """Plain progress lines for a console that is not a terminal: `line()` is printed when its
    `key()` (what the line says, without the clock) changed and the last line is at least
    `every` seconds old (the first change prints at once). `tick()` decides; a daemon thread
    calls it every `poll` seconds (`poll=None`: no thread, the caller ticks)."""

    def __init__(self, console, line: Callable[[], str], key: Callable[[], object] | None = None,
                 every: float = PIPED_EVERY_S, poll: float | None = POLL_S,
                 clock: Clock = time.monotonic) -> None:
        self.console, self.line, self.key, self.every = console, line, key or line, every
        self.clock, self.poll = clock, poll
        self.lock = threading.Lock()
        self.last: str | None = None
        self.last_key: object = None
        self.printed_at: float | None = None
        self._stop = threading.Event()
        self._thread = (threading.Thread(target=self._loop, daemon=True) if poll is not None
                        else None)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll):
            self.tick()

    def tick(self) -> bool:
        """Print the line if it is due; whether it printed."""
        with self.lock:
            key = self.key()
            now = self.clock()
            due = self.printed_at is None or now - self.printed_at >= self.every
            if not due or (self.printed_at is not None and key == self.last_key):
                return False
            self.last_key, self.printed_at = key, now
        self.say(self.line())
        return True

    def say(self, text: str) -> None:
        """Print `text` unless it is the line printed last (no repeats at the end)."""
        if text != self.last:
            self.last = text
            self.console.print(text, highlight=False, markup=False)

    def __enter__(self) -> Ticker:
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=(self.poll or 0) + 1)


# ---- one run ------------------------------------------------------------------------------------

class TrainProgress:
    """Fed by train_run's progress events: a rich bar, or `step 200/2000 loss ...` lines; its
    ETA is `Eta` over the one run (after the last step: "evaluating on the test set")."""

    def __init__(self, console, label: str, total: int, start: int = 0,
                 clock: Clock = time.monotonic, poll: float | None = POLL_S) -> None:
        self.console, self.label, self.total = console, label, total
        self.tty = console.is_terminal
        self.clock = clock
        self.last: dict = {"step": start}
        self.valid = "-"
        self.t0 = clock()
        self.eta = Eta({label: total}, 1, clock)
        self.eta.running(label)
        self.ticker = None
        self.closed = False
        if self.tty:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self.progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]:.3f}  acc {task.fields[acc]:.3f}  "
                           "valid {task.fields[valid]}  {task.fields[tps]:,.0f} tok/s"),
                TimeElapsedColumn(), TextColumn("{task.fields[eta]}"), console=console,
                transient=False,
            )
            self.task = self.progress.add_task(label, total=total, completed=start, loss=0.0,
                                               acc=0.0, valid="-", tps=0.0, eta="")
        else:
            self.ticker = Ticker(console, self.line, self.key, poll=poll, clock=clock)

    def eta_text(self) -> str:
        if self.closed:
            return ""
        if self.last["step"] >= self.total:
            return "evaluating on the test set"
        return self.eta.text()

    def key(self) -> tuple:
        return (self.last["step"], self.valid)

    def line(self) -> str:
        e = self.last
        parts = [f"{self.label}: step {e['step']}/{self.total}"]
        if "loss" in e:
            parts.append(f"loss {e['loss']:.3f} acc {e['acc']:.3f} valid {self.valid} "
                         f"{e['tokens_per_s']:,.0f} tok/s")
        parts.append(f"elapsed {_dur(self.clock() - self.t0)}")
        eta = self.eta_text()
        return ", ".join(parts + ([eta] if eta else []))

    def __enter__(self) -> TrainProgress:
        if self.tty:
            self.progress.__enter__()
        else:
            self.ticker.__enter__()
        return self

    def __exit__(self, *exc):
        if self.tty:
            return self.progress.__exit__(*exc)
        self.ticker.__exit__(*exc)
        if exc[0] is None:  # the closing line: where the run ended
            self.closed = True
            self.ticker.say(self.line())
        return None

    def __call__(self, e: dict) -> None:
        self.last = e
        self.eta.step(self.label, e["step"], self.total)
        if "valid" in e:
            self.valid = f"{e['valid']['acc']:.3f}"
        if self.tty:
            self.progress.update(self.task, completed=e["step"], loss=e["loss"], acc=e["acc"],
                                 tps=e["tokens_per_s"], valid=self.valid, eta=self.eta_text())
        else:
            self.ticker.tick()


# ---- a sweep ------------------------------------------------------------------------------------

class SweepProgress:
    """A sweep's monitor (`engine.Monitor`): one bar over its runs (done / running / failed /
    ETA; a running run counts by its fraction of steps), or plain lines; one line per finished
    or failed run. `left`: what the runs outside this sweep's slice are (`sweep --only`'s, or a
    placement's later rounds)."""

    def __init__(self, console, label: str, left: str = "left out by --only",
                 clock: Clock = time.monotonic, poll: float | None = POLL_S) -> None:
        self.console, self.label, self.left_word = console, label, left
        self.clock, self.poll = clock, poll
        self.tty = console.is_terminal
        self.lock = threading.Lock()
        self.total = self.todo = 0
        self.done = self.failed = 0
        self.running_frac: dict[str, float] = {}
        self.t0 = clock()
        self.eta = Eta({}, 1, clock)
        self.bar = self.ticker = None

    # -- Monitor protocol
    def start(self, total: int, todo: list[str], *, finished: int | None = None,
              left: int = 0, steps: dict[str, int] | None = None, workers: int = 1) -> None:
        """`finished`: runs finished before this sweep (default: all not in `todo` nor
        `left`); `steps`: each run's planned steps; `workers`: runs at a time."""
        self.total, self.todo = total, len(todo)
        before = total - len(todo) - left if finished is None else finished
        self.t0 = self.clock()
        self.eta = Eta({n: (steps or {}).get(n, 0) for n in todo}, workers, self.clock)
        parts = [f"{len(todo)} to run"]
        if before:
            parts.append(f"{before} finished before this sweep")
        if left:
            parts.append(f"{left} {self.left_word}")
        self.console.print(f"{self.label}: {total} run{'s' if total != 1 else ''}: "
                           + ", ".join(parts), highlight=False, markup=False)
        if not todo:
            return
        if self.tty:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(),
                TextColumn("{task.fields[text]}"), TimeElapsedColumn(),
                TextColumn("{task.fields[eta]}"), console=self.console, transient=False,
            )
            self.task = self.bar.add_task(self.label, total=len(todo), text=self._counts(),
                                          eta="")
            self.bar.__enter__()
        else:
            self.ticker = Ticker(self.console, self.line, self.key, poll=self.poll,
                                 clock=self.clock)
            self.ticker.__enter__()

    def running(self, name: str) -> None:
        with self.lock:
            self.running_frac.setdefault(name, 0.0)
            self.eta.running(name)
        self._refresh()

    def step(self, name: str, step: int, steps: int) -> None:
        with self.lock:
            self.running_frac[name] = step / max(steps, 1)
            self.eta.step(name, step, steps)
        self._refresh()

    def finished(self, name: str, result: dict) -> None:
        with self.lock:
            self.running_frac.pop(name, None)
            if result["status"] == "done":
                self.done += 1
                s = result["summary"]
                self.eta.finished(name, s.get("stopped_at", s.get("steps")),
                                  s.get("wall_s_this_session"))
                msg = (f"done {name}: valid {s['valid']['acc']:.3f} test {s['test']['acc']:.3f}"
                       f" ({s.get('stopped', 'steps')} at step {s.get('stopped_at', s['steps'])})")
            else:
                self.failed += 1
                self.eta.finished(name, failed=True)
                msg = f"FAILED {name}: {result['error']}"
        self.console.print(msg, highlight=False, markup=False)
        self._refresh()

    # -- drawing
    def _counts(self) -> str:
        return (f"{self.done} done, {len(self.running_frac)} running, {self.failed} failed"
                f" of {self.todo}")

    def seconds_left(self) -> float | None:
        with self.lock:
            return self.eta.seconds_left()

    def key(self) -> tuple:
        """What a piped line says, without the clock: the counts and the steps reported."""
        with self.lock:
            return (self.done, self.failed, tuple(sorted(self.running_frac.items())))

    def line(self) -> str:
        with self.lock:
            counts = self._counts()
            eta = self.eta.text()
        elapsed = self.clock() - self.t0
        return f"{self.label}: {counts}, elapsed {_dur(elapsed)}" + (f", {eta}" if eta else "")

    def _refresh(self) -> None:
        if self.bar is not None:
            with self.lock:
                progress = self.done + self.failed + sum(self.running_frac.values())
                text = self._counts()
                eta = self.eta.text()
            self.bar.update(self.task, completed=progress, text=text, eta=eta)
        elif self.ticker is not None:
            self.ticker.tick()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
        if self.ticker is not None:
            self.ticker.__exit__(None, None, None)


# ---- counts and waits without steps -------------------------------------------------------------

class CountProgress:
    """Progress over a count (samples, items): a transient rich bar, or `label: n/total` lines."""

    def __init__(self, console, label: str, total: int, clock: Clock = time.monotonic) -> None:
        self.console, self.label, self.total = console, label, total
        self.done = 0
        self.clock = clock
        self.t0 = clock()
        if console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self.bar = Progress("[progress.description]{task.description}", BarColumn(),
                                MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                                transient=True)
            self.task = self.bar.add_task(label, total=total)
            self.ticker = None
        else:
            self.bar = None
            self.ticker = Ticker(console, self.line, lambda: self.done, clock=clock)

    def line(self) -> str:
        return (f"{self.label}: {self.done:,}/{self.total:,}, "
                f"elapsed {_dur(self.clock() - self.t0)}")

    def advance(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.advance(self.task, n)

    def __enter__(self) -> CountProgress:
        (self.bar or self.ticker).__enter__()
        return self

    def __exit__(self, *exc) -> None:
        (self.bar or self.ticker).__exit__(*exc)


class Running:
    """For work without a count (a benchmark): nothing on a terminal (the work prints its own
    status), a `label: running, elapsed 35s` line every `PIPED_EVERY_S` otherwise (the one
    thing that changes is the time: the line says the work is alive)."""

    def __init__(self, console, label: str, clock: Clock = time.monotonic) -> None:
        self.t0 = clock()
        self.ticker = None if console.is_terminal else Ticker(
            console, lambda: f"{label}: running, elapsed {_dur(clock() - self.t0)}",
            clock=clock)

    def __enter__(self) -> Running:
        if self.ticker is not None:
            self.ticker.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.ticker is not None:
            self.ticker.__exit__(*exc)
