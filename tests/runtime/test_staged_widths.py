"""Vectors of a multiple of 8 components but not of 16 on the tensor cores (Stable Diffusion's d = 40, SigLIP's and
DiT's 72, ViT-g's 88), in the CUDA simulator: staged as the next multiple of 16 (``products.staged``), the padding's
chunk of every row zero-filled by copies of no bytes and written as zeros with the params, its output columns never
stored. The simulator's shared memory starts as NaN bytes (``sim_async.poison_shared_memory``), so a padding left
unwritten makes these outputs NaN instead of passing by the simulator's zeros."""

import numpy as np
import pytest

from redalgebra import RedalgebraError
from redalgebra.codegen import Problem
from redalgebra.codegen.strategies.products import column_groups
from redalgebra.runtime import compile
from redalgebra.runtime.choice import choose
from tests.catalogue import fused
from tests.runtime.test_mma import assert_matches_the_reference


@pytest.mark.parametrize("strategy,name,R,L,d,dtype,masked,query16,options", [
    # one warpgroup (a warp in the simulator): a whole tile's copies from one address (the padding's chunk read as
    # no bytes, zs_k), then a partial one (per copy); a float32 query (its residual's own chain); a mask
    ("wgmma", "attention", 20, 100, 72, "bfloat16", True, False, {"threads": 32}),
    # the producer block walking row tiles: the chained copies, the causal gate; d = 40 (three chunks and a padding
    # one a row)
    ("wgmma", "alibi_attention", 40, 150, 40, "float16", False, True, {"threads": 96}),
    # the row in two segments, merged by the combine kernel: the segments' states stored for the row's own columns
    ("wgmma", "attention", 20, 150, 88, "float16", True, False, {"segments": 2}),
    # mma.sync: ldmatrix rows of 32 + 8 components, the query's padding staged as zeros from the generator
    ("mma", "attention", 20, 100, 24, "bfloat16", True, False, {}),
    # one chunk a row and one of zeros: every copy's row two chunks, half of them of no bytes
    ("wgmma", "attention", 20, 77, 8, "float16", True, False, {}),
    # the producer block's wide consumers (129 … 256 components held whole): 136 staged as 144, tiles of 64
    ("wgmma", "attention", 20, 77, 136, "float16", True, False, {"threads": 96}),
])
def test_widths_of_a_multiple_of_8_match_the_reference(strategy, name, R, L, d, dtype, masked, query16, options):
    assert_matches_the_reference(strategy, name, 1, R, L, d, dtype, masked, query16, **options)


@pytest.mark.parametrize("out_dtype", [None, "float16"])
def test_a_query_in_16_bits_and_outputs_in_16_bits_through_the_staged_rows_of_a_padded_width(out_dtype):
    # the producer block walking row tiles, d = 72, a float16 query: each next row tile's query copied by cp.async
    # (the padding's chunk as no bytes), or where the float16 outputs leave through the staged query rows (9 chunks a
    # row: five rounds of a warp's 32 lanes over its 16 rows, the last in part) loaded and written with zeros —
    # bit for bit the float32 query's outputs (rounded once to float16)
    rng = np.random.default_rng(2)
    R, L, d = 50, 90, 72
    inputs = {x: rng.normal(size=(1, L, d)).astype(np.float16) for x in ("k", "v")}
    q16 = rng.normal(size=(R, d)).astype(np.float16)
    params = {"q": q16.astype(np.float32), "scale": np.float32(d ** -0.5)}
    wide = compile(fused("attention"), "cudasim", "wgmma", threads=96)(inputs, params)["y"]
    kernel = compile(fused("attention"), "cudasim", "wgmma", threads=96, out_dtype=out_dtype)
    spec = kernel.spec_for(R, L, {"k": "float16", "v": "float16", "q": "float16"}, {"d": d}, reps={"k": R, "v": R})[1]
    lines = [ln.strip() for ln in kernel.source(spec, "wgmma").source.splitlines()]
    copies = [ln for ln in lines if ln.startswith("cp_async16_at(sm, ") and ", q, " in ln]
    stores = [ln for ln in lines if ln.startswith("st_w4_at(out_y, orow * ")]
    assert spec.persistent and "zs_k = pick((8 * ((ptid + 0) % 16)) < 72, 16, 0)" in lines
    if out_dtype is None:  # (five chunks a lane: 16 rows of ten, the tenth the padding's)
        assert len(copies) == 10 and all(ln.endswith("< 72, 16, 0))") for ln in copies) and not stores
    else:
        assert not copies and len(stores) == 5 and "if orow < gend and lane < 16:" in lines
    got = kernel(inputs, {**params, "q": q16})["y"]
    assert got.shape == (R, d) and np.array_equal(got, wide if out_dtype is None else wide.astype(np.float16))


