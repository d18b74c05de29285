"""The rows strategy in the CUDA simulator: every scalar-element cascade, every dtype, odd lengths, passes."""

import numpy as np
import pytest

from redalgebra import RedalgebraError, derive, evaluate, parse, workloads
from redalgebra.runtime import compile
from redalgebra.runtime.check import check
from redalgebra.runtime.choice import choose
from redalgebra.runtime.formats import as_bfloat16, e4m3_to_float, to_float
from tests.catalogue import FUSABLE, fused

# (the catalogue's inputs, not derive's: derived at collection, every fusable cascade cost each worker 7 s)
SCALAR = [n for n in FUSABLE if not any(s.size for s in workloads.get(n).cascade.inputs)]
FP8_QUANT = """\
input x
reduce a = max(abs(x))
out q = fp8(x * 448 / max(a, 1e-12))
out s = max(a, 1e-12) / 448
"""


@pytest.mark.parametrize("name", ["safe_softmax", "cross_entropy", "softmax_entropy"])
def test_rows_matches_the_reference_in_every_input_dtype(name):
    # every scalar cascade runs rows under auto (test_kernels, float32 and bfloat16, L = 37 and 1); here rows of
    # 130 (two partial chunks) and float16, which differs from bfloat16 only in the loads and stores, on a
    # per-element output (softmax), positions (cross-entropy) and multi-term partial sums (entropy)
    dtypes = ("float32", "bfloat16", "float16") if name == "safe_softmax" else ("float32", "bfloat16")
    results = check(fused(name), "cudasim", "rows", shapes=((2, 130),), dtypes=dtypes)
    assert all(r.passed for r in results), "\n".join(r.line() for r in results)


def test_every_scalar_cascade_runs_rows_under_auto():
    assert all(choose(fused(n), 64, 4096) == "rows" for n in SCALAR)


def test_rows_longer_than_the_registers_are_walked_in_passes_and_read_twice():
    # 4 threads of 1 chunk each hold 16 of 131 elements: the row is folded in passes, merged by the derived merge
    results = check(fused("safe_softmax"), "cudasim", "rows", shapes=((3, 131),), dtypes=("float32", "bfloat16"),
                    group=4, tile=1, threads=32)
    assert all(r.passed for r in results), "\n".join(r.line() for r in results)
    kernel = compile(fused("safe_softmax"), "cudasim", "rows", group=4, tile=1, threads=32)
    src = kernel.source(kernel._layout({"x": np.zeros((3, 131), np.float32)}, {}, None)[0], "rows").source
    assert "for base in range(0, nch, 4):" in src


def test_inputs_only_the_outputs_read_are_loaded_for_the_outputs_and_fewer_chunks_at_once_in_passes():
    # LayerNorm's weight and bias enter its output only: over a resident row they are loaded after the reductions (not
    # held in registers through them), and over a row read in passes its outputs' walk takes 2 chunks of its 3 inputs
    # a thread at once where the reductions take 8 (96 float32 a thread at once spilled 732 bytes at 64 registers)
    f = fused("layernorm")
    for length, options, step in ((40, dict(group=16, threads=32), None),
                                  (1001, dict(group=8, tile=8, threads=32), ("8 * 8", "8 * 2"))):
        kernel = compile(f, "cudasim", "rows", **options)
        inputs = {n: np.zeros((3, length), np.float32) for n in "xgb"}
        spec = kernel._layout(inputs, {"eps": 1e-5}, None)[0]
        src = kernel.source(spec, "rows").source
        if step is None:
            assert spec.resident
            assert src.index("ld_f32x4(g,") > src.rindex("shfl") > src.index("ld_f32x4(x,")
        else:
            assert not spec.resident and spec.tile == 8
            assert [f"for base in range(0, nch, {eval(s)}):" in src for s in step] == [True, True]
        results = check(f, "cudasim", "rows", shapes=((3, length), (2, 1)), dtypes=("float32", "bfloat16"), **options)
        assert all(r.passed for r in results), "\n".join(r.line() for r in results)


