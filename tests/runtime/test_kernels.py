"""Every catalogue cascade, every strategy: generated kernels against the float64 reference."""

import numpy as np
import pytest

from redalgebra import EvaluationError, RedalgebraError, analyze, derive, evaluate, parse, workloads
from redalgebra.codegen import Spec, generate
from redalgebra.runtime import compile
from redalgebra.runtime.check import check, compare
from tests.catalogue import FUSABLE, fused


#: Built as users get them (``njit(parallel=True)``, three times the serial build's compile time) on a sample of the
#: catalogue's kinds: per-element outputs, a label's position, a gate by position (where), a vector sum over a dot
#: product, two vector inputs of different lengths, a top-k, an FP8 cast, several vector sums after a centred one, a
#: multi-term sum; the rest serial (the same loop bodies, ``prange`` as ``range``)
PARALLEL = ("safe_softmax", "cross_entropy", "alibi_attention", "attention", "mla_decode", "moe_routing",
            "fp8_quant_gemm", "layernorm_gemm", "softmax_entropy")


@pytest.mark.parametrize("name", FUSABLE)
def test_cpu_kernels_match_the_reference(name, monkeypatch):
    monkeypatch.setenv("REDALGEBRA_CPU_PARALLEL", "1" if name in PARALLEL else "0")
    # float16 inputs are widened on the host (numba's CPU target has no float16 arrays) and bfloat16 patterns
    # decoded by one helper per element: only their rounding differs from float32's, the same for any cascade,
    # so softmax alone runs them (the simulated and GPU kernels, whose loads differ per dtype, run every one)
    dtypes = ("float32", "float16", "bfloat16") if name == "safe_softmax" else ("float32",)
    results = check(fused(name), "cpu", dtypes=dtypes)
    assert all(r.passed for r in results), "\n".join(r.line() for r in results)


DISTINCT = [n for i, n in enumerate(FUSABLE)  # decode_attention is attention's text
            if workloads.get(n).text not in {workloads.get(m).text for m in FUSABLE[:i]}]


@pytest.mark.parametrize("name", DISTINCT)
def test_simulated_default_kernels_match_the_reference(name):
    # what a CUDA user gets: auto (rows, vrows or columns), every distinct cascade. Scalar elements in bfloat16 too
    # (the rows kernels' 128-bit loads of 8 elements, shifted first chunks at L = 37; test_rows covers their other
    # paths); vector elements (vrows: an OS thread per lane and a shuffle as two barriers in the simulator) on a
    # shorter row, in float32 (test_vrows runs their dtypes and vector lengths)
    vectors = any(s.size for s in fused(name).cascade.inputs)
    results = check(fused(name), "cudasim", "auto", shapes=((2, 19), (2, 1)) if vectors else ((3, 37), (2, 1)),
                    dtypes=("float32",) if vectors else ("float32", "bfloat16"))
    assert all(r.passed for r in results), "\n".join(r.line() for r in results)


# The first-generation strategies, each on the cascades that reach every kind of code they print: vectors with a dot
# product and exp (decode attention), a top-k (the router), fp8 rounding of a vector sum (FP8 + GEMM), positions and
# an integer param (cross-entropy), multi-term partial sums with a count and Chan's merge (LayerNorm + GEMM, softmax
# entropy). Not "thread": its body is the CPU row kernel's (codegen/kernels.py, _body_thread and _body_row), checked
# on every cascade above, its CUDA printing by the others here, and its PTX by test_ptx.
LEGACY_SAMPLE = ("decode_attention", "moe_routing", "fp8_quant_gemm", "cross_entropy", "layernorm_gemm",
                 "softmax_entropy")


@pytest.mark.parametrize("strategy", ["block_shared", "tile", "nonincremental", "split", "unfused", "lanes",
                                      "split_lanes"])
