"""The columns_wgmma strategy in the CUDA simulator: the level order's products as a GEMM on warpgroups' stand-ins
(``wgmma``), its weights widened, its launch policy, blocks walking the output's tiles and the epilogue's stores."""

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from redalgebra import RedalgebraError
from redalgebra.runtime import as_bfloat16, as_e4m3, compile
from redalgebra.runtime.formats import to_float
from tests.catalogue import fused
from tests.runtime.test_columns import _problem, _reference
from tests.runtime.test_columns_mma import _same_as_columns

@pytest.mark.parametrize("name,rows,length,n,dtype,segments,masked,tol", [
    # columns_wgmma in the simulator (one warp: 16 rows and 64 columns a block, the instruction's stand-in reading
    # the swizzled stages through the descriptors): two row blocks (the second of one row), a partial column
    # block, two segments with a partial last tile, a mask with a fully masked row
    ("fp8_quant_gemm", 17, 100, 72, "bfloat16", 2, True, 1e-5),
    ("fp8_quant_gemm", 3, 37, 72, "float16", 1, False, 1e-5),
    # RMSNorm's factors rounded to bfloat16 before the product (as columns_mma's)
    ("rmsnorm_gemm", 5, 70, 40, "bfloat16", None, False, 2 ** -9 + 1e-5),
])
def test_columns_wgmma_matches_the_reference(name, rows, length, n, dtype, segments, masked, tol):
    inputs, params = _problem(name, rows, length, n, "bfloat16" if dtype == "bfloat16" else "float32")
    if dtype == "float16":
        inputs = {k: v.astype(np.float16) for k, v in inputs.items()}
    keep = np.random.default_rng(1).random((rows, length)) > 0.2 if masked else None
    if keep is not None:
        keep[-1] = False
    out = compile(fused(name), "cudasim", "columns_wgmma", segments=segments)(inputs, params, keep)["y"]
    ref = _reference(name, {k: v.astype(np.float32) if getattr(v, "dtype", None) == np.float16 else v
                            for k, v in inputs.items()}, params, keep, rows)["y"]
    scale = np.nanmax(np.abs(ref))
    assert np.array_equal(np.isnan(out), np.isnan(ref))
    assert np.nanmax(np.abs(out - ref)) <= tol * scale
    if keep is not None:
        assert (out[-1] == 0).all()


@pytest.mark.parametrize("rows,length,n,segments,masked", [
    # e4m3 weights widened to float16 by a kernel of the module, then the float16 product: 72 columns (rows not of
    # 16 bytes: widened an element a thread), three tiles with the last partial, two segments, a mask with a fully
    # masked row; 64 columns (16 elements a thread)
    (17, 130, 72, 2, True),
    (3, 37, 64, None, False),
])
def test_columns_wgmma_widens_e4m3_weights(rows, length, n, segments, masked):
    inputs, params = _problem("fp8_quant_gemm", rows, length, n, "bfloat16")
    inputs["w"] = as_e4m3(to_float(inputs["w"]))
    keep = np.random.default_rng(1).random((rows, length)) > 0.2 if masked else None
    if keep is not None:
        keep[-1] = False
    kernel = compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma", segments=segments)
    out = kernel(inputs, params, keep)["y"]
    ref = _reference("fp8_quant_gemm", inputs, params, keep, rows)["y"]
    # the products of e4m3 values are exact: the float32 summation order is the only difference
    assert np.nanmax(np.abs(out - ref)) <= 1e-5 * np.nanmax(np.abs(ref))
    source = kernel.source(*kernel.spec_for(rows, length, {"x": "bfloat16", "w": "e4m3"}, {"n": n},
                                            reps={"w": rows})[1::-1]).source
    # the float16 product (not the FP8 instruction: its sums keep fewer bits than float32, measured on an H200)
    assert "wgmma_sst_f16(" in source
    assert ("ld_e4m3x16(" in source) == (n % 16 == 0)


