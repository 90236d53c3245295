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
"""

from __future__ import annotations

import hashlib
import json
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


def register(folder: Path, expects: list[dict], source: Path | None = None) -> str:
    """Record the experiment's claims (if they changed since the last registration) and return
    the id of the registration in force. Called before any run of the sweep starts."""
    folder = Path(folder)
    claims = [{"sha256": claim_hash(e), "claim": e.get("claim") or f"expectation {i + 1}",
               "spec": e} for i, e in enumerate(expects)]
    reg_id = claim_hash({"claims": [c["sha256"] for c in claims]})
    registry = read_registry(folder)
    regs = registry["registrations"]
    if regs and regs[-1]["id"] == reg_id:
        return reg_id
    commit, dirty = _git(source)
    regs.append({"id": reg_id, "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 "commit": commit, "file_changed_since_commit": dirty,
                 "source": str(source) if source else None, "claims": claims})
    ck.write_json(folder / CLAIMS, registry)
    return reg_id


def status(spec: dict, run_regs: list[str | None], registry: dict,
           launched: list[str | None] | None = None) -> dict:
    """Pre-registration status of one claim given the registration ids its rows' finished runs
    were launched under, and when each was launched (ISO UTC, as `sweep` records it; None where
    not recorded). A run counts as covered when its registration holds the claim, or when it was
    launched after the claim was first registered: a run of another experiment that the claim
    compares with carries that experiment's registration, which cannot hold the claim.
    Returns {"status", "text", "first_registered", "changed"}."""
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
    when = list(launched) if launched is not None else [None] * n

    def covered(reg: str | None, at: str | None) -> bool:
        if reg in regs and any(c["sha256"] == h for c in regs[reg].get("claims", [])):
            return True
        return first is not None and at is not None and at >= first["time"]

    open_runs = [r for r, at in zip(run_regs, when, strict=True) if not covered(r, at)]
    unknown = sum(1 for r in open_runs if r is None or r not in regs)
    after = len(open_runs) - unknown
    if n == 0:
        st, msg = "no runs", "no finished run of its rows"
    elif unknown == n:
        st, msg = "not recorded", "its runs predate pre-registration (no record)"
    elif after or unknown:
        st = "after runs"
        msg = f"written after {after + unknown} of its {n} runs started (exploratory there)"
    else:
        st = "pre-registered"
        where = f", commit {first['commit'][:10]}" if first and first.get("commit") else ""
        dirty = " (file had uncommitted edits)" if first and first.get(
            "file_changed_since_commit") else ""
        msg = f"fixed before all {n} runs of its rows ({first['time']}{where}{dirty})"
    if changed:
        msg += "; changed since first registered"
    return {"status": st, "text": msg, "first_registered": first["time"] if first else None,
            "changed": changed}