@pytest.mark.parametrize("name", LEGACY_SAMPLE)
def test_simulated_cuda_kernels_match_the_reference(name, strategy):
    # the lanes family simulates a warp per element (an OS thread per lane): a shorter row keeps it to
    # seconds; odd vector sizes, partial slots and segments have their own test below
    shapes = ((2, 19), (2, 1)) if strategy.endswith("lanes") else ((3, 37), (2, 1))
    results = check(fused(name), "cudasim", strategy, shapes=shapes)
    assert all(r.passed for r in results), "\n".join(r.line() for r in results)


@pytest.mark.parametrize("strategy", ["block_shared", "tile", "tile_shared", "nonincremental", "split",
                                      "split_shared", "unfused", "lanes", "lanes_shared", "split_lanes",
                                      "split_lanes_shared"])
def test_vector_reductions_alone_or_before_a_scalar_one_and_row_outputs_summing_a_vector(strategy):
    # (the catalogue's cascades hold scalar reductions, and attention sums l before o): a cascade of vector reductions
    # alone printed an `if` with no body (tile, split); a vector fold's name stayed bound as a vector for the scalar
    # fold after it (tile, lanes, nonincremental: "the vector __fold is used where a scalar is needed"); a row output
    # summing a vector the lanes hold in parts called the lanes' collective sum from thread 0 alone (lanes: NaN on the
    # simulator, undefined on the GPU), and the split lanes' combine kernel had no place for it
    texts = ["input v[e]\nreduce o = sum(v)\nreduce n = max(abs(v))\nout w = sum(o)\nout u = n",
             "input x\ninput v[e]\nreduce m = max(x)\nreduce o = sum(exp(x - m) * v)\nreduce l = sum(exp(x - m))\n"
             "out y = o / l\nout t = sum(o) / l"]
    rng = np.random.default_rng(7)
    for text in texts:
        f = derive(parse(text))
        inputs = {s.name: rng.standard_normal((2, 5, 3) if s.size else (2, 5)).astype(np.float32)
                  for s in f.cascade.inputs}
        want = evaluate(f.cascade, {k: v.astype(np.float64) for k, v in inputs.items()})
        got = compile(f, "cudasim", strategy)(inputs)
        for name in got:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=f"{strategy} {name}")


def test_the_legacy_sample_reaches_every_kind_of_cascade():
    texts = [fused(n).cascade for n in LEGACY_SAMPLE]
    assert set(LEGACY_SAMPLE) <= set(FUSABLE)
    assert any(r.monoid.k for c in texts for r in c.reductions)                      # top-k
    assert any(s.size for c in texts for s in c.inputs)                              # vectors
    assert any(p.integer for c in texts for p in c.params)                           # positions, an integer param
    assert any(fused(n).exact_in_reals_only for n in LEGACY_SAMPLE)                  # fp8
    assert any(r.terms for n in LEGACY_SAMPLE for r in analyze(workloads.get(n).cascade).reductions)  # multi-term