def test_a_block_of_less_than_a_warp_is_refused_by_name():
    # every shuffle names the whole warp: a block of 8 threads left the top-k's NaN flag OR-ed over lanes it does not
    # have (an IndexError deep in the simulator; undefined on the GPU)
    kernel = compile(derive(parse(TOPK.format(k=4))), "cudasim", "rows", group=8, threads=8)
    with pytest.raises(RedalgebraError, match="whole warps"):
        kernel({"g": np.zeros((2, 20), np.float32)})


def test_fp8_outputs_are_e4m3_bytes_that_decode_to_the_reference():
    # the bytes wrapped as E4M3 (as bfloat16 outputs are as BFloat16): NumPy reads the values, as the CPU returns them
    from redalgebra.runtime.formats import E4M3

    f = derive(parse(FP8_QUANT))
    x = np.random.default_rng(1).normal(size=(5, 67)).astype(np.float32)
    out = compile(f, "cudasim", "rows")({"x": x})
    assert isinstance(out["q"], E4M3) and out["q"].bits.dtype == np.uint8 and out["s"].dtype == np.float32
    np.testing.assert_array_equal(np.asarray(out["q"]), compile(f, "cpu")({"x": x})["q"])
    scale = np.abs(x).max(axis=1, keepdims=True) / 448
    want = np.clip(x / scale, -448, 448)
    got = e4m3_to_float(out["q"].bits)
    assert np.all(np.abs(got - want) <= np.abs(want) / 16 + 2.0 ** -9)  # half an e4m3 step (3 mantissa bits)
    assert np.allclose(out["s"][:, 0] if out["s"].ndim > 1 else out["s"], scale[:, 0], rtol=1e-6)
    # the codes from the row's final scale (rows computes the outputs after the whole row is reduced, resident or
    # walked in passes: 8 threads of one chunk hold 32 of 300): held to the float32 tolerance, not to the cast's
    # "exact in ℝ only" one
    results = check(f, "cudasim", "rows", shapes=((3, 37), (2, 1), (2, 300)), dtypes=("float32", "bfloat16"))
    results += check(f, "cudasim", "rows", shapes=((2, 300),), dtypes=("float32",), group=8, tile=1, threads=32)
    assert all(r.passed for r in results), "\n".join(r.line() for r in results)
    assert all(not r.note and r.tolerance < 1e-3 for r in results), "\n".join(r.line() for r in results)
    wide = compile(f, "cudasim", "rows", out_dtype="float32")({"x": x})
    assert wide["q"].dtype == np.float32


