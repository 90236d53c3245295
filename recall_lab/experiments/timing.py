"""Time that adds up: a run's training-loop and wall seconds summed over its segments.

Each `train_run` call is a segment (`train.segment`); a resumed run's summary lists every
segment with `loop_s_total` and `wall_s_total`. A summary written before segments were recorded
has only `wall_s_this_session` (its last segment's loop) and `resumed_from` (the step that
segment began at): its earlier segment is untimed, and is counted here as such, never as zero.

`run_time(summary)` reads one run, `total_time(summaries)` a set of them, `time_text(total)`
says it in one sentence: "N s over K segments" where a run has more than one.
"""

from __future__ import annotations

from collections.abc import Iterable


def run_time(summary: dict) -> dict:
    """{"loop_s", "wall_s" (None where not recorded), "segments", "untimed", "untimed_steps",
    "timed_steps"} of one run's summary: its segments' sums, or for a summary without segments
    its one timed (last) segment and, where it was resumed, one untimed segment before it."""
    segs = summary.get("segments")
    if isinstance(segs, list) and segs:
        timed = [s for s in segs if s.get("loop_s") is not None]
        untimed = [s for s in segs if s.get("loop_s") is None]
        return {"loop_s": sum(float(s["loop_s"]) for s in timed),
                "wall_s": sum(float(s.get("wall_s") or 0.0) for s in timed),
                "segments": len(segs), "untimed": len(untimed),
                "untimed_steps": sum(int(s["to_step"]) - int(s["from_step"]) for s in untimed),
                "timed_steps": sum(int(s["to_step"]) - int(s["from_step"]) for s in timed)}
    loop = float(summary.get("wall_s_this_session") or 0.0)
    start = int(summary.get("resumed_from") or 0)
    end = int(summary.get("stopped_at") or summary.get("steps") or 0)
    return {"loop_s": loop, "wall_s": None, "segments": 2 if start else 1,
            "untimed": 1 if start else 0, "untimed_steps": start,
            "timed_steps": max(end - start, 0)}


def total_time(summaries: Iterable[dict]) -> dict:
    """Sums over runs: {"loop_s", "runs", "segments", "resumed" (runs of several segments),
    "untimed" (segments), "untimed_steps", "untimed_estimate_s"}. The estimate prices each
    untimed segment's steps at its own run's timed rate (loop seconds a step): an estimate,
    not a measurement, and labelled so wherever it is printed."""
    out = {"loop_s": 0.0, "runs": 0, "segments": 0, "resumed": 0, "untimed": 0,
           "untimed_steps": 0, "untimed_estimate_s": 0.0}
    for s in summaries:
        t = run_time(s)
        out["loop_s"] += t["loop_s"]
        out["runs"] += 1
        out["segments"] += t["segments"]
        out["resumed"] += t["segments"] > 1
        out["untimed"] += t["untimed"]
        out["untimed_steps"] += t["untimed_steps"]
        if t["untimed_steps"] and t["timed_steps"]:
            out["untimed_estimate_s"] += t["untimed_steps"] * t["loop_s"] / t["timed_steps"]
    return out


def seconds(x: float) -> str:
    return f"{x:,.0f} s"


def time_text(total: dict) -> str:
    """"Training loops: 9,694 s over 33 runs (37 segments: 4 runs resumed) ..." and, where some
    segments are untimed, what they were and the estimate at their runs' own rates."""
    segs = (f" over {total['segments']} segments ({total['resumed']} run"
            f"{'s' if total['resumed'] != 1 else ''} resumed)"
            if total["segments"] > total["runs"] else "")
    text = (f"Training loops: {seconds(total['loop_s'])}{segs}, {total['runs']} runs (their "
            "own loop time, every timed segment summed)")
    if total["untimed"]:
        k = total["untimed"]
        text += (f"; {'the earlier segment' if k == 1 else f'{k} earlier segments'} "
                 f"({total['untimed_steps']:,} steps), recorded before segments were timed, "
                 f"{'is' if k == 1 else 'are'} not in it (about "
                 f"{seconds(total['untimed_estimate_s'])} at their runs' own rates: an "
                 "estimate)")
    return text + "."
