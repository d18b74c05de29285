"""The wgmma strategy's column groups in the CUDA simulator: vector sums wider than a warpgroup's registers hold (MLA
decode's 512-wide latent row, attention at d = 256) on two warpgroups sharing a block's 64 rows, each holding half the
sums' columns — handing the tile over (the first computes the scores and the update, the second its half of the
products) or each scoring half the keys and exchanging row partials (``wgmma.HANDOVER = 0``); MLA's query staged in
16-byte loads, its residual's products."""

import numpy as np
import pytest

from redalgebra.runtime import compile
from redalgebra.runtime.check import STORE_ROUNDING, TOLERANCE
from tests.catalogue import fused


def _mla(batch, heads, length, rank, rope, exact, seed=0, spread=0.2):
    """An MLA decode call (float16 latent and rope keys; the query float32 of deviation ``spread``, or exact in
    float16) and its float64 reference."""
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(batch, length, rank)).astype(np.float16)
    kr = rng.normal(size=(batch, length, rope)).astype(np.float16)
    qc = (rng.normal(size=(batch * heads, rank)) * spread).astype(np.float32)
    qr = (rng.normal(size=(batch * heads, rope)) * spread).astype(np.float32)
    if exact:
        qc, qr = qc.astype(np.float16).astype(np.float32), qr.astype(np.float16).astype(np.float32)
    params = {"qc": qc, "qr": qr, "scale": np.float32((rank + rope) ** -0.5)}
    inputs = {"c": c, "kr": kr}
    return inputs, params, _reference_of(inputs, params, heads)


def _reference_of(inputs, params, heads):
    from redalgebra import evaluate, workloads

    wide = {k: np.repeat(v.astype(np.float64), heads, 0) for k, v in inputs.items()}
    return evaluate(workloads.get("mla_decode").cascade, wide, params)["y"]


def _assert_close(out, ref):
    # the factors enter P·V rounded to float16: one such rounding allowed, as check allows it
    assert np.abs(out - ref).max() <= (TOLERANCE["float16"] + STORE_ROUNDING["float16"]) * np.abs(ref).max()


@pytest.mark.slow
@pytest.mark.parametrize("handover", [1, 0])
def test_wide_vector_sums_split_across_two_warpgroups_with_segments(handover, monkeypatch):
    # MLA's shape at half its widths: 256-wide values (two warpgroups of 128 columns, one block of 256 threads in
    # the simulator too), two dot products summed into one chain of accumulators, 20 heads (a partial block of 64
    # rows), two segments of the 70 keys (a tile, then a partial one) merged by vrows' combine kernel
    # (gpu/mla_check.py runs these paths on the GPU, at MLA's widths, with uneven segments and with float32 queries,
    # whose residual is staged or multiplied by mma.sync, too). The groups in roles (the default): the first computes
    # the scores of all 64 keys and the update and hands the second the factors and the rows' corrections at a named
    # barrier; without (HANDOVER = 0), each the scores of 32 keys, exchanging row partials. The query is float32 and not
    # exact in float16 (scores of tens: rounded, it would move the outputs 1.5e-3, 15 times the tolerance): its
    # values and residuals are staged from 16-byte loads spread over the block's threads. The exponential is the
    # fast one, as on the GPU by default (compile takes fast_exp on CUDA only: set on the kernel directly), printed as
    # ex2(fma32(s, LOG2E, -m·log2 e)) with the floors per group. A rope of 24 components, staged as 32: its two steps
    # of 16 paired across the groups, the second group's the padding's (read as zeros, not past the row)
    import dataclasses

    from redalgebra.codegen.strategies import wgmma

    monkeypatch.setattr(wgmma, "HANDOVER", handover)
    inputs, params, ref = _mla(1, 20, 70, 256, 24, exact=False, seed=1, spread=30.0)
    kernel = dataclasses.replace(compile(fused("mla_decode"), "cudasim", "wgmma", segments=2), fast_exp=True)
    _assert_close(kernel(inputs, params)["y"], ref)
    spec = kernel.spec_for(20, 70, {"c": "float16", "kr": "float16"}, {"r": 256, "e": 24}, reps={"c": 20, "kr": 20})[1]
    assert spec.threads == 256 and spec.batch == 64 and spec.segments == 2  # (a count above one: read at run time)
    source = kernel.source(spec, "wgmma").source
    assert "ex2(fma32(" in source and "def combine(" in source
    assert "wgmma_sst_f16(" in source  # P·V with the factors from the shared factor tile
    if handover:
        # the first group: one chain of both dot products at the tile's width (and its residual's), its P·V from its
        # registers; the second: its P·V from the factor tile, after the hand-over; no row partials exchanged
        assert source.count("wgmma_wait0()") == 4 and "wgmma_rs_f16(" in source
        assert "bar_arrive(1, 256)" in source and "bar_sync(1, 256)" in source
        # one block barrier a tile (its copies landed), one handing the final states over
        assert source.count("cuda.syncthreads()") == 2
    else:
        assert source.count("wgmma_wait0()") == 3 and "bar_sync(" not in source