def test_the_check_itself_fails_on_a_wrong_kernel(monkeypatch):
    """Guard the guard: a kernel whose output is perturbed must not pass."""
    import sys

    compile_module = sys.modules["redalgebra.runtime.compile"]

    original = compile_module.Kernel.__call__

    def wrong(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        return {k: (v * 1.01 if not k.endswith(".index") else v) for k, v in out.items()}

    monkeypatch.setattr(compile_module.Kernel, "__call__", wrong)
    assert not any(r.passed for r in check(fused("safe_softmax"), "cpu"))


def test_inputs_shared_across_rows_and_device_style_params():
    """MLA: every head reads one latent KV; the KV array has fewer rows than there are cascades."""
    f = fused("mla_decode")
    rng = np.random.default_rng(0)
    heads, length = 4, 33
    c = rng.normal(size=(1, length, 16)).astype(np.float32)
    kr = rng.normal(size=(1, length, 4)).astype(np.float32)
    qc, qr = rng.normal(size=(heads, 16)).astype(np.float32), rng.normal(size=(heads, 4)).astype(np.float32)
    out = compile(f, "cpu")({"c": c, "kr": kr}, {"qc": qc, "qr": qr, "scale": 0.25})["y"]
    s = (np.einsum("hr,lr->hl", qc, c[0]) + np.einsum("he,le->hl", qr, kr[0])) * 0.25
    p = np.exp(s - s.max(1, keepdims=True))
    np.testing.assert_allclose(out, (p / p.sum(1, keepdims=True)) @ c[0], rtol=1e-4, atol=1e-6)


def test_bad_calls_get_clear_errors():
    f = fused("attention")
    with pytest.raises(RedalgebraError, match="unknown back end"):
        compile(f, "tpu")
    with pytest.raises(RedalgebraError, match="not available on cpu"):
        compile(f, "cpu", "warp")
    k = compile(f, "cpu")
    with pytest.raises(RedalgebraError, match="no value given"):
        k({"k": np.zeros((1, 2, 3), np.float32)}, {})
    with pytest.raises(RedalgebraError, match="v has size 4 but d = 3"):
        k({"k": np.zeros((1, 2, 3), np.float32), "v": np.zeros((1, 2, 4), np.float32)},
          {"q": np.zeros(3), "scale": 1.0})
    with pytest.raises(RedalgebraError, match="float32, float16, bfloat16 bit patterns"):
        k({"k": np.zeros((1, 2, 3), np.int64), "v": np.zeros((1, 2, 3), np.float32)},
          {"q": np.zeros(3), "scale": 1.0})


def test_tile_strategy_on_rows_longer_than_the_registers_hold():
    """More than THREADS * 32 elements: the row is processed in chunks and read again for the outputs."""
    results = check(fused("safe_softmax"), "cudasim", "tile", shapes=((2, 1100),))
    assert results[0].strategy == "tile_shared" and all(r.passed for r in results), results[0].line()


def test_nonincremental_fp8_rounds_at_the_final_scale_like_the_unfused_form():
    results = check(fused("fp8_quant_gemm"), "cudasim", "nonincremental", shapes=((3, 40),))
    assert results[0].tolerance == 1e-4 and results[0].passed, results[0].line()


def test_nonincremental_refuses_rows_that_do_not_fit_on_chip():
    with pytest.raises(RedalgebraError, match="a row of 20000 elements staged .* do not fit in shared memory"):
        check(fused("safe_softmax"), "cudasim", "nonincremental", shapes=((1, 20000),))


def test_every_bfloat16_bit_pattern_is_decoded_like_the_host():
    from redalgebra import parse
    from redalgebra.derive import derive
    from redalgebra.runtime import as_bfloat16
    from redalgebra.runtime.formats import bfloat16_to_float

    bits = np.arange(2**16, dtype=np.uint16).reshape(-1, 1)
    f = derive(parse("input x\nreduce s = sum(x)\nout y = s"))
    got = compile(f, "cpu")({"x": as_bfloat16(bits)})["y"]
    np.testing.assert_array_equal(got, bfloat16_to_float(bits)[:, 0])


def test_bfloat16_inputs_on_the_simulator():
    results = check(fused("moe_routing"), "cudasim", "tile", shapes=((3, 37),), dtypes=("bfloat16",))
    assert results[0].passed, results[0].line()


def test_lanes_split_vectors_across_lanes_at_odd_sizes_and_explicit_segments():
    # 40 = one full slot and a partial one per lane; 3 segments of a 23-long row; 2 warps per block
    partial = {"d": 40, "e": 8, "n": 40, "r": 40}
    whole = {"d": 64, "e": 32, "n": 64, "r": 64}  # every slot full: the generated loops have no guards
    for name, strategy, options, sizes in (("mla_decode", "lanes", {"threads": 64, "tile": 2}, partial),
                                           ("mla_decode", "split_lanes", {"threads": 64, "segments": 3}, partial),
                                           ("decode_attention", "lanes", {"threads": 64}, whole)):
        results = check(fused(name), "cudasim", strategy, shapes=((2, 23),), sizes=sizes, **options)
        assert all(r.passed for r in results), "\n".join(r.line() for r in results)


def test_lanes_and_fast_exp_options_are_checked():
    f = fused("safe_softmax")
    with pytest.raises(RedalgebraError, match="fast_exp"):
        compile(f, "cudasim", "lanes", fast_exp=True)
    with pytest.raises(RedalgebraError, match="power of two"):
        compile(f, "cudasim", "lanes", tile=3)
    with pytest.raises(RedalgebraError, match="segments"):
        compile(f, "cudasim", "split_lanes", segments=0)
    probs = derive(parse("input k[d]\nparam q[d]\nlet s = dot(q, k)\nreduce m = max(s)\n"
                         "reduce l = sum(exp(s - m))\nout p = exp(s - m) / l\n"))
    with pytest.raises(RedalgebraError, match="per-element outputs"):
        generate(probs, "cuda", "lanes", Spec((("d", 8),)))


def test_compare_holds_infinite_references_exactly():
    # an empty row's max is -inf in the reference: a kernel giving a finite number there is wrong
    want = {"m": np.array([[1.0], [-np.inf]])}
    errors, ok = compare({"m": np.array([[1.0], [-np.inf]])}, want)
    assert ok and errors["m"] == 0.0
    errors, ok = compare({"m": np.array([[1.0], [-3e38]])}, want)
    assert not ok and errors["m"] == "inf mismatch"


def test_compare_takes_ties_broken_either_way_but_not_an_element_picked_twice():
    values = {"t": np.array([[3.0, 3.0, 3.0, 1.0]])}
    want = {"t": np.array([[3.0, 3.0]]), "t.index": np.array([[0, 1]])}
    errors, ok = compare({"t": np.array([[3.0, 3.0]]), "t.index": np.array([[2, 0]])}, want, values)
    assert ok and errors["t.index"] == "ties"
    errors, ok = compare({"t": np.array([[3.0, 3.0]]), "t.index": np.array([[2, 2]])}, want, values)
    assert not ok and errors["t.index"] == "differ"


@pytest.mark.parametrize("strategy,first", [("warp", "lane"), ("block", "tid")])
def test_one_thread_writes_a_top_k_but_the_row_stays_spread_over_the_threads(strategy, first):
    # a top-k's components come from one thread (threads may hold its list in different orders); the per-element
    # outputs of the same cascade are still written by every thread in turn, not by each thread whole
    f = derive(parse("input g\nreduce m = max(g)\nreduce t = topk(2, g)\nout y = g - m\nout w = t\n"))
    src = generate(f, "cuda", strategy, Spec()).source
    assert "for j in range(0, K_t, 1):" in src
    assert f"for l in range({first}, length," in src and "for l in range(0, length, 1)" not in src


def test_a_call_signature_is_laid_out_once_and_a_new_shape_gets_its_own_plan():
    k = compile(fused("safe_softmax"), "cpu")
    rng = np.random.default_rng(0)
    for _ in range(3):
        k({"x": rng.normal(size=(4, 33)).astype(np.float32)})
    assert len(k._plans) == 1
    y = k({"x": rng.normal(size=(2, 7)).astype(np.float32)})["y"]
    assert len(k._plans) == 2 and y.shape == (2, 7)
    with pytest.raises(EvaluationError, match="no value given"):  # a refused call is not planned
        k({})
    assert len(k._plans) == 2


def test_check_draws_params_with_their_declared_signs_and_either_sign_otherwise():
    from redalgebra.runtime.check import random_problem

    f = derive(parse("input x\nparam a < 0\nparam b >= 0\nparam c\nreduce s = sum(x * a * b * c)\nout y = s\n", "signs"))
    rng = np.random.default_rng(0)
    draws = [random_problem(f, 2, 5, rng)[1] for _ in range(40)]
    assert all(d["a"] < 0 and d["b"] >= 0 for d in draws)
    assert min(d["c"] for d in draws) < 0 < max(d["c"] for d in draws)


def test_check_refuses_a_cascade_with_nothing_to_compare():
    with pytest.raises(RedalgebraError, match="nothing to compare"):
        check(derive(parse("input x\nreduce m = max(x)\n", "no_out")), "cpu")


def test_cascades_that_do_not_fuse_run_unfused_and_only_unfused():
    # the baseline of one kernel per reduction needs no fused form: it runs the mean absolute deviation (not
    # separable) and (x - m)**6 (refused: float32 would cancel its power sums), checked against the reference
    from redalgebra.derive import unfused
    from redalgebra.errors import NotFusableError

    for text, shapes in (("input x\nparam n > 0\nreduce s = sum(x)\nreduce d = sum(abs(x - s / n))\nout y = d",
                          ((3, 37),)),
                         # with mean: its reductions mu_sum and mu_count are renamed for the kernels (mu_ is taken)
                         ("input x\nreduce mu = mean(x)\nreduce d = sum(abs(x - mu))\nout y = d", ((3, 37),)),
                         ("input x\nreduce m = max(x)\nreduce s = sum((x - m)**6)\nout y = s", ((2, 1),))):
        f = unfused(parse(text))
        assert not f.analysis.fusable and "only the unfused strategy" in f.guards[0]
        results = check(f, "cudasim", "unfused", shapes=shapes)
        assert all(r.passed for r in results), "\n".join(r.line() for r in results)
        assert compile(f, "cudasim").strategy == "unfused"  # auto
        with pytest.raises(NotFusableError, match="only 'unfused'"):
            compile(f, "cudasim", "tile")
        assert compile(f, "cpu").strategy == "levels"  # the CPU's pass per reduction
        with pytest.raises(NotFusableError, match="only 'levels'"):
            compile(f, "cpu", "row")
    assert unfused(parse("input x\nreduce m = max(x)\nout y = m")).analysis.fusable  # a fusable one: derive's forms


def test_check_problems_hold_a_row_of_signed_zeros_a_tie_and_a_subnormal():
    from redalgebra.runtime.check import random_problem

    inputs, _, keep = random_problem(fused("safe_softmax"), 3, 37, np.random.default_rng(0))
    x = inputs["x"]
    assert not x[0].any() and np.signbit(x[0]).sum() == 19  # -0.0 at even positions
    assert x[1, -1] == x[1].max() and (x[1] == x[1].max()).sum() >= 2 and x[1, 0] == np.float32(1e-40)
    assert not keep[-1].any()  # the last row fully masked


def test_check_draws_inputs_with_their_declared_signs():
    from redalgebra.runtime.check import random_problem

    f = derive(parse("input x > 0\ninput z <= 0\nreduce s = sum(x * z)\nout y = s"))
    inputs, _, _ = random_problem(f, 3, 37, np.random.default_rng(1))
    assert (inputs["x"] > 0).all() and (inputs["z"] <= 0).all()


@pytest.mark.parametrize("backend,strategy", [("cpu", "row"), ("cpu", "levels"), ("cudasim", "auto")])
def test_logsumexp_holds_values_whose_exponential_float32_cannot(backend, strategy):
    # logsumexp's ⊕ is log(exp(a) + exp(b)): printed as written, x = 100 overflowed to inf and x = -200 underflowed
    # to -inf where the result is an ordinary number (np.logaddexp's)
    import redalgebra as ra

    c = ra.parse("input x\nreduce m = max(x)\nreduce l = logsumexp(x)\nreduce t = logsumexp(x - m)\n"
                 "out y = l\nout z = t\n")
    x = np.array([[100.0, 99.0, 98.0], [-200.0, -201.0, -202.0], [1e-30, -1e30, -1e30], [0.5, 1.0, 2.0],
                  [-np.inf, -np.inf, 3.0]], np.float32)
    keep = np.ones(x.shape, bool)
    keep[2, 0] = False  # a row of -1e30 alone left
    want = ra.evaluate(c, {"x": x.astype(np.float64)}, {}, keep)
    got = ra.compile(ra.derive(c), backend, strategy)({"x": x}, {}, keep)
    for name in ("y", "z"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, err_msg=name)


def test_the_cpu_row_kernel_folds_a_long_row_in_chunks_merged_by_the_derived_merge():
    # a float32 running sum of 20000 values near 1e4 gathers an error growing with the row (the centred variance
    # 2.0e-4 off, its mean 6.6e-7, before); folded in chunks of CPU_CHUNK and merged: 4.7e-5 and 2.7e-7 (the bound
    # below sits between them, so the sequential fold fails it)
    import numpy as np

    from redalgebra import derive, evaluate, parse
    from redalgebra.codegen.kernels import CPU_CHUNK
    from redalgebra.runtime import compile

    c = parse("input x\nreduce s = sum(x)\nreduce v = sum((x - s / 20000)**2)\nout mean = s / 20000\nout var = v")
    x = (1e4 + np.random.default_rng(0).normal(size=(4, 20000))).astype(np.float32)
    got, want = compile(derive(c), "cpu", "row")({"x": x}), evaluate(c, {"x": x.astype(np.float64)})
    assert np.max(np.abs(got["var"] - want["var"]) / want["var"]) < 1e-4
    assert np.max(np.abs(got["mean"] - want["mean"]) / want["mean"]) < 4e-7
    # rows shorter than a chunk, a row ending inside one, masked chunks: as the reference
    f = derive(parse("input x\nreduce m = max(x)\nreduce l = sum(exp(x - m))\nreduce i = argmax(x)\nout y = exp(x - m) / l"))
    for length in (1, CPU_CHUNK - 1, CPU_CHUNK, 2 * CPU_CHUNK + 3):
        x = np.random.default_rng(length).normal(size=(3, length)).astype(np.float32)
        keep = np.ones_like(x, bool)
        keep[1, : min(length, CPU_CHUNK + 1)] = False
        got, want = compile(f, "cpu", "row")({"x": x}, keep=keep), evaluate(f.cascade, {"x": x}, keep=keep)
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-7)
        np.testing.assert_array_equal(got["i.index"], want["i.index"])


