"""The wgmma strategy's 16-bit forms in the CUDA simulator: outputs asked for in 16 bits (``out_dtype``), stored so
by the kernels (in a block walking row tiles through each warp's staged query rows), and a query given in the keys'
16-bit type, staged as it is (``Strategy.params16``). Each is checked bit for bit against the float32 form it must
equal."""

import numpy as np
import pytest

from redalgebra import RedalgebraError
from redalgebra.runtime import compile
from tests.catalogue import fused


@pytest.mark.parametrize("threads,R,d,out_dtype", [
    # a block walking row tiles (two consumer warps and a producer), d = 80: a row's ten 16-byte chunks do not divide
    # a warp's lanes; a partial last row tile
    (96, 50, 80, "float16"),
    # one warpgroup (a warp in the simulator), a row tile a block: the pairs stored from the fragments; bfloat16
    (32, 20, 32, "bfloat16"),
])
def test_outputs_asked_in_16_bits_leave_through_shared_memory_as_the_float32_ones_rounded(threads, R, d, out_dtype):
    # walking row tiles, each warp writes its accumulators' pairs into its own rows of the staged query, then stores
    # whole 16-byte chunks; rounding once, at the store, gives exactly the float32 outputs rounded to nearest
    from redalgebra.runtime.formats import as_bfloat16

    rng = np.random.default_rng(11)
    L = 70
    inputs = {x: rng.normal(size=(1, L, d)).astype(np.float16) for x in ("k", "v")}
    params = {"q": rng.normal(size=(R, d)).astype(np.float32), "scale": np.float32(d ** -0.5)}
    wide = compile(fused("attention"), "cudasim", "wgmma", threads=threads)(inputs, params)["y"]
    kernel = compile(fused("attention"), "cudasim", "wgmma", threads=threads, out_dtype=out_dtype)
    spec = kernel.spec_for(R, L, {"k": "float16", "v": "float16"}, {"d": d}, reps={"k": R, "v": R})[1]
    assert spec.persistent == (threads == 96) and spec.out_dtypes == (("y", out_dtype),)
    source = kernel.source(spec, "wgmma").source
    walking = threads == 96
    assert source.count("st_w4_at(out_y, orow * ") == (d // 16 if walking else 0)
    # a row tile a block: from the fragments, four values a lane (mma.PAIRED_STORES, on by default)
    fragments = any(f"st_{t}16x{n}(out_y" in source for t in "bh" for n in (2, 4))
    assert fragments != walking
    got = kernel(inputs, params)["y"]
    if out_dtype == "float16":
        assert got.dtype == np.float16 and np.array_equal(got, wide.astype(np.float16))
    else:
        assert np.array_equal(got.bits, as_bfloat16(wide).bits)


@pytest.mark.parametrize("strategy,threads,paired", [
    # two vector outputs would share a warp's staged rows: a walking block stores them from the fragments
    ("wgmma", 96, 0),
    # four a lane (mma.PAIRED_STORES): every output's shuffles come before the row's stores, each exchange's
    # registers its own
    ("mma", 32, 1),
])
def test_two_vector_outputs_in_16_bits_are_each_their_own(monkeypatch, strategy, threads, paired):
    from redalgebra import derive, parse
    from redalgebra.codegen.strategies import mma

    monkeypatch.setattr(mma, "PAIRED_STORES", paired)
    f = derive(parse("input k[d]\ninput v[d]\nparam q[d]\nlet s = dot(q, k)\nreduce m = max(s)\n"
                     "reduce l = sum(exp(s - m))\nreduce o = sum(exp(s - m) * v)\nout y = o / l\n"
                     "out z = 2 * o / l + 1\n"))
    rng = np.random.default_rng(1)
    R, L, d = 40, 50, 32
    inputs = {x: rng.normal(size=(1, L, d)).astype(np.float16) for x in ("k", "v")}
    params = {"q": (rng.normal(size=(R, d)) * 0.2).astype(np.float32)}
    wide = compile(f, "cudasim", strategy, threads=threads)(inputs, params)
    got = compile(f, "cudasim", strategy, threads=threads, out_dtype="float16")(inputs, params)
    for name in ("y", "z"):
        assert np.array_equal(got[name], wide[name].astype(np.float16)), name


def test_outputs_in_16_bits_from_the_fragments_and_from_the_segments_combine():
    # where the outputs cannot leave through the staged rows (segments: the combine kernel stores them; mma: no
    # staged rows), each is still rounded once, from the same float32 value
    rng = np.random.default_rng(12)
    R, L, d = 8, 150, 16
    inputs = {x: rng.normal(size=(1, L, d)).astype(np.float16) for x in ("k", "v")}
    params = {"q": rng.normal(size=(R, d)).astype(np.float32), "scale": np.float32(0.25)}
    for strategy, options in (("wgmma", {"segments": 2}), ("mma", {})):
        wide = compile(fused("attention"), "cudasim", strategy, **options)(inputs, params)["y"]
        got = compile(fused("attention"), "cudasim", strategy, out_dtype="float16", **options)(inputs, params)["y"]
        assert got.dtype == np.float16 and np.array_equal(got, wide.astype(np.float16)), strategy


@pytest.mark.parametrize("strategy,d,out_dtype", [
    ("wgmma", 32, "bfloat16"),  # one warp of the simulator's warpgroup, a row tile a block: four 8-column blocks
    ("mma", 40, "float16"),     # five blocks: two pairs exchanged, the last one stored as a pair
])
def test_outputs_from_the_fragments_four_a_lane_are_the_float32_ones_rounded(monkeypatch, strategy, d, out_dtype):
    # mma.PAIRED_STORES (on by default; set here so that the test holds either way): neighbouring blocks exchanged between lanes t and t ^ 1, each
    # lane storing four values; a partial last row tile, whose lanes past the rows shuffle and do not store
    from redalgebra.codegen.strategies import mma
    from redalgebra.runtime.formats import as_bfloat16

    monkeypatch.setattr(mma, "PAIRED_STORES", 1)
    rng = np.random.default_rng(13)
    R, L = 20, 70
    inputs = {x: rng.normal(size=(1, L, d)).astype(np.float16) for x in ("k", "v")}
    params = {"q": rng.normal(size=(R, d)).astype(np.float32), "scale": np.float32(d ** -0.5)}
    wide = compile(fused("attention"), "cudasim", strategy, threads=32)(inputs, params)["y"]
    kernel = compile(fused("attention"), "cudasim", strategy, threads=32, out_dtype=out_dtype)
    spec = kernel.spec_for(R, L, {"k": "float16", "v": "float16"}, {"d": d}, reps={"k": R, "v": R})[1]
    source = kernel.source(spec, strategy).source
    kind = "b" if out_dtype == "bfloat16" else "h"
    assert f"st_{kind}16x4(out_y" in source and (f"st_{kind}16x2(out_y" in source) == (d // 8 % 2 == 1)
    got = kernel(inputs, params)["y"]
    if out_dtype == "float16":
        assert got.dtype == np.float16 and np.array_equal(got, wide.astype(np.float16))
    else:
        assert np.array_equal(got.bits, as_bfloat16(wide).bits)


@pytest.mark.parametrize("threads,R,d", [(96, 40, 48), (32, 20, 32)])
def test_a_query_given_in_16_bits_is_staged_as_it_is(threads, R, d):
    # a float16 query (as a model holds it): its words staged as they are, a 16-byte load a chunk of eight, no
    # residuals — bit for bit what the same values given in float32 give (their residuals all zero; d = 48: a row's
    # six chunks do not divide a warp's lanes); a strategy that reads float32 params (mma) gets them widened on the host
    rng = np.random.default_rng(5)
    L = 70
    inputs = {x: rng.normal(size=(1, L, d)).astype(np.float16) for x in ("k", "v")}
    q16 = rng.normal(size=(R, d)).astype(np.float16)
    params = {"q": q16.astype(np.float32), "scale": np.float32(d ** -0.5)}
    kernel = compile(fused("attention"), "cudasim", "wgmma", threads=threads)
    want = kernel(inputs, params)["y"]
    assert np.array_equal(kernel(inputs, {**params, "q": q16})["y"], want)
    spec = kernel.spec_for(R, L, {"k": "float16", "v": "float16", "q": "float16"}, {"d": d}, reps={"k": R, "v": R})[1]
    assert ("q", "float16") in spec.dtypes
    lines = [ln.strip() for ln in kernel.source(spec, "wgmma").source.splitlines()]
    loads = [ln for ln in lines if "= ld_w4_at(q, " in ln]
    copies = [ln for ln in lines if ln.startswith("cp_async16_at(sm, ") and ", q, " in ln]
    # where the block walks row tiles, a warp copies its own 16 rows (the rows' index names the warp) by cp.async,
    # the first row tile's before the walk and each next one's after the tiles; else the block loads its rows
    walking = threads == 96
    per_thread = 16 * (d // 8) // (32 if walking else threads)
    assert (len(copies), len(loads)) == ((2 * per_thread, 0) if walking else (0, per_thread))
    assert all("16 * warp + " in ln for ln in copies) and not any("16 * warp + " in ln for ln in loads)
    assert sum("sts_w4(sm, " in ln for ln in lines) == len(loads) and not any("ld_f32x4(q" in ln for ln in lines)
    assert "if split:" not in lines  # no residual products: the query is exact in its type
    if not walking:  # one warpgroup's narrow query is staged before the first tile's copies are issued (copies_first)
        first_copy = next(i for i, ln in enumerate(lines) if ln.startswith("cp_async16") and ", k, " in ln)
        assert lines.index(loads[0]) < first_copy
    if not walking:  # mma reads float32 params: planned with the host query widened, the same outputs
        mma = compile(fused("attention"), "cudasim", "mma")
        assert "q" not in dict(mma.layout(inputs, {**params, "q": q16})[0].dtypes)
        assert np.array_equal(mma(inputs, {**params, "q": q16})["y"], mma(inputs, params)["y"])


class _Device:
    """What a call reads of a device array before its launch: its CUDA array interface."""

    def __init__(self, shape, typestr):
        self.shape = shape
        self.__cuda_array_interface__ = {"shape": shape, "strides": None, "typestr": typestr,
                                         "data": (1 << 20, False), "version": 3}


def test_a_query_in_16_bits_on_the_device_is_refused_where_it_would_not_be_read_as_it_is():
    from redalgebra.runtime.compile import Params16Unread
    from redalgebra.runtime.formats import as_bfloat16

    rng = np.random.default_rng(6)
    R, L, d = 16, 40, 16
    params = {"q": _Device((R, d), "<f2"), "scale": np.float32(0.25)}
    f16 = {x: rng.normal(size=(1, L, d)).astype(np.float16) for x in ("k", "v")}
    # mma reads float32 params: a host query of the same shape widened first, its plan not taken for the device one
    mma = compile(fused("attention"), "cudasim", "mma")
    mma(f16, {**params, "q": rng.normal(size=(R, d)).astype(np.float16)})
    with pytest.raises(Params16Unread, match=r"param q is given on the device in 16 bits, which mma does not read"):
        mma(f16, params)
    # bfloat16 keys: a float16 query's words are not what the bfloat16 products read
    b16 = {x: as_bfloat16(rng.normal(size=(1, L, d)).astype(np.float32)) for x in ("k", "v")}
    with pytest.raises(RedalgebraError, match=r"param q given in float16 is staged as it is only where the vector inputs"):
        compile(fused("attention"), "cudasim", "wgmma")(b16, params)


def test_a_bfloat16_query_counts_its_rows_and_is_staged_as_it_is():
    # bfloat16 bit patterns wrapped with as_bfloat16 (NumPy has no bfloat16): the call's rows are the query's, more
    # than the shared keys' one row; staged as they are, as the same values in float32
    from redalgebra.runtime.formats import as_bfloat16, bfloat16_to_float

    rng = np.random.default_rng(8)
    R, L, d = 20, 40, 32
    inputs = {x: as_bfloat16(rng.normal(size=(1, L, d)).astype(np.float32)) for x in ("k", "v")}
    q = as_bfloat16(rng.normal(size=(R, d)).astype(np.float32))
    kernel = compile(fused("attention"), "cudasim", "wgmma", threads=32)
    want = kernel(inputs, {"q": bfloat16_to_float(q.bits), "scale": np.float32(0.2)})["y"]
    assert want.shape == (R, d) and np.array_equal(kernel(inputs, {"q": q, "scale": np.float32(0.2)})["y"], want)


@pytest.mark.parametrize("d,length", [(80, 2048), (128, 1024)])
def test_a_16_bit_query_leaves_its_residuals_shared_memory_to_the_ring(d, length):
    # one warpgroup a block, two blocks a multiprocessor: with the query's residual rows planned, two stages fit; a
    # query given in the keys' type has none, and three stages do (the pipelined order) — without a gate only (under a
    # causal mask three stages measured slower on the H200)
    from redalgebra import derive, parse
    from redalgebra.codegen import Problem
    from redalgebra.codegen.strategies.wgmma_policy import configure
    from tests.runtime.test_mma import CAUSAL

    def stages(f, q):
        options = dict(threads=128, tile=None, segments=None, group=None, batch=None, simulator=False, cc=(9, 0))
        p = Problem(32 * length, length, (("d", d),), (("k", "float16"), ("v", "float16"), ("q", q)), False, True, True,
                    True, (("k", length), ("v", length)), tuple(options.items()))
        return configure(f, p)["stages"]
    assert stages(fused("attention"), "float16") == 3 and stages(fused("attention"), "float32") == 2
    assert stages(derive(parse(CAUSAL)), "float16") == 2


def test_the_simulator_refuses_products_reading_rows_a_copy_not_yet_waited_for_writes(monkeypatch):
    # the next row tile's query copied at the top of every tile instead of after the last one: the scores then read
    # rows whose copies have not landed (on the GPU the old or the new values, by luck). The simulator's products read
    # as they are issued, so the outputs would pass; the copies in flight are tracked and the read is refused instead
    import dataclasses

    from redalgebra.codegen.strategies.tile_producer import TileProducer

    loop = TileProducer.consumer_loop

    def copies_in_every_tile(self, after=()):
        out = loop(self, ())
        out[1] = dataclasses.replace(out[1], body=tuple(after) + tuple(out[1].body))
        return out
    monkeypatch.setattr(TileProducer, "consumer_loop", copies_in_every_tile)
    rng = np.random.default_rng(5)
    R, L, d = 40, 70, 48
    inputs = {x: rng.normal(size=(1, L, d)).astype(np.float16) for x in ("k", "v")}
    params = {"q": rng.normal(size=(R, d)).astype(np.float16), "scale": np.float32(d ** -0.5)}
    with pytest.raises(Exception, match="a cp.async copy not yet waited for writes"):
        compile(fused("attention"), "cudasim", "wgmma", threads=96)(inputs, params)
