"""The columns strategy in the CUDA simulator: rows sharing a weight matrix, the scalar reductions first."""

import numpy as np
import pytest

from redalgebra import RedalgebraError, derive, evaluate, parse
from redalgebra.runtime import compile
from redalgebra.runtime.check import check
from redalgebra.runtime.choice import choose
from redalgebra.runtime.formats import as_bfloat16, to_float
from tests.catalogue import fused


def _problem(name, rows, length, n, dtype, seed=0, shared=True):
    rng = np.random.default_rng(seed)
    c = fused(name).cascade
    inputs = {}
    for s in c.inputs:
        a = rng.normal(size=(rows, length) if s.size is None else (1 if shared else rows, length, n)).astype(np.float32)
        inputs[s.name] = as_bfloat16(a) if dtype == "bfloat16" else a
    params = {p.name: np.float32(length if p.name == "h" else 1e-5) for p in c.params}
    return inputs, params


def _reference(name, inputs, params, keep, rows):
    wide = {k: np.asarray(to_float(v) if hasattr(v, "bits") else v, np.float64) for k, v in inputs.items()}
    wide = {k: np.broadcast_to(v, (rows,) + v.shape[1:]) for k, v in wide.items()}
    from redalgebra import evaluate, workloads
    return evaluate(workloads.get(name).cascade, wide, params, keep)


@pytest.mark.parametrize("name,rows,length,n,dtype,segments,masked", [
    ("fp8_quant_gemm", 5, 300, 24, "bfloat16", 3, True),   # a batch of 4 and one of 1; 3 segments; a mask
    ("rmsnorm_gemm", 6, 70, 40, "bfloat16", None, False),  # two scalar inputs per element (x, g)
    ("layernorm_gemm", 4, 45, 16, "float32", 2, True),     # three scalar reductions first, two vector sums
])
def test_columns_matches_the_reference_at_the_float32_tolerance(name, rows, length, n, dtype, segments, masked):
    inputs, params = _problem(name, rows, length, n, dtype)
    keep = np.random.default_rng(1).random((rows, length)) > 0.2 if masked else None
    if keep is not None:
        keep[-1] = False  # a fully masked row
    kernel = compile(fused(name), "cudasim", "columns", segments=segments)
    out = kernel(inputs, params, keep)
    ref = _reference(name, inputs, params, keep, rows)["y"]
    # no cast tolerance for the FP8 cascade: the scale is final before any element is rounded
    scale = np.nanmax(np.abs(ref))
    assert np.array_equal(np.isnan(out["y"]), np.isnan(ref))
    assert np.nanmax(np.abs(out["y"] - ref)) <= 1e-5 * scale
    spec = kernel.spec_for(rows, length, {s.name: dtype for s in fused(name).cascade.inputs}, {"n": n},
                           reps={s.name: rows for s in fused(name).cascade.inputs if s.size is not None})[1]
    assert spec.batch == 4  # a power of two up to the rows (the simulator's accumulators allow it)


def test_fp8_rounds_at_the_rows_final_scale_where_a_running_scale_does_not():
    # the largest |x| last: a running absmax rounds the earlier elements at smaller scales
    rows, length, n = 2, 64, 8
    x = np.tile(np.linspace(0.1, 3.0, length, dtype=np.float32), (rows, 1)) * np.array([[1.0], [-1.0]], np.float32)
    w = np.random.default_rng(2).normal(size=(1, length, n)).astype(np.float32)
    ref = _reference("fp8_quant_gemm", {"x": x, "w": w}, {}, None, rows)["y"]
    exact = compile(fused("fp8_quant_gemm"), "cudasim", "columns")({"x": x, "w": w})["y"]
    running = compile(fused("fp8_quant_gemm"), "cudasim", "vrows")({"x": x, "w": np.repeat(w, rows, 0)})["y"]
    scale = np.abs(ref).max()
    assert np.abs(exact - ref).max() <= 1e-5 * scale < np.abs(running - ref).max()
    results = check(fused("fp8_quant_gemm"), "cudasim", "columns", shapes=((3, 37),), dtypes=("float32",),
                    sizes={"n": 8})
    assert all(r.passed and r.tolerance < 1e-3 and not r.note for r in results), "\n".join(r.line() for r in results)