def test_auto_takes_a_block_per_row_where_the_lanes_strategies_cannot_write_the_outputs():
    # a per-element output beside a dot product: vrows refuses it, and the lanes strategies hold only part of each
    # product in a lane (auto took lanes, which then refused at the first call; split_lanes printed a kernel that
    # read a name it never set)
    from redalgebra import evaluate

    f = derive(parse("input x\ninput k[d]\nparam q[d]\nlet s = dot(q, k)\nreduce m = max(s)\n"
                     "reduce l = sum(exp(s - m))\nout y = l\nout e = (x - m) * 2\n"))
    rng = np.random.default_rng(0)
    inputs = {"x": rng.normal(size=(3, 20)).astype(np.float32), "k": rng.normal(size=(3, 20, 8)).astype(np.float32)}
    params = {"q": rng.normal(size=(3, 8)).astype(np.float32)}
    kernel = compile(f, "cudasim")
    got = kernel(inputs, params)
    assert kernel.resolve(3, 20, {"d": 8}) == "tile_shared"
    want = evaluate(f.cascade, {k: v.astype(np.float64) for k, v in inputs.items()}, params)
    for name in ("y", "e"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)
    with pytest.raises(RedalgebraError, match="per-element outputs of elements with dot products"):
        compile(f, "cudasim", "split_lanes_shared")(inputs, params)


