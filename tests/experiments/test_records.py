"""record.json, one per placement: the seven committed placements' records follow the shipped
schema and their content hashes; one is rebuilt from its run records and equals the committed
file; a tampered record (a changed count, a changed hash, an unknown schema version) is refused
in one line."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from recall_lab.experiments import records as rec
from recall_lab.generators.errors import RecallLabError

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("placement_records",
                                              ROOT / "scripts" / "placement_records.py")
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)


def test_the_schema_is_package_data_and_versioned():
    schema = rec.schema()
    assert schema["version"] == rec.SCHEMA_VERSION
    assert schema["properties"]["schema_version"]["enum"] == list(rec.SCHEMA_VERSIONS)
    assert "Every Eval Ever" in schema["description"]
    toml = (ROOT / "pyproject.toml").read_text()
    assert '"schemas/*.json"' in toml


@pytest.mark.parametrize("folder", script.PLACEMENTS, ids=lambda p: p.name)
def test_each_committed_placement_has_a_valid_record(folder):
    record = rec.read_record(folder)  # schema version, schema, content hash
    answer = json.loads((folder / "answer.json").read_text())
    cells = {c["size"]: c["solved"] for c in answer["cells"] if c["solved"]}
    for r in record["evaluation_results"]:
        if r.get("status") == "cut":
            continue
        u = r["score_details"]["uncertainty"]
        k, n = len(r["seeds_solved"]), u["num_samples"]
        assert (k, n) == (cells[r["table"]]["k"], cells[r["table"]]["n"])
        ci = u["confidence_interval"]
        assert (ci["lower"], ci["upper"]) == pytest.approx((cells[r["table"]]["lo"],
                                                            cells[r["table"]]["hi"]))
    # every run's record hash is its files' hash as committed
    for run in record["runs"][:3]:
        sub = "pilot" if run["role"] == "pilot" else "cells"
        assert rec.run_record_hash(folder / sub / run["name"]) == run["record_sha256"]
    # these placements predate binding: the record says they are bound by time only, or,
    # where a later registration's runs store its hash (mamba3's 32-pair table), partially
    claims = record["claims"]
    if claims["binding"] == "partial":
        assert 0 < claims["runs_bound"] < claims["runs"]
        assert sum(r["registration_sha256"] is not None for r in record["runs"]) \
            == claims["runs_bound"]
    else:
        assert claims["binding"] == "time only" and "to the second" in claims["note"]


@pytest.mark.parametrize("folder", [ROOT / "docs/results/place-deltanet",
                                    ROOT / "docs/results/frontier-2026/kda"], ids=lambda p: p.name)
def test_a_record_rebuilt_from_its_runs_equals_the_committed_file(folder):
    """record.json, and report.md's and README.md's time and binding lines, as the records give
    them now."""
    for path, text in script.outputs(folder).items():
        assert text == path.read_text(), path


def test_a_tampered_record_is_refused_in_one_line(tmp_path):
    good = json.loads((ROOT / "docs/results/frontier-2026/kda/record.json").read_text())

    def refused(record: dict, match: str) -> None:
        path = tmp_path / "record.json"
        path.write_text(json.dumps(record))
        with pytest.raises(RecallLabError, match=match) as e:
            rec.read_record(path)
        assert "\n" not in str(e.value)

    changed = json.loads(json.dumps(good))
    changed["evaluation_results"][2]["seeds_solved"].append(1)  # a changed count
    refused(changed, "content hash mismatch")
    changed = json.loads(json.dumps(good))
    changed["runs"][0]["record_sha256"] = "0" * 64  # a changed run hash
    refused(changed, "content hash mismatch")
    refused({**good, "schema_version": "9.9"}, "unknown schema version '9.9'")
    broken = {k: v for k, v in good.items() if k != "runs"}
    refused(broken, "does not follow the placement-record schema")
    with pytest.raises(RecallLabError, match="no record.json"):
        rec.read_record(tmp_path / "nowhere")