def test_auto_takes_columns_for_a_shared_weight_and_refuses_coupled_components():
    f = fused("fp8_quant_gemm")
    assert choose(f, 16, 7168, {"n": 7168}, {"x": 1, "w": 16}) == "columns"
    assert choose(f, 16, 7168, {"n": 7168}) == "columns"  # too wide for vrows even unshared
    assert choose(f, 16, 7168, {"n": 64}) == "columns"   # narrow, a row's own weights: still exact fp8
    assert choose(fused("rmsnorm_gemm"), 16, 4096, {"n": 64}) == "vrows"  # no cast: a row's own narrow weights
    assert choose(fused("decode_attention"), 64, 4096, {"d": 128}, {"k": 64, "v": 64}) == "vrows"  # a dot product
    with pytest.raises(RedalgebraError, match="a dot product or a sum"):
        compile(fused("decode_attention"), "cudasim", "columns").spec_for(4, 64, sizes={"d": 8})
    odd = derive(parse("input x\ninput w[n]\nreduce o = sum(x * w * w)\nout y = o\n"))
    with pytest.raises(RedalgebraError, match="a scalar times a vector input"):
        compile(odd, "cudasim", "columns").spec_for(4, 64, sizes={"n": 8})


def test_a_cascade_that_does_not_fuse_runs_in_the_level_order():
    # int8 rounding does not separate (no fused form), but the absmax reads only x: columns computes it first
    from redalgebra.derive import unfused
    from redalgebra import workloads

    f = unfused(workloads.get("int8_quant_gemm").cascade)
    kernel = compile(f, "cudasim")
    assert kernel.resolve(3, 40, {"n": 16}) == "columns"
    rng = np.random.default_rng(5)
    x, w = rng.normal(size=(3, 40)).astype(np.float32), rng.normal(size=(1, 40, 16)).astype(np.float32)
    ref = _reference("int8_quant_gemm", {"x": x, "w": w}, {}, None, 3)["y"]
    assert np.abs(kernel({"x": x, "w": w})["y"] - ref).max() <= 1e-5 * np.abs(ref).max()
    with pytest.raises(RedalgebraError, match="or 'columns'"):
        compile(f, "cudasim", "tile")


def test_the_cpu_takes_the_level_order_for_casts_and_for_cascades_that_do_not_fuse():
    # fp8 at the final scale on the CPU too (the one-pass row kernel rounds at a running one)
    rows, length, n = 2, 64, 8
    x = np.tile(np.linspace(0.1, 3.0, length, dtype=np.float32), (rows, 1))
    w = np.random.default_rng(2).normal(size=(rows, length, n)).astype(np.float32)
    ref = _reference("fp8_quant_gemm", {"x": x, "w": w}, {}, None, rows)["y"]
    auto = compile(fused("fp8_quant_gemm"), "cpu")
    assert auto.strategy == "levels"
    one_pass = compile(fused("fp8_quant_gemm"), "cpu", "row")({"x": x, "w": w})["y"]
    scale = np.abs(ref).max()
    assert np.abs(auto({"x": x, "w": w})["y"] - ref).max() <= 1e-5 * scale < np.abs(one_pass - ref).max()
    assert compile(fused("safe_softmax"), "cpu").strategy == "row"
    from redalgebra import workloads
    from redalgebra.derive import unfused

    for name in workloads.names(fusable=False):  # every cascade runs on the CPU: a pass per reduction
        results = check(unfused(workloads.get(name).cascade), "cpu", shapes=((3, 37),))
        assert all(r.passed and r.strategy == "levels" for r in results), "\n".join(r.line() for r in results)
    with pytest.raises(RedalgebraError, match="only 'levels'"):
        compile(unfused(workloads.get("abs_deviation").cascade), "cpu", "row")


def test_row_outputs_read_later_masked_weights_and_what_columns_refuses():
    # a row output that a later output reads (computed by every thread, not read back from memory); a NaN weight
    # at an element the mask drops (the reference skips it); a batch that two weight rows would straddle
    f = derive(parse("input x\ninput w[n]\nreduce a = max(abs(x))\nreduce acc = sum(x / max(a, 1e-12) * w)\n"
                     "out sc = max(a, 1e-12)\nout y = acc * sc\n"))
    rng = np.random.default_rng(6)
    x, w = rng.normal(size=(3, 20)).astype(np.float32), rng.normal(size=(1, 20, 8)).astype(np.float32)
    keep = np.ones((3, 20), bool)
    keep[:, 5] = False
    w[0, 5, :] = np.nan
    out = compile(f, "cudasim", "columns", segments=1)({"x": x, "w": w}, {}, keep)
    ref = evaluate(f.cascade, {"x": x.astype(np.float64), "w": np.broadcast_to(w, (3, 20, 8)).astype(np.float64)},
                   {}, keep)
    assert not np.isnan(out["y"]).any() and np.abs(out["y"] - ref["y"]).max() <= 1e-5 * np.abs(ref["y"]).max()
    with pytest.raises(RedalgebraError, match="divides how many rows share"):
        compile(f, "cudasim", "columns", batch=4).spec_for(3, 20, sizes={"n": 8})  # a weight row per row
    vsum = derive(parse("input x\ninput w[n]\nreduce acc = sum(x * w)\nout t = sum(acc)\n"))
    assert choose(vsum, 16, 64, {"n": 8}, {"x": 1, "w": 16}) == "vrows"  # the finalize's sum(v) couples components


