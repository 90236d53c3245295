"""notebooks/mean_distance.ipynb executes headlessly in its small setting and produces its figures
and a verdict computed from its own numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "mean_distance.ipynb"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_notebook_runs_small(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("RECALL_LAB_NB_SMALL", "1")
    monkeypatch.setenv("RECALL_LAB_NB_RUNS", str(tmp_path))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
        "commit the notebook without outputs"
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", []) if o.get("output_type") == "stream")
    assert "small setting: True" in text
    assert any(v in text for v in ("INCONCLUSIVE", "CONSISTENT", "NOT CONSISTENT"))
    figs = tmp_path / "figures"
    assert (figs / "mean_distance_vs_length.png").read_bytes()[:4] == b"\x89PNG"
    assert len(list(figs.glob("map_*.png"))) == 4
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert len(images) == 5
