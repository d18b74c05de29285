"""``columns_wgmma``'s factors computed in the product's tiles (``Spec.tile_factors``): where the factor separates,
and the simulator against float64."""

import numpy as np
import pytest

from redalgebra.runtime import as_bfloat16, compile
from redalgebra.runtime.formats import to_float
from tests.catalogue import fused
from tests.runtime.test_columns_mma import LET_NAMED_FAC, SOFTMAX_WEIGHTED

@pytest.mark.parametrize("text,dtype,options,staged", [
    (None, "bfloat16", {}, "x"),                         # RMSNorm: g * x, scaled by 1 / sqrt(ss / h + eps)
    (LET_NAMED_FAC, "bfloat16", {}, "x"),                # x * g * (pos + 1), scaled by 1 / max(a, 1e-6)
    (None, "bfloat16", {"segments": 2}, ""),             # the row's scale needs the whole row
    (None, "bfloat16", {"keep": True}, ""),              # a mask: the factors kernel
    (None, "float32", {}, ""),                           # 4-byte activations do not fit the 16-bit tile
    (None, "bfloat16", {"pitch_ok": False}, ""),         # rows off the 16-byte grid: no 16-byte copies
    ("fp8", "bfloat16", {}, ""),                         # fp8(x * 448 / a) does not separate
    (SOFTMAX_WEIGHTED, "bfloat16", {}, ""),              # exp(x - m) / l does not either
])
def test_the_factors_are_computed_in_the_products_tiles_where_the_factor_separates(monkeypatch, text, dtype, options,
                                                                                  staged):
    import redalgebra as ra
    from redalgebra.codegen import Problem
    from redalgebra.codegen.strategies import tile_factors
    from redalgebra.codegen.strategies.columns_wgmma_policy import configure

    assert configure(fused("rmsnorm_gemm"), Problem(
        rows=4096, length=4096, sizes=(("n", 4096),), dtypes=(("x", "bfloat16"), ("g", "bfloat16"), ("w", "bfloat16")),
        vec_ok=True, pitch_ok=True, reps=(("w", 4096), ("g", 4096)),
        options=(("cc", (9, 0)), ("simulator", False))))["tile_factors"] == ""  # (off by default: measured slower)
    monkeypatch.setattr(tile_factors, "TILE_FACTORS", True)

    f = fused("rmsnorm_gemm") if text is None else fused("fp8_quant_gemm") if text == "fp8" else ra.derive(ra.parse(text))
    dtypes = tuple((s.name, dtype if s.size is None else "bfloat16") for s in f.cascade.inputs)
    opts = (("cc", (9, 0)), ("simulator", False), ("segments", options.get("segments")))
    p = Problem(rows=4096, length=4096, sizes=(("n", 4096),), dtypes=dtypes, has_keep=options.get("keep", False),
                vec_ok=True, pitch_ok=options.get("pitch_ok", True), reps=(("w", 4096), ("g", 4096)), options=opts)
    cfg = configure(f, p)
    assert cfg["tile_factors"] == staged
    if staged:  # (no factors kernel to configure)
        assert cfg["row_spec"] == ()


#: RMSNorm with per-element lets: Gemma's weight offset in the factor, the square a let of the sum.
GEMMA_NORM = """input x
input g
input w[n]
param h > 0
param eps > 0
let gg = g + 1
let x2 = x * x
reduce ss = sum(x2)
reduce acc = sum(x / sqrt(ss / h + eps) * gg * w)
out y = acc"""


#: RMSNorm whose factor reads the activations only through a let (the staged input found through it).
LET_READ_NORM = """input x
input g
input w[n]
param h > 0
param eps > 0
let xg = x * g
reduce ss = sum(x * x)
reduce acc = sum(xg / sqrt(ss / h + eps) * w)
out y = acc"""


@pytest.mark.parametrize("text,rows,length,n,weights,persistent,rowwise", [
    # per-element lets read by the factor and by the sum of squares, computed in the tiles' pass
    (GEMMA_NORM, 9, 136, 40, "bfloat16", False, False),
    # the factor reads x only through a let
    (LET_READ_NORM, 17, 136, 40, "bfloat16", False, False),
    # two row blocks (the second of one row), a partial column block, a partial last tile (whole 16-byte chunks:
    # contiguous 16-bit rows on the 16-byte grid), RMSNorm's sum of squares folded by the copying threads
    (None, 17, 200, 72, "bfloat16", False, False),
    # g given a row per row: a fragment's two rows read different rows of it (no load shared between them)
    (None, 17, 136, 40, "bfloat16", False, True),
    # float16 activations (bfloat16 weights): read as float16, the factors' part stored as bfloat16
    (None, 5, 136, 64, "float16", False, False),
    # a max (identity -inf) folded and met, the element's position and a second row input read in the tiles
    (LET_NAMED_FAC, 9, 96, 40, "bfloat16", False, False),
    # blocks walking the output's tiles: each tile's row states parked between barriers
    (None, 40, 130 - 2, 72, "bfloat16", True, False),
])
def test_factors_computed_in_the_products_tiles_match_the_reference(monkeypatch, text, rows, length, n, weights,
                                                                     persistent, rowwise):
    _check_tile_factors(monkeypatch, text, rows, length, n, weights, persistent, rowwise)


