"""Optional trackers (--log): TensorBoard event files and offline W&B runs hold the same numbers as
metrics.jsonl and summary.json; an unknown tracker is one clear error. Skipped where the package
is not installed (the [tracking] extra)."""

import json
import re
import time

import pytest

from recall_lab import checkpoint as ck
from recall_lab.config import RunConfig, TrainConfig
from recall_lab.generators import TaskSpec
from recall_lab.generators.errors import RecallLabError
from recall_lab.models import model_config
from recall_lab.tracking import parse_log
from recall_lab.train import train_run

SPEC = TaskSpec(levels=((3, 3),), values=4)


def _cfg():
    m = model_config("mamba", SPEC.vocab().size, d_model=16, d_state=4)
    t = TrainConfig(steps=4, batch_size=4, eval_every=2, eval_samples=8, test_samples=8,
                    warmup=1, device="cpu")
    return RunConfig(model=m, train=t, task=SPEC)


def _valid(folder):
    rows = [json.loads(x) for x in (folder / ck.METRICS).read_text().splitlines()]
    return {r["step"]: r["acc"] for r in rows if r["split"] == "valid"}


def test_unknown_tracker_is_one_clear_error():
    assert parse_log("tensorboard, wandb") == ("tensorboard", "wandb")
    assert parse_log(None) == ()
    with pytest.raises(RecallLabError, match="unknown --log 'mlflow'"):
        parse_log("tensorboard,mlflow")


def test_tensorboard_scalars_equal_the_metrics(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    summary = train_run(_cfg(), tmp_path / "r", log=("tensorboard",))
    acc = EventAccumulator(str(tmp_path / "r" / "tensorboard"))
    acc.Reload()
    got = {e.step: e.value for e in acc.Scalars("valid/acc")}
    assert got == pytest.approx(_valid(tmp_path / "r"))  # float32 in the event file
    assert acc.Scalars("final_test/acc")[0].value == pytest.approx(summary["test"]["acc"])


def test_wandb_runs_offline_and_records_the_summary(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "online")  # the tracker must force offline anyway
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    summary = train_run(_cfg(), tmp_path / "r", log=("wandb",))
    files = list((tmp_path / "r" / "wandb").glob("offline-run-*/*.wandb"))
    assert len(files) == 1  # an offline run: nothing was sent
    for _ in range(100):  # wandb's service process may still be writing its last records
        data = files[0].read_bytes()
        if _wandb_values(data, "final_test/acc"):
            break
        time.sleep(0.2)
    assert set(_wandb_values(data, "final_test/acc")) == {summary["test"]["acc"]}
    # history rows, and summary updates repeating the latest
    assert set(_wandb_values(data, "valid/acc")) == set(_valid(tmp_path / "r").values())


def _wandb_values(data: bytes, key: str) -> list[float]:
    """The values logged under `key` in a .wandb record log, read from the protobuf bytes: each
    item is the key string (after its length byte), then field 16 (`value_json`, tag bytes
    0x82 0x01), a length byte and the value as JSON text (the wandb package no longer ships a
    Python reader of its record log)."""
    out = []
    pattern = bytes([len(key)]) + re.escape(key.encode()) + rb"\x82\x01([\x00-\x7f])"
    for m in re.finditer(pattern, data):
        n = m.group(1)[0]
        out.append(float(json.loads(data[m.end():m.end() + n])))
    return out
