"""Every chapter notebook is committed with the outputs of a full run, and still runs (fast mode)."""

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "chapters").glob("*.ipynb"))


def test_there_is_at_least_one_notebook():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_has_outputs_and_no_errors(path):
    cells = json.loads(path.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    unrun = [i for i, c in enumerate(code) if c.get("execution_count") is None]
    assert not unrun, f"{path.name}: code cells {unrun} were committed without running"
    counts = [c["execution_count"] for c in code]
    assert counts == list(range(1, len(code) + 1)), f"{path.name}: not run top to bottom in one go: {counts}"
    errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: committed with error outputs: {[e['ename'] for e in errors]}"
    # Widget outputs (e.g. progress bars) make the site load the widget manager from a CDN.
    widgets = [o for c in code for o in c.get("outputs", []) if "application/vnd.jupyter.widget-view+json"
               in o.get("data", {})]
    assert not widgets and "widgets" not in json.loads(path.read_text())["metadata"], \
        f"{path.name}: committed with ipywidgets outputs (progress bars?); the site would fetch a CDN script"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes_in_fast_mode(path, monkeypatch):
    monkeypatch.setenv("MINIRL_FAST", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError, naming the cell, if any cell fails