def test_the_simulator_gives_inf_where_exp_passes_float64s_range():
    # Python's math.exp raises OverflowError past about 709, where the GPU's float32 exp gives inf (and the
    # reference inf): the simulator's kernels take an exp that does the same
    f = derive(parse("input x\nreduce s = sum(exp(x))\nout y = s\n"))
    got = compile(f, "cudasim", "unfused")({"x": np.array([[1.0, 1000.0, 2.0]], np.float32)}, {})["y"]
    assert np.isinf(got).all() and (got > 0).all()


def test_the_cpu_level_order_sums_a_long_row_in_blocks():
    # one running float32 total over 2**20 terms rounded softmax entropy's to 2.6e-4 of the result; in blocks of
    # LEVEL_BLOCK it stays at float32's few ulps. Vector states (attention's o) and a keep mask fold in blocks too
    from redalgebra.codegen.kernels import LEVEL_BLOCK

    rng = np.random.default_rng(3)
    f = fused("softmax_entropy")
    x = (5 + 0.01 * rng.standard_normal((2, 2 ** 20))).astype(np.float32)  # (near-equal terms: 4.2e-4 before)
    got = compile(f, "cpu", "levels")({"x": x})["h"]
    want = evaluate(f.cascade, {"x": x.astype(np.float64)})["h"]
    assert np.max(np.abs(got - want)) < 1e-6 * np.max(np.abs(want))
    f = fused("attention")
    length = 2 * LEVEL_BLOCK + 37
    inputs = {"k": rng.standard_normal((1, length, 8)).astype(np.float32),
              "v": rng.standard_normal((1, length, 8)).astype(np.float32)}
    params = {"q": rng.standard_normal((3, 8)).astype(np.float32), "scale": 0.3}
    keep = rng.random((3, length)) < 0.7
    got = compile(f, "cpu", "levels")(inputs, params, keep=keep)["y"]
    want = evaluate(f.cascade, {k: v.astype(np.float64) for k, v in inputs.items()}, params, keep=keep)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_block_merges_fit_their_states_in_shared_memory_or_say_the_size_is_too_large():
    """A warp's state a block in shared memory: the threads halve until attention's o (d wide) fits, and a d no
    block can hold is refused by name before any compiler sees it (ptxas's "too much shared data" before)."""
    k = compile(fused("attention"), "cuda", "lanes")
    _, spec, _ = k.spec_for(8, 4096, {}, {"d": 5000}, device=((9, 0), 132))
    assert spec.threads == 64  # 2 warps x 5001 floats: 40 KB; 4 warps would need 80 KB
    with pytest.raises(RedalgebraError, match=r"lanes: .*the widest o \(d = 100000\).*at most 12288 values"):
        k.spec_for(8, 4096, {}, {"d": 100000}, device=((9, 0), 132))
    auto = compile(fused("attention"), "cuda", "auto")
    with pytest.raises(RedalgebraError, match="shared memory even with 32 threads"):
        auto.spec_for(8, 4096, {}, {"d": 100000}, device=((9, 0), 132))