def test_a_cast_inside_a_reduction_rounds_at_the_final_scale_resident_or_in_passes():
    # a sum of fp8 codes rounds at a running absmax in the one-pass form (exact in the reals only), so rows stages it —
    # over the registers, or a pass over the row a reduction — and every code rounds at the row's final absmax: held to
    # float32's tolerance, no note (rows in passes folded it at running scales, held to the cast's tolerance), and
    # compile warns of no one-pass form
    import warnings

    from redalgebra.codegen.strategies import get
    from redalgebra.errors import ExactnessHint

    inside = derive(parse("input x\nreduce a = max(abs(x))\nreduce t = sum(fp8(x * 448 / max(a, 1e-12)))\nout y = t\n"))
    assert inside.exact_in_reals_only and get("rows").final(inside) and get("rows").final(derive(parse(FP8_QUANT)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ExactnessHint)
        kernel = compile(inside, "cudasim", "rows", group=4, tile=1, threads=32)
        spec = kernel._layout({"x": np.zeros((2, 130), np.float32)}, {}, None)[0]
        assert spec.staged and not spec.resident
        results = check(inside, "cudasim", "rows", shapes=((3, 37), (2, 130)), dtypes=("float32",), group=4, tile=1,
                        threads=32)
    assert all(r.passed and not r.note and r.tolerance < 1e-3 for r in results), "\n".join(r.line() for r in results)


def test_rows_refuses_elements_with_vectors_and_auto_sends_them_to_vrows():
    with pytest.raises(RedalgebraError, match="use vrows"):
        check(fused("decode_attention"), "cudasim", "rows", shapes=((2, 5),))
    assert choose(fused("attention"), 4096, 512) == "vrows"
    assert choose(fused("safe_softmax"), 8, 50257) == "rows"


@pytest.mark.parametrize("group,threads,length,dtype", [(16, 32, 200, "bfloat16"), (64, 64, 150, "float32")])
def test_top_k_is_selected_over_the_group_with_its_indices(group, threads, length, dtype):
    # staged reductions: softmax states all-reduced by their monoids, the top-8 chosen by 8 rounds of a
    # group-wide arg-max; a group of 64 crosses warps (shared memory), two groups of 16 share a block
    f = fused("moe_routing")
    kernel = compile(f, "cudasim", "rows", group=group, threads=threads)
    spec = kernel._layout({"g": np.zeros((3, length), np.float32)}, {}, None)[0]
    assert spec.staged and spec.resident
    assert "rt_topk_insert" not in kernel.source(spec, "rows").source.split("def kernel")[1]
    results = check(f, "cudasim", "rows", shapes=((2, length),), dtypes=(dtype,),
                    group=group, threads=threads)
    assert all(r.passed for r in results), "\n".join(r.line() for r in results)


@pytest.mark.parametrize("name,shared", [("safe_softmax", "exp(-s_m + e_x_"), ("moe_routing", "exp(e_g_")])
def test_staged_rows_compute_a_term_shared_with_later_expressions_once_per_element(name, shared):
    # softmax: exp(x - m) is l's body and y's numerator; the router: exp(g - m) is s's body and inside t's
    kernel = compile(fused(name), "cudasim", "rows")
    spec = kernel._layout({kernel.names[0][0]: np.zeros((3, 64), np.float32)}, {}, None)[0]
    body = kernel.source(spec, "rows").source.split("def kernel")[1]
    elements = spec.tile * spec.vec
    assert spec.staged and spec.resident
    assert body.count("exp(") == elements, body.count("exp(")  # one per register, nowhere else
    assert body.count(shared) == elements


def test_long_rows_with_nothing_written_per_element_run_in_small_blocks_walking_the_row():
    # a row read once either way: one 128-thread group per block, in passes; softmax (which writes every
    # element) keeps its row resident so that it is read once
    ce = compile(fused("cross_entropy"), "cuda")
    _, spec, _ = ce.spec_for(8192, 32000, {"x": "bfloat16"})
    assert (spec.group, spec.threads, spec.resident) == (128, 128, False)
    _, spec, _ = ce.spec_for(8192, 512, {"x": "bfloat16"})  # short rows: several per block, resident
    assert spec.group < 128 and spec.resident
    _, spec, _ = compile(fused("safe_softmax"), "cuda").spec_for(8192, 32000, {"x": "bfloat16"})
    assert spec.resident and spec.staged and spec.group == 1024


RMS = """\
input x
reduce s = sum(x * x)
out y = x / sqrt(s + 1e-6)
"""


def test_persistent_blocks_walk_every_row():
    # the simulator reports one multiprocessor: one block walks all 7 rows; groups of 64 meet through shared
    # memory (the RMS cascade has one reduction, so only the barrier closing each row keeps its box from being
    # refilled early); with two groups per block the last run holds a row past the end. On the H200,
    # compute-sanitizer found no race or memory error in these kernels (gpu/sanitize_persistent.py).
    f = derive(parse(RMS))
    kernel = compile(f, "cudasim", "rows", group=64, threads=128, persistent=True)
    spec = kernel._layout({"x": np.zeros((7, 100), np.float32)}, {}, None)[0]
    assert spec.persistent and "for run in range(cuda.blockIdx.x" in kernel.source(spec, "rows").source
    results = check(f, "cudasim", "rows", shapes=((7, 100),), group=64, threads=128, persistent=True)
    assert all(r.passed for r in results), "\n".join(r.line() for r in results)


def test_persistent_blocks_are_chosen_for_many_16_bit_rows_of_8_to_32_kb():
    softmax = compile(fused("safe_softmax"), "cuda")
    _, spec, _ = softmax.spec_for(32768, 8192, {"x": "bfloat16"})  # 16 KB rows: two chunks per thread
    assert spec.persistent and (spec.group, spec.threads, spec.tile, spec.min_blocks) == (512, 512, 2, 4)
    _, spec, _ = softmax.spec_for(65536, 4096, {"x": "float16"})  # 8 KB: a block of 256 per row, 8 blocks per SM
    assert spec.persistent and (spec.group, spec.threads, spec.tile, spec.min_blocks) == (256, 256, 2, 8)
    for rows, length, dtype in ((8192, 8192, "float32"), (65536, 1000, "bfloat16"), (64, 8192, "bfloat16"),
                                (4096, 32768, "bfloat16")):
        assert not softmax.spec_for(rows, length, {"x": dtype})[1].persistent  # float32; short; few rows; 64 KB
    forced = compile(fused("safe_softmax"), "cuda", group=256)  # the caller's launch shape is kept
    assert not forced.spec_for(32768, 8192, {"x": "bfloat16"})[1].persistent
    assert not compile(fused("logsumexp"), "cuda").spec_for(32768, 8192, {"x": "bfloat16"})[1].persistent
    # with more inputs than one (LayerNorm's weight and bias), 1024 threads a multiprocessor, 64 registers: at 32,
    # ptxas spilled 480 bytes a thread and the kernel ran 3.8 times slower
    layernorm = compile(fused("layernorm"), "cuda")
    _, spec, _ = layernorm.spec_for(16384, 4096, {n: "bfloat16" for n in "xgb"}, reps={"g": 16384, "b": 16384})
    assert spec.persistent and (spec.group, spec.threads, spec.tile, spec.min_blocks) == (256, 256, 2, 4)


@pytest.mark.parametrize("dtype,tile", [("float32", 4), ("bfloat16", 2)])
def test_rows_walked_in_passes_by_1024_threads_hold_16_values_a_thread(dtype, tile):
    # at 64 registers a thread, 32 values spilled; the residents and a caller's tile are kept
    softmax = compile(fused("safe_softmax"), "cuda")
    for length in (50257, 65536, 151936):
        _, spec, _ = softmax.spec_for(667, length, {"x": dtype})
        assert not spec.resident and (spec.threads, spec.group, spec.tile) == (1024, 1024, tile)
    _, spec, _ = softmax.spec_for(667, 32768, {"x": dtype})  # (held whole in the registers: 32 values a thread)
    assert spec.resident and (spec.threads, spec.tile) == (1024, 2 * tile)
    _, spec, _ = compile(fused("safe_softmax"), "cuda", tile=8).spec_for(667, 65536, {"x": dtype})
    assert spec.tile == 8
    # a top-k's rounds over the group: blocks of 512 holding twice the chunks, 32 values (128 registers a thread)
    _, spec, _ = compile(fused("moe_routing"), "cuda").spec_for(1024, 50257, {"g": dtype})
    assert not spec.resident and (spec.threads, spec.group, spec.tile) == (512, 512, {"float32": 8, "bfloat16": 4}[dtype])


def test_a_resident_row_beside_a_second_input_is_walked_in_passes_at_1024_threads():
    # LayerNorm's row held whole by 1024 threads (64 registers a thread) beside its weight and bias spilled 80-328
    # bytes a thread at 20-32 values (ptxas), and ran 1.54 times slower than in passes of 16 values on an H100
    layernorm = compile(fused("layernorm"), "cuda")
    for rows, length, dtype, tile in ((1024, 32768, "float32", 4), (1000, 20000, "float32", 4),
                                      (1024, 32768, "bfloat16", 2)):
        _, spec, _ = layernorm.spec_for(rows, length, {n: dtype for n in "xgb"}, reps={"g": rows, "b": rows})
        assert not spec.resident and (spec.threads, spec.group, spec.tile) == (1024, 1024, tile)
    # 16384 float32 values: blocks of 512 (128 registers a thread) hold the row; a caller's tile is kept
    _, spec, _ = layernorm.spec_for(1024, 16384, {n: "float32" for n in "xgb"}, reps={"g": 1024, "b": 1024})
    assert spec.resident and spec.threads == 512
    forced = compile(fused("layernorm"), "cuda", tile=8)
    assert forced.spec_for(1024, 32768, {n: "float32" for n in "xgb"}, reps={"g": 1024, "b": 1024})[1].resident


def test_a_thread_holds_as_many_chunks_as_its_share_of_the_row():
    # 257 float32 off the 16-byte grid: 66 chunks over 16 threads are 5 each, not 8
    _, spec, _ = compile(fused("safe_softmax"), "cuda").spec_for(65536, 257, {"x": "float32"})
    assert (spec.group, spec.tile) == (16, 5)


TOPK = "input g\nreduce t = topk({k}, g)\nout w = t\n"


@pytest.mark.parametrize("k,group,threads", [(8, 16, 32), (3, 64, 128), (17, 64, 64)])
def test_top_k_selection_breaks_ties_by_the_smaller_index_and_marks_missing_values(k, group, threads):
    # values drawn from 6 integers (ties everywhere), a row with one finite value (the rest -inf: index -1),
    # a row shorter than k: the k largest values, equal ones in increasing element index, as a stable sort
    # gives. Groups of 16 select by shuffles alone; groups of 64 by a warp's own rounds, then over the
    # group's warps x k candidates (2 groups a block: each reads its own); k = 17 (34 candidates: 2 a lane, the second guarded)
    f = derive(parse(TOPK.format(k=k)))
    kernel = compile(f, "cudasim", "rows", group=group, threads=threads)
    rng = np.random.default_rng(k)
    for length in ((150, 5) if k < 10 else (300,)):  # the simulator's shuffles are slow: one row length for k = 17
        g = rng.integers(-3, 3, size=(3, length)).astype(np.float32)
        g[1] = -np.inf
        g[1, length // 2] = 1.0
        if length == 300:  # float32, tile 2: warp 0 holds elements 0-127 and 256-299, warp 1 128-255; the
            g[2] = 0.0     # ties in warp 1 come first, so a lane's two candidates are out of index order
            g[2, 260:291] = g[2, 130:161] = 2.0
        out = kernel({"g": g})
        order = np.argsort(-g, axis=1, kind="stable")[:, :k]
        want = np.take_along_axis(g, order, axis=1)
        want = np.pad(want, ((0, 0), (0, k - want.shape[1])), constant_values=-np.inf)
        index = np.where(want == -np.inf, -1, np.pad(order, ((0, 0), (0, k - order.shape[1]))))
        np.testing.assert_array_equal(out["w"], want)
        np.testing.assert_array_equal(out["t.index"], index)


def test_a_router_read_in_passes_picks_each_element_once():
    # rows longer than the group's registers are read in passes, their top-k lists merged after the softmax's
    # rescaling, which can make unequal values tie: threads then hold the same top 8 in different orders, and
    # components written by different threads repeated an element (and dropped another). One thread writes
    # them now; check() refuses repeated indices.
    f = fused("moe_routing")
    kernel = compile(f, "cudasim", "rows")
    g = np.random.default_rng(0).integers(-4, 4, size=(1, 4096)).astype(np.float32)  # ties everywhere
    spec = kernel._layout({"g": as_bfloat16(g)}, {}, None)[0]
    assert not spec.resident
    index = kernel({"g": as_bfloat16(g)})["t.index"]
    for row, idx in zip(g, index):
        assert len(set(idx.tolist())) == 8 and (row[idx] == row.max()).all(), idx


@pytest.mark.parametrize("k,group,threads", [(4, 64, 64), (11, 16, 32)])
def test_top_k_selection_ranks_nan_above_every_number_as_the_reference(k, group, threads):
    # a NaN never compares greater or equal: unless the order says where it goes, the lanes of a row holding one
    # end the butterfly with different winners. NaN ranks first (by index), then the numbers; a row holding more
    # NaNs than k selects NaNs only. Rows with a NaN take the selection's second copy of its later rounds
    # (unrolled; for k = 11 of 12 values a lane, a loop)
    f = derive(parse(TOPK.format(k=k)))
    kernel = compile(f, "cudasim", "rows", group=group, threads=threads)
    g = np.random.default_rng(3).standard_normal((3, 150)).astype(np.float32)
    g[0, [5, 128, 149]] = np.nan  # 128: the first register of the lane that parks its warp's list
    g[1, :140] = np.nan  # more NaNs than k
    g[2, 77] = np.nan  # one NaN, then three numbers
    out = kernel({"g": g})
    want = evaluate(f.cascade, {"g": g.astype(np.float64)}, {})
    np.testing.assert_array_equal(out["t.index"], want["t.index"])
    np.testing.assert_array_equal(out["w"], np.asarray(want["w"], np.float32).reshape(out["w"].shape))


def test_long_selections_are_a_loop_of_rounds():
    # beyond k x a lane's values = 128 the rounds after the first are a loop (the row's list indexed at run time)
    from redalgebra.codegen import generate

    text = workloads.get("moe_routing").text
    for k, looped in ((8, False), (16, True)):
        f = derive(parse(text.replace("topk(8,", f"topk({k},")))
        strategy, spec, _ = compile(f, "cuda").spec_for(4096, 4096, dtypes={"g": "bfloat16"})
        assert (spec.tile * spec.vec, strategy) == (16, "rows")
        assert (f"for j in range(1, {k}):" in generate(f, "cuda", strategy, spec).source) == looped


def _walk_depth(source: str) -> int:
    """How deep numba's recursive walk of the kernel's blocks goes (``CFGraph._find_topo_order``: a Python frame
    a block, depth first, back edges left out), from numba's IR of the generated kernel."""
    from numba.core.analysis import compute_cfg_from_blocks
    from numba.core.compiler import run_frontend

    from redalgebra.runtime.cache import load

    cfg = compute_cfg_from_blocks(run_frontend(load(source).kernel.py_func).blocks)
    succs, back, entry = cfg._succs, cfg._back_edges, cfg.entry_point()
    seen, path, deepest = {entry}, [(entry, iter(succs[entry]))], 1
    while path:
        node, rest = path[-1]
        dest = next((d for d in rest if d not in seen and (node, d) not in back), None)
        if dest is None:
            path.pop()
            continue
        seen.add(dest)
        path.append((dest, iter(succs[dest])))
        deepest = max(deepest, len(path))
    return deepest


@pytest.mark.parametrize("name,k,length", [("topk", 8, 4096), ("moe_routing", 8, 4096), ("topk", 40, 1000),
                                           ("moe_routing", 64, 257)])
def test_top_k_kernels_stay_shallow_for_numbas_recursive_walk_of_their_blocks(name, k, length):
    # numba's compiler walks a kernel's blocks recursively, a Python frame a block on the path. Comparisons
    # written as branches (a block per operand of ``or``/``and``) made the top-8 of 4096 bfloat16 values a walk
    # 864 deep under Python 3.11, and the same source went 981 deep under 3.12, past its limit of 1000 frames
    # (RecursionError); 824 for the router, 1219 for a top-40 of 1000 (past the limit under 3.11 too); and a
    # router's weights t / sum(t) summed the list again for each of its k components (391 deep for k = 64 with
    # the comparisons already selects). As selects, the list summed once: 87 to 135.
    from redalgebra.codegen import generate

    text = TOPK.format(k=k) if name == "topk" else workloads.get(name).text.replace("topk(8,", f"topk({k},")
    f = derive(parse(text))
    strategy, spec, _ = compile(f, "cuda").spec_for(4096, length, dtypes={"g": "bfloat16"})
    assert strategy == "rows" and spec.staged
    assert _walk_depth(generate(f, "cuda", strategy, spec).source) <= 300


def test_a_rows_index_is_divided_in_32_bits_below_two_to_the_31_rows_and_in_64_from_there():
    # numba's 64-bit division is a subroutine call of some hundred instructions a thread: kept only where a row's
    # index needs it (a call of 2**31 rows or more; built here, not run)
    from redalgebra import workloads
    import redalgebra as ra

    kernel = ra.compile(ra.derive(workloads.get("safe_softmax").cascade), "cudasim", "rows")
    for rows, wide in ((4096, False), (2 ** 31 + 1000, True)):
        strategy, spec, _ = kernel.spec_for(rows, 16, {"x": "float16"}, {})
        source = kernel.source(spec, strategy).source
        assert spec.wide_rows == wide
        assert ("rr_x = row // rep_x" in source) == wide
        assert ("rr_x = int32(uint32(row) // uint32(rep_x))" in source) == (not wide)


def test_a_router_read_in_passes_runs_the_level_order_and_selects_what_the_reference_selects():
    # the one-pass form ranks values the reference ranks equal (equal logits, to the lower index) by the rounding of
    # their corrections, and that form is all a single pass has. A row too long for the registers is read in a pass
    # per reduction instead (m, then s, then the top-8 of exp(g - m) / s with both final): the reference's indices
    # exactly, over ties and NaNs, and no warning. (A row all -inf, whose max sits at its identity, selects nothing, as
    # the resident row does: the fused kernels take it as empty, the reference's exp(-inf - -inf) is NaN everywhere)
    import warnings

    from redalgebra.errors import ExactnessHint

    f = fused("moe_routing")
    kernel = compile(f, "cudasim")
    rng = np.random.default_rng(0)
    g = rng.integers(-4, 4, size=(4, 3000)).astype(np.float32)  # ties everywhere
    g[1] = rng.standard_normal(3000)
    g[2, [5, 700, 2999]] = np.nan
    g[3] = -np.inf
    spec = kernel._layout({"g": g}, {}, None)[0]
    assert spec.staged and not spec.resident
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = kernel({"g": g})
    assert not [w for w in seen if issubclass(w.category, ExactnessHint)]
    want = evaluate(f, {"g": g[:3].astype(np.float64)})
    np.testing.assert_array_equal(out["t.index"][:3], want["t.index"])
    np.testing.assert_allclose(to_float(out["w"][:3]), np.asarray(want["w"]).reshape(3, 8), rtol=1e-6)
    resident = kernel({"g": g[3:, :100]})
    np.testing.assert_array_equal(out["t.index"][3], resident["t.index"][0])


def test_a_warp_of_several_rows_takes_the_nan_order_for_all_of_them_where_one_holds_a_nan():
    # groups of 8 lanes: four rows a warp. The later rounds' two copies hold shuffles, whose lanes must all execute the
    # same one, so the choice is the warp's (its rows' flags OR-ed), not the row's: rows without a NaN beside one with
    # a NaN go through the NaN order too, and give what they give alone
    from redalgebra.codegen import generate

    f = derive(parse(TOPK.format(k=3)))
    kernel = compile(f, "cudasim", "rows", group=8, threads=32)
    strategy, spec, _ = kernel.spec_for(8, 20, {"g": "float32"})
    assert spec.staged and spec.group == 8
    source = generate(f, "cuda", strategy, spec).source
    assert source.count("bnan | onan") == 2  # offsets 8 and 16
    g = np.random.default_rng(5).integers(-3, 3, size=(8, 20)).astype(np.float32)  # ties
    g[1, [4, 17]] = np.nan  # warp 0: rows 0-3, one with NaNs
    g[6, :] = np.nan  # warp 1: rows 4-7, one all NaN
    out = kernel({"g": g})
    want = evaluate(f.cascade, {"g": g.astype(np.float64)}, {})
    np.testing.assert_array_equal(out["t.index"], want["t.index"])
    np.testing.assert_array_equal(out["w"], np.asarray(want["w"], np.float32).reshape(out["w"].shape))


def test_a_vector_reduction_that_derive_made_a_let_stays_so_in_the_staged_kernel():
    # sum(exp(x - m) * q) is q * sum(exp(x - m)) once derived: the rewritten cascade's reductions are scalars, so the
    # row is staged, but the cascade as written has the vector reduction, which the staged kernel cannot reduce (it
    # failed: "setting an array element with a sequence"); it keeps the derived form there
    f = derive(parse("input x\nparam q[d]\nreduce m = max(x)\nreduce v = sum(exp(x - m) * q)\nout z = v\n"))
    x = np.random.default_rng(2).standard_normal((3, 40)).astype(np.float32)
    q = np.random.default_rng(3).standard_normal(4).astype(np.float32)
    kernel = compile(f, "cudasim", "rows")
    assert kernel.spec_for(3, 40, {"x": "float32"}, {"d": 4})[1].staged
    want = evaluate(f.source, {"x": x.astype(np.float64)}, {"q": q.astype(np.float64)})["z"]
    np.testing.assert_allclose(kernel({"x": x}, {"q": q})["z"], np.asarray(want).reshape(3, 4), rtol=1e-5)