def test_columns_wgmma_refuses_what_it_cannot_take():
    inputs, params = _problem("fp8_quant_gemm", 32, 64, 32, "bfloat16", shared=False)
    inputs["w"] = as_e4m3(to_float(inputs["w"])[:2])  # two weight matrices, each shared by 16 rows: e4m3 weights
    with pytest.raises(RedalgebraError, match="one weight matrix shared by every row"):  # are widened for one
        compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma")(inputs, params)
    inputs, params = _problem("fp8_quant_gemm", 4, 64, 16, "bfloat16")
    with pytest.raises(RedalgebraError, match="blocks of 32 or 128 or 256 threads"):
        compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma", threads=64)(inputs, params)
    with pytest.raises(RedalgebraError, match="blocks of 64, 128, 256 columns"):
        compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma", group=12)(inputs, params)
    inputs, params = _problem("fp8_quant_gemm", 4, 64, 12, "bfloat16")  # 16-bit rows are copied 16 bytes at a time
    with pytest.raises(RedalgebraError, match="not a multiple of 8"):
        compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma")(inputs, params)
    inputs, params = _problem("fp8_quant_gemm", 32, 64, 16, "bfloat16", shared=False)
    inputs["w"] = as_bfloat16(to_float(inputs["w"])[:4])  # four weight matrices of 8 rows: a block takes 16
    with pytest.raises(RedalgebraError, match="share one weight matrix"):
        compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma")(inputs, params)


def test_columns_wgmma_takes_e4m3_weights_as_int8_and_without_scalar_reductions():
    import redalgebra as ra
    from redalgebra import evaluate

    # bytes given as int8 (a torch view, say): read as their byte, not widened with their sign
    inputs, params = _problem("fp8_quant_gemm", 3, 37, 64, "bfloat16")
    codes = as_e4m3(to_float(inputs["w"]))
    signed = dict(inputs, w=as_e4m3(np.asarray(codes.bits).view(np.int8)))
    ref = _reference("fp8_quant_gemm", dict(inputs, w=codes), params, None, 3)["y"]
    out = compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma")(signed, params)["y"]
    assert np.abs(out - ref).max() <= 1e-5 * np.abs(ref).max()
    # a cascade with no scalar reduction: no factors kernel fused with one, the weights still widened
    c = ra.parse("input x\ninput w[n]\nreduce o = sum(fp8(x) * w)\nout y = o\n")
    x = np.random.default_rng(2).normal(size=(5, 40)).astype(np.float32)
    w = as_e4m3(np.random.default_rng(3).normal(size=(1, 40, 32)).astype(np.float32))
    out = compile(ra.derive(c), "cudasim", "columns_wgmma")({"x": as_bfloat16(x), "w": w})["y"]
    want = evaluate(c, {"x": to_float(as_bfloat16(x)).astype(np.float64),
                        "w": np.broadcast_to(to_float(w).astype(np.float64), (5, 40, 32))})["y"]
    assert np.abs(out - want).max() <= 1e-5 * np.abs(want).max()


def test_auto_takes_wgmma_for_many_rows_on_hopper():
    from redalgebra.codegen import Problem
    from redalgebra.runtime.choice import GEMM_ROWS, choose

    f = fused("fp8_quant_gemm")

    def strategy(rows, cc, dtype="bfloat16"):
        dtypes = tuple((s.name, dtype if s.size is not None else "bfloat16") for s in f.cascade.inputs)
        p = Problem(rows=rows, length=7168, sizes=(("n", 7168),), dtypes=dtypes, vec_ok=True, pitch_ok=True,
                    reps=(("w", rows),), options=(("cc", cc),))
        return choose(f, rows, 7168, {"n": 7168}, {"w": rows}, p)
    assert strategy(GEMM_ROWS, (9, 0)) == "columns_wgmma"
    assert strategy(GEMM_ROWS - 1, (9, 0)) == "columns_mma"   # few rows: 16-row blocks on mma.sync
    assert strategy(4096, (8, 9)) == "columns_mma"            # not a Hopper GPU
    assert strategy(4096, (9, 0), "e4m3") == "columns_wgmma"  # e4m3 weights: widened to float16 first


@pytest.mark.parametrize("length,dtype,fp8", [(7168, "e4m3", False), (7168, "e4m3", True), (200, "e4m3", False),
                                              (4096, "bfloat16", False)])