def test_factors_computed_in_the_products_tiles_by_a_warpgroup(monkeypatch):
    # four warps (one warpgroup, 64 rows a block): each warp's fragments from its own 16 rows of the staged tile; two
    # row blocks, the second partial
    _check_tile_factors(monkeypatch, None, 70, 128, 64, "bfloat16", False, False, threads=128)


def test_factors_computed_in_the_products_tiles_with_k_major_weights(monkeypatch):
    # a Linear layer's rows read as they lie (wgmma_rsk: B K-major; L whole tiles), two row blocks, a partial column
    # block (e4m3 weights, widened first, are refused for RMSNorm: its factors need not fit float16's range)
    _check_tile_factors(monkeypatch, None, 17, 192, 72, "bfloat16", False, False, k_major=True)


def _check_tile_factors(monkeypatch, text, rows, length, n, acts, persistent, rowwise, k_major=False, threads=None):
    # the factor's row-free part rounded to the weights' 16-bit type (2^-9 for bfloat16, as the factors kernel's
    # whole factors), the row's scale applied to the float32 sums; no factors kernel, no factors scratch
    import importlib


    import redalgebra as ra
    from redalgebra import evaluate
    from redalgebra.codegen.strategies import tile_factors

    monkeypatch.setattr(tile_factors, "TILE_FACTORS", True)
    if persistent:
        monkeypatch.setattr(importlib.import_module("redalgebra.runtime.launch"), "multiprocessors", lambda cuda: 2)
    f = fused("rmsnorm_gemm") if text is None else ra.derive(ra.parse(text))
    rng = np.random.default_rng(rows)
    own = {s.name for s in f.cascade.inputs if s.size is None and (s.name == "x" or rowwise)}  # (a row per row)
    rows_in = {s.name: rng.normal(size=(rows if s.name in own else 1, length)) for s in f.cascade.inputs
               if s.size is None}
    w = 0.1 * rng.normal(size=(1, length, n))
    make = as_bfloat16 if acts == "bfloat16" else (lambda a: a.astype(np.float16))
    inputs = {k: make(v) for k, v in rows_in.items()}
    inputs["w"] = as_bfloat16(w)
    given = inputs["w"]
    if k_major:  # (the same values, W.T[None] of an (n, L) matrix)
        given = type(given)(np.ascontiguousarray(given.bits[0].T).T[None])
    params = {"h": np.float32(length), "eps": np.float32(1e-5)} if text in (None, GEMMA_NORM, LET_READ_NORM) else {}
    kernel = compile(f, "cudasim", "columns_wgmma", persistent=persistent or None, threads=threads,
                     group=8 if threads else None)
    spec = kernel._planned(dict(inputs, w=given), params, None)[0]
    assert spec.tile_factors == "x" and spec.k_major == (("w",) if k_major else ())
    source = kernel.source(spec, "columns_wgmma").source
    assert "def factors" not in source and "fac" not in source.split("def tiles(")[1].split(")")[0].split(", ")
    tiles = source.split("def tiles(")[1].split("\ndef ")[0]
    assert ("wgmma_rsk_" if k_major else "wgmma_rs_") in tiles
    out = kernel(dict(inputs, w=given), params)["y"]
    wide = {k: np.repeat(np.asarray(to_float(v), np.float64), rows // v.shape[0], axis=0) for k, v in inputs.items()}
    ref = evaluate(f.cascade, wide, {k: np.float64(v) for k, v in params.items()}, None)["y"]
    tol = 2 ** -9 + 1e-5  # (each factor's part rounded once to bfloat16)
    assert np.max(np.abs(out - ref)) <= tol * np.max(np.abs(ref))


def test_a_tiles_fragments_are_written_only_after_the_products_reading_the_last_ones_are_done(monkeypatch):
    # the previous tile's wgmma_rs reads its A words from registers until its group completes (the PTX ISA leaves
    # touching them earlier undefined, and the simulator's stand-ins read them at issue, so no run shows it): in the
    # loop, the wait comes before the first word is packed, and the old words are held after it
    from redalgebra.codegen.strategies import tile_factors

    monkeypatch.setattr(tile_factors, "TILE_FACTORS", True)
    kernel = compile(fused("rmsnorm_gemm"), "cudasim", "columns_wgmma")
    spec = kernel.spec_for(17, 200, {"x": "bfloat16", "g": "bfloat16", "w": "bfloat16"}, {"n": 72},
                           reps={"x": 1, "g": 17, "w": 17})[1]
    loop = kernel.source(spec, "columns_wgmma").source.split("for it in range(")[1]
    wait, hold = loop.index("wgmma_wait0()"), loop.index("= wgmma_hold(((pa_0_0")
    assert "wgmma_wait1()" not in loop.split("wgmma_wait0()\n", 1)[0]
    assert wait < hold < loop.index("pa_0_0 = pack_") and loop.index("ldsm_x4(") < wait
