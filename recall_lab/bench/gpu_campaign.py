"""`scripts/gpu-campaign.sh`: what a lent GPU buys, in one offline command with one time budget.

    python -m recall_lab.bench.gpu_campaign run --out DIR --budget SECONDS [--no-cuda] ...

The pieces, in this order, each cut at its share of what is left of the budget (`SHARES`; time a
piece does not use goes to the pieces after it):

0. ``workers``: runs per minute of ``sweep --workers N`` on one GPU at N = 1, 4, 8, 16
   (`WORKERS`), for the small config of experiments/gpu/gpu-workers.toml (2N runs at each N, each
   N in a fresh sweep folder); the N with the most steps per second is used by the training
   pieces below;
a. ``check``: the GPU check's unfinished parts: the zoo on FLA's kernels and Mamba-3 against
   mamba-ssm's (`gpu_check`'s ``zoo`` part, with a longer limit per test for FLA's first-call
   autotuning; the tests an earlier
   lease finished are not run again), then :func:`elu_probe`, which narrows the ELU linear
   attention bf16 failure (V = 17) to the widths, feature signs and value columns it needs;
c. ``frontier64``: experiments/zoo-frontier/zoo-frontier-64.toml (claims in the file, written
   before its runs; float32 with TF32 off);
b. ``zoology``: every experiment file matching ``--zoology-glob`` in turn; where none does, one
   line says so and the piece is skipped.

Wheels and probe come first, exactly as in the GPU check (:class:`gpu_check.Check`): the carried
wheels are installed into a temporary folder that every child finds first on ``PYTHONPATH``.

Every training piece is a sweep (``python -m recall_lab.bench.gpu_campaign sweep``, a child
process; finished runs are skipped and interrupted ones resumed, as in ``recall-lab sweep``) in
the work folder (``--work``, default runs/gpu-campaign-work); while it runs, each run's record
(config.json, summary.json, metrics.jsonl) is copied under ``DIR/data/records/`` as it finishes.
At the cut the sweep gets SIGINT (its workers stop, their runs keep their checkpoints), then
SIGKILL after a grace period.

Across leases: after every piece, ``DIR/campaign.tar.gz`` packs ``DIR/data`` (records, the check's
results, the workers table) and the checkpoints of the runs a cut left unfinished; above
`PACK_LIMIT` it is split into ``campaign.tar.gz.00``, ``.01``, ... (the device tool returns at most
8 files of 16 MiB, at most 2 folders deep, so everything comes back in the top folder's few
files). ``--resume PATH`` (that tarball, its first part, or an earlier DIR) starts from it: the
finished runs are skipped, the cut ones resume from their checkpoints, the workers measured are
not measured again and the zoo tests that finished are not run again.

Bad input never stops the campaign: a missing or failing wheel, an invalid experiment file, a
piece that fails (a CUDA error) are each reported in one line, and the next piece runs; what
finished is kept. ``--no-cuda`` is the dry run on a CPU (`make gpu-campaign-dryrun`): the same
pieces, the training ones on the CPU with ``--steps`` overriding every run's steps; the check's
CUDA tests skip and the probe records "skipped: no CUDA".

This module's ``run`` imports only the standard library (the children import the lab).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from pathlib import Path

from recall_lab.bench import gpu_check

ROOT = gpu_check.ROOT
PIECES = ("workers", "check", "frontier64", "zoology")
# each piece's share of the time left when it starts (with the pieces after it); the time a
# piece does not use goes on to the next ones
SHARES = {"workers": 0.25, "check": 0.45, "frontier64": 0.2, "zoology": 0.1}
ZOO_SHARE = 0.65  # of the check's share: the zoo tests; the rest (at least 60 s) the ELU probe
WORKERS = (1, 4, 8, 16)
WORKERS_EXPERIMENT = "experiments/gpu/gpu-workers.toml"
FRONTIER_EXPERIMENT = "experiments/zoo-frontier/zoo-frontier-64.toml"
ZOOLOGY_GLOB = "experiments/zoology/zoology-fig2-gpu*.toml"
DEFAULT_WORKERS = 8  # the training pieces' workers when no workers table was measured
# the zoo tests that passed or skipped on the first GPU check (an H200) are not run again; the
# failed one is (its reason was not recorded), and those that never finished
ZOO_DONE_LOG = "docs/results/gpu/2026-11-27-h200/zoo-rerun.log"
# the zoo part's test files (gpu_check.ZOO_FILES) by the stem its results are recorded under
ZOO_STEMS = tuple(Path(f).stem for f in gpu_check.ZOO_FILES)
ZOO_TESTS = 17  # test_gpu_zoo.py's 15 and test_gpu_mamba3.py's 2
ZOO_PER_TEST_S = 300.0  # per zoo test: FLA's first-call autotuning (over 60 s on the H200)
SETUP_BUDGETS = {"wheels": 20.0, "probe": 60.0}
PACK_RESERVE_S = 20.0  # kept back from the pieces for the last pack
PACK_LIMIT = 15 * 2**20  # bytes per file that comes back (the device tool's limit is 16 MiB)
PACK = "campaign.tar.gz"
RUN_FILES = ("config.json", "summary.json", "metrics.jsonl")
SWEEP_FILES = ("sweep.json", "claims.json")
RESUME_FILE = "resume.safetensors"  # a run folder with it (and no summary) can resume
TICK_S = 2.0
# the ELU bf16 probe (elu_probe), most telling first, as (length, features, last value column,
# V, dtype): the failing case (V = 17: 16 values and the normaliser's column of ones), then one
# ingredient changed at a time, then float32 controls. Each new padded width autotunes once.
PROBE_WIDTHS = (16, 18, 32, 33)
PROBE_CASES = (
    (300, "elu", "ones", 17, "bfloat16"), (100, "elu", "ones", 17, "bfloat16"),
    (300, "elu", "random", 17, "bfloat16"), (300, "identity", "ones", 17, "bfloat16"),
    *((300, "elu", "ones", v, "bfloat16") for v in PROBE_WIDTHS),
    (300, "identity", "random", 16, "bfloat16"),
    (300, "elu", "ones", 17, "float32"), (300, "elu", "ones", 16, "float32"),
)


def log(out: Path | None, line: str) -> None:
    print(line, flush=True)
    if out is not None:
        with open(out / "campaign.log", "a") as fh:
            fh.write(line + "\n")


def matching(pattern: str) -> list[str]:
    """The experiment files `pattern` (relative to the checkout) matches, sorted, relative to the
    checkout where they lie in it: the zoology piece's files, run in this order
    (zoology-fig2-gpu.toml, then -gpu1-rows, then -gpu2-based)."""
    return sorted(str(Path(p).relative_to(ROOT)) if Path(p).is_relative_to(ROOT) else p
                  for p in glob.glob(str(ROOT / pattern)))


def shares(left_s: float, pieces: list[str]) -> float:
    """The first of `pieces`' share of `left_s` seconds (its weight over theirs)."""
    total = sum(SHARES[p] for p in pieces)
    return max(0.0, left_s * SHARES[pieces[0]] / total) if total else 0.0