SIGMOID_SUMS = """\
input k[d]
input v[d]
param q[d]
let s = dot(q, k)
reduce n = sum(sigmoid(s))
reduce o = sum(sigmoid(s) * v)
out y = o / n
"""


#: A vector sum over the tiles with no product of scores (a scalar input, no dot product): the first group's scores
#: issue no copies, so the tile issues them first.
NO_SCORES = """\
input g
input v[d]
param c
let s = g * c
reduce m = max(s)
reduce l = sum(exp(s - m))
reduce o = sum(exp(s - m) * v)
out y = o / l
"""


@pytest.mark.parametrize("text,masked,dtype", [(None, True, "float16"), (SIGMOID_SUMS, False, "bfloat16"),
                                               (NO_SCORES, True, "float16")])
def test_column_groups_hand_the_tile_over_in_one_segment(text, masked, dtype, monkeypatch):
    # 256-wide values on two column groups without segments (the outputs' path: the second group reads the first's
    # final states), 20 rows (a partial block), 70 keys (a whole tile, then a partial one): attention with a random
    # mask and a fully masked row (NaN, as the reference); a cascade typed here whose vector sum has no correction
    # (no dependency: nothing to hand over but the factors; bfloat16, as float16 products need factors shown in
    # [0, 1] with the row's largest at 1); and one without a dot product. Handed over and not, both against float64.
    from redalgebra import evaluate
    from redalgebra.codegen.strategies import wgmma
    from redalgebra.derive import derive
    from redalgebra.ir import parse
    from redalgebra.runtime.formats import as_bfloat16, bfloat16_to_float

    f = derive(parse(text)) if text else fused("attention")
    c = f.cascade
    rng = np.random.default_rng(7)
    inputs = {x.name: rng.normal(size=(1, 70) + ((256,) if x.size else ())).astype(np.float32) for x in c.inputs}
    inputs = {x.name: (as_bfloat16(inputs[x.name]) if dtype == "bfloat16" else inputs[x.name].astype(np.float16))
              if x.size else inputs[x.name] for x in c.inputs}
    params = {p.name: (rng.normal(size=(20, 256)) / 8).astype(np.float32) if p.size else
              rng.uniform(1 / 32, 2, size=20).astype(np.float32) for p in c.params}
    keep = None
    if masked:
        keep = rng.random((20, 70)) > 0.3
        keep[3] = False
    wide = {k: np.repeat(np.asarray(bfloat16_to_float(v.bits) if hasattr(v, "bits") else v, np.float64), 20, 0)
            for k, v in inputs.items()}
    ref = evaluate(c, wide, params, keep)["y"]
    dtypes = {x.name: dtype for x in c.inputs if x.size}
    for handover in (1, 0):
        monkeypatch.setattr(wgmma, "HANDOVER", handover)
        kernel = compile(f, "cudasim", "wgmma", segments=1)
        spec = kernel.spec_for(20, 70, dtypes, {"d": 256}, keep=masked)[1]
        assert spec.threads == 256 and spec.segments == 1
        assert ("bar_sync(1, 256)" in kernel.source(spec, "wgmma").source) == bool(handover)
        out = kernel(inputs, params, keep)["y"]
        assert np.array_equal(np.isnan(out), np.isnan(ref)) and np.isnan(ref).any() == masked
        fin = np.isfinite(ref)
        assert np.abs(out - ref)[fin].max() <= (TOLERANCE[dtype] + STORE_ROUNDING[dtype]) * np.abs(ref[fin]).max()


