"""The wgmma strategy in the CUDA simulator: mma's tiles on Hopper's warpgroup instructions.

The stand-ins of ``wgmma`` decode the 128-byte-swizzled shared memory from the descriptors as the hardware does
(``gpu/wgmma_check.py`` checks the same layouts on exact integers on the GPU, and here in the simulator); a
simulated block is one warp (16 rows), whose accumulators each thread computes from its own rows.
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from redalgebra import RedalgebraError
from redalgebra.codegen import Problem
from redalgebra.runtime import compile
from redalgebra.runtime.check import STORE_ROUNDING, TOLERANCE
from tests.catalogue import fused
from tests.runtime.test_mma import CAUSAL, _problem, assert_matches_the_reference
from tests.runtime.test_wgmma_groups import _assert_close

CHECK = Path(__file__).resolve().parents[2] / "gpu" / "wgmma_check.py"


@pytest.mark.parametrize("name,R,L,d,dtype,masked,query16", [
    # three tiles (the last partial), a mask with a fully masked row, a float32 query (the residual's own chain)
    ("attention", 20, 130, 16, "float16", True, False),
    # the gate (a causal mask and ALiBi written with positions): tiles no row sees skipped; bfloat16
    ("alibi_attention", 20, 40, 16, "bfloat16", False, True),
    # 80 components: a second block of 64 columns, partly used, in every swizzled tile
    ("attention", 16, 70, 80, "bfloat16", False, False),
])
def test_wgmma_matches_the_reference(name, R, L, d, dtype, masked, query16):
    assert_matches_the_reference("wgmma", name, 1, R, L, d, dtype, masked, query16)


def test_wgmma_whole_tiles_of_two_groups():
    # two warps (copies 8 rows apart: a whole tile's copies by flat offsets and constant steps in the swizzled
    # layout), d = 64, two groups, one whole tile and a partial one
    assert_matches_the_reference("wgmma", "attention", 2, 20, 70, 64, "float16", False, True, threads=64)


def test_the_swizzled_layouts_give_exact_integer_products():
    spec = importlib.util.spec_from_file_location("gpu_wgmma_check", CHECK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for kind in ("bf16", "f16"):
        good, line = module.run(kind)
        assert good, line


def test_the_simulators_descriptor_reads_follow_the_swizzle_value_by_value():
    # the stand-ins read an operand through its descriptor in one gather: each value is the one at the swizzled
    # address (byte ^ ((byte >> 3) & 0x70)), 16-bit ones little-endian; an address past the array is an error
    from redalgebra.runtime import tensor_cores  # noqa: F401 - (imports warpgroup, which it re-exports)
    from redalgebra.runtime import warpgroup as wg

    raw = np.arange(4096, dtype=np.uint32).astype(np.uint8) * np.uint8(7)
    desc = wg._SimDesc((raw.view(np.uint16), 1024, 2048, 1024))
    at = lambda a: a ^ ((a >> 3) & 0x70)  # noqa: E731
    u16 = lambda a: int(raw[at(a)]) | int(raw[at(a) + 1]) << 8  # noqa: E731
    rows = wg._k_major(desc, 16, 8, 16, 2)
    assert rows.dtype == np.uint16 and rows.shape == (16, 16)
    assert all(rows[r, k] == u16(1024 + ((8 + r) // 8) * 1024 + ((8 + r) % 8) * 128 + 2 * k)
               for r in range(16) for k in range(16))
    e4m3 = wg._k_major(desc, 8, 0, 32, 1)
    assert all(e4m3[r, k] == raw[at(1024 + r * 128 + k)] for r in range(8) for k in range(32))
    cols = wg._mn_major(wg._SimDesc((raw.view(np.uint16), 0, 2048, 1024)), 72)
    assert cols.shape == (16, 72) and all(cols[k, c] == u16((c // 64) * 2048 + (k // 8) * 1024 + (k % 8) * 128
                                                            + 2 * (c % 64)) for k in range(16) for c in range(72))
    with pytest.raises(IndexError, match="operand byte 4096 is outside the shared array \\(4096 bytes\\)"):
        wg._k_major(wg._SimDesc((raw.view(np.uint16), 3072, 0, 1024)), 16)


@pytest.mark.parametrize("strategy", ["mma", "wgmma"])
def test_a_masked_key_far_above_the_others_changes_nothing(strategy):
    # its score is 960 above the row's maximum: the exponential of the element that does not count must not be taken
    # where it would raise (the simulator's math.exp) — on the GPU both sides of a select are computed, and it is inf
    R, L, d = 16, 40, 16
    k, v = np.zeros((1, L, d), np.float16), np.ones((1, L, d), np.float16)
    k[0, 5] = 60.0
    keep = np.ones((R, L), bool)
    keep[:, 5] = False
    params = {"q": np.ones((R, d), np.float32), "scale": np.float32(1.0)}
    out = compile(fused("attention"), "cudasim", strategy)({"k": k, "v": v}, params, keep)["y"]
    np.testing.assert_array_equal(out, np.ones((R, d), np.float32))


HOLE = """\
input k[d]
input v[d]
param q[d]
param lo int
param hi int
let s = dot(q, k)
let sc = where(pos < lo or pos >= hi, s, -inf)
reduce m = max(sc)
reduce l = sum(exp(sc - m))
reduce o = sum(exp(sc - m) * v)
out y = o / l
"""


def test_pipelined_products_cross_a_skipped_tile_and_a_partial_one():
    # a typed cascade whose keys lo <= pos < hi are masked in the cascade: the tile of keys 64 … 127 is skipped
    # whole, so the products left in flight from tile 0 are finished there (tile 4's copies go to tile 0's stage
    # while tile 2 is computed), and tile 2 starts with none pending; the last tile is partial. Enough stages (d = 16) for the pipelined order: each tile's P · V issued after the
    # next tile's scores, its accumulators scaled after they are done (bit for bit the unpipelined sums' order)
    from redalgebra import derive, evaluate
    from redalgebra.ir import parse
    from redalgebra.codegen import generate

    f = derive(parse(HOLE))
    rng = np.random.default_rng(5)
    R, L, d = 16, 300, 16
    inputs = {"k": rng.normal(size=(1, L, d)).astype(np.float16), "v": rng.normal(size=(1, L, d)).astype(np.float16)}
    lo = rng.integers(40, 64, size=R).astype(np.int64)
    hi = rng.integers(128, 140, size=R).astype(np.int64)
    params = {"q": rng.normal(size=(R, d)).astype(np.float16).astype(np.float32), "lo": lo, "hi": hi}
    kernel = compile(f, "cudasim", "wgmma")
    strategy, spec, _ = kernel.spec_for(R, L, (("k", "float16"), ("v", "float16")), {"d": d}, reps={"k": R, "v": R})
    source = generate(kernel.fused, "cudasim", strategy, spec).source
    assert spec.stages >= 3 and "wgmma_wait1()" in source and "pp = 1" in source and "lv & 1" in source
    out = kernel(inputs, params)["y"]
    wide = {k_: np.repeat(v_.astype(np.float64), R, 0) for k_, v_ in inputs.items()}
    ref = evaluate(f.cascade, wide, params)["y"]
    err = np.abs(out - ref).max() / np.abs(ref).max()
    assert err <= TOLERANCE["float16"] + STORE_ROUNDING["float16"], err


TWO_SOFTMAXES = """\
input k[d]
input v[d]
param q[d]
param p[d]
let s = dot(q, k)
let r = dot(p, k)
reduce m = max(s)
reduce l = sum(exp(s - m))
reduce o = sum(exp(s - m) * v)
reduce m2 = max(r)
reduce l2 = sum(exp(r - m2))
reduce o2 = sum(exp(r - m2) * v)
out y = o / l + o2 / l2
"""


def test_pipelined_vector_sums_are_each_scaled_by_their_own_correction():
    # two vector sums with different corrections (exp(m_old - m_new), exp(m2_old - m2_new)): pipelined, their
    # scaling waits for the pending products, and each must still use its own (one shared name gave 0.85 off)
    from redalgebra import derive, evaluate
    from redalgebra.ir import parse

    f = derive(parse(TWO_SOFTMAXES))
    rng = np.random.default_rng(7)
    R, L, d = 16, 200, 16
    inputs = {"k": rng.normal(size=(1, L, d)).astype(np.float16), "v": rng.normal(size=(1, L, d)).astype(np.float16)}
    params = {n: rng.normal(size=(R, d)).astype(np.float16).astype(np.float32) for n in ("q", "p")}
    out = compile(f, "cudasim", "wgmma")(inputs, params)["y"]
    wide = {k_: np.repeat(v_.astype(np.float64), R, 0) for k_, v_ in inputs.items()}
    ref = evaluate(f.cascade, wide, params)["y"]
    err = np.abs(out - ref).max() / np.abs(ref).max()
    assert err <= TOLERANCE["float16"] + STORE_ROUNDING["float16"], err


def test_a_tiles_products_run_past_the_loops_barrier_at_d128():
    # d = 128, one warpgroup a block: no stage to spare for the pipelined order, so a tile's P·V is committed and
    # left in flight; the next tile waits for it after the loop's barrier, just before its scores (and so before
    # the copies that take its stage); the loop's last products are waited for after it
    kernel = compile(fused("attention"), "cudasim", "wgmma", threads=128)
    spec = kernel.spec_for(256, 300, {"k": "float16", "v": "float16"}, {"d": 128}, reps={"k": 256, "v": 256})[1]
    assert spec.stages == 2 and spec.threads == 128
    raw = kernel.source(spec, "wgmma").source.splitlines()
    lines = [ln.strip() for ln in raw]
    loop = lines.index("for it in range(ntile):")
    barrier = lines.index("cuda.syncthreads()", loop)
    wait = lines.index("wgmma_wait0()", barrier)
    scores = next(i for i in range(loop, len(lines)) if "wgmma_ss_f16(" in lines[i])
    copies = next(i for i in range(scores, len(lines)) if lines[i].startswith("cp_async16"))
    products = next(i for i in range(loop, len(lines)) if "wgmma_rs_f16(" in lines[i])
    assert barrier < wait < scores < copies < products and lines[products + 1] == "wgmma_commit()"
    drain = lines.index("wgmma_wait0()", products)
    indent = len(raw[loop]) - len(raw[loop].lstrip())
    assert len(raw[drain]) - len(raw[drain].lstrip()) == indent  # after the loop, not in it


@pytest.mark.parametrize("groups,R,L,d,dtype,masked,query16,options", [
    # five tiles (the last partial) through a ring of four stages: every stage reused, a release waited for; a mask
    # with a fully masked row; a float32 query (the residual's products inside the turn's scores)
    (1, 40, 300, 16, "float16", True, False, {}),
    # two groups, d = 64, a whole tile and a partial one; a row block partly past its group's rows; a block a row
    # tile (the others here walk theirs: one simulated multiprocessor, one block taking both row tiles)
    (2, 20, 130, 64, "bfloat16", False, True, {"persistent": False}),
    # tiles of 128 elements: three (the last partial), 128-column score tiles, 8 steps of P·V a tile; two groups,
    # each row tile walked reading its own group's keys
    (2, 20, 300, 16, "float16", True, False, {"tile": 128}),
    # the row in three segments (of four, four and three tiles), merged by the combine kernel
    (1, 40, 700, 16, "float16", True, False, {"segments": 3}),
])
def test_a_producer_warpgroup_and_two_consumer_warpgroups_taking_turns(groups, R, L, d, dtype, masked, query16,
                                                                         options):
    # threads=96 in the simulator (three warps: two consumer "warpgroups" of a warp, the producer's), as 384 on the
    # GPU: the producer copies the tiles into the ring, the consumers meet it at named barriers only
    assert_matches_the_reference("wgmma", "attention", groups, R, L, d, dtype, masked, query16, threads=96, **options)


@pytest.mark.parametrize("chain,d", [(1, 32), (3, 32), (8, 32), (3, 64)])
def test_the_producers_whole_tile_copies_from_bases_moved_on_every_few_copies(chain, d, monkeypatch):
    # d = 32 in a producer warp of 32 threads: copies 8 rows apart (the swizzle's period: one place a thread), 8 a
    # thread, input and tile; the bases moved on after every copy (1), after three (the last group short), or never
    # (8) copy the same tiles. At d = 64 the copies are 4 rows apart, two swizzles: two places a thread (a period of
    # 2, as d = 256 on the GPU), the chain rounded up to 4
    from redalgebra.codegen.strategies import tile_copies

    monkeypatch.setattr(tile_copies, "CHAIN", chain)
    kernel = compile(fused("attention"), "cudasim", "wgmma", threads=96)
    spec = kernel.spec_for(20, 130, {"k": "float16", "v": "float16"}, {"d": d}, reps={"k": 20, "v": 20})[1]
    source = kernel.source(spec, "wgmma").source
    assert "gen_sa = " in source and ("gen_sa = fresh(" in source) == (chain < 8)
    assert ("gen_sa_1 = fresh(gen_sa_1 + " in source) == (d == 64)
    assert_matches_the_reference("wgmma", "attention", 1, 20, 130, d, "float16", False, True, threads=96)


@pytest.mark.parametrize("strategy,threads", [("wgmma", 32), ("wgmma", 96), ("mma", 32)])
def test_rows_whose_chunks_do_not_divide_the_copiers_are_copied_as_if_padded(strategy, threads):
    # d = 48: six 16-byte chunks a row, 32 copying threads (a simulated warpgroup, or the producer's warp): copied as
    # eight a row, the padding's threads idle (on the GPU d = 80 and 96: ten and twelve, as sixteen). The last tile
    # whole: a padding copy issued would read past the keys' end (the simulator checks every copy's bounds)
    kernel = compile(fused("attention"), "cudasim", strategy, threads=threads)
    spec = kernel.spec_for(20, 128, {"k": "float16", "v": "float16"}, {"d": 48}, reps={"k": 20, "v": 20})[1]
    source = kernel.source(spec, strategy).source
    assert "8 * (tid % 8) < 48" in source or "8 * (ptid % 8) < 48" in source
    assert_matches_the_reference(strategy, "attention", 1, 20, 128, 48, "float16", True, True, threads=threads)
    if threads == 32 and strategy == "wgmma":  # a partial last tile: its copies (clamped, zeros past the end) padded too
        assert_matches_the_reference(strategy, "attention", 1, 20, 100, 48, "float16", True, True, threads=threads)


@pytest.mark.parametrize("name,d,dtype,masked", [("attention", 256, "float16", True),
                                                  ("alibi_attention", 192, "bfloat16", False)])
def test_a_producer_blocks_consumers_hold_vector_sums_up_to_256_wide(name, d, dtype, masked):
    # the block for d = 129 … 256 (Gemma's 256; 192, which no column groups hold): each consumer warpgroup holds all d
    # columns of its rows' sums, on tiles of 32 above 192 (64 up to it: three stages fit beside the query's rows); a
    # keep mask, a causal gate.
    # d = 192 in the simulator: 24 chunks a row copied as 32 by the producer's warp, a row a copy (eight swizzles)
    kernel = compile(fused(name), "cudasim", "wgmma", threads=96)
    spec = kernel.spec_for(20, 100, {"k": dtype, "v": dtype}, {"d": d}, reps={"k": 20, "v": 20})[1]
    assert spec.producer and spec.tile == (32 if d > 192 else 64) and spec.stages >= 3
    assert_matches_the_reference("wgmma", name, 1, 20, 100, d, dtype, masked, True, threads=96)
    if d % 128:  # one warpgroup holds 128 at most, and column groups multiples of 128
        with pytest.raises(RedalgebraError, match="256 with a producer"):
            compile(fused(name), "cudasim", "wgmma", threads=32).spec_for(20, 100, {"k": dtype, "v": dtype},
                                                                          {"d": d}, reps={"k": 20, "v": 20})


def test_the_producer_block_meets_at_named_barriers_only_once_its_roles_split(monkeypatch):
    # on the GPU: 384 threads (launch bounds), one block barrier (the residuals' vote) before the roles split, none in
    # either role's loop; a "full" barrier a stage and consumer warpgroup (256 threads: one warpgroup and the
    # producer), an "empty" one a stage (384), the turns (256) around the products' issue; four stages
    import importlib

    compile_module = importlib.import_module("redalgebra.runtime.compile")
    monkeypatch.setattr(compile_module, "device_capability", lambda backend: (9, 0))  # (an H200's, without one)
    kernel = compile(fused("attention"), "cuda", "wgmma", threads=384, persistent=False)
    spec = kernel.spec_for(64 * 2048, 2048, {"k": "float16", "v": "float16"}, {"d": 128},
                           reps={"k": 2048, "v": 2048})[1]
    assert spec.producer and spec.threads == 256 and spec.stages == 4 and not spec.persistent
    lines = [ln.strip() for ln in kernel.source(spec, "wgmma").source.splitlines()]
    assert "BOUNDS_kernel = {} if config.ENABLE_CUDASIM else {'launch_bounds': 384, 'cache': CACHE}" in lines
    split = lines.index("if warp >= 8:")
    assert sum("syncthreads" in ln for ln in lines) == 1 and "cuda.syncthreads_or" in " ".join(lines[:split])
    body = lines[split:]
    assert "bar_sync(1 + wgi + 2 * (st), 256)" in body and "bar_sync(9 + (st), 384)" in body
    assert "bar_arrive(9 + (sp), 384)" in body and "bar_sync(13 + (wgi), 256)" in body
    assert "bar_arrive(13 + (1 - wgi), 256)" in body
    # the turn taken before the scores' products are issued, handed on after the pending P·V's, before the waits
    take = body.index("bar_sync(13 + (wgi), 256)")
    scores = next(i for i in range(take, len(body)) if "wgmma_ss_f16(" in body[i])
    give = body.index("bar_arrive(13 + (1 - wgi), 256)", scores)
    pending = next(i for i in range(scores, give) if "wgmma_rs_f16(" in body[i])
    assert take < scores < pending < give < body.index("wgmma_wait1()", give)
    # the factors exp(s - m) with the fast exponential: ex2(s·log2(e) - m·log2(e)), one fused multiply-add an element
    # (the row's -m·log2(e) once, where its floored maximum is found)
    assert "zn_m_0 = -(z_m_0 * LOG2E)" in body and "pf_o_0_0_0 = ex2(fma32(e_s_0_0_0, LOG2E, zn_m_0))" in body
    assert not any("fast_exp(-z_m" in ln for ln in body)


def test_the_producer_block_walks_row_tiles_voting_at_a_barrier_of_its_consumers(monkeypatch):
    # by default (no gate, one segment) the block walks row tiles: no barrier of the whole block at all (the
    # producer copies on into the next row tile's keys), the consumers' vote on their query's residuals at named
    # barrier 15 of their 256 threads, the ring's stage counted across row tiles, and the producer, past its last
    # tile, waiting for the releases it did not wait for
    import importlib

    compile_module = importlib.import_module("redalgebra.runtime.compile")
    monkeypatch.setattr(compile_module, "device_capability", lambda backend: (9, 0))
    kernel = compile(fused("attention"), "cuda", "wgmma", threads=384, tile=128)
    spec = kernel.spec_for(64 * 2048, 2048, {"k": "float16", "v": "float16"}, {"d": 128},
                           reps={"k": 2048, "v": 2048})[1]
    assert spec.producer and spec.persistent and spec.stages == 3 and spec.segments == 1
    lines = [ln.strip() for ln in kernel.source(spec, "wgmma").source.splitlines()]
    assert not any("syncthreads" in ln for ln in lines)
    split = lines.index("if warp >= 8:")
    assert lines.count("while tile < total:") == 2 and lines.index("while tile < total:") > split
    consumers = lines[lines.index("else:", lines.index("for jt in range(max(gq - 3, 0), gq):")):]
    assert "split = bar_red_or(15, 256, inexact)" in consumers and "st = uint32(gq + it) % uint32(3)" in consumers
    assert "bar_sync(7 + (uint32(jt) % uint32(3)), 384)" in lines[split:]
    # a row tile's last stage released once its sums are complete (the producer waits for every release)
    assert "if pp != 0:" in consumers and "if ntile > 0:" in consumers
    # the query staged in 16-byte loads, a warp's 32 a row (32 chunks of 4 components: the thread's column fixed),
    # 16 a thread, all issued before the first is rounded; each warp its own 16 rows
    loads = [i for i, ln in enumerate(consumers)
             if "= ld_f32x4(q, min(grp * grows + rt * 128 + 16 * warp + gen_qr0_0 + " in ln]
    assert len(loads) == 16 and "gen_qr0_0 + 15, gend - 1), 4 * gen_qc_0)" in consumers[loads[-1]]
    assert loads[-1] < min(i for i, ln in enumerate(consumers) if ln.startswith("qw = pack_f16x2("))
    vote = consumers.index("split = bar_red_or(15, 256, inexact)")
    assert not any("q[rc_" in ln for ln in consumers[:vote])  # (past it: the residuals' products, where split)


def test_blocks_walk_row_tiles_only_as_the_producer_block_in_one_segment_with_messages(monkeypatch):
    from redalgebra import derive
    from redalgebra.codegen.strategies import mma_policy
    from redalgebra.ir import parse

    def spec(f, **options):
        kernel = compile(f, "cudasim", "wgmma", **options)
        return kernel.spec_for(40, 300, {"k": "float16", "v": "float16"}, {"d": 16}, reps={"k": 40, "v": 40})[1]
    attention, causal = fused("attention"), derive(parse(CAUSAL))
    assert spec(attention, threads=96).persistent and not spec(attention, threads=96, persistent=False).persistent
    assert not spec(attention, threads=96, segments=3).persistent  # (segments: a block a row tile)
    # a gate: the producer's vote on its tile counts takes a named barrier, one more than a ring of 4 stages leaves
    assert spec(causal, threads=96).stages == 4 and not spec(causal, threads=96).persistent
    with pytest.raises(RedalgebraError, match="only as the producer block"):
        spec(attention, threads=32, persistent=True)
    # (said by applicable, so that auto takes another strategy rather than failing the call)
    from redalgebra.codegen.strategies.wgmma_policy import applicable

    base = dict(threads=32, tile=None, segments=None, group=None, batch=None, simulator=True, persistent=True)
    p = Problem(40, 300, (("d", 16),), (("k", "float16"), ("v", "float16")), False, True, True, True,
                (("k", 40), ("v", 40)), tuple(base.items()))
    assert "only as the producer block" in applicable(attention, p)
    with pytest.raises(RedalgebraError, match="under a gate with at most 3 stages"):  # (said before any source)
        spec(causal, threads=96, persistent=True)
    with pytest.raises(RedalgebraError, match="each row in one segment"):
        spec(attention, threads=96, persistent=True, segments=3)
    monkeypatch.setattr(mma_policy, "MOST_STAGES", 3)
    assert spec(causal, threads=96).persistent


@pytest.mark.parametrize("queries,blocks,query,settings,extra", [
    (150, 3, "float16", (1, 1), 16), (128, 8, "float32", (1, 1), 16), (40, 2, "float16", (1, 1), 30),
    (150, 3, "float32", (0, 0), 16)])
def test_blocks_walking_causal_row_tiles_in_pairs_take_each_once(queries, blocks, query, settings, extra, monkeypatch):
    # two heads of `queries` causal rows, row tiles of 32 rows walked by `blocks` blocks in pairs (a head's row tile
    # p and its p-th from the end: the same work a pair). 150 rows: five row tiles a head (the last partial, the
    # middle one after every pair), 128: four (no middle), 40: two; 8 blocks: more than the pairs (blocks that take
    # none). The consumer warpgroups go on to the next row tile each on its own, counting
    # the block's live tiles at a barrier each (and, for a float32 query, on its own residuals: a warpgroup's
    # products add them where any of its rows has one). Every row's output against float64; and with both settings
    # 0 (timing settings: longest first in a snake, the warpgroups meeting every row tile), as before them
    import importlib

    from redalgebra import derive, evaluate
    from redalgebra.codegen.strategies import mma_policy, tile_producer
    from redalgebra.ir import parse
    from redalgebra.workloads.masks import query_positions

    monkeypatch.setattr(mma_policy, "MOST_STAGES", 3)
    monkeypatch.setattr(tile_producer, "PAIRS", settings[0])
    monkeypatch.setattr(tile_producer, "DECOUPLED", settings[1])
    monkeypatch.setattr(importlib.import_module("redalgebra.runtime.launch"), "multiprocessors", lambda cuda: blocks)
    # the queries the last of their keys, `extra` more. 16: a key tile begins at the first row of the second consumer
    # warpgroup of every other row tile (the block's count of live tiles is not each warpgroup's); 30: the second row
    # tile's first row sees all of key tile 0 but its last key (the tile is not whole for the block: masked)
    heads, d, L = 2, 16, queries + extra
    rng = np.random.default_rng(queries + blocks + extra)
    f = derive(parse(CAUSAL))
    inputs = {x: rng.normal(size=(heads, L, d)).astype(np.float16) for x in ("k", "v")}
    q = rng.normal(size=(heads * queries, d))
    if query == "float32":  # the first 16 rows of each row tile exact in 16 bits: one warpgroup's residuals only
        first = np.arange(heads * queries) % queries % 32 < 16
        q[first] = q[first].astype(np.float16)
    params = {"q": q.astype(query), "qpos": query_positions(queries, L, heads).astype(np.float32)}
    kernel = compile(f, "cudasim", "wgmma", threads=96)
    spec = kernel.spec_for(heads * queries, L, {"k": "float16", "v": "float16", "q": query}, {"d": d},
                           reps={"k": queries, "v": queries})[1]
    source = kernel.source(spec, "wgmma").source
    assert spec.persistent and ("pend" in source) == bool(settings[0])
    assert ("bar_red_or(pick(wgi == 0, 15, 13), 32, int32(ml >= cand))" in source) == bool(settings[1])
    assert ("split = bar_red_or(pick(wgi == 0, 15, 13), 32, inexact)" in source) == (query == "float32" and settings[1])
    out = kernel(inputs, params)["y"]
    wide = {x: np.repeat(a.astype(np.float64), queries, 0) for x, a in inputs.items()}
    ref = evaluate(f.cascade, wide, {**params, "q": params["q"].astype(np.float64)})["y"]
    err = np.abs(out - ref).max(axis=1) / np.abs(ref).max(axis=1)
    assert err.max() <= TOLERANCE["float16"] + STORE_ROUNDING["float16"], err


# causal attention (test_mma's) with its gate true on the row's last keys instead: not on a prefix
RECENT = CAUSAL.replace("pos <= qpos", "pos > qpos - 64")


def test_a_producer_warpgroup_refuses_a_gate_not_true_on_a_prefix_with_a_message():
    # the tiles a gate true on the row's last keys skips are voted on at the block's barrier every tile, which the
    # producer's warps never reach
    from redalgebra import derive
    from redalgebra.ir import parse

    rng = np.random.default_rng(2)
    inputs = {x: rng.normal(size=(1, 40, 16)).astype(np.float16) for x in ("k", "v")}
    params = {"q": rng.normal(size=(8, 16)).astype(np.float32), "qpos": np.arange(8, dtype=np.int64)}
    with pytest.raises(RedalgebraError, match="true on a prefix of the row"):
        compile(derive(parse(RECENT)), "cudasim", "wgmma", threads=96)(inputs, params)
    # tiles of 128 elements only with the producer's two consumer warpgroups
    with pytest.raises(RedalgebraError, match="or 128 with a producer warpgroup"):
        assert_matches_the_reference("wgmma", "attention", 1, 20, 40, 16, "bfloat16", False, True, tile=128)


@pytest.mark.parametrize("options", [{}, {"tile": 128}, {"segments": 4}, {"tile": 128, "walk": True}])
def test_a_producer_block_reads_no_tile_its_causal_mask_hides(options, monkeypatch):
    # queries at positions 0 … 169 over their 170 keys, blocks of 32 rows: the values from key 128 on (a tile of 64
    # or 128 keys, the last one partial) are NaN. Only the last blocks' rows see them (and are NaN); a block that read
    # that tile at all would
    # make its rows NaN too (a masked key's factor 0 times NaN), where the other rows' outputs are those of clean
    # values. The block's live
    # tiles and its whole ones are counted before the producer and the consumers part (ALiBi's gate, pos <= qpos:
    # true on a prefix of the row). Tiles of 128 here take 3 stages, and one block walks the six row tiles, each role
    # counting the live tiles itself; "walk": four blocks taking them in a snake (0 … 3, then blocks 3 and 2 take 4
    # and 5)
    import importlib

    from redalgebra import evaluate, workloads
    from redalgebra.codegen.strategies import mma_policy

    if options.pop("walk", False):
        monkeypatch.setattr(mma_policy, "MOST_STAGES", 3)
        monkeypatch.setattr(importlib.import_module("redalgebra.runtime.launch"), "multiprocessors", lambda cuda: 4)

    rng = np.random.default_rng(4)
    R = L = 170
    inputs = {x: rng.normal(size=(1, L, 16)).astype(np.float16) for x in ("k", "v")}
    params = {"q": rng.normal(size=(R, 16)).astype(np.float16).astype(np.float32), "scale": np.float32(0.25),
              "slope": np.float32(0.3), "qpos": np.arange(R, dtype=np.float32)}
    wide = {k_: np.repeat(v_.astype(np.float64), R, 0) for k_, v_ in inputs.items()}
    ref = evaluate(workloads.get("alibi_attention").cascade, wide, params)["y"]
    inputs["v"][0, 128:] = np.nan
    # (four segments of three tiles of 64: one, one, one partial and none)
    kernel = compile(fused("alibi_attention"), "cudasim", "wgmma", threads=96, **options)
    walking = "tile" in options  # (the query then given in float16: each next row tile's copied ahead, the snake's)
    q = params["q"].astype(np.float16) if walking else params["q"]
    out = kernel(inputs, {**params, "q": q})["y"]
    chosen = kernel.spec_for(R, L, {"k": "float16", "v": "float16", "q": q.dtype.name}, {"d": 16},
                             reps={"k": R, "v": R})[1]
    assert chosen.persistent == walking and chosen.stages == (3 if walking else 4)
    copies = sum(ln.strip().startswith("cp_async16_at(sm, ") and ", q, " in ln
                 for ln in kernel.source(chosen, "wgmma").source.splitlines())
    assert copies == (2 * 16 * 2 // 32 if walking else 0)  # (16 rows of two chunks a warp, twice)
    assert np.isnan(out[128:]).all() and np.isfinite(out[:128]).all()
    err = np.abs(out - ref)[:128].max() / np.abs(ref[:128]).max()
    assert err <= TOLERANCE["float16"] + STORE_ROUNDING["float16"], err


def test_the_fast_exponential_by_a_fused_multiply_add_in_the_simulator():
    # exp(s - m) printed as ex2(fma32(s, LOG2E, -m·log2 e)) where the kernel takes the fast exponential (the CUDA
    # default): run here on the instructions' stand-ins (compile takes fast_exp on CUDA only: the option set on the
    # kernel directly) — one warpgroup and the producer block (MLA's column groups, whose floors are per group, in
    # test_wide_vector_sums_split_across_two_warpgroups_with_segments)
    import dataclasses

    inputs, params, keep = _problem("attention", 1, 40, 200, 16, "float16", True, False)  # (three tiles and 8 keys)
    wide = {k_: np.repeat(v_.astype(np.float64), 40, 0) for k_, v_ in inputs.items()}
    from redalgebra import evaluate, workloads

    ref = evaluate(workloads.get("attention").cascade, wide, params, keep)["y"]
    fin = np.isfinite(ref)
    for options in ({}, {"threads": 96}):
        kernel = dataclasses.replace(compile(fused("attention"), "cudasim", "wgmma", **options), fast_exp=True)
        out = kernel(inputs, params, keep)["y"]
        assert "ex2(fma32(" in next(iter(kernel._compiled.values()))[0].source
        assert np.array_equal(np.isnan(out), np.isnan(ref))
        tol = TOLERANCE["float16"] + STORE_ROUNDING["float16"]
        assert np.abs(out - ref)[fin].max() <= tol * np.abs(ref[fin]).max()


def test_a_walking_warpgroup_stages_only_the_query_rows_it_reads_itself(monkeypatch):
    # nothing orders the two consumer warpgroups between one row tile's last products and the next row tile's vote,
    # and on the GPU a wgmma reads its operands after it is issued: a warpgroup that staged the other's rows of the
    # next row tile could overwrite them while the other's products still read them. Here the second consumer's
    # products stay in flight longer (each of its wgmma steps delayed while its reads are recorded): with a 16-bit
    # query the next row tile's rows are copied by cp.async, which the simulator refuses into rows a group in flight
    # reads; a float32 query's rows are stored by each warp too (its loads index the warp's own rows)
    import threading
    import time

    from redalgebra.runtime import sim_async

    reads = sim_async._sim_reads

    def late():
        state = reads()
        if threading.current_thread().thread_id // 32 == 1 and (state.open or state.groups):
            time.sleep(0.2)  # (the second consumer warp, with products in flight)
        return state
    monkeypatch.setattr(sim_async, "_sim_reads", late)
    rng = np.random.default_rng(7)
    R, L, d = 64, 40, 32  # (d = 32: a block-wide mapping would give each warp rows of both warps)
    inputs = {x: rng.normal(size=(1, L, d)).astype(np.float16) for x in ("k", "v")}
    kernel = compile(fused("attention"), "cudasim", "wgmma", threads=96)
    for q in (rng.normal(size=(R, d)).astype(np.float16), (rng.normal(size=(R, d)) * 30).astype(np.float32)):
        params = {"q": q, "scale": np.float32(0.25)}
        spec = kernel.spec_for(R, L, {"k": "float16", "v": "float16", "q": q.dtype.name}, {"d": d},
                               reps={"k": R, "v": R})[1]
        assert spec.persistent
        loads = [ln for ln in kernel.source(spec, "wgmma").source.splitlines() if "q, min(" in ln and "gen_qr" in ln]
        assert loads and all("16 * warp + gen_qr" in ln for ln in loads)
        if q.dtype == np.float16:  # (the float32 query's plain stores are not tracked: its loads' rows said above)
            _assert_close(kernel(inputs, params)["y"], _reference_of_attention(inputs, params, R))


def _reference_of_attention(inputs, params, rows):
    from redalgebra import evaluate, workloads

    wide = {k: np.repeat(v.astype(np.float64), rows, 0) for k, v in inputs.items()}
    return evaluate(workloads.get("attention").cascade, wide, params)["y"]
