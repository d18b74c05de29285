"""Hopper's programmatic dependent launch in the generated modules (no GPU needed): which kernels start early, and
that each waits before it reads what the kernel before it wrote."""

import re

import pytest

import redalgebra.runtime.backends as backends
from redalgebra.runtime import compile
from tests.catalogue import fused


def _module(monkeypatch, cc, name="fp8_quant_gemm", weights="e4m3", rows=16, k_major=False):
    monkeypatch.setattr(backends, "_capability", lambda: cc)
    f = fused(name)
    kernel = compile(f, "cuda", "columns_mma")
    dtypes = {s.name: weights if s.size is not None else "bfloat16" for s in f.cascade.inputs}
    reps = {s.name: rows for s in f.cascade.inputs if s.size is not None}
    vectors = tuple(s.name for s in f.cascade.inputs if s.size is not None) if k_major else ()
    strategy, spec, _ = kernel.spec_for(rows, 7168, dtypes, {"n": 7168}, reps=reps, k_major=vectors)
    return spec, kernel.source(spec, strategy).source


@pytest.mark.parametrize("name,weights,rows,whole", [
    ("fp8_quant_gemm", "e4m3", 1, True), ("fp8_quant_gemm", "e4m3", 16, True),
    ("fp8_quant_gemm", "bfloat16", 1, False), ("fp8_quant_gemm", "e4m3", 64, False),
    ("rmsnorm_gemm", "bfloat16", 16, False)])
@pytest.mark.parametrize("k_major", [False, True])
def test_a_few_rows_products_bring_their_whole_segments_of_weights_into_l2_where_the_weights_fit(
        monkeypatch, name, weights, rows, whole, k_major):
    # 7168 x 7168 e4m3 weights (51 MB) at one and 16 rows, where 512 rows are half a segment: the whole segment
    # (measured faster on the H100); bfloat16 weights (102 MB, past the L2), 64 rows (four row blocks) and RMSNorm's
    # 16 rows (32 MB; 512 rows three quarters of a segment): the first rows only (measured slower or the same)
    spec, source = _module(monkeypatch, (9, 0), name, weights=weights, rows=rows, k_major=k_major)
    assert spec.dependent and spec.warm_all == whole and bool(spec.k_major) == k_major
    tiles = _bodies(source)["tiles"]
    warm = tiles[:tiles.index("grid_launch()")]
    if k_major:  # (lines a column: the segment's, or at most 512 rows' bytes over the block's columns)
        lines = re.search(r"wl = (.*)\n", warm).group(1)
        assert re.fullmatch(r"\(hi - lo \+ \d+\) // \d+", lines) if whole else lines.startswith("min(")
    else:
        assert ("min(hi, lo + 512)" in warm) != whole and (" hi, " in warm.replace("(hi - lo", "")) == whole
    assert not _module(monkeypatch, (8, 9), name, weights=weights, rows=rows)[0].warm_all  # (no dependent launch)


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
    # the products bring their first weight rows into L2, let the next launch start, and wait before the first factor
    tiles = body["tiles"]
    assert tiles.index("prefetch_l2_at(") < tiles.index("grid_launch()") < tiles.index("grid_wait()") < \
        tiles.index("ld_w4_at(fac")
    # the combine waits before anything else
    assert body["combine"].split("\n")[1].strip() == "grid_wait()"


def test_off_hopper_the_kernels_run_one_after_the_other(monkeypatch):
    spec, source = _module(monkeypatch, (8, 9))
    assert not spec.dependent and "grid_wait" not in "".join(_bodies(source).values())
    assert "prefetch_l2_at(" not in source.split("def ")[-1]


@pytest.mark.parametrize("warm_all", [False, True])
@pytest.mark.parametrize("k_major", [False, True])
def test_the_products_prefetch_stays_inside_the_weights_with_empty_segments(monkeypatch, k_major, warm_all):
    # the dependent launch's L2 prefetch (its simulator stand-in refuses an address outside the array) in a module
    # whose last segments are empty (640 elements in 7 segments of 128) and whose one column block is partial (64 of
    # 128 columns): with K-major weights, the clamped offsets of an empty segment pointed past the weights' end before
    # that segment's prefetch was skipped; with the whole segments brought in (warm_all) too
    import dataclasses

    import numpy as np

    from redalgebra.codegen import strategies
    from redalgebra.runtime import as_e4m3
    from redalgebra.runtime.formats import to_float
    from tests.runtime.test_columns import _problem, _reference

    strategy = strategies.REGISTRY["columns_mma"]

    def configure(f, p):  # (the simulator is never given the dependent launch: forced here)
        return dict(strategy.configure(f, p), dependent=True, warm_all=warm_all)
    monkeypatch.setitem(strategies.REGISTRY, "columns_mma", dataclasses.replace(strategy, configure=configure))
    inputs, params = _problem("fp8_quant_gemm", 1, 640, 64, "bfloat16")
    w = as_e4m3(to_float(inputs["w"]))
    given = as_e4m3(np.ascontiguousarray(w.bits[0].T).T[None]) if k_major else w
    kernel = compile(fused("fp8_quant_gemm"), "cudasim", "columns_mma", segments=7)
    spec = kernel._planned(dict(inputs, w=given), params, None)[0]
    assert spec.dependent and spec.warm_all == warm_all and spec.k_major == (("w",) if k_major else ())
    out = kernel(dict(inputs, w=given), params)["y"]
    ref = _reference("fp8_quant_gemm", dict(inputs, w=w), params, None, 1)["y"]
    assert np.max(np.abs(out - ref)) <= 1e-5 * np.max(np.abs(ref))