def test_a_residual_multiplied_from_registers_reads_zeros_past_the_row(monkeypatch):
    # a float32 query whose residuals do not fit in shared memory: their product by mma.sync, its A fragments read
    # from global memory per step of 16 components — the last step of d = 72 half past the row (read as zeros)
    from redalgebra.codegen.strategies import wgmma_policy

    monkeypatch.setattr(wgmma_policy, "SM_SHARED", 40_000)
    kernel = compile(fused("attention"), "cudasim", "wgmma")
    spec = kernel.spec_for(20, 70, {"k": "float16", "v": "float16"}, {"d": 72}, reps={"k": 20, "v": 20})[1]
    source = kernel.source(spec, "wgmma").source
    assert "mma_f16(" in source and "min(16 * ks + 8 + 2 * t, 70)" in source
    assert_matches_the_reference("wgmma", "attention", 1, 20, 70, 72, "float16", False, False)


def test_which_widths_the_tensor_cores_take():
    f = fused("attention")

    def problem(d, cc=(9, 0), length=4096, rows=32 * 4096):
        options = dict(threads=None, tile=None, segments=None, group=None, batch=None, simulator=False, cc=cc)
        return Problem(rows, length, (("d", d),), (("k", "bfloat16"), ("v", "bfloat16")), False, True, True, True,
                       (("k", length), ("v", length)), tuple(options.items()))
    reps = {"k": 4096, "v": 4096}
    for d in (8, 40, 72, 88, 136, 200):
        assert choose(f, 32 * 4096, 4096, {"d": d}, reps, problem(d)) == "wgmma", d
        assert choose(f, 32 * 4096, 4096, {"d": d}, reps, problem(d, (8, 0))) == ("mma" if d <= 120 else "vrows"), d
    for d in (36, 100, 4):  # rows not of whole 16-byte chunks: no cp.async copies them
        assert choose(f, 32 * 4096, 4096, {"d": d}, reps, problem(d)) == "vrows", d
    kernel = compile(f, "cudasim", "wgmma")
    with pytest.raises(RedalgebraError, match="multiple of 8 components; k has 36 \\(vrows takes any\\)") as info:
        kernel.spec_for(20, 70, {"k": "float16", "v": "float16"}, {"d": 36}, reps={"k": 20, "v": 20})
    assert "at most" not in str(info.value)  # (its width is not what refuses it: wgmma takes up to 256)
    # column groups split a sum's columns evenly: never a padded one (its padding would be the last group's), which a
    # producer block's consumers hold whole instead
    assert column_groups([256]) == 2 and column_groups([248]) is None and column_groups([248], 256) == 1
    assert column_groups([120]) == 1 and column_groups([136]) is None and column_groups([136, 8], 256) == 1
    with pytest.raises(RedalgebraError, match="256 with a producer"):
        kernel.spec_for(20, 70, {"k": "float16", "v": "float16"}, {"d": 248}, reps={"k": 20, "v": 20})


@pytest.mark.parametrize("strategy,options", [("wgmma", {}), ("wgmma", {"threads": 96}), ("mma", {})])
def test_a_typed_cascade_of_two_padded_widths_and_a_summed_narrow_product(strategy, options):
    # keys of 24 components and values of 40 (each staged as its own multiple of 16), and MLA's form with a rope of 8
    # (its product summed with the latent's into one chain of accumulators: the rope's staged 16 half zeros)
    from redalgebra import derive, evaluate, parse

    rng = np.random.default_rng(4)
    R, L = 20, 75
    two = derive(parse("input k[a]\ninput v[b]\nparam q[a]\nparam scale\nlet s = scale * dot(q, k)\nreduce m = max(s)\n"
                       "reduce l = sum(exp(s - m))\nreduce o = sum(exp(s - m) * v)\nout y = o / l\n"))
    rope = derive(parse("input c[r]\ninput kr[e]\nparam qc[r]\nparam qr[e]\nlet s = dot(qc, c) + dot(qr, kr)\n"
                        "reduce m = max(s)\nreduce l = sum(exp(s - m))\nreduce o = sum(exp(s - m) * c)\nout y = o / l\n"))
    calls = [(two, {"k": 24, "v": 40}, {"q": 24}, {"scale": np.float32(0.2)}),
             (rope, {"c": 64, "kr": 8}, {"qc": 64, "qr": 8}, {})]
    for f, widths, vector_params, scalars in calls:
        inputs = {x: rng.normal(size=(1, L, n)).astype(np.float16) for x, n in widths.items()}
        params = {p: (rng.normal(size=(R, n)) * 0.3).astype(np.float32) for p, n in vector_params.items()} | scalars
        wide = {x: np.repeat(a.astype(np.float64), R, 0) for x, a in inputs.items()}
        ref = evaluate(f.cascade, wide, params)["y"]
        out = compile(f, "cudasim", strategy, **options)(inputs, params)["y"]
        assert out.shape == ref.shape and np.abs(out - ref).max() <= 2e-3 * np.abs(ref).max(), f.cascade.name