def test_the_scalar_kernel_reads_16_bytes_at_a_time_where_every_row_is_aligned():
    def pre_vec(name, strategy, length, dtypes, n=16):
        kernel = compile(fused(name), "cudasim", strategy)
        reps = {s.name: 4 for s in fused(name).cascade.inputs if s.size is not None}
        return kernel.spec_for(4, length, dtypes, {"n": n}, reps=reps)[1].pre_vec
    assert pre_vec("fp8_quant_gemm", "columns_mma", 64, {"x": "bfloat16", "w": "e4m3"}) == 8
    assert pre_vec("fp8_quant_gemm", "columns", 64, {"x": "float32", "w": "float32"}) == 4
    assert pre_vec("fp8_quant_gemm", "columns", 37, {"x": "bfloat16", "w": "bfloat16"}) == 1  # rows off the grid
    assert pre_vec("rmsnorm_gemm", "columns", 64, {"x": "bfloat16", "g": "float32", "w": "bfloat16"}) == 1  # widths
    for name, strategy, dtype in (("layernorm_gemm", "columns", "bfloat16"), ("fp8_quant_gemm", "columns_mma", "e4m3")):
        results = check(fused(name), "cudasim", strategy, shapes=((3, 64), (2, 136)), dtypes=(dtype,))
        assert all(r.passed for r in results), [r.line() for r in results]


def test_a_call_without_per_element_outputs_reads_16_bytes_at_a_time_wherever_its_rows_are_on_the_grid():
    # only per-element outputs (rows of `length` of the call's own) need a length that is a multiple of 16; bfloat16
    # rows of 40 or 1000 elements (80 and 2000 bytes) are on the 16-byte grid and were read an element at a time
    for name, strategy, length in (("fp8_quant_gemm", "columns", 40), ("logsumexp", "rows", 1000)):
        kernel = compile(fused(name), "cudasim", strategy)
        reps = {s.name: 3 for s in fused(name).cascade.inputs if s.size is not None}
        spec = kernel.spec_for(3, length, {s.name: "bfloat16" for s in fused(name).cascade.inputs}, {"n": 16},
                               reps=reps)[1]
        assert (spec.pre_vec if strategy == "columns" else spec.vec) == 8 and not spec.shifted
        results = check(fused(name), "cudasim", strategy, shapes=((3, length),), dtypes=("bfloat16",))
        assert all(r.passed for r in results), [r.line() for r in results]
    # a per-element output keeps the rule: softmax's rows of 1000 are shifted onto the grid, as before
    spec = compile(fused("safe_softmax"), "cudasim", "rows").spec_for(3, 1000, {"x": "bfloat16"})[1]
    assert spec.vec == 8 and spec.shifted


@pytest.mark.parametrize("cc", [(8, 9), (9, 0)])
@pytest.mark.parametrize("name", ["fp8_quant_gemm", "rmsnorm_gemm"])
def test_auto_keeps_the_level_order_for_16_bit_weights_many_rows_share(monkeypatch, name, cc):
    # 16 rows or more sharing narrow 16-bit weights suit mma's (and wgmma's) tiles too, but those are one-pass: an FP8
    # cast rounded at a running scale there (3 % of the largest output off at 16 rows × 65 × 40) and RMSNorm's factor
    # rounded; the columns' level order takes the cascade (its components independent), exactly
    from redalgebra.runtime import backends

    monkeypatch.setattr(backends, "_capability", lambda: cc)
    f = fused(name)
    dtypes = {s.name: "bfloat16" for s in f.cascade.inputs}
    reps = {s.name: 64 for s in f.cascade.inputs if s.size is not None}
    for rows in (16, 64):
        strategy = compile(f, "cuda").spec_for(rows, 65, dtypes, {"n": 40}, reps=reps, device=(cc, 132))[0]
        assert strategy in (("columns_mma", "columns_wgmma") if name == "fp8_quant_gemm" else ("columns",)), strategy
    # attention's keys and values (dot products) still go to the tensor-core tiles
    att = fused("attention")
    b16 = {s.name: "bfloat16" for s in att.cascade.inputs}
    strategy = compile(att, "cuda").spec_for(64, 256, b16, {"d": 64}, reps={"k": 64, "v": 64}, device=(cc, 132))[0]
    assert strategy == ("wgmma" if cc == (9, 0) else "mma")
