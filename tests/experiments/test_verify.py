"""`recall-lab verify RECORD`: bad records end in one line and exit 2 with nothing written; a dry
run checks the committed kda record's config and data hashes and names the runs it would train;
a record of one tiny run is re-trained and its outcome reproduced, and the same record claiming
the other outcome is not."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from recall_lab.cli import app
from recall_lab.config import RunConfig, TrainConfig
from recall_lab.experiments import records as rec
from recall_lab.experiments import verify as vf
from recall_lab.generators import TaskSpec
from recall_lab.models import model_config
from recall_lab.train import train_run
from tests.cli_checks import fails_with, snapshot

ROOT = Path(__file__).resolve().parents[2]
KDA = ROOT / "docs" / "results" / "frontier-2026" / "kda"
runner = CliRunner()


def _kda() -> dict:
    return json.loads((KDA / rec.RECORD).read_text())


def _write(folder: Path, record: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    record["dedupe_identity"]["content_hash"] = rec.content_hash(record)
    return rec.write_record(folder, record)


def test_bad_records_are_one_line_and_write_nothing(tmp_path):
    (tmp_path / "empty").mkdir()
    before = snapshot(tmp_path)
    fails_with(["verify", tmp_path / "empty"], "no record.json")
    path = tmp_path / "v" / rec.RECORD
    path.parent.mkdir()
    path.write_text(json.dumps({**_kda(), "schema_version": "0.9"}))
    fails_with(["verify", path], "unknown schema version '0.9'")
    tampered = _kda()
    tampered["evaluation_results"][3]["seeds_solved"] = [0, 5]  # a changed count
    path.write_text(json.dumps(tampered))
    fails_with(["verify", path, "--dry-run"], "content hash mismatch")
    moved = _kda()
    moved["model_info"]["id"] = "gone_package.mixers:Nowhere"
    _write(path.parent, moved)
    fails_with(["verify", path, "--dry-run"], "cannot import the record's mixer "
               "gone_package.mixers:Nowhere")
    edited = _kda()
    edited["runs"][5]["config_hash"] = "0badc0de"  # the record's hash no longer its config's
    _write(path.parent, edited)
    fails_with(["verify", path], "config hash mismatch: run " + edited["runs"][5]["name"])
    path.unlink()
    assert snapshot(tmp_path) == before  # nothing written by any of them
    inside = KDA / "verify-here"
    fails_with(["verify", KDA, "--out", inside], "inside the record's folder")
    fails_with(["verify", KDA, "--table", "12", "--dry-run"], "--table 12: the record has no "
               "such table (it ran 4, 8, 16, 32)")
    fails_with(["verify", KDA, "--table", "16", "--runs", "2", "--dry-run"],
               "--runs and --table choose the runs two ways")


def test_a_dry_run_checks_the_hashes_and_names_the_boundary_seeds(tmp_path):
    before = snapshot(KDA)
    r = runner.invoke(app, ["verify", str(KDA / rec.RECORD), "--dry-run", "--no-estimate"])
    assert r.exit_code == 0, r.output
    record = _kda()
    cells = [x for x in record["runs"] if x["role"] == "cell"]
    assert f"config hashes: {len(cells)} of {len(cells)} rebuilt equal" in r.stdout
    assert "data hashes: 4 of 4 tables equal" in r.stdout
    # the boundary tables are those some but not all seeds solved: 16 (7/8) and 32 (1/6);
    # the seed named at each is its closest call to the threshold
    mixed = {e["table"] for e in record["evaluation_results"]
             if 0 < len(e["seeds_solved"]) < len(e["seeds_run"])}
    assert mixed == {16.0, 32.0}
    for size in mixed:
        near = min((x for x in cells if x["table"] == size),
                   key=lambda x: abs(x["test_acc"] - 0.95))
        assert f"would train {near['name']}: table {size:g}, seed {near['seed']}" in r.stdout
    assert snapshot(KDA) == before


def test_a_table_replay_names_every_cell_run_of_its_tables():
    r = runner.invoke(app, ["verify", str(KDA), "--dry-run", "--no-estimate", "--table", "16",
                            "--table", "32"])
    assert r.exit_code == 0, r.output
    cells = [x for x in _kda()["runs"] if x["role"] == "cell" and x["table"] in (16.0, 32.0)]
    named = [ln for ln in r.stdout.splitlines() if ln.startswith("would train ")]
    assert len(named) == len(cells) > 2
    assert named == [f"would train {x['name']}: table {x['table']:g}, seed {x['seed']}"
                     for x in sorted(cells, key=lambda x: (x["table"], x["seed"]))]


def _tiny_record(folder: Path, tmp_path: Path) -> tuple[Path, dict]:
    """A record of one 6-step run of a tiny model, its outcome as it trained here."""
    spec = TaskSpec(levels=((3, 3),), values=4)
    t = TrainConfig(steps=6, batch_size=4, eval_every=2, eval_samples=8, test_samples=8,
                    warmup=2, device="cpu")
    m = model_config("mamba+hax", spec.vocab().size, d_model=16, d_state=4, k=4, lsh_bits=2)
    cfg = RunConfig(model=m, train=t, task=spec, task_name="tiny")
    tables = json.loads(json.dumps(cfg.to_json()))
    acc = train_run(cfg, tmp_path / "first")["test"]["acc"]
    record = _kda()
    h = rec.config_hash_of(tables)
    shape = {k: v for k, v in tables.items()}
    shape["train"] = {k: v for k, v in tables["train"].items() if k not in ("seed", "lr")}
    solve_at = record["protocol"]["solve_at"] = acc  # the run solves at its own accuracy
    record["model_info"]["id"] = "mamba+hax"
    table = {**record["evaluation_results"][0], "table": 3.0, "config": shape,
             "seeds_run": [0], "seeds_solved": [0],
             "first_batch_sha256": rec.first_batch_sha256(tables)}
    record["evaluation_results"] = [table]
    record["runs"] = [{**record["runs"][3], "name": f"s0-{h}", "role": "cell", "table": 3.0,
                       "seed": 0, "lr": tables["train"]["lr"], "config_hash": h,
                       "test_acc": acc, "solved": acc >= solve_at}]
    return _write(folder, record), record


def test_a_tiny_record_is_reproduced_and_a_false_outcome_is_caught(tmp_path):
    path, record = _tiny_record(tmp_path / "rec", tmp_path)
    before = snapshot(path.parent)
    v = vf.verify(path, out=tmp_path / "out")
    assert (v["reproduced"], v["of"]) == (1, 1) and vf.outcome_line(v) == \
        "outcome reproduced 1/1"
    written = json.loads((Path(v["folder"]) / vf.VERIFY).read_text())
    assert written["runs"][0]["test_acc"] == record["runs"][0]["test_acc"]  # same CPU: equal
    assert written["versions"]["torch"] == written["torch"]  # the software that re-trained
    assert Path(v["folder"]).parent == (tmp_path / "out").resolve()
    # the record claims the other outcome: verify names the mismatch and exits 1
    record["runs"][0]["solved"] = not record["runs"][0]["solved"]
    _write(path.parent, record)
    r = runner.invoke(app, ["verify", str(path), "--out", str(tmp_path / "out2")])
    assert r.exit_code == 1, r.output
    assert "outcome NOT reproduced (0/1)" in r.stdout
    assert set(snapshot(path.parent)) == set(before)  # nothing written into the record's folder
