"""Pre-registered claims: when an experiment's `[[report.expect]]` claims were fixed, and whether
they were fixed before the runs that test them.

`sweep` calls `register(folder, expects, source)` before it starts any run. It appends a
registration to `<sweep folder>/claims.json` whenever the set of claims differs from the last
one (time, SHA-256 and text of each claim, the git commit of the experiment file and whether that
file had uncommitted changes), and returns the registration's id. The sweep stores that id in
every run entry it launches (`sweep.json` "registration"), so a run knows which claims existed
when it started.

`report --check` asks `status(claim, runs, registry)` per claim:
- "pre-registered": every finished run of the claim's rows was launched under a registration that
  already held this exact claim;
- "after N of M runs": the claim (this exact text and values) did not exist yet when N of its
  rows' runs were launched: it is exploratory for those runs;
- "not recorded": its runs predate pre-registration (no registration id);
and whether the claim changed since it was first registered (an earlier registration held a claim
with the same `claim` text and other values).

Binding. A registration written since records were bound carries `sha256`, the content hash of
the registration as written (`content_hash`: its id, time to the microsecond, commit and claims,
canonical JSON); `claims.json` is fsynced before `register` returns. Every run launched under it
stores that hash in its own config.json (`"registration": {"id", "sha256", "claims"}`, beside
`versions`: not a config field, so no run's config hash moved) and `sweep.json` names it. A run
is "bound" to a claim when its stored hash equals the hash recomputed from a registration that
holds the claim and its launch is strictly later than that registration's time; "pre-registered"
needs every run bound. Runs recorded before the binding existed (no hash) can be covered only by
their launch times, to the second: their claims read "registered before its runs, by time only".
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from recall_lab import checkpoint as ck
from recall_lab.generators.errors import RecallLabError

CLAIMS = "claims.json"


def claim_hash(spec: dict) -> str:
    """SHA-256 (16 hex digits) of one claim's table, keys sorted: any edit of it is a new claim."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _git(source: Path | None) -> tuple[str | None, bool | None]:
    """(commit of HEAD, whether `source` differs from it) where `source` sits in a git work tree;
    (None, None) otherwise."""
    if source is None:
        return None, None
    cwd = Path(source).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None, None
        dirty = subprocess.run(["git", "status", "--porcelain", "--", str(Path(source).resolve())],
                               cwd=cwd, capture_output=True, text=True, timeout=10)
        return head.stdout.strip(), bool(dirty.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


def read_registry(folder: Path) -> dict:
    path = Path(folder) / CLAIMS
    if not path.is_file():
        return {"registrations": []}
    data = ck.read_json(path, "claims registry")
    if not isinstance(data, dict) or not isinstance(data.get("registrations"), list):
        raise RecallLabError(f"corrupt claims registry {path}: no 'registrations' list")
    return data


def content_hash(registration: dict) -> str:
    """SHA-256 (64 hex digits) of one registration as written, less its own `sha256` field:
    canonical JSON (keys sorted, no spaces, UTF-8). A changed claim, time or commit changes it."""
    body = {k: v for k, v in registration.items() if k != "sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _fsync(path: Path) -> None:
    """The file and its folder's entry on disk before anything else happens."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # pragma: no cover - a platform without directory descriptors
        return
    try:
        os.fsync(dfd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(dfd)


def now_precise() -> str:
    """UTC now to the microsecond (registrations and launches: 'strictly later' is testable)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def when(stamp: str | None) -> datetime | None:
    """An ISO time as recorded (to the second or the microsecond) -> datetime; None if absent."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return None


def register(folder: Path, expects: list[dict], source: Path | None = None) -> str:
    """Record the experiment's claims (if they changed since the last registration, or the last
    one predates binding: no `sha256`) and return the id of the registration in force. The file
    is written and fsynced before this returns; called before any run of the sweep starts."""
    folder = Path(folder)
    claims = [{"sha256": claim_hash(e), "claim": e.get("claim") or f"expectation {i + 1}",
               "spec": e} for i, e in enumerate(expects)]
    reg_id = claim_hash({"claims": [c["sha256"] for c in claims]})
    registry = read_registry(folder)
    regs = registry["registrations"]
    if regs and regs[-1]["id"] == reg_id and regs[-1].get("sha256"):
        return reg_id
    commit, dirty = _git(source)
    entry = {"id": reg_id, "time": now_precise(), "commit": commit,
             "file_changed_since_commit": dirty, "source": str(source) if source else None,
             "claims": claims}
    if regs and regs[-1]["id"] == reg_id:  # same claims, recorded before binding: bound anew
        entry["note"] = ("the same claims as the registration before, recorded again with a "
                         "content hash so that runs launched from here on are bound to it")
    entry["sha256"] = content_hash(entry)
    regs.append(entry)
    ck.write_json(folder / CLAIMS, registry)
    _fsync(folder / CLAIMS)
    return reg_id


def binding(folder: Path, reg_id: str) -> dict:
    """What a run launched under registration `reg_id` of `folder/claims.json` stores: {"id",
    "sha256", "time", "claims" (the file), "n_claims"}; the latest registration with that id."""
    path = Path(folder) / CLAIMS
    regs = [r for r in read_registry(folder)["registrations"] if r.get("id") == reg_id]
    if not regs:
        raise RecallLabError(f"{path} has no registration {reg_id}")
    r = regs[-1]
    return {"id": reg_id, "sha256": r.get("sha256"), "time": r.get("time"),
            "claims": str(path), "n_claims": len(r.get("claims") or [])}


def binding_lines(b: dict) -> list[str]:
    """What is printed before the first run: where the claims are, when they were recorded,
    and their hash (every run launched under them stores it); each line at most 100 columns
    but the path."""
    return [f"claims: {b['n_claims']} recorded in {b['claims']} at {b['time']} "
            f"(registration {b['id']}, fsynced before the first run)",
            f"claims sha256 {b['sha256']} (runs store it)"]


def check_binding(run_hash: str | None, launched: str | None, registry: dict,
                  reg_id: str | None = None) -> dict:
    """Whether one run is bound to a registration of `registry`: its stored hash equals the hash
    recomputed from a registration's content (the one named `reg_id` where given) and its
    launch is strictly later than that registration's time. Returns {"bound": bool,
    "registration": the matching entry or None, "why": one phrase}."""
    regs = [r for r in registry.get("registrations", [])
            if reg_id is None or r.get("id") == reg_id]
    if not run_hash:
        return {"bound": False, "registration": None,
                "why": "the run stores no registration hash (recorded before binding)"}
    match = [r for r in regs if r.get("sha256") == run_hash]
    if not match:
        return {"bound": False, "registration": None,
                "why": f"its registration hash {run_hash[:16]} is no registration of these claims"}
    r = match[-1]
    if content_hash(r) != run_hash:
        return {"bound": False, "registration": r,
                "why": f"registration {r['id']}'s content no longer hashes to {run_hash[:16]} "
                       "(claims.json edited after the run was launched)"}
    t_reg, t_run = when(r.get("time")), when(launched)
    if t_run is None or t_reg is None or not t_run > t_reg:
        return {"bound": False, "registration": r,
                "why": f"launched {launched or 'at an unrecorded time'}, not after the "
                       f"registration ({r.get('time')})"}
    return {"bound": True, "registration": r, "why": "hash equal, launched after"}


def status(spec: dict, run_regs: list[str | None], registry: dict,
           launched: list[str | None] | None = None,
           hashes: list[str | None] | None = None) -> dict:
    """Pre-registration status of one claim given the registration ids its rows' finished runs
    were launched under, when each was launched (ISO UTC, as `sweep` records it; None where
    not recorded) and the registration hash each run stores in its config.json (`hashes`; None
    where it stores none). A run is covered when its registration holds the claim, or when it was
    launched after the claim was first registered (a run of another experiment that the claim
    compares with carries that experiment's registration, which cannot hold the claim); it is
    bound when its hash equals a registration holding the claim and it was launched strictly
    after it (`check_binding`). "pre-registered" needs every run bound; every run covered but
    some not bound reads "time only" (registered before its runs, by time only, to the second).
    Returns {"status", "text", "first_registered", "changed", "bound" (runs bound)}."""
    h = claim_hash(spec)
    regs = {r["id"]: r for r in registry.get("registrations", [])}
    holding = [r for r in registry.get("registrations", [])
               if any(c["sha256"] == h for c in r.get("claims", []))]
    first = holding[0] if holding else None
    text = spec.get("claim")
    changed = any(c.get("claim") == text and c["sha256"] != h
                  for r in registry.get("registrations", []) for c in r.get("claims", [])
                  if text is not None)
    n = len(run_regs)
    at_list = list(launched) if launched is not None else [None] * n
    hash_list = list(hashes) if hashes is not None else [None] * n
    t_first = when(first["time"]) if first else None

    def covered(reg: str | None, at: str | None) -> bool:
        if reg in regs and any(c["sha256"] == h for c in regs[reg].get("claims", [])):
            return True
        t = when(at)
        return t_first is not None and t is not None and t >= t_first

    holding_registry = {"registrations": holding}
    open_runs = [r for r, at in zip(run_regs, at_list, strict=True) if not covered(r, at)]
    bound = sum(check_binding(hh, at, holding_registry)["bound"]
                for hh, at in zip(hash_list, at_list, strict=True))
    unknown = sum(1 for r in open_runs if r is None or r not in regs)
    after = len(open_runs) - unknown
    where = f", commit {first['commit'][:10]}" if first and first.get("commit") else ""
    dirty = " (file had uncommitted edits)" if first and first.get(
        "file_changed_since_commit") else ""
    if n == 0:
        st, msg = "no runs", "no finished run of its rows"
    elif unknown == n:
        st, msg = "not recorded", "its runs predate pre-registration (no record)"
    elif after or unknown:
        st = "after runs"
        msg = f"written after {after + unknown} of its {n} runs started (exploratory there)"
    elif bound == n:
        st = "pre-registered"
        stamps = [a for a in at_list if when(a) is not None]
        launched_first = min(stamps, key=when) if stamps else "-"
        hashed = next((r for r in reversed(holding) if r.get("sha256")), {})
        msg = (f"fixed before all {n} runs of its rows ({first['time']}{where}{dirty}; first "
               f"run launched {launched_first}); each run stores its registration's hash "
               f"({hashed.get('sha256', '')[:16]}) and was launched after it")
    else:
        st = "time only"
        msg = (f"registered before its runs by time only, to the second ({first['time']}"
               f"{where}{dirty}): {n - bound} of its {n} runs store no hash of a registration "
               "holding it")
    if changed:
        msg += "; changed since first registered"
    return {"status": st, "text": msg, "first_registered": first["time"] if first else None,
            "changed": changed, "bound": bound}


def run_bindings(runs: list, registry: dict) -> dict:
    """A placement's (or any sweep's) runs against the claims they were launched under: how
    many are bound by hash (`check_binding`), when the claims were recorded and the first run
    launched, and whether the launch times alone put every run after them. `runs`: records with
    `bound` (the hash a run's config.json stores) and `launched`."""
    regs = registry.get("registrations", [])
    first = regs[0] if regs else None
    launched = [r.launched for r in runs if r.launched]
    t0 = when(first["time"]) if first else None
    checks = [check_binding(r.bound, r.launched, registry) for r in runs]
    return {"claims_recorded": first["time"] if first else None,
            "sha256": next((r.get("sha256") for r in reversed(regs) if r.get("sha256")), None),
            "first_run_launched": min(launched, key=when) if launched else None,
            "before_every_run": bool(t0 and launched and all(when(x) >= t0 for x in launched)),
            "runs": len(runs), "bound": sum(c["bound"] for c in checks),
            "unbound": sorted({c["why"] for c in checks if not c["bound"]})}


def registration_text(reg: dict) -> str:
    """One sentence on how a placement's runs are bound to its claims: "pre-registered" only
    where every run stores the claims' hash and was launched strictly after them; records from
    before binding say they were bound by time only, to the second."""
    n, k = reg.get("runs"), reg.get("bound")
    times = (f"claims.json: {reg['claims_recorded']}; first run launched "
             f"{reg['first_run_launched'] or '-'}")
    if n and k == n:
        return (f"Written, fsynced and recorded before the first run ({times}; sha256 "
                f"{(reg.get('sha256') or '')[:16]}): each of the {n} runs stores that hash and "
                "was launched after it: pre-registered.")
    if k:
        return (f"Recorded in claims.json before the runs ({times}), but only {k} of the {n} "
                "runs store its hash and were launched after it: NOT pre-registered for the "
                "others.")
    order = ("every run launched at or after it" if reg.get("before_every_run")
             else "NOT before every run")
    return (f"Recorded before the runs by time only, to the second ({times}; {order}): these "
            "runs store no hash of the claims (recorded before runs were bound to them), so the "
            "records show the claims were not written after the runs, not that they preceded "
            "them.")