def test_auto_takes_the_gemm_for_k_major_weights_from_the_same_rows(length, dtype, fp8):
    # weights given K-major (a Linear layer's W.t()): columns_wgmma reads them along their rows (the exact product's
    # e4m3 widened row by row whatever L, 16-bit read as they lie), so GEMM_ROWS decides as for contiguous weights.
    # (When its exact product copied them on every call — 0.30 ms at 7168 x 7168, more than columns_mma's whole 0.16
    # ms at 256 rows — auto kept columns_mma up to 1024 rows.)
    from redalgebra.codegen import Problem
    from redalgebra.codegen.strategies.columns_wgmma_policy import configure
    from redalgebra.runtime.choice import GEMM_ROWS, choose

    f = fused("fp8_quant_gemm")

    def problem(rows, k_major):
        return Problem(rows=rows, length=length, sizes=(("n", 7168),), dtypes=(("x", "bfloat16"), ("w", dtype)),
                       vec_ok=True, pitch_ok=True, reps=(("w", rows),), k_major=k_major,
                       options=(("cc", (9, 0)), ("simulator", False), ("fp8_products", fp8)))
    for k_major in ((), ("w",)):
        assert choose(f, GEMM_ROWS, length, {"n": 7168}, {"w": GEMM_ROWS}, problem(GEMM_ROWS, k_major)) == "columns_wgmma"
        assert choose(f, GEMM_ROWS - 1, length, {"n": 7168}, {"w": GEMM_ROWS - 1},
                      problem(GEMM_ROWS - 1, k_major)) == "columns_mma"
    # read as they lie, not copied — but the FP8 product's e4m3 rows only where L is whole tiles of 128
    read = not fp8 or length % 128 == 0
    assert configure(f, problem(GEMM_ROWS, ("w",)))["k_major"] == (("w",) if read else ())


@pytest.mark.parametrize("strategy", ["columns", "columns_mma", "columns_wgmma"])
def test_the_column_policies_configure_a_launch_of_no_rows_or_no_columns(strategy):
    # (their segments were the GPU's blocks divided by the blocks a launch makes: none, a ZeroDivisionError)
    from redalgebra.codegen import Problem
    from redalgebra.codegen.strategies import get

    f = fused("fp8_quant_gemm")
    dtypes = tuple((s.name, "bfloat16") for s in f.cascade.inputs)
    for rows, length, n in ((0, 7168, 7168), (0, 0, 64), (16, 7168, 0)):
        p = Problem(rows=rows, length=length, sizes=(("n", n),), dtypes=dtypes, vec_ok=True, pitch_ok=True,
                    reps=(("w", max(rows, 1)),), options=(("cc", (9, 0)),))
        assert get(strategy).configure(f, p)["segments"] >= 1


def test_columns_wgmma_takes_a_block_a_row_as_wide_as_one_pass_of_the_row():
    # the scalars-and-factors kernel (a block a row): the smallest block of 128 or more that reads the row in one pass
    # of 32 elements a thread, so that short rows keep more rows in flight (measured on the H200: RMSNorm K4096 58.5
    # -> 42.6 us at 128 threads); the simulator's one-warp block keeps its 32
    from redalgebra.codegen import Problem
    from redalgebra.codegen.strategies.columns_wgmma_policy import configure

    f = fused("rmsnorm_gemm")

    def row_threads(length, simulator=False):
        dtypes = tuple((s.name, "bfloat16") for s in f.cascade.inputs)
        p = Problem(rows=4096, length=length, sizes=(("n", 4096),), dtypes=dtypes, vec_ok=True, pitch_ok=True,
                    reps=(("w", 4096),), options=(("cc", (9, 0)), ("simulator", simulator)))
        return configure(f, p)["row_threads"]
    assert [row_threads(k) for k in (333, 4096, 4097, 7168, 8192, 50000)] == [128, 128, 256, 256, 256, 256]
    assert row_threads(4096, simulator=True) == 32


@settings(max_examples=3, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(1, 20), length=st.integers(1, 160), n=st.sampled_from([8, 24, 72]),
       dtype=st.sampled_from(["bfloat16", "float16", "e4m3"]), segments=st.sampled_from([None, 2, 3]),
       masked=st.booleans())
@example(rows=1, length=1, n=72, dtype="bfloat16", segments=None, masked=True)  # a partial tile's rows below zero
def test_columns_wgmma_gives_what_columns_gives(rows, length, n, dtype, segments, masked):
    # the same factors summed by wgmma's stand-ins (16-bit; e4m3 weights widened first) and by the CUDA
    # cores: equal up to float32 summation order, whatever the shape
    _same_as_columns("columns_wgmma", rows, length, n, dtype, segments, masked)


