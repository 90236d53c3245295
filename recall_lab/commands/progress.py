"""Progress as the commands show it: a rich bar on a terminal, plain lines every few seconds when
stdout is not one (CI, nohup, pipes), where a live bar would print nothing until the end."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

PLAIN_EVERY_S = 5.0


def _dur(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


class Ticker:
    """Calls `line()` and prints it every `every` seconds from a daemon thread until closed."""

    def __init__(self, console, line: Callable[[], str], every: float = PLAIN_EVERY_S) -> None:
        self.console, self.line, self.every = console, line, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

        self.last: str | None = None

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.say(self.line())

    def say(self, text: str) -> None:
        """Print `text` unless it is the line printed last (no repeats at the end)."""
        if text != self.last:
            self.last = text
            self.console.print(text, highlight=False)

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=self.every + 1)


class TrainProgress:
    """Fed by train_run's progress events: a rich bar, or `step 200/2000 loss ... ` lines."""

    def __init__(self, console, label: str, total: int, start: int = 0) -> None:
        self.console, self.label, self.total = console, label, total
        self.tty = console.is_terminal
        self.last: dict = {"step": start}
        self.valid = "-"
        self.t0 = time.monotonic()
        self.start = start
        if self.tty:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]:.3f}  acc {task.fields[acc]:.3f}  "
                           "valid {task.fields[valid]}  {task.fields[tps]:,.0f} tok/s"),
                TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False,
            )
            self.task = self.progress.add_task(label, total=total, completed=start, loss=0.0,
                                               acc=0.0, valid="-", tps=0.0)
        else:
            self.ticker = Ticker(console, self.line)

    def line(self) -> str:
        e = self.last
        done = e["step"] - self.start
        elapsed = time.monotonic() - self.t0
        eta = elapsed / done * (self.total - e["step"]) if done > 0 else None
        parts = [f"{self.label}: step {e['step']}/{self.total}"]
        if "loss" in e:
            parts.append(f"loss {e['loss']:.3f} acc {e['acc']:.3f} valid {self.valid} "
                         f"{e['tokens_per_s']:,.0f} tok/s")
        parts.append(f"elapsed {_dur(elapsed)}" + (f" eta {_dur(eta)}" if eta is not None
                                                    else ""))
        return ", ".join(parts)

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
        if exc[0] is None:
            self.ticker.say(self.line())
        return None

    def __call__(self, e: dict) -> None:
        self.last = e
        if "valid" in e:
            self.valid = f"{e['valid']['acc']:.3f}"
        if self.tty:
            self.progress.update(self.task, completed=e["step"], loss=e["loss"], acc=e["acc"],
                                 tps=e["tokens_per_s"], valid=self.valid)


class SweepProgress:
    """A sweep's monitor: one bar over runs (done / running / failed / ETA; running runs count
    by their fraction of steps), or plain lines; one line per finished or failed run."""

    def __init__(self, console, label: str) -> None:
        self.console, self.label = console, label
        self.tty = console.is_terminal
        self.lock = threading.Lock()
        self.total = self.skipped = 0
        self.done = self.failed = 0
        self.running_frac: dict[str, float] = {}
        self.t0 = time.monotonic()
        self.bar = self.ticker = None

    # -- Monitor protocol
    def start(self, total: int, todo: list[str]) -> None:
        self.total, self.skipped = total, total - len(todo)
        self.t0 = time.monotonic()
        self.console.print(f"{self.label}: {total} runs, {self.skipped} finished already (or left "
                           "out by --only), "
                           f"{len(todo)} to run", highlight=False)
        if not todo:
            return
        if self.tty:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            # the eta is ours (`eta`), not rich's: none until a run has finished
            self.bar = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(),
                TextColumn("{task.fields[text]}"), TimeElapsedColumn(),
                TextColumn("{task.fields[eta]}"), console=self.console, transient=False,
            )
            self.task = self.bar.add_task(self.label, total=len(todo), text=self._counts(),
                                          eta="")
            self.bar.__enter__()
        else:
            self.ticker = Ticker(self.console, self.line)
            self.ticker.__enter__()

    def running(self, name: str) -> None:
        with self.lock:
            self.running_frac.setdefault(name, 0.0)
        self._refresh()

    def step(self, name: str, step: int, steps: int) -> None:
        with self.lock:
            self.running_frac[name] = step / max(steps, 1)
        self._refresh()

    def finished(self, name: str, result: dict) -> None:
        with self.lock:
            self.running_frac.pop(name, None)
            if result["status"] == "done":
                self.done += 1
                s = result["summary"]
                msg = (f"done {name}: valid {s['valid']['acc']:.3f} test {s['test']['acc']:.3f}"
                       f" ({s.get('stopped', 'steps')} at step {s.get('stopped_at', s['steps'])})")
            else:
                self.failed += 1
                msg = f"FAILED {name}: {result['error']}"
        self.console.print(msg, highlight=False)
        self._refresh()

    # -- drawing
    def _counts(self) -> str:
        return (f"{self.done} done, {len(self.running_frac)} running, {self.failed} failed"
                f" of {self.total - self.skipped}")

    def eta(self) -> float | None:
        """Seconds left, once a run has finished; None before. A run's first steps include its
        start-up (spawn, imports, held-out sets), so extrapolating from them gave a first eta of
        2h for a 50-second demo."""
        with self.lock:
            if self.done + self.failed == 0:
                return None
            progress = self.done + self.failed + sum(self.running_frac.values())
        todo = self.total - self.skipped
        return (time.monotonic() - self.t0) / progress * max(todo - progress, 0)

    def line(self) -> str:
        with self.lock:
            counts = self._counts()
        elapsed = time.monotonic() - self.t0
        eta = self.eta()
        return (f"{self.label}: {counts}, elapsed {_dur(elapsed)}"
                + (f", eta {_dur(eta)}" if eta is not None else ""))

    def _refresh(self) -> None:
        if self.bar is not None:
            with self.lock:
                progress = self.done + self.failed + sum(self.running_frac.values())
                text = self._counts()
            eta = self.eta()
            self.bar.update(self.task, completed=progress, text=text,
                            eta=f"eta {_dur(eta)}" if eta is not None else "")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
        if self.ticker is not None:
            self.ticker.__exit__(None, None, None)


class CountProgress:
    """Progress over a count (samples, items): a transient rich bar, or `label: n/total` lines."""

    def __init__(self, console, label: str, total: int) -> None:
        self.console, self.label, self.total = console, label, total
        self.done = 0
        self.t0 = time.monotonic()
        if console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self.bar = Progress("[progress.description]{task.description}", BarColumn(),
                                MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                                transient=True)
            self.task = self.bar.add_task(label, total=total)
            self.ticker = None
        else:
            self.bar = None
            self.ticker = Ticker(console, self.line)

    def line(self) -> str:
        return (f"{self.label}: {self.done:,}/{self.total:,}, "
                f"elapsed {_dur(time.monotonic() - self.t0)}")

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
    status), `label: running, elapsed 35s` lines every few seconds otherwise."""

    def __init__(self, console, label: str) -> None:
        self.t0 = time.monotonic()
        self.ticker = None if console.is_terminal else Ticker(
            console, lambda: f"{label}: running, elapsed {_dur(time.monotonic() - self.t0)}")

    def __enter__(self) -> Running:
        if self.ticker is not None:
            self.ticker.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.ticker is not None:
            self.ticker.__exit__(*exc)
