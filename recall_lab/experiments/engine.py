"""Running an experiment's runs: a local process pool or Ray tasks, over the same run folders.

`run_sweep(experiment, root)` looks at `root/<experiment>/<run name>/` for every run of the grid:
a folder with `summary.json` is finished and skipped; one with a resume checkpoint is resumed
(`train_run(resume=True)`: the same result as an uninterrupted run); anything else is started
afresh. It keeps `root/<experiment>/sweep.json`, the index of the grid: every run with its config,
hash, status (`done`, `failed`, `pending`, `running`) and, for a failure, the error line and the
traceback. A failing run does not stop the others; the caller turns the failure count into the
exit code. Editing the grid and sweeping again runs only the runs that are new.

Workers: `--workers N` processes (spawned, each with `threads` torch threads; with several GPUs
visible, each worker owns one through CUDA_VISIBLE_DEVICES), or Ray tasks (`engine="ray"`: a local
Ray instance, or the cluster at `address`) running the same `execute` function. A run's result
depends only on its config, so both engines give the same summaries (tests check it). Only this
process writes `sweep.json` (atomically); each worker writes only its own run folder.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from recall_lab import checkpoint as ck
from recall_lab.experiments.claims import binding, binding_lines, now_precise, register
from recall_lab.experiments.grid import Experiment, Run, selected
from recall_lab.experiments.verdicts import check_spec
from recall_lab.generators.errors import RecallLabError

INDEX = "sweep.json"
ENGINES = ("local", "ray")


class Monitor(Protocol):
    """What a sweep reports while it runs (`recall_lab.progress` draws it; tests record it).
    `start` also hears the plan: `finished` (runs finished before this sweep), `left` (runs
    outside `only`), `steps` (each run to run: its planned steps) and `workers`."""

    def start(self, total: int, todo: list[str], **plan: Any) -> None: ...
    def running(self, name: str) -> None: ...
    def step(self, name: str, step: int, steps: int) -> None: ...
    def finished(self, name: str, result: dict) -> None: ...


class _Quiet:
    def start(self, total: int, todo: list[str], **plan: Any) -> None:
        pass

    def running(self, name: str) -> None:
        pass

    def step(self, name: str, step: int, steps: int) -> None:
        pass

    def finished(self, name: str, result: dict) -> None:
        pass


@dataclass(frozen=True)
class Job:
    run: Run
    folder: Path  # where the run is on disk now: `<sweep>/<run.name>`, or a renamed run's folder
    action: str  # "skip" (finished), "left" (not in --only), "resume" (has a checkpoint), "fresh"


def _same_config_folder(out: Path, run: Run) -> Path | None:
    """The folder of this run under an older name: a grid edit that adds or reorders an axis
    renames runs whose config did not change (the name is built from the swept values). Found by
    the name's hash suffix and confirmed on the folder's own config.json."""
    if not out.is_dir():
        return None
    want = run.config.to_json()
    for p in sorted(out.glob(f"*-{run.hash}")):
        if p.name != run.name and (p / ck.CONFIG).is_file():
            on_disk = ck.read_json(p / ck.CONFIG, "run config")
            if all(on_disk.get(t) == want.get(t) for t in want):
                return p
    return None


def plan(exp: Experiment, root: Path, only: dict[str, Any] | None = None) -> list[Job]:
    """What a sweep would do with each run, from what is on disk; with `only` (see
    `grid.parse_only`), the unfinished runs that do not match it are "left". A run found under an
    older name (same config) keeps that folder here; `run_sweep` renames it first."""
    if only and not any(selected(r, only) for r in exp.runs):
        raise RecallLabError(f"--only {only} matches none of the {len(exp.runs)} runs of "
                             f"{exp.name}")
    out = Path(root) / exp.name
    jobs = []
    for run in exp.runs:
        folder = out / run.name
        if not folder.exists():
            folder = _same_config_folder(out, run) or folder
        if (folder / ck.SUMMARY).is_file():
            action = "skip"
        elif only and not selected(run, only):
            action = "left"
        elif (folder / ck.RESUME).is_file() and (folder / ck.CONFIG).is_file():
            action = "resume"
        else:
            action = "fresh"
        jobs.append(Job(run, folder, action))
    return jobs


def outside_grid(exp: Experiment, root: Path) -> list[str]:
    """Run folders under `root/<experiment>/` that are not runs of the grid (an edited grid, or
    hashes changed by a code change): left alone, listed so the user knows."""
    folder = Path(root) / exp.name
    if not folder.is_dir():
        return []
    names = {r.name for r in exp.runs} | {j.folder.name for j in plan(exp, root)}
    return sorted(p.name for p in folder.iterdir()
                  if p.is_dir() and (p / ck.CONFIG).is_file() and p.name not in names)


# ---- the worker side ----------------------------------------------------------------------------

_events: Any = None  # queue to the parent (local pool); None under Ray


def _init_worker(threads: int, events: Any, gpus: Any, parent: int) -> None:
    """Runs in each new worker before torch is imported: thread count, its own GPU, and death
    with the sweep (a killed sweep leaves no orphan training on; its runs resume next time)."""
    from recall_lab.generators.dataset import die_with_parent

    global _events
    _events = events
    die_with_parent(parent)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    if gpus is not None:
        try:
            os.environ["CUDA_VISIBLE_DEVICES"] = str(gpus.get_nowait())
        except queue.Empty:
            pass


def _send(*event: Any) -> None:
    if _events is not None:
        _events.put(event)


def fresh_run_state(threads: int) -> None:
    """What a run may find changed by the runs before it in the same (warm) worker, put back to
    a new process's values: the RNGs (torch's, Python's, numpy's global ones), the thread count,
    grad mode and default dtype. `train_run` seeds torch itself; the rest is so that no code path
    can read state another run left behind (tests/experiments/test_engine.py runs two configs in
    one process in both orders and compares the weights)."""
    import random

    import numpy as np
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    torch.set_grad_enabled(True)
    torch.set_default_dtype(torch.float32)


def execute(job: dict) -> dict:
    """Train one run (the unit of work of both engines): {"name", "status", "summary" | "error",
    "traceback", "wall_s"}. Every exception is caught and returned: one run's failure is not the
    sweep's. The pool's workers live for the whole sweep, so torch is imported (and the native
    kernels loaded) once per worker, not once per run; `fresh_run_state` keeps a run's result
    independent of what that worker ran before."""
    name = job["name"]
    t0 = time.perf_counter()
    try:
        import torch  # noqa: F401 - first run of a worker: the import is counted as overhead

        from recall_lab.config import RunConfig
        from recall_lab.ssm import retain_freed_memory
        from recall_lab.train import train_run

        retain_freed_memory()
        fresh_run_state(job["threads"])
        cfg = RunConfig.model_validate(job["config"])
        _send("running", name)
        last = [0.0]

        def progress(e: dict) -> None:
            now = time.monotonic()
            if now - last[0] >= 1.0 or e["step"] == e["steps"]:
                last[0] = now
                _send("step", name, e["step"], e["steps"])

        summary = train_run(cfg, Path(job["dir"]), resume=job["resume"], force=not job["resume"],
                            progress=progress, log=tuple(job.get("log", ())),
                            record=job.get("record"))
        return {"name": name, "status": "done", "summary": summary,
                "wall_s": time.perf_counter() - t0}
    except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
        lines = str(exc).strip().splitlines()
        error = lines[0] if lines else type(exc).__name__
        if not isinstance(exc, RecallLabError):
            error = f"{type(exc).__name__}: {error}"
        return {"name": name, "status": "failed", "error": error,
                "traceback": traceback.format_exc()}


# ---- engines ------------------------------------------------------------------------------------

def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:  # pragma: no cover
        return 0


def _local(payloads: list[dict], workers: int, threads: int, monitor: Monitor,
           on_result) -> None:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")  # no forked torch state; CUDA works in children
    events = ctx.Queue()
    n_gpu = _gpu_count()
    gpus = None
    if n_gpu > 1:
        gpus = ctx.Queue()
        for i in range(n_gpu):
            gpus.put(i)
        workers = min(workers, n_gpu)
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            try:
                e = events.get(timeout=0.2)
            except (queue.Empty, EOFError, OSError):
                continue
            if e[0] == "running":
                monitor.running(e[1])
            elif e[0] == "step":
                monitor.step(e[1], e[2], e[3])

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker,
                               initargs=(threads, events, gpus, os.getpid()))
    try:
        futures = {pool.submit(execute, p): p for p in payloads}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                try:
                    result = f.result()
                except BrokenProcessPool as exc:
                    result = {"name": futures[f]["name"], "status": "failed",
                              "error": f"worker process died ({exc})"}
                on_result(result)
    except BaseException:
        # Interrupted (Ctrl-C reaches the workers too, and a pool worker would just take the next
        # run): drop the queue and stop the workers now; their runs resume from their last
        # checkpoints on the next sweep.
        procs = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join(timeout=10)
        raise
    else:
        pool.shutdown(wait=True)
    finally:
        stop.set()
        reader.join(timeout=2)


def _ray(payloads: list[dict], workers: int, threads: int, address: str | None,
         monitor: Monitor, on_result) -> None:
    try:
        import ray
    except ImportError:
        raise RecallLabError("--engine ray needs Ray: pip install 'recall-lab[ray]'") from None
    started = not ray.is_initialized()
    if started:
        env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        if os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "runtime_env": {"env_vars": env}}
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(num_cpus=workers * threads, num_gpus=_gpu_count(), **kwargs)
    try:
        gpu = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        task = ray.remote(execute).options(num_cpus=threads, num_gpus=gpu, max_retries=0)
        refs = {task.remote(p): p for p in payloads}
        pending = list(refs)
        # Ray sends no events from inside a task: count as running the first `workers` not yet
        # finished (its local instance has CPUs for exactly that many)
        shown = 0
        while pending:
            for p in [refs[r] for r in pending][shown:workers] if not address else []:
                monitor.running(p["name"])
            shown = min(workers, len(pending))
            done, pending = ray.wait(pending, num_returns=1)
            shown -= len(done)
            for ref in done:
                try:
                    result = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a dead Ray worker
                    result = {"name": refs[ref]["name"], "status": "failed",
                              "error": f"Ray task failed: {str(exc).splitlines()[0]}"}
                on_result(result)
    finally:
        if started:
            ray.shutdown()


# ---- the sweep ----------------------------------------------------------------------------------

def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _entry(job: Job, status: str) -> dict:
    return {"name": job.run.name, "hash": job.run.hash, "values": job.run.values,
            "status": status, "config": job.run.config.to_json()}


def _finished_entry(entry: dict, summary: dict) -> dict:
    return {**entry, "status": "done", "stopped": summary.get("stopped"),
            "valid": summary.get("valid"), "test": summary.get("test")}


def sweep_timing(wall: float, results: list[dict], workers: int) -> dict:
    """Where a sweep's time went: its wall time, the runs' training loops (each summary's
    `wall_s_this_session`), and the per-run overhead outside training: worker wall time
    (wall x workers, capped by the runs started) minus training, per finished run. It counts
    process start, imports, model building, evaluation of the best weights and the length
    tests, and time a worker sat idle at the end of the sweep; `in_run_overhead_per_run_s` is
    the part inside `execute` (building, the final test, the first run's imports)."""
    done = [r for r in results if r.get("status") == "done"]
    train = sum(float(r["summary"].get("wall_s_this_session") or 0.0) for r in done)
    in_runs = sum(float(r.get("wall_s") or 0.0) for r in done)  # execute(), first run's imports
    busy = wall * max(1, min(workers, len(results)))
    per_run = (busy - train) / len(done) if done else None
    return {"wall_s": wall, "train_s": train, "runs": len(done),
            "workers": max(1, min(workers, len(results))), "overhead_per_run_s": per_run,
            "in_run_overhead_per_run_s": (in_runs - train) / len(done) if done else None}


def read_index(folder: Path) -> dict | None:
    path = Path(folder) / INDEX
    return ck.read_json(path, "sweep index") if path.is_file() else None


def run_sweep(exp: Experiment, root: str | Path = "runs", *, workers: int = 1,
              threads: int = 1, engine: str = "local", address: str | None = None,
              monitor: Monitor | None = None, log: tuple[str, ...] = (),
              only: dict[str, Any] | None = None, replicates: dict | None = None,
              registration: dict | None = None, say: Any = None) -> dict:
    """Run every unfinished run of `exp` under `root/<exp.name>/`; returns the index (also
    written to sweep.json) with counts {"done", "failed", "skipped", "ran"}. `replicates`: the
    record of a replication (`replicate.plan_replication`), kept in the index as written
    before the first run. `log` names
    optional trackers for every run (`recall_lab.tracking`). `only` ({field: value}, see
    `grid.parse_only`): run just the unfinished runs whose config matches (a slice of the grid,
    e.g. one model's rows); the others stay listed in the index as they are.

    Claims bind the runs (claims.py): the experiment's claims are registered (claims.json
    written and fsynced) before any run starts, or `registration` (`claims.binding` of claims
    kept elsewhere: a placement's) names them; sweep.json's "registration" names that binding,
    and every run launched here stores its id and content hash in its config.json and is
    launched strictly after it (microsecond times). `say(line)` hears the binding's line (its
    hash) before the first run is launched."""
    if engine not in ENGINES:
        raise RecallLabError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    if workers < 1 or threads < 1:
        raise RecallLabError(f"--workers and --threads must be >= 1, got {workers}, {threads}")
    expects = exp.report.get("expect") or []
    for i, e in enumerate(expects if isinstance(expects, list) else [expects]):
        try:  # a claim that could never be checked is refused before anything is written
            check_spec(e)
        except RecallLabError as exc:
            name = e.get("claim") if isinstance(e, dict) else None
            raise RecallLabError(f"[[report.expect]] {i + 1}"
                                 f"{f' ({name})' if name else ''}: {exc}") from None
    monitor = monitor or _Quiet()
    folder = Path(root) / exp.name
    folder.mkdir(parents=True, exist_ok=True)
    # one sweep per experiment folder at a time (a second would train the same runs); the OS lock
    # dies with its holder, so a killed sweep never blocks the next one
    with ck.RunLock(folder):
        jobs = plan(exp, root, only)
        old = read_index(folder) or {}
        launched_under = {e.get("name"): e.get("registration") for e in old.get("runs", [])
                          if isinstance(e, dict)}
        launched_at = {e.get("name"): e.get("launched") for e in old.get("runs", [])
                       if isinstance(e, dict)}
        launched_hash = {e.get("name"): e.get("registration_sha256")
                         for e in old.get("runs", []) if isinstance(e, dict)}
        for i, job in enumerate(jobs):  # runs renamed by a grid edit move to their new name
            if job.folder.name != job.run.name:
                launched_under[job.run.name] = launched_under.get(job.folder.name)
                launched_at[job.run.name] = launched_at.get(job.folder.name)
                launched_hash[job.run.name] = launched_hash.get(job.folder.name)
                job.folder.rename(folder / job.run.name)
                jobs[i] = Job(job.run, folder / job.run.name, job.action)
        # claims first: recorded (when they changed) before any run of this sweep starts, and
        # every run launched here carries the id of the claims in force (report --check reads it)
        expects = exp.report.get("expect") or []
        expects = expects if isinstance(expects, list) else [expects]
        if registration is not None:
            if expects:
                raise RecallLabError(f"{exp.name} has its own claims ([[report.expect]]); its "
                                     "runs cannot be bound to another registration")
            bound = dict(registration)
        else:
            bound = binding(folder, register(folder, expects, exp.source))
        reg_id = bound["id"]
        entries: dict[str, dict] = {}
        for job in jobs:
            if job.action == "skip":
                summary = ck.read_json(job.folder / ck.SUMMARY, "run summary")
                entries[job.run.name] = _finished_entry(_entry(job, "done"), summary)
            else:  # one an earlier sweep launched keeps that record until it is resumed
                entries[job.run.name] = _entry(job, "pending")
            entries[job.run.name]["registration"] = launched_under.get(job.run.name)
            entries[job.run.name]["registration_sha256"] = launched_hash.get(job.run.name)
            entries[job.run.name]["launched"] = launched_at.get(job.run.name)
        index = {"experiment": exp.name, "source": str(exp.source) if exp.source else None,
                 "axes": exp.axes, "report": exp.report, "reference": exp.reference,
                 "registration": bound, "updated": _now(), "runs": list(entries.values()),
                 **({"replicates": replicates} if replicates else {})}

        def save() -> None:
            index["updated"] = _now()
            index["runs"] = list(entries.values())
            ck.write_json(folder / INDEX, index)

        save()
        todo = [j for j in jobs if j.action in ("fresh", "resume")]
        actions = [j.action for j in jobs]
        if say is not None and todo and (expects or registration is not None):
            for line in binding_lines(bound):
                say(line)
        monitor.start(len(jobs), [j.run.name for j in todo], finished=actions.count("skip"),
                      left=actions.count("left"),
                      steps={j.run.name: j.run.config.train.steps for j in todo},
                      workers=max(1, min(workers, len(todo))))
        stamp = {"id": bound["id"], "sha256": bound["sha256"], "claims": bound["claims"]}
        payloads = [{"name": j.run.name, "config": j.run.config.to_json(), "dir": str(j.folder),
                     "resume": j.action == "resume", "threads": threads, "log": list(log),
                     "record": {"registration": stamp}}
                    for j in todo]
        by_name = {j.run.name: j for j in todo}
        now = now_precise()  # every run's launch time: the sweep's start, a lower bound
        for j in todo:
            entries[j.run.name]["status"] = "running"
            # a resumed run keeps the claims it was first launched under, and its launch time
            resumed = j.action == "resume"
            entries[j.run.name]["registration"] = (launched_under.get(j.run.name) if resumed
                                                   else reg_id)
            entries[j.run.name]["registration_sha256"] = (launched_hash.get(j.run.name)
                                                          if resumed else bound["sha256"])
            entries[j.run.name]["launched"] = launched_at.get(j.run.name) if resumed else now
        if todo:
            save()

        results: list[dict] = []

        def on_result(result: dict) -> None:
            results.append(result)
            job = by_name[result["name"]]
            base = {**_entry(job, result["status"]),
                    "registration": entries[job.run.name].get("registration"),
                    "registration_sha256": entries[job.run.name].get("registration_sha256"),
                    "launched": entries[job.run.name].get("launched")}
            if result["status"] == "done":
                entries[job.run.name] = _finished_entry(base, result["summary"])
            else:
                entries[job.run.name] = {**base, "error": result["error"],
                                         "traceback": result.get("traceback")}
            save()
            monitor.finished(result["name"], result)

        started = time.perf_counter()
        if todo:
            try:
                if engine == "local":
                    _local(payloads, min(workers, len(todo)), threads, monitor, on_result)
                else:
                    _ray(payloads, workers, threads, address, monitor, on_result)
            finally:
                for e in entries.values():  # interrupted: what did not finish is pending again
                    if e["status"] == "running":
                        e["status"] = "pending"
                save()
        if todo:
            index["timing"] = sweep_timing(time.perf_counter() - started, results, workers)
        statuses = [e["status"] for e in entries.values()]
        # "left": unfinished runs outside --only's slice, so "skipped" counts only finished ones
        index["counts"] = {"runs": len(jobs), "ran": len(todo),
                           "skipped": actions.count("skip"), "left": actions.count("left"),
                           "done": statuses.count("done"),
                           "failed": statuses.count("failed")}
        ck.write_json(folder / INDEX, index)
        return index