@pytest.mark.parametrize("resident,segments", [(3, 2), (2, 1)])
def test_columns_wgmma_blocks_walk_the_output_tiles(monkeypatch, resident, segments):
    # asked for (persistent), the product's blocks walk the output's tiles by gridDim (launched as many as are
    # resident: the simulator's device says one multiprocessor): here 3 row blocks x 2 column blocks (x 2 segments)
    # taken by 3 or 2 blocks (their results: the next test), and only that grid capped; else a block a tile
    import importlib

    launch_module = importlib.import_module("redalgebra.runtime.launch")
    inputs, params = _problem("fp8_quant_gemm", 40, 150, 72, "bfloat16", seed=7)

    def grids(persistent, multiprocessors):
        monkeypatch.setattr(launch_module, "multiprocessors", lambda cuda: multiprocessors)
        kernel = compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma", segments=segments, persistent=persistent)
        steps = kernel.prepare(inputs, params).steps  # the simulator's launch configurations
        return [("fac" in names and "nseg" in names, tuple(c.grid_dim)) for c, names, _ in steps]

    tiles = 3 * 2 * segments
    uncapped = grids(True, 10 ** 6)
    assert [g[0] for is_tiles, g in uncapped if is_tiles] == [tiles]
    for persistent, blocks in ((True, resident), (None, tiles)):  # (None: a block a tile)
        got = grids(persistent, resident)
        assert [g[0] for is_tiles, g in got if is_tiles] == [blocks]
        assert [g for is_tiles, g in got if not is_tiles] == [g for is_tiles, g in uncapped if not is_tiles]


