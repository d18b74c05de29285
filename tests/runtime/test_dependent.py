"""Hopper's programmatic dependent launch in the generated modules (no GPU needed): which kernels start early, and
that each waits before it reads what the kernel before it wrote."""

import re

import pytest

import redalgebra.runtime.backends as backends
from redalgebra.runtime import compile
from tests.catalogue import fused


def _module(monkeypatch, cc, name="fp8_quant_gemm", weights="e4m3"):
    monkeypatch.setattr(backends, "_capability", lambda: cc)
    f = fused(name)
    kernel = compile(f, "cuda", "columns_mma")
    dtypes = {s.name: weights if s.size is not None else "bfloat16" for s in f.cascade.inputs}
    reps = {s.name: 16 for s in f.cascade.inputs if s.size is not None}
    strategy, spec, _ = kernel.spec_for(16, 7168, dtypes, {"n": 7168}, reps=reps)
    return spec, kernel.source(spec, strategy).source


def _bodies(source):
    """Each kernel's body by name."""
    parts = re.split(r"\ndef (\w+)\(", source)
    return {parts[k]: parts[k + 1] for k in range(1, len(parts), 2)}


@pytest.mark.parametrize("name,weights", [("fp8_quant_gemm", "e4m3"), ("rmsnorm_gemm", "bfloat16")])
def test_on_hopper_each_later_kernel_waits_before_it_reads_the_one_before(monkeypatch, name, weights):
    spec, source = _module(monkeypatch, (9, 0), name, weights)
    assert spec.dependent and spec.segments > 1
    body = _bodies(source)
    # the factors' kernel lets the products start at once
    assert body["factors"].split("\n")[1].strip() == "grid_launch()"
    # the products bring their first weight rows into L2, let the combine start, and wait before the first factor
    tiles = body["tiles"]
    assert tiles.index("prefetch_l2_at(") < tiles.index("grid_launch()") < tiles.index("grid_wait()") < \
        tiles.index("ld_w4_at(fac")
    # the combine waits before anything else
    assert body["combine"].split("\n")[1].strip() == "grid_wait()"


def test_off_hopper_the_kernels_run_one_after_the_other(monkeypatch):
    spec, source = _module(monkeypatch, (8, 9))
    assert not spec.dependent and "grid_wait" not in "".join(_bodies(source).values())
    assert "prefetch_l2_at(" not in source.split("def ")[-1]
