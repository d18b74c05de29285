"""gpu/timeline.py's table without a GPU: each kernel's start and end within a call from a profiler's spans."""

import sys
import types

import pytest

from tests.gpu_scripts import loaded


@pytest.fixture
def T(monkeypatch):
    try:
        import torch  # noqa: F401
    except ImportError:  # (a stand-in with the CUDA namespace the harness names, for this test only)
        monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
        sys.modules["torch"].cuda = types.SimpleNamespace(Event=None, synchronize=None)
    yield from loaded("timeline")


def test_the_table_gives_each_kernels_median_start_and_end_from_its_calls_first_kernel(T):
    # three calls of two kernels: the second starts 1 µs into the call (a dependent launch) and ends at 10, 12, 11
    spans = []
    for start, end in ((0.0, 10.0), (20.0, 32.0), (40.0, 51.0)):
        spans += [("factors", start, start + 3.0), ("products", start + 1.0, end)]
    lines = T.table(spans, 2)
    factors, products = lines[1].split(), lines[2].split()
    assert factors == ["factors", "0.00", "3.00", "3.00"]
    assert products == ["products", "1.00", "11.00", "10.00"]  # (medians of 10, 12, 11 and of 9, 11, 10)
    assert lines[3].startswith("call to call: 20.00 µs") and lines[3].endswith("9.00 µs")
    assert "not a multiple" in T.table(spans[:-1], 2)[0]