def test_threads_halved_for_shared_states_stay_whole_warps():
    # 96 threads halved were 48: a block of two warps whose states had one slot (the second warp's written out of
    # bounds, its elements dropped)
    k = compile(fused("attention"), "cuda", "block", threads=96)
    _, spec, _ = k.spec_for(4, 1000, {}, {"d": 8000}, device=((9, 0), 132))
    assert spec.threads == 32


@pytest.mark.parametrize("strategy,threads,text", [
    # a block's merge tree over a thread count that is not a power of two: its strides had halved from nt // 2, so
    # 48 threads merged 24 + 12 + 6 + 3 + 1 of their states (40 ones summed to 27) and 33 dropped one
    ("nonincremental", 48, "input x\nreduce m = max(x)\nreduce s = sum(exp(x - m))\nout y = exp(x - m) / s\nout t = s"),
    ("unfused", 96, "input x\nreduce m = max(x)\nreduce s = sum(exp(x - m))\nout y = exp(x - m) / s\nout t = s"),
    ("block_shared", 33, "input x\nreduce s = sum(x)\nreduce q = sum((x - s / 101) ** 2)\nout y = q"),
    ("nonincremental", 100, "input x\nreduce t = topk(3, x)\nout y = t"),  # (the top-k lists' own tree)
    # a thread a row in blocks of fewer than a warp (the grid divided by threads // 32: ZeroDivisionError)
    ("thread", 7, "input x\nreduce m = max(x)\nreduce s = sum(exp(x - m))\nout t = s"),
])
def test_blocks_of_any_thread_count_merge_every_threads_state(strategy, threads, text):
    c = parse(text)
    x = np.random.default_rng(5).normal(size=(3, 101)).astype(np.float32)
    got = compile(derive(c), "cudasim", strategy, threads=threads)({"x": x})
    want = evaluate(c, {"x": x.astype(np.float64)})
    for name in (o.name for o in c.outputs):
        np.testing.assert_allclose(np.asarray(got[name], np.float64), want[name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("strategy", ["warp", "block", "tile", "split", "lanes_shared", "vrows"])
def test_strategies_that_work_in_warps_refuse_a_partial_warp_on_the_simulator_too(strategy):
    # the simulator's shuffle-free twin would have run 48 threads, which the shuffles (or a warp a row) cannot; below
    # a warp, the grid divided by threads // 32 (ZeroDivisionError)
    vectors = "lanes" in strategy or strategy == "vrows"
    c = parse("input k[d]\nparam q[d]\nreduce m = max(dot(q, k))\nout y = m" if vectors else
              "input x\nreduce m = max(x)\nout y = m")
    inputs = {"k": np.ones((2, 40, 8), np.float32)} if vectors else {"x": np.ones((2, 40), np.float32)}
    params = {"q": np.ones((2, 8), np.float32)} if vectors else {}
    for threads in (16, 48):
        with pytest.raises(RedalgebraError, match=f"the {strategy} strategy works in whole warps.*got {threads}"):
            compile(derive(c), "cudasim", strategy, threads=threads)(inputs, params)


def test_nonincremental_counts_its_vector_states_in_shared_memory():
    # the staged row fitted, but attention's final o (d floats) on top of it did not: ptxas's "too much shared data"
    k = compile(fused("attention"), "cuda", "nonincremental")
    with pytest.raises(RedalgebraError, match="8192 values of vector states do not fit in shared memory"):
        k.spec_for(4, 3000, {}, {"d": 8192}, device=((9, 0), 132))
    assert k.spec_for(4, 3000, {}, {"d": 512}, device=((9, 0), 132))[1].tile == 3072


LOG_OF_EXP = {  # a log-softmax, its sum (the log-likelihood of every element), and the entropy
    "log_softmax": "input x\nreduce m = max(x)\nreduce s = sum(exp(x - m))\nout y = log(exp(x - m) / s)",
    "sum_log_p": "input x\nreduce m = max(x)\nreduce s = sum(exp(x - m))\nreduce e = sum(log(exp(x - m) / s))\nout y = e",
    "entropy": "input x\nreduce m = max(x)\nreduce s = sum(exp(x - m))\n"
               "reduce e = sum(exp(x - m) / s * log(exp(x - m) / s))\nout y = e",
}


@pytest.mark.parametrize("backend,strategies", [("cpu", ("auto", "row", "levels")),
                                                ("cudasim", ("auto", "rows", "tile", "unfused"))])
@pytest.mark.parametrize("name", LOG_OF_EXP)
def test_a_log_of_an_exponential_that_underflows_float32_is_finite(name, backend, strategies):
    # exp(x - m) is 0 in float32 at an element 200 below the row's max: log(exp(x - m)/s) was -inf there (the
    # log-softmax, its sum) and p·log(p) NaN (the entropy), where the reference is finite; the kernels print
    # log(exp(a)·r) as a + log(r)
    f = derive(parse(LOG_OF_EXP[name]))
    x = np.array([[0, -200, 1, 2, -150], [0, 1, 2, 3, 4]], np.float32)
    want = evaluate(f.cascade, {"x": x.astype(np.float64)})["y"]
    for strategy in strategies:
        got = compile(f, backend, strategy)({"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6, err_msg=f"{backend} {strategy}")


def test_exp_out_of_logs_splits_products_only():
    import sympy as sp

    from redalgebra.derive.program import exp_out_of_logs

    x, m, s = sp.symbols("x m s", real=True)
    assert exp_out_of_logs(sp.log(sp.exp(x - m) / s)) == x - m + sp.log(1 / s)
    assert exp_out_of_logs(sp.log(sp.exp(x) + s)) == sp.log(sp.exp(x) + s)  # (a sum: logsumexp's own rule)
    assert exp_out_of_logs(2 * sp.log(3 * sp.exp(x))) == 2 * (x + sp.log(3))