@pytest.mark.parametrize("heads,rope", [
    (20, 24),  # a rope staged as 32: a chunk of its padding read as zeros; 20 heads, a partial block
    (50, 8),   # staged as 16: two 16-bit chunks a row, 128 for 256 threads, half of them past the block's 64 rows
    (50, 40),  # staged as 48: six a row, a second round for rows 42 … 63 (42 … 49 the call's), the rest past them
])
def test_column_groups_stage_a_16_bit_query_as_it_is_and_a_float32_one_in_16_byte_loads(heads, rope):
    # MLA's shape at half its widths (two column groups of 128 value columns), 70 keys in two segments. The query
    # given in float16, as a model holds it (and as the baseline reads it), is staged as its words are: no
    # residuals, no float32 loads, bit for bit the outputs of the same values given in float32 — where the block's
    # 256 threads do not divide a row's chunks too, the last round's chunks past the rows loaded and not written. The
    # float32 query is loaded in 16-byte chunks spread over the block's threads (four components a load), not two
    # 4-byte loads a pair of components (the fragments' order, which took 6-7 us of MLA's 63 us partial kernel on an
    # H100)
    import dataclasses

    inputs, params, ref = _mla(1, heads, 70, 256, rope, exact=True, seed=3)
    kernel = dataclasses.replace(compile(fused("mla_decode"), "cudasim", "wgmma", segments=2), fast_exp=True)
    want = kernel(inputs, params)["y"]
    _assert_close(want, ref)
    halves = {**params, "qc": params["qc"].astype(np.float16), "qr": params["qr"].astype(np.float16)}
    assert np.array_equal(kernel(inputs, halves)["y"], want)
    sizes, reps = {"r": 256, "e": rope}, {"c": heads, "kr": heads}
    wide = kernel.spec_for(heads, 70, {"c": "float16", "kr": "float16"}, sizes, reps=reps)[1]
    narrow = kernel.spec_for(heads, 70, {"c": "float16", "kr": "float16", "qc": "float16", "qr": "float16"}, sizes,
                             reps=reps)[1]
    assert wide.threads == narrow.threads == 256 and dict(narrow.dtypes)["qc"] == "float16"
    staged = -(-rope // 16) * 16
    lines = [ln.strip() for ln in kernel.source(wide, "wgmma").source.splitlines()]
    # (64 rows of 256 + staged components, four a load, over 256 threads)
    assert sum("= ld_f32x4(qc, " in ln for ln in lines) == 16
    assert sum("= ld_f32x4(qr, " in ln for ln in lines) == 64 * staged // 4 // 256
    assert not any(ln.startswith("v0 = qc[") for ln in lines)
    # column groups issue the first tile's copies before the query is loaded: they land while it is staged
    first_copy = next(i for i, ln in enumerate(lines) if ln.startswith("cp_async16"))
    assert first_copy < next(i for i, ln in enumerate(lines) if "= ld_f32x4(qc, " in ln)
    float32 = lines
    lines = [ln.strip() for ln in kernel.source(narrow, "wgmma").source.splitlines()]
    assert sum("= ld_w4_at(qc, " in ln for ln in lines) == 8 and not any("ld_f32x4(q" in ln for ln in lines)
    assert sum("= ld_w4_at(qr, " in ln for ln in lines) == -(-64 * staged // 8 // 256)
    # no residual, so no residual products in the loop (the float32 query's are multiplied by mma.sync when it votes)
    assert "if split:" not in lines and "if split:" in float32


@pytest.mark.parametrize("rank,given", [(256, "qc"), (256, "qr"), (128, "qc")])
def test_a_query_part_in_16_bits_beside_a_float32_one_adds_only_the_float32_ones_residual(rank, given):
    # one dot's param given in float16, the other's in float32 and not exact in float16: the float32 one's residual
    # is staged (rank 256: two column groups, and rank 128: one warpgroup, whose residual rows fit) and multiplied
    # when the block votes for it; the 16-bit one has no residual rows written, so its residual product is left out
    inputs, params, ref = _mla(1, 20, 70, rank, 24, exact=False, seed=4, spread=30.0)
    params = {**params, given: params[given].astype(np.float16)}
    ref = _reference_of(inputs, {**params, given: params[given].astype(np.float32)}, 20)
    _assert_close(compile(fused("mla_decode"), "cudasim", "wgmma", segments=2)(inputs, params)["y"], ref)


@pytest.mark.slow
def test_a_residual_that_does_not_fit_is_multiplied_from_registers(monkeypatch):
    # MLA's 576-wide query and its residual do not fit in shared memory beside two stages of keys: the residual's
    # product is mma.sync's, its A fragments computed from the query in global memory. Forced here at 128 + 16 (one
    # warpgroup, one warp in the simulator) by less shared memory; the GPU runs it at 512 + 64 (gpu/mla_check.py)
    from redalgebra.codegen.strategies import wgmma_policy

    monkeypatch.setattr(wgmma_policy, "SM_SHARED", 60_000)
    # scores of tens of units: the query rounded to float16 would move the outputs several times the tolerance
    inputs, params, ref = _mla(1, 16, 40, 128, 16, exact=False, seed=1, spread=30.0)
    kernel = compile(fused("mla_decode"), "cudasim", "wgmma")
    _assert_close(kernel(inputs, params)["y"], ref)
    rounded = {k: (v.astype(np.float16).astype(np.float32) if k != "scale" else v) for k, v in params.items()}
    with pytest.raises(AssertionError):
        _assert_close(_reference_of(inputs, rounded, 16), ref)
    spec = kernel.spec_for(16, 40, {"c": "float16", "kr": "float16"}, {"r": 128, "e": 16}, reps={"c": 16, "kr": 16})[1]
    assert "mma_f16(" in kernel.source(spec, "wgmma").source