@pytest.mark.parametrize("resident,rows,segments,matrices", [
    (4, 48, None, 3),   # 3 row blocks x 2 column blocks on 4 blocks (two walk two tiles, two one); a weight matrix
    #                     per 16 rows (a block's)
    (1, 40, 2, 1),      # one block walks all 12 tiles (3 x 2 x 2 segments)
])
def test_columns_wgmma_walking_blocks_match_the_reference(monkeypatch, resident, rows, segments, matrices):
    import importlib

    from redalgebra import evaluate

    monkeypatch.setattr(importlib.import_module("redalgebra.runtime.launch"), "multiprocessors", lambda cuda: resident)
    length, n = 130, 72
    rng = np.random.default_rng(rows)
    x = rng.normal(size=(rows, length)).astype(np.float32)
    w = rng.normal(size=(matrices, length, n)).astype(np.float32)
    kernel = compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma", segments=segments, persistent=True)
    out = kernel({"x": as_bfloat16(x), "w": as_bfloat16(w)}, {})["y"]
    wide = {"x": to_float(as_bfloat16(x)).astype(np.float64),
            "w": np.repeat(to_float(as_bfloat16(w)).astype(np.float64), rows // matrices, axis=0)}
    ref = evaluate(fused("fp8_quant_gemm").cascade, wide, {}, None)["y"]
    # FP8's factors are exact in 16 bits and their products exact: float32 summation order only
    assert np.max(np.abs(out - ref)) <= 1e-5 * np.max(np.abs(ref))


def _tile_places(source: str, rows: int, nmb_cols: int, nseg: int, length: int) -> list:
    """Each block's (segment, row block, column block) by the generated product kernel's own statements (the
    lines from ``segl`` to ``gw`` and from ``sg`` to ``nb``), evaluated in Python for every block."""
    lines = [ln.strip() for ln in source.splitlines()]
    head = [ln for ln in lines if ln.split(" = ")[0] in ("segl", "nmb", "gw")][:3]
    first = next(i for i, ln in enumerate(lines) if ln.startswith("sg = int32(uint32(tile)"))
    body = lines[first:first + 7]
    assert body[-1].startswith("nb = ")
    space = {"int32": int, "uint32": int, "min": min, "max": max, "rows": rows, "length": length, "nseg": nseg}
    for ln in head:
        exec(ln, space)
    places = []
    for tile in range(space["nmb"] * nmb_cols * nseg):
        space["tile"] = tile
        for ln in body:
            exec(ln, space)
        places.append((space["sg"], space["mb"], space["nb"], space["gw"]))
    return places


@pytest.mark.parametrize("rows,n,segments,raster,groups", [
    (80, 136, None, 2 * 16 * 2 * 192, [2, 2, 1]),     # 5 row blocks in groups of 2, 2, 1; 3 column blocks
    (80, 136, 2, 2 * 16 * 2 * 128, [2, 2, 1]),        # the same in each of two segments (128 elements each)
    (48, 72, None, 1 << 30, [3]),                     # every row block one group (the order before groups)
    (48, 72, None, 1, [1, 1, 1]),                     # at least one row block a group
    (48, 72, None, 2 * 16 * 2 * 192, [2, 1]),         # a partial last group: this one also run
])
def test_columns_wgmma_walks_its_tiles_in_groups_of_row_blocks(monkeypatch, rows, n, segments, raster, groups):
    # blocks in order take every column block of a group of row blocks (as many as RASTER_BYTES of factors hold)
    # before the next group, so that the blocks running at once share a few row blocks in L2; every tile exactly once
    from redalgebra.codegen.strategies import columns_wgmma

    monkeypatch.setattr(columns_wgmma, "RASTER_BYTES", raster)
    length = 130 if segments is None else 256
    kernel = compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma", segments=segments)
    strategy, spec, _ = kernel.spec_for(rows, length, {"x": "bfloat16", "w": "bfloat16"}, {"n": n}, reps={"w": rows})
    nseg, nnb = spec.segments, -(-n // 64)
    places = _tile_places(kernel.source(spec, strategy).source, rows, nnb, nseg, length)
    assert sorted(p[:3] for p in places) == [(s, m, c) for s in range(nseg) for m in range(-(-rows // 16))
                                              for c in range(nnb)]
    per_segment = len(places) // nseg
    for s in range(nseg):
        order = places[s * per_segment:(s + 1) * per_segment]
        assert all(p[0] == s for p in order)
        seen, start = [], 0
        for size in groups:  # a group's tiles: its row blocks first, then each column block
            block = order[start:start + size * nnb]
            assert [(p[1], p[2]) for p in block] == [(sum(groups[:len(seen)]) + i % size, i // size)
                                                     for i in range(size * nnb)]
            seen.append(size)
            start += size * nnb
    if groups != [2, 1]:  # (the outputs checked once, where the last group is partial)
        return
    # and the kernel so ordered computes the reference (every tile's outputs stored once, in its place)
    inputs, params = _problem("fp8_quant_gemm", rows, length, n, "bfloat16")
    out = kernel(inputs, params)["y"]
    ref = _reference("fp8_quant_gemm", inputs, params, None, rows)["y"]
    assert np.max(np.abs(out - ref)) <= 1e-5 * np.max(np.abs(ref))


@pytest.mark.parametrize("n,branches", [(64, 0), (72, 1), (40, 0)])
def test_columns_wgmma_stores_neighbouring_columns_together(n, branches):
    # each output's two columns of a thread computed from their own accumulators, then one 8-byte store; the columns
    # tested only where a block may be partial: not at all (64: whole blocks of the simulator's 64), behind one test
    # of the block (72), or every pair (40: the one block partial)
    kernel = compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma")
    strategy, spec, _ = kernel.spec_for(20, 300, {"x": "bfloat16", "w": "bfloat16"}, {"n": n}, reps={"w": 20})
    source = kernel.source(spec, strategy).source
    epilogue = source[source.index("def tiles"):source.index("def combine") if "def combine" in source else None]
    first = epilogue[epilogue.index("sv_0_y = "):]
    assert first.index("ac_0_0") < first.index("sv_1_y = ") < first.index("ac_0_1") < first.index(
        "st_f32x2(out_y, orow, cb + 0 + 2 * tq, sv_0_y, sv_1_y)")
    assert epilogue.count(f"if cb + 64 <= {n}:") == 2 * branches and "out_y[" not in epilogue
    assert epilogue.count(f"+ 2 * tq < {n}:") == (0 if n % 64 == 0 else 2 * 64 // 8)  # each row's 8 pairs, or none


@pytest.mark.parametrize("name,rows,length,n,out,options", [
    # the FP8 product's block: a producer warpgroup beside two consumers meeting at named barriers (the exchange's
    # shuffles meet by warp there), the GPU's 64-row warpgroups, a partial last row block
    ("fp8_quant_gemm", 65, 128, 64, "bfloat16", dict(fp8_products=True, threads=256)),
    # 128 columns a block: one whole column block paired, a partial one of 8 columns stored a pair a lane
    ("fp8_quant_gemm", 20, 100, 136, "float16", dict(fp8_products=True, group=16)),
    # blocks walking the output's tiles
    ("fp8_quant_gemm", 17, 100, 72, "bfloat16", dict(persistent=True)),
])
def test_16_bit_outputs_stored_four_a_lane_are_the_float32_outputs_rounded(name, rows, length, n, out, options):
    # the epilogue exchanges neighbouring column blocks between lanes tq and tq ^ 1 before its 8-byte stores: every
    # output must land where the float32 epilogue puts it, rounded once to the 16-bit type — bit for bit
    from redalgebra.runtime.formats import bf16_bits

    inputs, params = _problem(name, rows, length, n, "bfloat16")
    if options.get("fp8_products"):
        inputs["w"] = as_e4m3(to_float(inputs["w"]))
    kernel = compile(fused(name), "cudasim", "columns_wgmma", out_dtype=out, **options)
    dtypes = {s.name: ("e4m3" if s.name == "w" and options.get("fp8_products") else "bfloat16")
              for s in fused(name).cascade.inputs}
    spec = kernel.spec_for(rows, length, dtypes, {"n": n}, reps={"w": rows, "x": 1})[1]
    assert f"st_{'b' if out == 'bfloat16' else 'h'}16x4(out_y" in kernel.source(spec, "columns_wgmma").source
    got = np.asarray(to_float(kernel(inputs, params)["y"]), np.float32)
    wide = compile(fused(name), "cudasim", "columns_wgmma", **options)(inputs, params)["y"].astype(np.float32)
    rounded = ((bf16_bits(wide).astype(np.uint32) << 16).view(np.float32) if out == "bfloat16"
               else wide.astype(np.float16).astype(np.float32))
    assert np.array_equal(got, rounded, equal_nan=True)


def test_the_products_tolerance_is_each_elements_bound_not_a_share_of_the_largest_output():
    # RMSNorm + GEMM over 37 bfloat16 terms (check's first shape, seed 0): the factors rounded to bfloat16 move an
    # output by up to 2^-8 of its terms' magnitudes Σ|f·w|, more there than 2^-8 of the largest output (4.7e-3 of
    # it, where a flat 2^-8 + 1e-4 allowed 4.0e-3 and called the kernel wrong)
    from redalgebra import derive, parse
    from redalgebra.ir import evaluate
    from redalgebra.runtime.check import STORE_ROUNDING, check, judge, magnitudes, random_problem

    f = fused("rmsnorm_gemm")
    (result,) = check(f, "cudasim", "columns_wgmma", shapes=((3, 37),), dtypes=("bfloat16",), seed=0)
    assert result.passed and result.errors["y"] > 2.0 ** -8 + 1e-4
    # the judge itself: the exact outputs moved by 0.9 of an element's allowance pass, by twice it fail
    inputs, params, keep = random_problem(f, 3, 37, np.random.default_rng(1), "bfloat16", {"n": 16}, shared=True)
    exact = {k: np.broadcast_to(to_float(v).astype(np.float64), (3,) + v.shape[1:]) for k, v in inputs.items()}
    want = evaluate(f.cascade, exact, params, keep=keep)["y"]
    size = np.abs(evaluate(magnitudes(f.cascade), exact, params, keep=keep)["y"])
    sign = np.where(np.arange(want.size).reshape(want.shape) % 2, 1.0, -1.0)
    for factor, passes in ((0.9, True), (2.0, False)):
        moved = {"y": (want + sign * factor * STORE_ROUNDING["bfloat16"] * size).astype(np.float32)}
        assert judge(f, moved, inputs, params, keep, "bfloat16", False, products=True)[0] == passes
    # a factor made from a signed scalar sum: only the vector sum is taken by magnitudes (sum(|x|) would change the
    # factors, exp(x - Σ|x| / h): an allowance of a few per cent of the bound)
    f = derive(parse("input x\ninput w[n]\nparam h > 0\nreduce s = sum(x)\nreduce acc = sum(exp(x - s / h) * w)\n"
                     "out y = acc"))
    inputs, params, keep = random_problem(f, 4, 37, np.random.default_rng(0), "bfloat16", {"n": 16}, shared=True)
    params["h"] = np.float32(4.0)
    x, w = (np.broadcast_to(to_float(inputs[k]).astype(np.float64), (4,) + inputs[k].shape[1:]) for k in ("x", "w"))
    kept = np.ones(x.shape, bool) if keep is None else keep
    factors = np.where(kept, np.exp(x - np.where(kept, x, 0).sum(1, keepdims=True) / 4.0), 0)[..., None] * w
    want, bound = factors.sum(1), np.abs(factors).sum(1)
    for factor, passes in ((0.9, True), (2.0, False)):
        moved = {"y": (want + np.where(np.arange(want.size).reshape(want.shape) % 2, 1.0, -1.0) * factor *
                       STORE_ROUNDING["bfloat16"] * bound).astype(np.float32)}
        assert judge(f, moved, inputs, params, keep, "bfloat16", False, products=True)[0] == passes