def run_child(cmd: list[str], budget: float, logfile: Path, env: dict, tick=None,
              grace_s: float = 20.0) -> dict:
    """Run `cmd` from the checkout for at most `budget` seconds (then SIGINT, then SIGKILL after
    `grace_s`), its output appended to `logfile`; `tick()` every TICK_S seconds meanwhile."""
    row: dict = {"budget_s": round(budget, 1)}
    t0 = time.perf_counter()
    with open(logfile, "a") as fh:
        fh.write(f"### {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
        deadline = t0 + budget
        while True:
            try:
                wait_s = max(0.05, min(TICK_S, deadline - time.perf_counter()))
                row["rc"] = proc.wait(timeout=wait_s)
                row["status"] = "ok" if row["rc"] == 0 else "failed"
                break
            except subprocess.TimeoutExpired:
                if tick is not None:
                    tick()
                if time.perf_counter() < deadline:
                    continue
                os.killpg(proc.pid, signal.SIGINT)
                try:
                    proc.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                row["rc"], row["status"] = proc.returncode, "cut"
                break
    if tick is not None:
        tick()
    row["wall_s"] = round(time.perf_counter() - t0, 2)
    return row


def last_error(logfile: Path, since: int) -> str:
    """The last `error:` line (else the last line) a child wrote to `logfile` after `since`."""
    with open(logfile) as fh:
        fh.seek(since)
        lines = [ln.strip() for ln in fh.read().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:") or "Error" in ln]
    return ((errors or lines or [""])[-1])[:200]


def sync_sweep(sweep: Path, dest: Path) -> int:
    """Copy `sweep`'s index, claims and every finished run's records to `dest` (what is there
    already is left as it is); returns the number of finished runs in `dest`."""
    if not sweep.is_dir():
        return 0
    dest.mkdir(parents=True, exist_ok=True)
    for name in SWEEP_FILES:
        if (sweep / name).is_file():
            shutil.copy2(sweep / name, dest / name)
    for run in sweep.iterdir():
        if (run / "summary.json").is_file() and not (dest / run.name / "summary.json").is_file():
            (dest / run.name).mkdir(exist_ok=True)
            for name in RUN_FILES:  # summary.json last: a record is finished once it is there
                if (run / name).is_file():
                    shutil.copy2(run / name, dest / run.name / name)
    return sum((p / "summary.json").is_file() for p in dest.iterdir() if p.is_dir())


def seed_sweep(records: Path, sweep: Path) -> int:
    """Before a sweep: copy the records of the runs an earlier lease finished into its folder,
    where the folder lacks them (the sweep then skips them); returns how many."""
    n = 0
    for run in sorted(records.iterdir()) if records.is_dir() else []:
        if run.is_dir() and (run / "summary.json").is_file() and not (sweep / run.name).exists():
            shutil.copytree(run, sweep / run.name)
            n += 1
    return n


def gpu_sample() -> tuple[float, float] | None:
    """(utilisation %, memory used MiB) of GPU 0 from nvidia-smi, or None."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
                              "--format=csv,noheader,nounits", "-i", "0"], capture_output=True,
                             text=True, timeout=5, check=False).stdout.split(",")
        return float(out[0]), float(out[1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


class Campaign:
    """One `run`: setup, then the pieces in order, each within its share of the budget."""

    def __init__(self, args: argparse.Namespace, site: Path):
        self.args, self.out = args, args.out.resolve()
        self.data = self.out / "data"
        self.work = args.work.resolve()
        self.cuda = not args.no_cuda
        self.t_end = time.perf_counter() + args.budget - PACK_RESERVE_S
        self.result: dict = {"dry_run": not self.cuda, "budget_s": args.budget,
                             "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                             "pieces": [], "workers": [], "lease": None}
        self.site = site
        self.env: dict = {}
        self.check: gpu_check.Check | None = None

    # -- bookkeeping --

    def left(self) -> float:
        return self.t_end - time.perf_counter()

    def piece_row(self, name: str, status: str, **kw) -> dict:
        row = {"piece": name, "status": status, **kw}
        self.result["pieces"].append(row)
        text = f"campaign: {name}: {status}" + (f" ({kw['note']})" if kw.get("note") else "")
        log(self.out, "\n".join(textwrap.wrap(text, 96, subsequent_indent="    ",
                                               break_on_hyphens=False)))
        return row

    def save(self) -> None:
        (self.data / "campaign.json").write_text(json.dumps(self.result, indent=2))
        shutil.copy2(self.data / "campaign.json", self.out / "campaign.json")
        (self.out / "summary.txt").write_text("\n".join(summary_lines(self.result)) + "\n")
        try:
            self.result["pack"] = pack(self.out, self.work)
        except OSError as exc:
            log(self.out, f"campaign: error: packing {self.out / PACK} failed: {exc}")
        (self.out / "campaign.json").write_text(json.dumps(self.result, indent=2))

    # -- setup --

    def setup(self) -> None:
        """Wheels and probe, as the GPU check does them (their results under data/check/)."""
        earlier = sorted((self.data / "check").glob("lease-*"))
        lease = len(earlier) + 1
        self.result["lease"] = lease
        out = self.data / "check" / f"lease-{lease}"
        out.mkdir(parents=True, exist_ok=True)
        wheels = None if self.args.no_wheels else self.args.wheels
        budgets = {**gpu_check.BUDGETS, **SETUP_BUDGETS}
        self.check = gpu_check.Check(out, wheels, self.site, self.cuda, False, budgets, ("zoo",))
        self.env = self.check.env
        ok = self.check.install_wheels()
        parts = self.check.result["parts"]
        if not ok:
            log(self.out, f"campaign: error: the carried wheels did not install (see "
                          f"{out / 'setup.log'}); going on: children may miss a package")
        elif parts and parts[-1]["status"] == "none carried":
            log(self.out, f"campaign: no wheels carried ({parts[-1].get('note')}); the "
                          "children use the Python's own packages")
        ok = self.check.probe()
        self.check.save()
        machine = self.check.result["machine"]
        self.result["machine"] = machine
        if not ok:
            log(self.out, f"campaign: error: the probe failed ({parts[-1].get('note') or 'see '}"
                          f"{out / 'setup.log'}); going on")
        adopted = adopt_unfinished(self.data, self.work)
        if adopted:
            log(self.out, f"campaign: {adopted} runs cut in an earlier lease resume from their "
                          "checkpoints")
        log(self.out, f"campaign: lease {lease} on {machine.get('device', '?')} (torch "
                      f"{machine.get('torch', '?')}, fla-core {machine.get('fla') or 'none'})")

    # -- the training pieces' sweeps --

    def sweep(self, piece: str, experiment: str, root: Path, workers: int, budget: float,
              first: int | None = None) -> dict:
        """One sweep child for `experiment` under `root`, records copied to data/records/piece
        as runs finish; returns the row (status, counts, wall)."""
        path = ROOT / experiment if not Path(experiment).is_absolute() else Path(experiment)
        name = _experiment_name(path)
        sweep_dir = root / name
        records = self.data / "records" / piece / name
        sweep_dir.mkdir(parents=True, exist_ok=True)
        seeded = seed_sweep(records, sweep_dir)
        row: dict = {"experiment": experiment, "sweep": name, "workers": workers,
                     "seeded_from_earlier_leases": seeded}
        result_json = root / f"{name}.result.json"
        result_json.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "recall_lab.bench.gpu_campaign", "sweep", str(path),
               "--root", str(root), "--workers", str(workers), "--json", str(result_json)]
        if self.args.steps:
            cmd += ["--steps", str(self.args.steps)]
        if not self.cuda:
            cmd += ["--device", "cpu"]
        if first:
            cmd += ["--first", str(first)]
        logfile = self.out / "campaign.log"
        since = logfile.stat().st_size if logfile.exists() else 0
        row |= run_child(cmd, budget, logfile, self.env, tick=lambda: sync_sweep(sweep_dir,
                                                                                 records))
        row["finished_records"] = sync_sweep(sweep_dir, records)
        if result_json.is_file():
            row |= json.loads(result_json.read_text())
        if row["status"] == "failed" and row.get("rc") == 2:
            row["error"] = last_error(logfile, since)
        elif row["status"] == "failed" and not row.get("counts"):
            row["error"] = last_error(logfile, since)
        return row

    def best_workers(self) -> int:
        """--train-workers, else the N with the most training steps per second (a cut N counts
        up to its runs' last evaluations), else DEFAULT_WORKERS (1 on the CPU)."""
        rows = [r for r in self.result["workers"] if r.get("steps")]
        if self.args.train_workers:
            return self.args.train_workers
        if not rows:
            return DEFAULT_WORKERS if self.cuda else 1
        return max(rows, key=lambda r: r["steps_per_s"])["workers"]

    # -- the pieces --

    def piece_workers(self, budget: float) -> None:
        earlier = {r["workers"]: r for r in self.result["workers"] if r.get("status") == "ok"}
        todo = [n for n in self.args.workers_list if n not in earlier]
        if not todo:
            self.piece_row("workers", "done in an earlier lease", table=list(earlier.values()))
            return
        end = time.perf_counter() + budget
        for i, n in enumerate(todo):
            share = (end - time.perf_counter()) / (len(todo) - i)
            root = self.work / "workers" / f"n{n}"
            shutil.rmtree(root, ignore_errors=True)  # a measurement starts from nothing
            samples: list[tuple[float, float]] = []

            def tick(root=root, samples=samples) -> None:
                s = gpu_sample() if self.cuda else None
                if s is not None:
                    samples.append(s)

            path = ROOT / self.args.workers_experiment
            name = _experiment_name(path)
            records = self.data / "records" / "workers" / f"n{n}" / name
            cmd = [sys.executable, "-m", "recall_lab.bench.gpu_campaign", "sweep", str(path),
                   "--root", str(root), "--workers", str(n), "--first", str(max(2, 2 * n)),
                   "--json", str(self.work / f"workers-n{n}.json")]
            if self.args.steps:
                cmd += ["--steps", str(self.args.steps)]
            if not self.cuda:
                cmd += ["--device", "cpu"]
            logfile = self.out / "campaign.log"
            since = logfile.stat().st_size if logfile.exists() else 0

            def both(root=root, records=records, tick=tick, name=name) -> None:
                tick()
                sync_sweep(root / name, records)

            r = run_child(cmd, share, logfile, self.env, tick=both)
            done = sync_sweep(root / name, records)
            steps = steps_trained(root / name)
            row = {"workers": n, "runs": max(2, 2 * n), "finished": done,
                   "wall_s": r["wall_s"], "budget_s": r["budget_s"],
                   "runs_per_min": round(60 * done / r["wall_s"], 2) if r["wall_s"] else 0.0,
                   "steps": steps,
                   "steps_per_s": round(steps / r["wall_s"], 1) if r["wall_s"] else 0.0,
                   "status": "ok" if r["status"] == "ok" and done == max(2, 2 * n) else
                   ("cut" if r["status"] == "cut" else "failed"), "lease": self.result["lease"]}
            if samples:
                row["gpu_util_pct_mean"] = round(sum(s[0] for s in samples) / len(samples), 1)
                row["gpu_mem_mib_max"] = max(s[1] for s in samples)
            if row["status"] == "failed":
                row["error"] = last_error(logfile, since)
            self.result["workers"].append(row)
            (self.data / "workers.json").write_text(json.dumps(self.result["workers"], indent=2))
            log(self.out, f"campaign: workers {n}: {done} of {row['runs']} runs in "
                          f"{r['wall_s']:.1f} s: {row['runs_per_min']} runs/min, "
                          f"{row['steps_per_s']} steps/s ({row['status']})"
                + (f": {row['error']}" if row.get("error") else ""))
        rows = [r for r in self.result["workers"] if r["lease"] == self.result["lease"]]
        status = "ok" if all(r["status"] == "ok" for r in rows) else "partly done"
        self.piece_row("workers", status, note=f"training pieces' workers: "
                                                f"{self.best_workers()}")

    def piece_check(self, budget: float) -> None:
        assert self.check is not None
        t0 = time.perf_counter()
        notes = []
        done = finished_zoo_tests(self.data / "check")
        before = set()
        if self.args.zoo_done_log:
            before = passed_in_log(ROOT / self.args.zoo_done_log) - done
            done |= before
        zoo_total = self.args.zoo_tests
        if zoo_total and len(done) >= zoo_total:
            notes.append(f"zoo: all {len(done)} tests finished in earlier leases")
        else:
            self.check.deselect = [f"tests/gpu/{t.split('::')[0]}.py::{t.split('::', 1)[1]}"
                                   for t in sorted(done)]
            self.check.per_test["zoo"] = self.args.zoo_per_test
            self.check.budgets["zoo"] = max(1.0, min(budget * ZOO_SHARE, budget - 60))
            self.check.tests("zoo")
            self.check.save()
            zoo = self.check.result["parts"][-1]
            notes.append(f"zoo: {zoo['status']} in {zoo['wall_s']:.0f} s ({zoo.get('note')}; "
                         f"not rerun: {len(done) - len(before)} finished in earlier leases, "
                         f"{len(before)} passed or skipped in {self.args.zoo_done_log or '-'})")
        probe_json = self.data / "check" / "elu-probe.json"
        earlier = json.loads(probe_json.read_text()) if probe_json.is_file() else {}
        if len(earlier.get("cases") or []) >= len(PROBE_CASES):
            notes.append("elu probe: done in an earlier lease")
        else:
            left = budget - (time.perf_counter() - t0)
            cmd = [sys.executable, "-m", "recall_lab.bench.gpu_campaign", "elu-probe",
                   "--json", str(probe_json)] + ([] if self.cuda else ["--no-cuda"])
            r = run_child(cmd, max(30.0, left), self.out / "campaign.log", self.env)
            probe = json.loads(probe_json.read_text()) if probe_json.is_file() else {}
            notes.append(f"elu probe: {r['status']} in {r['wall_s']:.0f} s"
                         + (f", {probe['skipped']}" if probe.get("skipped") else
                            f", {len(probe.get('cases', []))} cases" if probe else ""))
        self.piece_row("check", "ran", note="; ".join(notes))

    def piece_sweep(self, piece: str, experiments: list[str], budget: float) -> None:
        end = time.perf_counter() + budget
        workers = self.best_workers()
        for i, exp in enumerate(experiments):
            share = (end - time.perf_counter()) / (len(experiments) - i)
            first = 1 if (self.args.steps and not self.cuda) else None  # the dry run: one run
            row = self.sweep(piece, exp, self.work / "runs", workers, share, first)
            counts = row.get("counts") or {}
            status = ("done" if row["status"] == "ok" else "cut at its share" if
                      row["status"] == "cut" else "done, some runs failed" if
                      row.get("rc") == 1 and counts else "failed")
            if row.get("first_run_error"):
                row["error"] = f"first failed run: {row['first_run_error']}"
            note = (f"{counts['done']} of {counts['runs']} runs finished ({counts['skipped']} "
                    f"before this lease), {counts['failed']} failed" if counts
                    else "cut before the sweep's counts")
            note += f"; {row['finished_records']} records in all; {workers} workers"
            if row.get("error"):
                note += f"; {row['error']}"
            self.piece_row(piece, status, note=note, **{k: v for k, v in row.items()
                                                       if k not in ("status", "note")})

    def run(self) -> int:
        self.setup()
        self.save()
        order = [p for p in PIECES if p in self.args.pieces]
        for i, piece in enumerate(order):
            budget = shares(self.left(), order[i:])
            log(self.out, f"campaign: {piece}: {budget:.0f} s of the {max(0, self.left()):.0f} "
                          "s left")
            if budget < 5:
                self.piece_row(piece, "not run: no time left")
                continue
            try:
                if piece == "workers":
                    self.piece_workers(budget)
                elif piece == "check":
                    self.piece_check(budget)
                elif piece == "frontier64":
                    self.piece_sweep(piece, [self.args.frontier_experiment], budget)
                else:
                    files = matching(self.args.zoology_glob)
                    if not files:
                        line = f"skipped: no experiment file matches {self.args.zoology_glob}"
                        skip = self.data / "records" / "zoology" / "skipped.json"
                        skip.parent.mkdir(parents=True, exist_ok=True)
                        skip.write_text(json.dumps({"piece": piece, "status": line}) + "\n")
                        self.piece_row(piece, line)
                    else:
                        self.piece_sweep(piece, files, budget)
            except Exception as exc:  # noqa: BLE001 - one piece's failure is not the campaign's
                self.piece_row(piece, f"failed: {type(exc).__name__}: {exc}"[:200])
            self.save()
        self.result["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.save()
        print("\n".join(summary_lines(self.result)))
        pk = self.result.get("pack", {})
        log(self.out, f"campaign: packed into {', '.join(pk.get('files', []))} "
                      f"({pk.get('bytes', 0) / 2**20:.2f} MiB) in {self.out}")
        failed = [p for p in self.result["pieces"] if p["status"].startswith("failed")]
        return 1 if failed else 0


def _experiment_name(path: Path) -> str:
    """The sweep folder's name: the file's `name = ...` line, else its stem (stdlib only: the
    child validates the file)."""
    import tomllib

    try:
        with open(path, "rb") as fh:
            return str(tomllib.load(fh).get("name") or path.stem)
    except (OSError, tomllib.TOMLDecodeError):
        return path.stem


def finished_zoo_tests(check_dir: Path) -> set[str]:
    """The zoo tests that finished (passed, failed or skipped) in any lease's check."""
    done = set()
    for f in sorted(check_dir.glob("lease-*/gpu-check.json")):
        try:
            tests = json.loads(f.read_text()).get("tests", [])
        except (OSError, ValueError):
            continue
        done |= {t["id"] for t in tests if t.get("path") in ZOO_STEMS
                 and t.get("outcome") in ("passed", "failed", "skipped")}
    return done


def steps_trained(sweep: Path) -> int:
    """Training steps the runs in `sweep` logged (each run's last metrics row; a cut run counts
    up to its last evaluation), so a cut measurement still gives a throughput."""
    total = 0
    for metrics in sweep.glob("*/metrics.jsonl") if sweep.is_dir() else []:
        lines = [ln for ln in metrics.read_text().splitlines() if ln.strip()]
        try:
            total += int(json.loads(lines[-1])["step"]) if lines else 0
        except (ValueError, KeyError, TypeError):
            continue
    return total


def passed_in_log(path: Path) -> set[str]:
    """The zoo tests a `pytest -v` log shows passed or skipped (gpu_check.log_results)."""
    if not path.is_file():
        return set()
    return {t["id"] for t in gpu_check.log_results(path.read_text())
            if t["path"] in ZOO_STEMS and t["outcome"] in ("passed", "skipped")}


def pack(out: Path, work: Path) -> dict:
    """`out`/data and the checkpoints of the runs left unfinished in `work` -> campaign.tar.gz in
    `out` (split into .00, .01, ... above PACK_LIMIT); returns {"files", "bytes"}."""
    for old in out.glob(PACK + "*"):
        old.unlink()
    tmp = out / (PACK + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(out / "data", arcname="data")
        for name in ("summary.txt", "campaign.log"):
            if (out / name).is_file():
                tar.add(out / name, arcname=name)
        for piece_dir in sorted((work / "runs").glob("*")) if (work / "runs").is_dir() else []:
            for run in sorted(piece_dir.glob("*")):
                if (run / RESUME_FILE).is_file() and not (run / "summary.json").is_file():
                    piece = _piece_of(out, piece_dir.name)
                    tar.add(run, arcname=f"data/unfinished/{piece}/{piece_dir.name}/{run.name}",
                            filter=_resumable)
    size = tmp.stat().st_size
    if size <= PACK_LIMIT:
        tmp.rename(out / PACK)
        return {"files": [PACK], "bytes": size}
    files = []
    with open(tmp, "rb") as fh:
        for i in range(100):
            chunk = fh.read(PACK_LIMIT)
            if not chunk:
                break
            (out / f"{PACK}.{i:02d}").write_bytes(chunk)
            files.append(f"{PACK}.{i:02d}")
    tmp.unlink()
    return {"files": files, "bytes": size}


def _resumable(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """What a cut run needs to resume elsewhere: not its latest weights (model.safetensors,
    rewritten at its next evaluation; resume.safetensors holds them) nor its lock."""
    return None if Path(member.name).name in ("model.safetensors", ".lock") else member


def _piece_of(out: Path, sweep: str) -> str:
    for piece in ("frontier64", "zoology"):
        if (out / "data" / "records" / piece / sweep).is_dir():
            return piece
    return "zoology"


def adopt_unfinished(data: Path, work: Path) -> int:
    """An earlier lease's cut runs (data/unfinished/PIECE/SWEEP/RUN, with their checkpoints) ->
    work/runs/SWEEP/RUN where that folder is missing; the packed copies are then dropped (the
    next pack takes them from the work folder again). Returns how many were adopted."""
    n = 0
    for run in sorted(data.glob("unfinished/*/*/*")):
        dest = work / "runs" / run.parent.name / run.name
        if run.is_dir() and not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(run, dest)
            n += 1
    shutil.rmtree(data / "unfinished", ignore_errors=True)
    return n


def restore(src: Path, out: Path) -> str:
    """An earlier lease's results (its tarball, the first of its parts, or its DIR) -> out/data."""
    if src.is_dir():
        data = src / "data" if (src / "data").is_dir() else src
        shutil.copytree(data, out / "data", dirs_exist_ok=True)
        return f"copied {data}"
    parts = [src]
    if src.name.endswith(".00"):
        stem = src.name[:-3]
        parts = sorted(src.parent.glob(stem + ".[0-9][0-9]"))
    with tempfile.TemporaryDirectory() as tmp:
        whole = Path(tmp) / PACK
        with open(whole, "wb") as fh:
            for p in parts:
                fh.write(p.read_bytes())
        with tarfile.open(whole, "r:gz") as tar:
            members = [m for m in tar.getmembers() if m.name.startswith("data/")
                       and ".." not in Path(m.name).parts and (m.isfile() or m.isdir())]
            tar.extractall(out, members=members)
    return f"unpacked {len(parts)} file(s) from {src}"


def summary_lines(result: dict) -> list[str]:
    """The campaign's one-screen summary."""
    machine = result.get("machine") or {}
    lines = textwrap.wrap(f"gpu-campaign lease {result.get('lease')} on "
                          f"{machine.get('device', '?')} (torch {machine.get('torch', '?')}), "
                          f"budget {result.get('budget_s')} s"
                          + (" (dry run, no CUDA)" if result.get("dry_run") else ""), 100,
                          subsequent_indent="    ", break_on_hyphens=False)
    rows = result.get("workers") or []
    if rows:
        lines.append("  workers | runs | finished | wall s | runs/min | steps/s | gpu util % | "
                     "status")
        for r in sorted(rows, key=lambda r: (r["workers"], r.get("lease") or 0)):
            lines.append(f"  {r['workers']:>7} | {r['runs']:>4} | {r['finished']:>8} | "
                         f"{r['wall_s']:>6.1f} | {r['runs_per_min']:>8} | "
                         f"{r.get('steps_per_s', '-'):>7} | "
                         f"{r.get('gpu_util_pct_mean', '-'):>10} | {r['status']} "
                         f"(lease {r.get('lease')})")
    for p in result.get("pieces", []):
        note = f": {p['note']}" if p.get("note") else ""
        lines += textwrap.wrap(f"{p['piece']}: {p['status']}{note}", 96, initial_indent="  ",
                               subsequent_indent="      ", break_on_hyphens=False)
    return lines


def _sweep_main(args: argparse.Namespace) -> int:
    """The `sweep` child: an experiment file with the campaign's overrides, run by run_sweep."""
    from recall_lab.generators.errors import RecallLabError

    try:
        from recall_lab.config import read_toml
        from recall_lab.experiments.engine import run_sweep
        from recall_lab.experiments.grid import expand

        data = read_toml(args.experiment)
        train = dict(data.get("train") or {})
        if args.steps:  # the dry run: every run this many steps, evaluated once, small sets
            train |= {"steps": args.steps, "eval_every": min(args.steps, 100), "warmup": 0,
                      "eval_samples": 32, "test_samples": 32}
        if args.device:
            train["device"] = args.device
        if args.steps or args.device:
            data = {**data, "train": train}
            for table in ("grid", "link"):  # an axis over the overridden fields would win
                _drop_axes(data, table, {f"train.{k}" for k in ("steps", "device")})
        exp = expand(data, args.experiment.stem, args.experiment)
        if args.first:
            from dataclasses import replace

            exp = replace(exp, runs=exp.runs[:args.first])
        index = run_sweep(exp, args.root, workers=args.workers)
    except RecallLabError as exc:
        print(f"error: {args.experiment}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sweep: cut (its runs resume from their checkpoints)", file=sys.stderr)
        return 130
    c = index["counts"]
    errors = [e.get("error") for e in index["runs"] if e.get("status") == "failed"]
    if args.json:
        args.json.write_text(json.dumps({"counts": c, "timing": index.get("timing"),
                                         "first_run_error": errors[0] if errors else None}))
    print(f"{exp.name}: {c['done']} of {c['runs']} runs done ({c['skipped']} were already), "
          f"{c['failed']} failed")
    return 1 if c["failed"] else 0


def _drop_axes(data: dict, table: str, fields: set[str]) -> None:
    """Remove axes over `fields` from `data[table]` (a [grid] table or [[link]] list) in place."""
    value = data.get(table)
    if isinstance(value, dict):
        data[table] = {k: v for k, v in value.items() if k not in fields}
    elif isinstance(value, list):
        kept = [{k: v for k, v in t.items() if k not in fields} for t in value]
        data[table] = [t for t in kept if t]


def elu_probe(cuda: bool, save=None, cases=None, device: str = "cuda", kernel=None) -> dict:
    """Narrow the H200's failure of FLA's chunk_linear_attn in bf16 at (H=4, K=16, V=17): the
    mapping's relative errors against the lab's torch chunked form in float32 (output and each
    gradient: kernel_check.errors), case by case (`PROBE_CASES`): the mixer's case at the test's
    length (300 tokens) and the self-check's (100); then one ingredient changed at a time: the
    last value column random instead of the normaliser's ones, signed (identity) features
    instead of positive (elu + 1), other value widths (PROBE_WIDTHS); then float32 controls.
    `save(result)` is called after every case, so a cut keeps the cases that finished. The CPU
    test passes `device` "cpu", FLA's naive reference as `kernel` and a few `cases`."""
    if not cuda:
        return {"skipped": "skipped: no CUDA"}
    import torch
    import torch.nn.functional as F

    from recall_lab import kernel_check
    from recall_lab.mixers import fla_kernels
    from recall_lab.mixers.linear_attn import linear_attn_chunked

    fn = kernel
    if kernel is None:
        if not torch.cuda.is_available():
            return {"skipped": "skipped: no CUDA (torch sees no device)"}
        fn, why = fla_kernels.kernel("linear_attn")
        if fn is None:
            return {"skipped": f"skipped: FLA's chunk_linear_attn does not load: {why}"}
        torch.backends.cuda.matmul.allow_tf32 = False  # the reference's products in full fp32
    result = {"device": torch.cuda.get_device_name(0) if device == "cuda" else device,
              "torch": torch.__version__, "fla": _version("fla-core"), "cases": []}
    dtypes = {"bfloat16": torch.bfloat16, "float32": torch.float32}
    for length, features, last, v_width, dtype in cases or PROBE_CASES:
        gen = torch.Generator().manual_seed(0)
        b, h, dk = 2, 4, 16
        q, k = (torch.randn(b, h, length, dk, generator=gen) for _ in range(2))
        v = torch.randn(b, h, length, v_width, generator=gen)
        if last == "ones":
            v[..., -1] = 1.0
        if features == "elu":
            q, k = (F.elu(q) + 1) * dk ** -0.5, F.elu(k) + 1
        else:
            q = q * dk ** -0.5
        inputs = {n: x.to(device, dtypes[dtype]) for n, x in (("q", q), ("k", k), ("v", v))}
        row: dict = {"length": length, "features": features, "last_column": last,
                     "V": v_width, "dtype": dtype}
        t0 = time.perf_counter()
        try:
            errs = kernel_check.errors(
                lambda **t: fla_kernels.map_linear_attn(fn, **t),
                lambda **t: linear_attn_chunked(*(t[n].float() for n in ("q", "k", "v")), 64),
                inputs)
            row |= {"max_rel_err": max(errs.values()), "worst": max(errs, key=errs.get),
                    "errors": errs}
        except Exception as exc:  # noqa: BLE001 - a refused width is a finding too
            row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        row["wall_s"] = round(time.perf_counter() - t0, 2)  # the first call of a width autotunes
        result["cases"].append(row)
        if save is not None:
            save(result)
    return result


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _positive_ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, "
                                         f"got {text!r}")
    return values


def _pieces(text: str) -> tuple[str, ...]:
    chosen = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in chosen if x not in PIECES]
    if bad or not chosen:
        raise argparse.ArgumentTypeError(f"--pieces takes a comma-separated list of "
                                         f"{', '.join(PIECES)}, got {text!r}")
    return chosen


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gpu-campaign", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="the campaign (scripts/gpu-campaign.sh)")
    r.add_argument("--out", type=Path, required=True, help="folder for the results")
    r.add_argument("--budget", type=float, required=True, metavar="SECONDS",
                   help="wall time for everything, the final pack included")
    r.add_argument("--work", type=Path, default=ROOT / "runs" / "gpu-campaign-work",
                   help="the sweeps' run folders, checkpoints included (not packed whole)")
    r.add_argument("--resume", type=Path, default=None, metavar="PATH",
                   help="an earlier lease's campaign.tar.gz (or its .00 part, or its --out)")
    r.add_argument("--pieces", type=_pieces, default=PIECES, metavar="LIST",
                   help=f"the pieces to run, in the campaign's order ({','.join(PIECES)})")
    r.add_argument("--workers-list", type=_positive_ints, default=WORKERS, metavar="N,N,..")
    r.add_argument("--train-workers", type=int, default=None, metavar="N",
                   help="workers of the training pieces (default: the best measured, else "
                        f"{DEFAULT_WORKERS})")
    r.add_argument("--workers-experiment", default=WORKERS_EXPERIMENT)
    r.add_argument("--frontier-experiment", default=FRONTIER_EXPERIMENT)
    r.add_argument("--zoology-glob", default=ZOOLOGY_GLOB)
    r.add_argument("--zoo-per-test", type=float, default=ZOO_PER_TEST_S, metavar="SECONDS")
    r.add_argument("--zoo-done-log", default=ZOO_DONE_LOG, metavar="PATH",
                   help="a pytest -v log of the zoo tests: those it shows passed or skipped are "
                        "not run again ('' for none)")
    r.add_argument("--zoo-tests", type=int, default=ZOO_TESTS,
                   help="how many zoo tests there are (all finished: the zoo is not rerun)")
    r.add_argument("--steps", type=int, default=None,
                   help="override every training run's steps (the dry run)")
    r.add_argument("--wheels", type=Path, default=ROOT / ".whl")
    r.add_argument("--no-wheels", action="store_true")
    r.add_argument("--no-cuda", action="store_true", help="the dry run on a CPU")
    s = sub.add_parser("sweep", help="(a child) one experiment's sweep with overrides")
    s.add_argument("experiment", type=Path)
    s.add_argument("--root", type=Path, required=True)
    s.add_argument("--workers", type=int, default=1)
    s.add_argument("--steps", type=int, default=None)
    s.add_argument("--device", default=None)
    s.add_argument("--first", type=int, default=None)
    s.add_argument("--json", type=Path, default=None)
    p = sub.add_parser("elu-probe", help="(a child) the ELU bf16 probe")
    p.add_argument("--json", type=Path, required=True)
    p.add_argument("--no-cuda", action="store_true")
    return ap


def check_args(args: argparse.Namespace) -> str | None:
    """One line on what is wrong with `run`'s arguments, or None."""
    if not args.budget > PACK_RESERVE_S + sum(SETUP_BUDGETS.values()):
        return (f"--budget must exceed {PACK_RESERVE_S + sum(SETUP_BUDGETS.values()):g} s "
                f"(setup and the final pack), got {args.budget:g}")
    if args.out.exists() and not args.out.is_dir():
        return f"--out {args.out} is a file, not a folder"
    if args.steps is not None and args.steps < 1:
        return f"--steps must be >= 1, got {args.steps}"
    if args.train_workers is not None and args.train_workers < 1:
        return f"--train-workers must be >= 1, got {args.train_workers}"
    if args.resume is not None and not args.resume.exists():
        return f"--resume {args.resume} does not exist"
    if (args.out / "data" / "campaign.json").is_file() and args.resume is not None:
        return f"{args.out} already holds a campaign: resume it without --resume"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.cmd == "sweep":
        return _sweep_main(args)
    if args.cmd == "elu-probe":
        def save(result: dict) -> None:
            args.json.write_text(json.dumps(result, indent=2))

        result = elu_probe(cuda=not args.no_cuda, save=save)
        save(result)
        print(result.get("skipped") or f"elu probe: {len(result['cases'])} cases")
        return 0
    problem = check_args(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "data").mkdir(exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.resume is not None:
        try:
            log(args.out.resolve(), f"campaign: resume: {restore(args.resume, args.out)}")
        except (OSError, tarfile.TarError) as exc:
            print(f"error: --resume {args.resume}: {exc}", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="recall-lab-campaign-site-") as tmp:
        campaign = Campaign(args, Path(tmp))
        earlier = args.out / "data" / "campaign.json"
        if earlier.is_file():  # an earlier lease's workers table and pieces, kept
            old = json.loads(earlier.read_text())
            campaign.result["workers"] = old.get("workers", [])
            campaign.result["earlier_pieces"] = (old.get("earlier_pieces", [])
                                                 + old.get("pieces", []))
        return campaign.run()


if __name__ == "__main__":
    sys.exit(main())
