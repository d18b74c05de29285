"""Every notebook runs top to bottom (nbclient) and ends in its own asserts, each within two minutes."""

import time
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_the_seven_notebooks_are_there():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06", "07"]


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_its_checks_pass(path, tmp_path):
    from jupyter_client import KernelManager
    from nbclient import NotebookClient  # (the dev extra installs it; imported here: 1-2 s of every worker's collection)

    nb = nbformat.read(path, as_version=4)
    assert "assert" in nb.cells[-1].source, "a notebook ends in its checks"
    # the kernel's channels on Unix sockets of the test's own folder: over TCP, two workers starting kernels at once
    # drew the same free port, and one kernel died binding it ("Address already in use")
    km = KernelManager(kernel_name="python3", transport="ipc", ip=str(tmp_path / "kernel"))
    client = NotebookClient(nb, km=km, timeout=120, resources={"metadata": {"path": str(path.parent)}})
    start = time.time()
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any failure
    assert time.time() - start < 120, f"{path.name} took {time.time() - start:.0f}s"
    assert "all checks passed" in "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    mimes = {m for c in nb.cells if c.cell_type == "code" for o in c.outputs for m in o.get("data", {})}
    if path.name != "06_gpu_results.ipynb":
        assert {"text/latex", "text/markdown"} <= mimes, "cascades and analyses display richly"
