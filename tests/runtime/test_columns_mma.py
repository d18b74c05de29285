"""The columns_mma strategy in the CUDA simulator: the level order with F · W on the tensor cores' stand-ins."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redalgebra import RedalgebraError
from redalgebra.errors import PerformanceHint
from redalgebra.runtime import as_bfloat16, as_e4m3, compile
from redalgebra.runtime.formats import to_float
from tests.catalogue import fused
from tests.runtime.test_columns import _problem, _reference


@pytest.mark.parametrize("name,rows,length,n,dtype,segments,masked,tol,threads", [
    # FP8 factors are exact in bfloat16: only the float32 summation order differs (the float32 tolerance).
    # Two blocks of rows (the second of one row), 40 of a block's 64 columns, two segments (a tile each, the second
    # partial) summed by the combine kernel, a mask with a fully masked row
    ("fp8_quant_gemm", 17, 100, 40, "bfloat16", 2, True, 1e-5, None),
    # one partial step, two warps taking the steps in turn (their sums met in shared memory), a second block of 8
    # columns, float16 weights
    ("fp8_quant_gemm", 3, 37, 72, "float16", 1, False, 1e-5, 64),
    # RMSNorm's factors are rounded to bfloat16 before the product (2^-9 each, as FlashAttention's probabilities)
    ("rmsnorm_gemm", 5, 70, 40, "bfloat16", None, False, 2 ** -9 + 1e-5, None),
    # e4m3 weights (x in bfloat16), widened to float16 in registers: exact, so the float32 tolerance.
    # Two warps, rows g + 8 of the fragments (past 8 rows: 8-byte loads, 64 columns a block), a block of 64 columns
    # and 16 of the next, two segments, a mask; then one warp, a partial step
    ("fp8_quant_gemm", 9, 100, 80, "e4m3", 2, True, 1e-5, 64),
    ("fp8_quant_gemm", 3, 37, 48, "e4m3", 1, False, 1e-5, None),
    # four warps (e4m3; 16 whole steps in the first segment, an iteration of four steps each, and 9 in the second,
    # a tail) in two segments with a mask (three rows: the fully masked one is the third, so rows 0 and 1 carry
    # every accumulator slot); eight warps (bfloat16), one partial step and 8 columns past the first four blocks, two
    # rows: rows 2 tq and 2 tq + 1 of the n8 tile, so every accumulator slot (and each warp's share of the sums it
    # adds up) reaches an output (the factors' kernel, a block of 1024 threads a row, is most of the simulator's time)
    ("fp8_quant_gemm", 3, 400, 128, "e4m3", 2, True, 1e-5, 128),
    ("fp8_quant_gemm", 2, 37, 264, "bfloat16", 1, False, 1e-5, 256),
])
def test_columns_mma_matches_the_reference(name, rows, length, n, dtype, segments, masked, tol, threads):
    inputs, params = _problem(name, rows, length, n, "bfloat16" if dtype in ("bfloat16", "e4m3") else "float32")
    if dtype == "float16":
        inputs = {k: v.astype(np.float16) for k, v in inputs.items()}
    if dtype == "e4m3":  # the weights rounded to e4m3 (nearest even, saturating), as bytes
        inputs["w"] = as_e4m3(to_float(inputs["w"]))
    keep = np.random.default_rng(1).random((rows, length)) > 0.2 if masked else None
    if keep is not None:
        keep[-1] = False
    kernel = compile(fused(name), "cudasim", "columns_mma", segments=segments, threads=threads)
    out = kernel(inputs, params, keep)["y"]
    ref = _reference(name, {k: (v.astype(np.float32) if v.dtype == np.float16 else v) if hasattr(v, "dtype") else v
                            for k, v in inputs.items()}, params, keep, rows)["y"]
    scale = np.nanmax(np.abs(ref))
    assert np.array_equal(np.isnan(out), np.isnan(ref))
    assert np.nanmax(np.abs(out - ref)) <= tol * scale
    if keep is not None:
        assert (out[-1] == 0).all()  # nothing kept: the sum is empty


@pytest.mark.parametrize("dtype,rows,n,segments,masked", [
    # a lane's 8 bytes of a weight row (group: half a 16-byte load's columns): 8 e4m3 columns, a block of 64 and 16
    # of the next, two segments, a mask, two n8 tiles of rows; 4 bfloat16 columns, a block of 32 and 8 of the next
    ("e4m3", 9, 80, 2, True),
    ("bfloat16", 3, 40, None, False),
])
def test_columns_mma_with_8_byte_loads_matches_the_reference(dtype, rows, n, segments, masked):
    length = 100
    inputs, params = _problem("fp8_quant_gemm", rows, length, n, "bfloat16")
    if dtype == "e4m3":
        inputs["w"] = as_e4m3(to_float(inputs["w"]))
    keep = np.random.default_rng(2).random((rows, length)) > 0.2 if masked else None
    group = {"e4m3": 8, "bfloat16": 4}[dtype]
    kernel = compile(fused("fp8_quant_gemm"), "cudasim", "columns_mma", segments=segments, group=group)
    out = kernel(inputs, params, keep)["y"]
    ref = _reference("fp8_quant_gemm", inputs, params, keep, rows)["y"]
    assert np.array_equal(np.isnan(out), np.isnan(ref))
    assert np.nanmax(np.abs(out - ref)) <= 1e-5 * np.nanmax(np.abs(ref))
    spec = kernel.spec_for(rows, length, {"x": "bfloat16", "w": dtype}, {"n": n}, reps={"w": rows})[1]
    source = kernel.source(spec, "columns_mma").source
    assert spec.group == group and "ld_w2_stream_at(" in source and "ld_w4_stream_at(" not in source
    with pytest.raises(RedalgebraError, match="a lane loads"):
        compile(fused("fp8_quant_gemm"), "cudasim", "columns_mma", group=2 * group + 1)(inputs, params, keep)


@pytest.mark.parametrize("dtype,rows,length,n,segments,threads,lying", [
    # e4m3 K-major: 9 rows (8 columns a lane), three segments of a super-step each (unroll 1 and 3: a super-step a
    # round; unroll 8: two, so the rest loop only), a partial column block (80 = 64 + 16)
    ("e4m3", 9, 192, 80, 3, None, True),
    # bfloat16 K-major, two warps taking 10 super-steps of one segment in turn (unroll 8: a round of four
    # super-steps each, then the rest; unroll 1 and 3: rounds of one)
    ("bfloat16", 2, 320, 16, 1, 64, True),
    # row-major: e4m3 over 9 rows in two segments (8 steps, then 4 and a partial one), one warp: unroll 3 has two
    # rounds and a rest in the first, unroll 8 one round, then the rest only; bfloat16 with two warps, 16 steps and a
    # partial one in one segment: unroll 8 a round each, then the partial step, unroll 3 two rounds each and the rest.
    # (Two warps' turns: the bfloat16 cases; the loads of a step are the same code whatever the warps)
    ("e4m3", 9, 200, 80, 2, None, False),
    ("bfloat16", 2, 261, 72, 1, 64, False),
])
def test_the_steps_loaded_before_their_products_change_no_sum(monkeypatch, dtype, rows, length, n, segments,
                                                              threads, lying):
    # Spec.unroll: the steps a warp loads before their products. A warp adds its steps in the same order whatever
    # the rounds, so the sums are the same bit for bit, and each is the reference's
    from redalgebra.codegen.strategies import columns_mma

    inputs, params = _problem("fp8_quant_gemm", rows, length, n, "bfloat16")
    w = as_e4m3(to_float(inputs["w"])) if dtype == "e4m3" else inputs["w"]
    if lying:
        w = type(w)(np.ascontiguousarray(w.bits[0].T).T[None])
    inputs = dict(inputs, w=w)
    got, runs = {}, {}
    for unroll in (1, 3, 8):
        monkeypatch.setattr(columns_mma, "UNROLL", unroll)
        kernel = compile(fused("fp8_quant_gemm"), "cudasim", "columns_mma", segments=segments, threads=threads)
        spec = kernel._planned(inputs, params, None)[0]
        assert spec.unroll == unroll and bool(spec.k_major) == lying
        # a kernel printed already is not run again: K-major weights are loaded a super-step (2 or 4 steps) at a time,
        # max(unroll // its steps, 1) a round, so unrolls 1 and 3 print the same kernel
        source = kernel.source(spec, "columns_mma").source
        if source not in runs:
            runs[source] = kernel(inputs, params)["y"]
        got[unroll] = runs[source]
    assert len(runs) == (2 if lying else 3)
    want = _reference("fp8_quant_gemm", inputs, params, None, rows)["y"]
    np.testing.assert_allclose(got[1], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    for unroll, y in got.items():
        np.testing.assert_array_equal(y, got[1], err_msg=f"unroll = {unroll}")


def test_a_kernel_built_for_8_rows_a_block_refuses_more_rows_rather_than_skipping_them():
    from redalgebra.codegen.strategies.columns_mma import grid

    kernel = compile(fused("fp8_quant_gemm"), "cudasim", "columns_mma")
    spec = kernel.spec_for(8, 64, {"x": "bfloat16", "w": "e4m3"}, {"n": 64}, reps={"w": 8})[1]
    named = {"w": np.zeros((1, 64, 64), np.uint8), "fac": np.zeros((16, 64), np.float16)}
    assert spec.batch == 8 and grid(8, spec, named)["tiles"][0] == (1, 1, spec.segments)
    with pytest.raises(RedalgebraError, match="built for 8 rows a block"):
        grid(9, spec, named)


def test_columns_mma_refuses_what_it_cannot_take():
    inputs, params = _problem("fp8_quant_gemm", 4, 64, 16, "float32")
    with pytest.raises(RedalgebraError, match="bfloat16, float16 or e4m3 weights"):
        compile(fused("fp8_quant_gemm"), "cudasim", "columns_mma")(inputs, params)
    inputs, params = _problem("rmsnorm_gemm", 4, 64, 16, "float32")
    inputs = {k: v.astype(np.float16) for k, v in inputs.items()}
    with pytest.raises(RedalgebraError, match="only FP8 factors"):
        compile(fused("rmsnorm_gemm"), "cudasim", "columns_mma")(inputs, params)
    inputs, params = _problem("fp8_quant_gemm", 4, 64, 16, "bfloat16", shared=False)  # a weight matrix per row
    with pytest.raises(RedalgebraError, match="share one weight matrix"):
        compile(fused("fp8_quant_gemm"), "cudasim", "columns_mma")(inputs, params)
    inputs, params = _problem("fp8_quant_gemm", 4, 64, 12, "bfloat16")
    with pytest.raises(RedalgebraError, match="multiple of 8"):
        compile(fused("fp8_quant_gemm"), "cudasim", "columns_mma")(inputs, params)
    inputs, params = _problem("fp8_quant_gemm", 4, 64, 24, "bfloat16")  # e4m3 rows are read 16 bytes at a time
    inputs["w"] = as_e4m3(to_float(inputs["w"]))
    with pytest.raises(RedalgebraError, match="multiple of 16"):
        compile(fused("fp8_quant_gemm"), "cudasim", "columns_mma")(inputs, params)
    inputs, params = _problem("rmsnorm_gemm", 4, 64, 16, "bfloat16")  # RMSNorm's factors are not exact in float16
    inputs["w"] = as_e4m3(to_float(inputs["w"]))
    with pytest.raises(RedalgebraError, match="only FP8 factors"):
        compile(fused("rmsnorm_gemm"), "cudasim", "columns_mma")(inputs, params)


def test_auto_takes_the_tensor_cores_only_where_the_factors_are_exact():
    def strategy(name, dtype, reps):
        kernel = compile(fused(name), "cudasim", "auto")
        return kernel.spec_for(16, 7168, {s.name: dtype for s in fused(name).cascade.inputs}, {"n": 7168},
                               reps=reps)[0]
    assert strategy("fp8_quant_gemm", "bfloat16", {"w": 16}) == "columns_mma"  # FP8 factors: exact in bfloat16
    assert strategy("fp8_quant_gemm", "float16", {"w": 16}) == "columns_mma"
    assert strategy("fp8_quant_gemm", "float32", {"w": 16}) == "columns"       # float32 weights
    with pytest.warns(PerformanceHint, match="strategy='columns_mma'"):  # (said: the test below)
        assert strategy("rmsnorm_gemm", "bfloat16", {"w": 16}) == "columns"     # a factor it would round
    assert strategy("fp8_quant_gemm", "e4m3", {"w": 16}) == "columns_mma"      # e4m3 weights, widened on chip
    assert strategy("rmsnorm_gemm", "e4m3", {"w": 16}) == "columns"            # ... which need FP8 factors


def test_columns_mma_fills_the_gpu_once_and_launches_the_row_kernel_wider():
    from redalgebra.codegen.strategies import SMS
    from redalgebra.codegen.strategies.columns_mma import RESIDENT

    kernel = compile(fused("fp8_quant_gemm"), "cudasim", "columns_mma", threads=128)  # the GPU's block
    # (rows, weights): columns a block, segments, blocks a multiprocessor. e4m3 weights past 8 rows: 8-byte loads of
    # 8 columns a lane (64 a block) and a fourth block a multiprocessor; at 8 rows or fewer, and 16-bit weights,
    # 16-byte loads and RESIDENT blocks
    for rows, weights, columns, segments, resident in ((16, "e4m3", 64, 4, RESIDENT + 1), (8, "e4m3", 128, 7, RESIDENT),
                                                       (16, "bfloat16", 64, 3, RESIDENT)):
        _, spec, _ = kernel.spec_for(rows, 7168, {"x": "bfloat16", "w": weights}, {"n": 7168}, reps={"w": rows})
        blocks = 7168 // columns
        # launch bounds for that many blocks a multiprocessor, and as many segments as fit them all in one wave
        assert spec.min_blocks == resident and spec.segments == segments and 8 * spec.group == columns
        assert blocks * spec.segments <= SMS * resident < blocks * (spec.segments + 1)
        src = kernel.source(spec, "columns_mma")
        # the kernel of the scalars and the factors (a block per row) is launched with four times the threads
        assert "BOUNDS_factors = {} if config.ENABLE_CUDASIM else {'launch_bounds': 512, 'cache': CACHE}" in src.source
        assert dict(src.bounds) == {"factors": 512}
    _, spec, _ = kernel.spec_for(4096, 7168, {"x": "bfloat16", "w": "bfloat16"}, {"n": 7168}, reps={"w": 4096})
    assert spec.segments == 1  # blocks enough without segments
    # ... but no wider than writes a row's factors in one pass, 8 a thread, a warp at least: rows of 4096 or more keep
    # 512, a row of 100 takes a warp; the simulator's warp-wide module, four warps at most
    for length, threads in ((100, 32), (257, 64), (1000, 128), (4096, 512), (4097, 512), (50000, 512)):
        _, spec, _ = kernel.spec_for(1, length, {"x": "bfloat16", "w": "e4m3"}, {"n": 64}, reps={"w": 1})
        assert spec.row_threads == threads, length
        assert dict(kernel.source(spec, "columns_mma").bounds) == {"factors": threads}
    narrow = compile(fused("fp8_quant_gemm"), "cudasim", "columns_mma")
    _, spec, _ = narrow.spec_for(1, 7168, {"x": "bfloat16", "w": "e4m3"}, {"n": 64}, reps={"w": 1})
    assert spec.row_threads == 128


def test_check_gives_columns_mma_its_weights_once_for_all_rows():
    from redalgebra.runtime.check import check

    (result,) = check(fused("fp8_quant_gemm"), "cudasim", "columns_mma", shapes=((3, 37),), dtypes=("bfloat16",))
    assert result.passed and result.strategy == "columns_mma" and max(result.errors.values()) < 1e-6


@settings(max_examples=3, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(1, 18), length=st.integers(1, 100), n=st.sampled_from([8, 24, 72]),
       dtype=st.sampled_from(["bfloat16", "float16"]), segments=st.sampled_from([None, 2, 3]),
       masked=st.booleans(), threads=st.sampled_from([None, 64]))
def test_columns_mma_gives_what_columns_gives(rows, length, n, dtype, segments, masked, threads):
    # the same factors (float32, FP8-rounded at the row's final scale) summed by the tensor cores and by the CUDA
    # cores: equal up to float32 summation order, whatever the shape
    _same_as_columns("columns_mma", rows, length, n, dtype, segments, masked, threads=threads)


def _same_as_columns(strategy, rows, length, n, dtype, segments, masked, **options):
    """``strategy``'s FP8 quant + GEMM against ``columns``' (the CUDA cores) on the same inputs: equal up to float32
    summation order (kernels against each other: the factors are the same float32 ones)."""
    inputs, params = _problem("fp8_quant_gemm", rows, length, n, "float32" if dtype == "float16" else "bfloat16",
                              seed=rows * 1000 + length)
    if dtype == "float16":
        inputs = {k: v.astype(np.float16) for k, v in inputs.items()}
    if dtype == "e4m3":
        inputs["w"] = as_e4m3(to_float(inputs["w"]))
    keep = np.random.default_rng(length).random((rows, length)) > 0.3 if masked else None
    ours = compile(fused("fp8_quant_gemm"), "cudasim", strategy, segments=segments, **options)(inputs, params, keep)["y"]
    if dtype == "float16":  # columns reads float32 or bfloat16 (the same values: float16 widens exactly)
        inputs = {k: v.astype(np.float32) for k, v in inputs.items()}
    cores = compile(fused("fp8_quant_gemm"), "cudasim", "columns")(inputs, params, keep)["y"]
    scale = max(float(np.abs(cores).max()), 1e-30)
    assert np.array_equal(np.isnan(ours), np.isnan(cores))
    assert np.nanmax(np.abs(ours - cores)) <= 1e-5 * scale


@pytest.mark.parametrize("name,invariant,element", [
    # RMSNorm: the row's 1 / sqrt(eps + ss / h) once a row, not an IEEE square root and reciprocal an element
    ("rmsnorm_gemm", "rv_0 = (_K1/rt_sqrt(p_eps + f_ss/p_h + _K0))", "e_g*e_x*rv_0"),  # (+ 0: at -0.0, +inf)
    # FP8: the row's max(a, 1e-12) once; each element still divided by it (a quotient rounded as a quantiser does)
    ("fp8_quant_gemm", "rv_0 = rt_max(", "*e_x/rv_0)"),
])
def test_the_factor_kernels_compute_a_rows_invariants_once(name, invariant, element):
    # with a mask, columns' block-a-row kernel and a loop of the factors; the scalars also come from the registers the
    # row's reduction leaves them in, not read back from its outputs
    kernel = compile(fused(name), "cudasim", "columns_wgmma")
    dtypes = {s.name: "bfloat16" for s in kernel.fused.cascade.inputs}
    strategy, spec, _ = kernel.spec_for(20, 300, dtypes, {"n": 64}, keep=True, reps={"w": 20})
    assert spec.row_spec == ()
    source = kernel.source(spec, strategy).source
    factors = source[source.index("def factors"):source.index("def tiles")]
    assert factors.count(invariant) == 1 and factors.count(element) == 8  # eight elements a thread
    assert factors.count("rt_sqrt") == (name == "rmsnorm_gemm") and "= out_pre_" not in factors  # (stored, not read)


@pytest.mark.parametrize("name,invariant,element", [
    ("rmsnorm_gemm", "r_h0 = (_K1/rt_sqrt(p_eps + s_ss/p_h + _K0))", "e_g_0_0*e_x_0_0*r_h0"),
    # divided by the row's max, as written: the reciprocal's product corrected by FMAs (codegen.quotients), testing
    # the reciprocal an element at a time where the factors are stored wider
    ("fp8_quant_gemm", "r_h0 = rt_max(", "= rt_fp8(rt_q8c(_K"),
])
def test_without_a_mask_the_factors_are_a_rows_kernels_per_element_output(name, invariant, element):
    # the scalar part with the factors as a per-element output, built by the rows strategy: the row read once into
    # registers, its invariant once, each factor from the registers, zeros past the row's end to the tiles' width
    kernel = compile(fused(name), "cudasim", "columns_wgmma")
    dtypes = {s.name: "bfloat16" for s in kernel.fused.cascade.inputs}
    strategy, spec, _ = kernel.spec_for(20, 300, dtypes, {"n": 64}, reps={"w": 20})
    row = dict(spec.row_spec)
    assert row["resident"] and row["group"] * row["tile"] * row["vec"] >= 300
    source = kernel.source(spec, strategy).source
    factors = source[source.index("def factors"):source.index("def tiles")]
    assert factors.count(invariant) == 1 and element in factors
    assert factors.count("rt_sqrt") == (name == "rmsnorm_gemm") and "kx" not in factors  # (no second pass)
    assert "for kz in range(length + gt, fac.shape[1]" in factors


@pytest.mark.parametrize("name,length,shape", [
    # the rows policy's block for 8-32 KB rows of 16-bit values (two 16-byte chunks a thread), a block a row: blocks
    # walking the rows measured slower here on the H200 (RMSNorm M4096 0.2264 against 0.2227 ms, FP8 0.6527 against
    # 0.6459); rows of 1001 are off the 16-byte grid: an element a load
    ("rmsnorm_gemm", 4096, (256, 256, 2, 8)),
    ("fp8_quant_gemm", 7168, (512, 512, 2, 8)),
    ("rmsnorm_gemm", 1001, None),
])
def test_the_factors_kernel_takes_the_rows_policys_block_without_walking_the_rows(name, length, shape):
    from redalgebra.codegen import Problem
    from redalgebra.codegen.strategies.columns_wgmma_policy import configure

    f = fused(name)
    dtypes = tuple((s.name, "bfloat16") for s in f.cascade.inputs)
    p = Problem(rows=4096, length=length, sizes=(("n", 4096),), dtypes=dtypes, vec_ok=True, pitch_ok=length % 8 == 0,
                reps=(("w", 4096),), options=(("cc", (9, 0)), ("simulator", False)))
    row = dict(configure(f, p)["row_spec"])
    assert not row["persistent"] and row["min_blocks"] == 0 and row["resident"]
    if shape is None:
        assert row["vec"] == 1
    else:
        assert (row["threads"], row["group"], row["tile"], row["vec"]) == shape


#: A softmax-weighted sum: two scalar reductions, exp(x - m) computed once an element (a term the factors share with
#: l's body), the factor divided by the row's l.
SOFTMAX_WEIGHTED = """input x
input w[n]
reduce m = max(x)
reduce l = sum(exp(x - m))
reduce acc = sum(exp(x - m) / l * w)
out y = acc"""
#: A let over a reduction (named as the factors' output would be) and a second row input, the element's position in
#: the factor.
LET_NAMED_FAC = """input x
input g
input w[n]
reduce a = max(abs(x))
let fac = x / max(a, 1e-6) * g * (pos + 1)
reduce acc = sum(fac * w)
out y = acc"""


@pytest.mark.parametrize("text,length,activations", [
    (SOFTMAX_WEIGHTED, 70, "bfloat16"),  # an element a load (rows off the 16-byte grid), zeros past 70 to 128
    (LET_NAMED_FAC, 96, "bfloat16"),     # 16-byte loads and stores, zeros past 96
    (LET_NAMED_FAC, 64, "float32"),      # 4 elements a load (the factors stored one by one: no 8-byte 16-bit store)
    (SOFTMAX_WEIGHTED, 96, "e4m3"),      # 16 a load, the factors stored by two 16-byte stores
])
def test_a_typed_cascade_gets_from_columns_wgmma_what_columns_mma_gives(text, length, activations):
    # the factors by the rows kernel (no mask), rounded to bfloat16 as columns_mma rounds them: the same factors,
    # so equal up to the float32 summation order; a NaN in one row stays in that row's outputs
    import redalgebra as ra

    f = ra.derive(ra.parse(text))
    rng = np.random.default_rng(3)
    rows, n = 5, 40
    make = {"bfloat16": as_bfloat16, "float32": lambda a: a.astype(np.float32), "e4m3": as_e4m3}[activations]
    inputs = {s.name: make(rng.normal(size=(rows, length))) if s.size is None
              else as_bfloat16(rng.normal(size=(1, length, n))) for s in f.cascade.inputs}
    if activations == "float32":
        inputs["x"][2, 5] = np.nan
    kernel = compile(f, "cudasim", "columns_wgmma")
    dtypes = {s.name: activations if s.size is None else "bfloat16" for s in f.cascade.inputs}
    spec = kernel.spec_for(rows, length, dtypes, {"n": n}, reps={"w": rows})[1]
    assert dict(spec.row_spec)["vec"] == {70: 1}.get(length, {"bfloat16": 8, "float32": 4, "e4m3": 16}[activations])
    factors = kernel.source(spec, "columns_wgmma").source.split("def factors")[1].split("def tiles")[0]
    assert ("st_b16x8(fac" in factors) == (length == 96)
    ours = kernel(inputs)["y"]
    mma = compile(f, "cudasim", "columns_mma")(inputs)["y"]
    assert np.array_equal(np.isnan(ours), np.isnan(mma)) and np.isnan(ours[2]).all() == (activations == "float32")
    assert np.nanmax(np.abs(ours - mma)) <= 1e-5 * np.nanmax(np.abs(mma))


@pytest.mark.parametrize("name,segments,out,tol,n", [
    # FP8's products are exact: the outputs' own rounding only (check.STORE_ROUNDING: half an ulp, 2^-8 of the value
    # in bfloat16, 2^-11 in float16), stored four at a time by the product's epilogue in whole column blocks, as pairs
    # in a partial one (n = 72: a block of 64 and one of 8), or one by one by the combine kernel of two segments
    ("fp8_quant_gemm", None, "bfloat16", 2 ** -8 + 1e-5, 72),
    ("fp8_quant_gemm", 2, "bfloat16", 2 ** -8 + 1e-5, 72),
    ("fp8_quant_gemm", None, "float16", 2 ** -11 + 1e-5, 128),
    # RMSNorm's factors rounded too (2^-9 more)
    ("rmsnorm_gemm", None, "bfloat16", 2 ** -8 + 2 ** -9 + 1e-5, 72),
])
def test_columns_wgmma_stores_its_outputs_in_16_bits_when_asked(name, segments, out, tol, n):
    rows, length = 17, 100
    inputs, params = _problem(name, rows, length, n, "bfloat16")
    kernel = compile(fused(name), "cudasim", "columns_wgmma", segments=segments, out_dtype=out)
    spec = kernel.spec_for(rows, length, {k: "bfloat16" for k in inputs}, {"n": n},
                           reps={s.name: (rows if s.size is not None else 1) for s in fused(name).cascade.inputs})[1]
    source = kernel.source(spec, "columns_wgmma").source
    kind = "b" if out == "bfloat16" else "h"
    assert (f"st_{kind}16x4(out_y" in source) == (segments is None)
    assert (f"st_{kind}16x2(out_y" in source) == (segments is None and n % 64 != 0)
    got = kernel(inputs, params)["y"]
    assert (got.bits.dtype == np.uint16) if out == "bfloat16" else (got.dtype == np.float16)
    ref = _reference(name, inputs, params, None, rows)["y"]
    values = np.asarray(to_float(got), np.float64)
    assert np.max(np.abs(values - ref)) <= tol * np.max(np.abs(ref))
    # float32 by default, as before
    assert compile(fused(name), "cudasim", "columns_wgmma", segments=segments)(inputs, params)["y"].dtype == np.float32


@pytest.mark.parametrize("backend,strategy,name,out", [
    ("cudasim", "columns_mma", "fp8_quant_gemm", "bfloat16"),  # a strategy that stores float32: rounded on return
    ("cpu", None, "safe_softmax", "float16"),                  # the CPU back end likewise
])
def test_a_16_bit_out_dtype_returns_every_output_in_that_type(backend, strategy, name, out):
    from redalgebra.runtime.check import STORE_ROUNDING

    rows, length, n = 3, 64, 40  # (any rows: the call rounds what the kernels stored on return)
    inputs, params = _problem(name, rows, length, n, "bfloat16" if name == "fp8_quant_gemm" else "float32")
    kernel = compile(fused(name), backend, strategy, out_dtype=out)
    got = kernel(inputs, params)["y"]
    assert (got.bits.dtype == np.uint16) if out == "bfloat16" else (got.dtype == np.float16)
    ref = _reference(name, inputs, params, None, rows)["y"]
    assert np.max(np.abs(np.asarray(to_float(got), np.float64) - ref)) <= (STORE_ROUNDING[out] + 1e-5) * np.max(np.abs(ref))
    # out= takes what the call returns (the 16-bit type, written rounded as returned), and only that
    shape = np.asarray(to_float(got)).shape
    mine = as_bfloat16(np.zeros(shape, np.float32)) if out == "bfloat16" else np.zeros(shape, np.float16)
    written = kernel(inputs, params, out={"y": mine})["y"]
    assert written is mine and np.array_equal(np.asarray(to_float(mine)), np.asarray(to_float(got)))
    with pytest.raises(RedalgebraError, match=r"out\['y'\] must be a contiguous .* of (bfloat16 bit patterns|float16)"):
        kernel(inputs, params, out={"y": np.zeros(shape, np.float32)})


def test_out_dtype_names_the_types_it_takes():
    with pytest.raises(RedalgebraError, match="out_dtype is None .* 'bfloat16' or 'float16'"):
        compile(fused("rmsnorm_gemm"), "cudasim", "columns_wgmma", out_dtype="e4m3")


def test_auto_keeping_rounded_factors_exact_names_the_tensor_core_strategy_once(monkeypatch):
    # RMSNorm's factors x·r·g are not exact in bfloat16: auto keeps them in float32 on CUDA cores (columns), 56x slower
    # than columns_wgmma at 4096 tokens on the H200; the call says so, once a kernel and alternative, with what the
    # alternative rounds. FP8 factors are exact (auto takes the tensor cores itself), and a call the tensor cores do
    # not suit (one row sharing the weights) gets no hint.
    import warnings

    from redalgebra.errors import PerformanceHint
    from redalgebra.runtime import backends

    monkeypatch.setattr(backends, "_capability", lambda: (9, 0))
    dtypes = {"x": "bfloat16", "g": "bfloat16", "w": "bfloat16"}

    def hints(kernel, rows, reps=None, **kw):
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            strategy = kernel.spec_for(rows, 4096, sizes={"n": 4096}, reps=reps or {"w": rows, "g": rows}, **kw)[0]
        return strategy, [str(w.message) for w in got if issubclass(w.category, PerformanceHint)]
    kernel = compile(fused("rmsnorm_gemm"), "cuda")
    strategy, said = hints(kernel, 4096, dtypes=dtypes)
    assert strategy == "columns" and len(said) == 1 and "strategy='columns_wgmma'" in said[0] and "2^-9" in said[0]
    assert hints(kernel, 4096, dtypes=dtypes) == ("columns", [])  # once a kernel
    strategy, said = hints(kernel, 64, dtypes=dtypes)
    assert strategy == "columns" and len(said) == 1 and "strategy='columns_mma'" in said[0]
    assert hints(compile(fused("rmsnorm_gemm"), "cuda"), 4096, reps={"w": 1, "g": 1}, dtypes=dtypes)[1] == []
    fp8 = compile(fused("fp8_quant_gemm"), "cuda")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        assert fp8.spec_for(4096, 7168, dtypes={"x": "bfloat16", "w": "e4m3"}, sizes={"n": 7168},
                            reps={"w": 4096})[0] == "columns_wgmma"
    assert not [w for w in got if issubclass(w.category, PerformanceHint)]


def test_weights_broadcast_over_the_rows_are_one_shared_matrix():
    # np.broadcast_to(w, (rows, L, n)) (torch's w.expand) is one matrix for every row, which the product needs: it was
    # read as rows of their own and refused ("each is shared by 1 rows")
    inputs, params = _problem("fp8_quant_gemm", 5, 64, 16, "bfloat16")
    w = inputs["w"]
    wide = {**inputs, "w": as_bfloat16(np.broadcast_to(w.bits, (5, *w.shape[1:])).view(np.uint16))}
    assert wide["w"].bits.strides[0] == 0
    out = compile(fused("fp8_quant_gemm"), "cudasim", "columns_mma")(wide, params)["y"]
    ref = _reference("fp8_quant_gemm", inputs, params, None, 5)["y"]
    assert np.nanmax(np.abs(out - ref)) <= 1e-5 * np.nanmax(np.abs(ref))

