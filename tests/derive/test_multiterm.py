"""Multi-term separability: sums of separable terms are split into partial sums, proved, and fused."""

import random

import numpy as np
import pytest
import sympy as sp

from redalgebra import NotFusableError, parse
from redalgebra.derive import Evaluator, analyze, derive, random_bounds
from redalgebra.ir import evaluate
from redalgebra.workloads.catalogue import COVARIANCE, LAYERNORM_GEMM, SOFTMAX_ENTROPY, VARIANCE_TWO_PASS

EXP_MINUS_MAX = "input x\nreduce m = max(x)\nreduce v = sum(exp(x) - m)\nout y = v\n"
CASCADES = {"variance": VARIANCE_TWO_PASS, "covariance": COVARIANCE, "entropy": SOFTMAX_ENTROPY,
            "exp_minus_max": EXP_MINUS_MAX, "layernorm_gemm": LAYERNORM_GEMM}
#: the multi-term reduction of each cascade and the element parts E_t of its terms
TERMS = {"variance": ("v", {"x**2", "x", "1"}), "covariance": ("c", {"x*y", "x", "y", "1"}),
         "entropy": ("t", {"x*exp(-m + x)", "exp(-m + x)"}), "exp_minus_max": ("v", {"exp(x)", "1"}),
         "layernorm_gemm": ("acc", {"w*x", "w"})}


def problem(c, rows, length, rng, scale=2.0, offset=0.0):
    inputs = {s.name: offset + scale * rng.normal(size=(rows, length) if s.size is None else (rows, length, 3))
              for s in c.inputs}
    params = {p.name: (float(length) if p.name in ("n", "h") else abs(rng.normal()) + 0.1) for p in c.params}
    keep = rng.random((rows, length)) > 0.2
    keep[-1] = False  # a fully masked row: every sum is 0, the reference's value
    return inputs, params, keep


@pytest.mark.parametrize("name", CASCADES)
def test_analyze_names_the_terms_and_proves_their_sum_equals_the_body(name):
    a = analyze(parse(CASCADES[name], name))
    red, expected = TERMS[name]
    r = a[red]
    assert a.fusable and r.fusable and r.kind == "multi-term"
    assert {str(t.E) for t in r.terms.terms} == expected
    assert r.terms.proof.proved
    total = sum(t.coefficient * t.E for t in r.terms.terms)
    assert sp.simplify(total - r.F) == 0  # independent of the prover: the terms add up to the body
    text = a.text()
    assert "multi-term separable" in text and all(f"sum({e})" in text for e in expected - {"1"})
    data = a.as_dict()["reductions"]
    assert {t["E"] for t in next(d for d in data if d["name"] == red)["terms"]} == expected


def test_variance_and_covariance_keep_the_degree_two_term_centred():
    for name, red in (("variance", "v"), ("covariance", "c")):
        r = analyze(parse(CASCADES[name]))[red]
        centred = [t for t in r.terms.terms if t.center]
        assert len(centred) == 1 and len(centred[0].center) == 2
        assert "Chan" in r.terms.note and "CAUTION" not in r.terms.note
    entropy = analyze(parse(SOFTMAX_ENTROPY))["t"]
    assert not any(t.center for t in entropy.terms.terms) and "CAUTION" in entropy.terms.note
    assert all(t.analysis.otimes.name == "mul" and t.analysis.H == sp.exp(-sp.Symbol("m", real=True))
               for t in entropy.terms.terms)


@pytest.mark.parametrize("name", CASCADES)
def test_the_rewrite_and_the_centred_merges_are_proved(name):
    f = derive(parse(CASCADES[name], name))
    assert f.source is not None and f.rewrite is not None
    proofs = [p for ps in f.rewrite.proofs.values() for p in ps]
    assert proofs and all(p.proved for p in proofs)
    assert {o.name for o in f.cascade.outputs} == {o.name for o in f.source.outputs}
    for ra in f.analysis.reductions:
        assert ra.fusable and ra.kind in ("single", "centered")


@pytest.mark.parametrize("name", CASCADES)
def test_every_derived_form_matches_the_reference_of_the_cascade_as_written(name):
    f = derive(parse(CASCADES[name], name))
    rng = np.random.default_rng(7)
    inputs, params, keep = problem(f.source, 3, 23, rng)
    want = evaluate(f.source, inputs, params, keep=keep)
    ev = Evaluator(f, inputs, params, keep=keep)
    r = random.Random(3)
    forms = {"incremental": ev.finalize(ev.incremental()),
             "nonincremental": ev.finalize(ev.nonincremental()),
             "segmented": ev.finalize(ev.segmented(random_bounds(23, r), rng=r)),
             "staged segments": ev.finalize(ev.segmented(random_bounds(23, r), "nonincremental", rng=r))}
    for form, got in forms.items():
        for o in f.source.outputs:
            np.testing.assert_allclose(got[o.name], want[o.name], rtol=1e-9, atol=1e-9, err_msg=f"{form}: {o.name}")


def test_float32_centred_variance_keeps_digits_the_naive_power_sums_lose():
    f = derive(parse(VARIANCE_TWO_PASS))
    rng = np.random.default_rng(1)
    x = 1e4 + rng.normal(size=(2, 4000))  # mean 10^4, spread 1: E[x²] − E[x]² cancels 8 digits
    params = {"n": 4000.0}
    want = evaluate(f.source, {"x": x}, params)["var"]
    ev = Evaluator(f, {"x": x}, params, dtype=np.float32)
    derived = ev.finalize(ev.segmented(random_bounds(4000, random.Random(0)), "incremental"))["var"]
    x32 = x.astype(np.float32)
    n = np.float32(4000)
    s, sq = x32.sum(axis=1), (x32 * x32).sum(axis=1)
    naive = (sq - 2 * (s / n) * s + n * (s / n) ** 2) / n  # the three partial sums combined at the end
    derived_err = np.max(np.abs(derived - want) / want)
    naive_err = np.max(np.abs(naive - want) / want)
    assert derived_err < 1e-3, derived_err
    assert naive_err > 100 * derived_err and naive_err > 1e-2, (naive_err, derived_err)


SQUARED_AND_LINEAR = "input x\nparam n > 0\nreduce s = sum(x)\nreduce v = sum(3*(x - s/n)**2 + x)\nout y = v / n\n"


@pytest.mark.parametrize("name, text, inputs", [("variance", VARIANCE_TWO_PASS, ("x",)),
                                                ("covariance", COVARIANCE, ("x", "y")),
                                                ("a square beside a linear term", SQUARED_AND_LINEAR, ("x",))])
def test_a_sum_that_squares_past_float32_leaves_the_shift_to_the_mean_finite(name, text, inputs):
    # elements of 1e17 in rows of 300: the sum's square (9e38) overflows float32, the variance (1e28) does not. The
    # shift from the running mean to s/n was s**2*(count - n)**2/(count*n**2): inf * 0 = NaN where n is the count;
    # as count*(s/count - s/n)**2 it is 0 there (and the linear term's s stays beside it)
    f = derive(parse(text, "c"))
    reduction = next(r for r in f.source.reductions if r.name in f.rewrite.combination)
    shift = str(f.rewrite.combination[reduction.name])
    assert "count*(-" in shift and "/(count*n**2)" not in shift, shift
    rng = np.random.default_rng(0)
    data = {k: 1e17 + 1e14 * rng.normal(size=(2, 300)) for k in inputs}
    want = evaluate(f.source, data, {"n": 300.0})
    ev = Evaluator(f, data, {"n": 300.0}, dtype=np.float32)
    got = ev.finalize(ev.segmented(random_bounds(300, random.Random(0)), "incremental"))
    out = f.source.outputs[0].name
    assert np.all(np.isfinite(got[out])), got[out]
    np.testing.assert_allclose(got[out], want[out], rtol=1e-3)


@pytest.mark.parametrize("text, why", [
    # (|x - max(x)| fuses: the states decide it, see below; the distance from the mean does not)
    ("input x\nparam n > 0\nreduce s = sum(x)\nreduce d = sum(abs(x - s / n))\nout y = d", "abs("),
    ("input x\nreduce m = max(x)\nreduce p = sum(log(1 + exp(x - m)))\nout y = p", "log("),
    ("input x\nparam n > 0\nreduce s = sum(x)\nreduce d = sum(1 / (x - s / n))\nout y = d", "1/("),
])
def test_bodies_that_are_not_multi_term_separable_are_refused_with_the_reason(text, why):
    with pytest.raises(NotFusableError) as info:
        derive(parse(text))
    message = str(info.value)
    assert "not multi-term separable either" in message and why in message


def test_a_term_that_does_not_separate_is_named():
    a = analyze(parse("input x\nreduce m = max(x)\nreduce d = sum(x + log(1 + exp(x - m)))\nout y = d"))
    assert not a["d"].fusable and "log(exp(-m + x) + 1)" in a["d"].reason and "is itself not separable" in a["d"].reason


def test_one_term_with_a_coefficient_that_may_vanish_fuses_as_a_partial_sum():
    """sum(exp(x) * m): H = m is not invertible at m = 0, but m · sum(exp(x)) needs no inverse."""
    f = derive(parse("input x\nreduce m = max(x)\nreduce v = sum(exp(x) * m)\nout y = v"))
    assert f.source_analysis["v"].kind == "deferred" and f.rewrite.deferred == {"v": "v_g"}
    assert str(f.cascade["v_g"].body) == "exp(x)"
    x = np.array([[0.0, -1.0, 0.5], [-2.0, 0.0, -1.0]])  # the second row's max is 0
    ev = Evaluator(f, {"x": x})
    want = evaluate(f.source, {"x": x}, {})["y"]
    np.testing.assert_allclose(ev.finalize(ev.incremental())["y"], want, rtol=1e-12)


def test_single_term_cascades_are_not_rewritten():
    f = derive(parse("input x\nreduce m = max(x)\nreduce l = sum(exp(x - m))\nout y = m + log(l)"))
    assert f.source is None and f.rewrite is None


def test_a_count_is_a_sum_of_one():
    c = parse("input x\nreduce n = sum(1)\nreduce s = sum(x)\nout mean = s / n")
    keep = np.array([[True, False, True, True], [False] * 4])
    got = evaluate(c, {"x": np.arange(8.0).reshape(2, 4)}, {}, keep=keep)
    assert got["n"].tolist() == [3.0, 0.0] and got["mean"][0] == pytest.approx((0 + 2 + 3) / 3)


@pytest.mark.parametrize("name", ["variance", "layernorm_gemm", "entropy"])
def test_cpu_kernel_agrees_with_the_reference_of_the_cascade_as_written(name):
    pytest.importorskip("numba")
    from redalgebra.runtime import compile as compile_kernel

    f = derive(parse(CASCADES[name], name))
    kernel = compile_kernel(f, "cpu")
    rng = np.random.default_rng(5)
    inputs, params, keep = problem(f.source, 3, 37, rng)
    inputs = {k: v.astype(np.float32) for k, v in inputs.items()}
    params = {k: np.float32(v) for k, v in params.items()}
    got = kernel(inputs, params, keep=keep)
    want = evaluate(f.source, {k: v.astype(np.float64) for k, v in inputs.items()}, params, keep=keep)
    for o in f.source.outputs:
        np.testing.assert_allclose(np.asarray(got[o.name], np.float64), want[o.name], rtol=1e-4,
                                   atol=1e-4 * np.nanmax(np.abs(want[o.name])))


ABSMAX_MAX = "input x\nreduce a = max(abs(x))\nreduce b = max(x * a)\nout y = b"


def test_a_factor_that_is_zero_on_a_row_of_zeros_is_applied_at_the_end_not_divided_by():
    # a = max|x| is 0 on a row of zeros (not an empty row): the correction a_n/a_a would be 0/0, so b keeps
    # max(x) and b = a·max(x) is formed once a is final (× distributes over max for a >= 0, as proved)
    f = derive(parse(ABSMAX_MAX))
    assert f.source_analysis["b"].kind == "deferred" and "b_g" in {r.name for r in f.cascade.reductions}
    assert not f.corrections  # nothing is divided by a
    x = np.array([[0.0, 0.0, 0.0], [1.0, -3.0, 2.0]])
    ev = Evaluator(f, {"x": x})
    want = evaluate(f.source, {"x": x}, {})["y"]  # 0 and 3 * 2
    np.testing.assert_allclose(ev.finalize(ev.incremental())["y"], want, rtol=1e-12)
    np.testing.assert_allclose(want, [0.0, 6.0])
    assert "formed from" not in f.text() and "other factors are applied at the end" in f.text()


def test_a_vanishing_factor_read_by_a_later_reduction_keeps_its_correction_and_says_where_it_is_nan():
    f = derive(parse("input x\nreduce a = max(abs(x))\nreduce b = sum(x * a)\nreduce c = sum(exp(x - b))\nout y = c"))
    assert f.analysis["b"].kind == "single" and "b" in f.corrections
    assert any(g.startswith("b: H = a may be 0 or infinite") and "NaN" in g for g in f.guards)


@pytest.mark.parametrize("text", [
    # a pole on a prefix of zeros (the abs-max, a sum of squares, a sum of non-negative elements are 0 there)
    "input x\nreduce a = max(abs(x))\nreduce s = sum((x / a) ** 2)\nout y = a * sqrt(s)",
    "input x\nreduce a = max(abs(x))\nreduce s = sum(x / a)\nout y = s",
    "input x\nreduce q = sum(x * x)\nreduce s = sum(x / sqrt(q))\nout y = s",
    "input x >= 0\nreduce c = sum(x)\nreduce s = sum(x / c)\nout y = s",
    # a count of the positive elements, 0 on a prefix of negative ones
    "input x\nreduce c = sum(where(x > 0, 1, 0))\nreduce s = sum(x / c)\nout y = s",
    # a mean's numerator: 0 on a prefix of zeros (its denominator, a count, is 0 only on an empty segment)
    "input x >= 0\nreduce mu = mean(x)\nreduce t = max(x * mu)\nout y = t",
    # ⊗ = +, H infinite where a dependency is 0 (the correction -inf - (-inf) there; the identity state has q = 0, so
    # every row was NaN): log(q), -1/q, the log-mean-exp of the positive elements
    "input x\nreduce q = sum(x * x)\nreduce l = max(x + log(q))\nout y = l",
    "input x\nreduce q = sum(x * x)\nreduce l = max(x - 1 / q)\nout y = l",
    "input x\nreduce a = max(abs(x))\nreduce l = min(x - log(a))\nout y = l",
    "input x\nreduce q = sum(x * x)\nreduce l = logsumexp(x + log(q))\nout y = l",
    "input x\nreduce c = sum(where(x > 0, 1, 0))\nreduce l = logsumexp(x - log(c))\nout y = l",
    # ⊗ = + is always deferred: -m on a prefix of -inf elements (m = -inf there) was skipped as a masked prefix
    "input x\nreduce m = max(x)\nreduce r = min(x - m)\nout y = r",
])
def test_a_pole_or_zero_of_h_on_a_prefix_of_the_row_is_deferred(text):
    # the correction H(D_new)/H(D_old) does not exist where a prefix has H(D) = 0 or infinite, yet the row's value
    # does: the correction form gave NaN from such a prefix on (every row below starts with one); deferred, the
    # state keeps the sum of G and H is applied once the dependencies are final
    f = derive(parse(text))
    reduced = f.source_analysis.reductions[-1]
    assert reduced.kind == "deferred" and f.rewrite.deferred == {reduced.name: f"{reduced.name}_g"}
    x = np.array([[0.0, -1.0, 0.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.5, 0.0], [-1.0, -2.0, 4.0, 1.0, 0.0]])
    if ">= 0" in text:
        x = np.abs(x)
    want = evaluate(f.source, {"x": x}, {})["y"]
    assert np.isfinite(want).all()
    ev = Evaluator(f, {"x": x})
    np.testing.assert_allclose(ev.finalize(ev.incremental())["y"], want, rtol=1e-12)
    np.testing.assert_allclose(ev.finalize(ev.segmented([0, 1, 3, 5]))["y"], want, rtol=1e-12)


@pytest.mark.parametrize("strategy", ["row", "levels"])
def test_the_cpu_kernels_of_a_deferred_pole_give_the_reference_on_rows_that_start_at_it(strategy):
    text = "input x\nreduce q = sum(x * x)\nreduce c = sum(where(x > 0, 1, 0))\nreduce s = sum(x / sqrt(q))\n" \
           "reduce t = sum(x / c)\nreduce l = logsumexp(x + log(q))\nout y = s + t + l"
    x = np.random.default_rng(3).normal(size=(6, 41)).astype(np.float32).astype(np.float64)
    x[:, :5] = [[0.0] * 5, [-1.0] * 5, [0.0, -2.0, 0.0, -1.0, 0.0]] * 2   # q = 0 or c = 0 on every row's prefix
    _, _, got, want = _cpu(text, x, strategy)
    np.testing.assert_allclose(got["y"], want["y"], rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("row", [[-np.inf, 1.0, 2.0], [1.0, -np.inf, 2.0], [1.0, 2.0, -np.inf]])
def test_an_element_at_minus_inf_is_a_value_not_a_masked_one_where_f_keeps_it(row):
    # min(x - m): a prefix whose max is -inf was skipped as if masked, so the row's -inf was lost (-1, not -inf) where
    # it came first and kept where it came later; deferred, min(x) - m in every order
    f = derive(parse("input x\nreduce m = max(x)\nreduce r = min(x - m)\nreduce s = max(m - x)\nout y = r\nout z = s"))
    x = np.array([row])
    ev = Evaluator(f, {"x": x})
    for got in (ev.finalize(ev.incremental()), ev.finalize(ev.segmented([0, 1, 3]))):
        assert got["y"].tolist() == [-np.inf] and got["z"].tolist() == [np.inf]


def test_a_pole_read_by_a_later_reduction_keeps_its_correction_and_says_where_it_is_nan():
    f = derive(parse("input x\nreduce a = max(abs(x))\nreduce r = sum(x / a)\nreduce t = sum(exp(x - r))\nout y = t"))
    assert f.analysis["r"].kind == "single" and "r" in f.corrections
    notes = [g for g in f.guards if g.startswith("r: H = 1/a")]
    assert len(notes) == 1 and "infinite" in notes[0] and "NaN" in notes[0] and "later reduction reads r" in notes[0]
    x = np.array([[0.0, 0.0, 2.0]])  # the first element alone has a = 0: H = 1/a is not invertible there
    ev = Evaluator(f, {"x": x})
    assert np.isfinite(evaluate(f.cascade, {"x": x})["y"]).all()  # the unfused value exists (a = 2 overall)
    assert np.isnan(ev.finalize(ev.incremental())["y"]).all()  # the fused form says it cannot give it


@pytest.mark.parametrize("power", [3, 6, 40])
def test_powers_of_a_difference_above_two_are_refused_as_float32_would_cancel_them(power):
    # (x - m)**k expands into power sums up to x**k combined with powers of m: one element at 1e5 gave an
    # error of 1e29 in float32 where the answer is 0; degree 2 has its centred form (the variance)
    text = f"input x\nreduce m = max(x)\nreduce s = sum((x - m)**{power})\nout y = s"
    with pytest.raises(NotFusableError) as info:
        derive(parse(text))
    assert f"power sums up to degree {power}" in str(info.value) and "cancel catastrophically" in str(info.value)
    derive(parse(text.replace(f"**{power}", "**2")))  # the centred degree-2 form still fuses


def test_a_sum_of_squares_says_where_float32_overflows():
    f = derive(parse("input x\nreduce s = sum(x * x)\nout y = x / sqrt(s)"))
    note = next(g for g in f.guards if g.startswith("s = sum("))
    assert "1.8e+19" in note and "overflows" in note
    assert not any("grows as" in g for g in derive(parse("input x\ninput w\nreduce s = sum(x * w)\nout y = s")).guards)


def test_abs_of_a_difference_from_the_max_is_decided_by_the_states_and_fuses():
    # every element is at most the row's max: |x - m| = m - x there (proved with m = x + u, u >= 0), so
    # Σ|x - max| = max·count - Σx, two separable terms; the kernel agrees with the reference, masked rows too
    text = "input x\nreduce m = max(x)\nreduce d = sum(abs(x - m) * exp(x / 4))\nout y = d\n"
    a = analyze(parse(text))
    d = a["d"]
    assert a.fusable and d.terms is not None and len(d.terms.terms) == 2
    domain = d.proofs[0]
    assert domain.proved and "on the states the cascade reaches" in domain.claim
    c = parse(text)
    rng = np.random.default_rng(7)
    inputs, params, keep = problem(c, 5, 60, rng)
    from redalgebra.runtime import compile as compile_kernel

    got = compile_kernel(derive(c), "cpu")({k: v.astype(np.float32) for k, v in inputs.items()}, params, keep)["y"]
    want = evaluate(c, inputs, params, keep)["y"]
    assert np.allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("text,inside", [
    # m = max(x) is at least x: a counterexample with x > m is no state of the cascade
    ("input x\nreduce m = max(x)\nreduce p = sum(log(1 + exp(x - m)))\nout y = p\n", lambda v: v["x"] <= v["m"]),
    # a sum of squares is at least each square: no Σx² < x² (where the square root is not even real)
    ("input x\nreduce q = sum(x**2)\nreduce r = sum(sqrt(q - x**2))\nout y = r\n", lambda v: v["x"] ** 2 <= v["q"]),
])
def test_counterexamples_respect_what_the_states_satisfy(text, inside):
    a = analyze(parse(text))
    assert not a.fusable
    r = a.reductions[-1]
    cx = r.counterexample
    assert cx is not None and not cx.domain
    assert inside({k.name if hasattr(k, "name") else str(k): v for k, v in cx.values.items()})
    assert cx.lhs.is_real and cx.rhs.is_real


def test_the_analysis_says_what_the_states_decided():
    a = analyze(parse("input x\nreduce m = max(x)\nreduce d = sum(abs(x - m))\nout y = d\n"))
    assert "on the states the cascade reaches" in a.text() and "= m - x [proved]" in a.text()


@pytest.mark.parametrize("text", [
    "input x\nreduce m = max(x)\nreduce s = sum(fp8(x - m))\nout y = s\n",           # a cast of the dependency
    "input x\nreduce m = max(x)\nlet q = fp8(x - m)\nreduce s = sum(q * q)\nout y = s\n",  # through a let
    "input x\nreduce m = max(x)\nreduce s = sum(fp8(x) - m)\nout y = s\n",            # of the element alone
])
def test_a_body_that_rounds_is_not_split_into_terms_that_would_not(text):
    # the split works in real arithmetic (fp8(u) is u there): its partial sums, and the kernels built from the
    # rewritten cascade (the levels strategy too), never rounded — sum(fp8(x - m)) came out as sum(x) - L·m
    from redalgebra import compile
    from redalgebra.derive import unfused

    c = parse(text)
    s = analyze(c)["s"]
    assert not s.fusable and "cast fp8(" in s.reason and "cannot reproduce" in s.reason
    with pytest.raises(NotFusableError):
        derive(c)
    x = np.array([[0.0, -1.55, 0.3], [2.0, 1.0, 0.7]], np.float32)  # fp8(-1.55) = -1.5: rounding shows
    want = evaluate(c, {"x": x.astype(np.float64)})["y"]
    for strategy in ("auto", "levels"):
        got = compile(unfused(c), "cpu", strategy)({"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_factor_applied_at_the_end_and_infinite_on_an_empty_row_gives_the_empty_sum():
    # sum(k / sqrt(ss)) keeps Σk and applies 1/sqrt(ss) at the end (one term of the split): on a fully masked row
    # that was 0 · inf = NaN
    # where the reference's empty sum is 0; a row of zeros, not masked, is NaN in both (0 / 0 per element)
    from redalgebra import compile

    c = parse("input k[d]\nreduce ss = sum(dot(k, k))\nreduce s = sum(k / sqrt(ss))\nout y = s\n")
    f = derive(c)
    assert analyze(c)["s"].fusable
    k = np.arange(27, dtype=np.float32).reshape(3, 3, 3) + 1
    k[2] = 0.0
    keep = np.array([[False] * 3, [True, True, False], [True] * 3])
    want = evaluate(c, {"k": k.astype(np.float64)}, {}, keep)["y"]
    assert (want[0] == 0).all() and np.isnan(want[2]).all()
    for backend, strategy in (("cpu", "row"), ("cpu", "levels"), ("cudasim", "auto")):
        got = compile(f, backend, strategy)({"k": k}, {}, keep)["y"]
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"{backend} {strategy}")


@pytest.mark.parametrize("value", ["x - m", "(x - m)**2"])
def test_a_term_whose_max_is_infinite_on_a_row_that_selects_nothing_adds_nothing(value):
    # m = max(where(pos < w, x, -inf)) is -inf on a row with w = 0, where the split's -m · sum([pos < w]) was
    # inf · 0 = NaN; the reference's where picks 0 for every element, so the sum is 0
    from redalgebra import compile

    c = parse(f"input x\nparam w int >= 0\nreduce m = max(where(pos < w, x, -inf))\n"
              f"reduce s = sum(where(pos < w, {value}, 0))\nout y = s\n")
    x = np.array([[0.5, 1.0, -2.0]] * 3, np.float32)
    p = {"w": np.array([0, 2, 3])}
    want = evaluate(c, {"x": x.astype(np.float64)}, p)["y"]
    assert want[0] == 0
    # (the level order computes m before s, so no split term: it is compared once, the fused row for both values)
    for strategy in ("row", "levels") if value == "x - m" else ("row",):
        got = compile(derive(c), "cpu", strategy)({"x": x}, p)["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=strategy)


def test_a_log_of_positive_factors_is_split_into_their_logs():
    # sum(log(p)) of a softmax's p = exp(x - m)/l: l, a sum of exponentials, is positive on a non-empty segment, so
    # log(exp(x - m)/l) = x - m - log(l) — two terms, sum(x) and a count — proved under l > 0; a row masked whole is
    # the empty sum, 0
    from redalgebra import compile

    c = parse("input x\nreduce m = max(x)\nreduce l = sum(exp(x - m))\nreduce s = sum(log(exp(x - m) / l))\n"
              "out y = s\n")
    a = analyze(c)["s"]
    assert a.fusable and a.terms is not None and len(a.terms.terms) == 2
    assert a.terms.proof.proved and "l" in str(a.terms.proof.assumptions)
    rng = np.random.default_rng(0)
    x = (3 * rng.normal(size=(4, 37))).astype(np.float32)
    keep = np.ones(x.shape, bool)
    keep[1] = False
    keep[2, 5:] = False
    want = evaluate(c, {"x": x.astype(np.float64)}, {}, keep)["y"]
    assert want[1] == 0
    f = derive(c)
    for backend, strategy in (("cpu", "row"), ("cudasim", "auto")):
        got = compile(f, backend, strategy)({"x": x}, {}, keep)["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"{backend} {strategy}")


def test_a_sum_of_exponentials_of_masked_scores_without_a_max_shift_can_be_0_on_a_prefix():
    # where(pos >= n, x, -inf): a row padded on the left has exp(-inf) = 0 terms first, so l = sum(exp(s)) is 0 on
    # that prefix (not positive, as a sum of exponentials of finite values is): 1/l is a pole there, deferred, where
    # the correction form gave NaN from the prefix on; with the max subtracted (m = max(s)) l stays positive
    text = "input x\nparam n int\nlet s = where(pos >= n, x, -inf)\nreduce l = sum(exp(s))\n" \
           "reduce t = sum(x * exp(s) / l)\nout y = t"
    f = derive(parse(text))
    assert f.source_analysis.signs["l"].sign == ">=0" and f.source_analysis["t"].kind == "deferred"
    shifted = analyze(parse(text.replace("reduce l = sum(exp(s))", "reduce m = max(s)\nreduce l = sum(exp(s - m))")))
    assert shifted.signs["l"].sign == ">0"
    x = np.array([[0.5, 1.0, 2.0], [0.5, 1.0, 2.0]])
    params = {"n": np.array([1, 0])}
    ev = Evaluator(f, {"x": x}, params)
    np.testing.assert_allclose(ev.finalize(ev.incremental())["y"], evaluate(f.source, {"x": x}, params)["y"], rtol=1e-12)


def _cpu(text, x, strategy=None):
    pytest.importorskip("numba")
    from redalgebra.runtime import compile as compile_kernel

    f = derive(parse(text))
    kernel = compile_kernel(f, "cpu", strategy)
    return f, kernel, kernel({"x": x.astype(np.float32)}), evaluate(f.source or f.cascade, {"x": x}, {})


def test_a_logsumexp_shifted_by_a_max_keeps_its_correction_and_its_digits():
    # deferred, logsumexp(x) - m ran its logaddexp over the raw x, rounding at |x|'s scale: 5.27 for 5.76 at an
    # offset of 1e4; the correction form keeps the shift the cascade wrote
    text = "input x\nreduce m = max(x)\nreduce z = logsumexp(x - m)\nout y = z"
    x = np.random.default_rng(4).normal(size=(2, 10_000)) + 1e4
    f, _, got, want = _cpu(text, x.astype(np.float32).astype(np.float64))
    assert f.source is None and f.analysis["z"].kind == "single"  # (not rewritten: no deferred state cascade)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5)


def test_a_deferred_h_keeps_its_exponentials_in_the_state():
    # H = mu · exp(-m) with a mean that may be 0: only mu waits for the end; the state keeps sum(exp(x - m)), not
    # sum(exp(x)), which overflows float32 at x = 100 (inf was the result)
    text = "input x\nreduce mu = mean(x)\nreduce m = max(x)\nreduce l = sum(exp(x - m) * mu)\nout y = l"
    x = np.random.default_rng(5).normal(size=(2, 300)) + 100
    f, _, got, want = _cpu(text, x.astype(np.float32).astype(np.float64))
    assert str(f.cascade["l_g"].body) == "exp(-m + x)"
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5)


def test_a_correction_that_does_not_exist_on_a_prefix_sends_the_cpu_to_the_level_order():
    # m = max(x + log(q)) is read by l, so it keeps its correction, -inf - (-inf) from the identity state (q = 0) on:
    # NaN on every row in the one-pass form; the guard says so and auto takes the level order
    text = "input x\nreduce q = sum(x * x)\nreduce m = max(x + log(q))\nreduce l = sum(exp(x + log(q) - m))\nout y = l"
    x = np.random.default_rng(6).normal(size=(3, 50))
    f, kernel, got, want = _cpu(text, x)
    assert f.uncorrectable == ("m",) and kernel.strategy == "levels"
    assert any(g.startswith("m: H = log(q) may be infinite") and "-inf - (-inf)" in g for g in f.guards)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5)
    assert np.isnan(_cpu(text, x, "row")[2]["y"]).all()


def test_a_max_of_the_unmasked_values_is_no_shift_of_the_masked_ones():
    # m = max(x) is finite on a masked prefix of s = where(pos >= 3, x, -inf), where exp(s - m) is 0: l is 0 there
    text = "input x\nlet s = where(pos >= 3, x, -inf)\nreduce m = max(x)\nreduce l = sum(exp(s - m))\n" \
           "reduce o = sum(exp(s - m) * x / l)\nout z = o"
    assert analyze(parse(text)).signs["l"].sign == ">=0"
    x = np.random.default_rng(7).normal(size=(2, 20))
    _, _, got, want = _cpu(text, x)
    np.testing.assert_allclose(got["z"], want["z"], rtol=1e-5)


def test_a_body_that_rounds_is_never_deferred():
    # sum(fp8(x * 448 / a)) without the catalogue's clamp of a: H = 448/a has a pole on a prefix of zeros, but the
    # deferred form would be 448·sum(x)/a, which never rounds (1-4 % off); the level order rounds at the final scale
    text = "input x\nreduce a = max(abs(x))\nreduce s = sum(fp8(x * 448 / a))\nout y = s"
    x = np.random.default_rng(0).normal(size=(3, 7)).astype(np.float32).astype(np.float64)
    x[0, :3] = 0.0
    f, kernel, got, want = _cpu(text, x)
    assert f.source is None and f.analysis["s"].kind == "single" and kernel.strategy == "levels"
    np.testing.assert_array_equal(got["y"], want["y"])


def test_a_side_skipped_as_empty_whose_elements_still_count_is_named_and_left_to_the_level_order():
    # m = max(x) is -inf on a prefix of -inf elements; the merge skips such a side as empty, which is right for
    # exp(x - m) (0 there) but loses exp(tanh(x) - m) = exp(-1 - m): the one-pass form gave 1.647 for 1.782
    from redalgebra.derive.fused import unskippable

    text = "input x\nreduce m = max(x)\nreduce l = sum(exp(tanh(x) - m))\nout y = l"
    x = np.array([[-np.inf, 0.5, 1.0, -0.3], [0.5, -np.inf, 1.0, -0.3]])
    f, kernel, got, want = _cpu(text, x)
    assert f.uncorrectable == ("l",) and kernel.strategy == "levels"
    assert any(g.startswith("l: a side whose m is -oo is skipped as empty") for g in f.guards)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6)
    assert not np.allclose(_cpu(text, x, "row")[2]["y"], want["y"], rtol=1e-3)  # (the one-pass form, as the note says)
    softmax = derive(parse("input x\nreduce m = max(x)\nreduce l = sum(exp(x - m))\nreduce t = sum(x * exp(x - m))"))
    assert not any(unskippable(ra, softmax.analysis) for ra in softmax.analysis.reductions)


@pytest.mark.parametrize("text, row", [
    # m = max(log(x)) is -inf on a prefix of zeros, where exp(sqrt(x) - m) still counts exp(-m): 1.426 for 1.574
    ("input x >= 0\nreduce m = max(log(x))\nreduce l = logsumexp(sqrt(x) - m)\nout y = l", [0, 0, 1, 2, 3]),
    # a body that is not one value: max(2x) is -inf at a -inf element, where exp(tanh(x) - m) is exp(-1 - m)
    ("input x\nreduce m = max(2 * x)\nreduce l = sum(exp(tanh(x) - m))\nout y = l", [-np.inf, 0.5, 1, -0.3]),
    # a log's argument 0 away from 0: max(log(abs(x - 1))) is -inf at x = 1 (4.883 for 7.601)
    ("input x\nreduce m = max(log(abs(x - 1)))\nreduce l = sum(exp(sqrt(abs(x)) - m))\nout y = l", [1, 1, 2, 3]),
])
def test_a_skipped_side_is_found_where_the_dependency_body_reaches_its_identity_at_a_finite_element(text, row):
    x = np.array([row], dtype=np.float64)
    f, kernel, got, want = _cpu(text, x)
    assert f.uncorrectable == ("l",) and kernel.strategy == "levels"
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6)
    assert not np.allclose(_cpu(text, x, "row")[2]["y"], want["y"], rtol=1e-3)


@pytest.mark.parametrize("value", ["x", "where(pos > 0, x, -inf)"])
def test_a_divisor_is_not_multiplied_out_by_the_expansion(value):
    # (1/(x + 1) - m)**2 expands into power sums; SymPy's expand also turned 1/(x + 1)**2 into 1/(x**2 + 2x + 1),
    # inf - inf at x = -inf (a masked value) where the written form is 0: NaN from every CPU strategy for 6.25
    text = f"input x\ninput y\nlet u = {value}\nreduce m = mean(y)\nreduce r = sum((1 / (u + 1) - m)**2)\nout o = r"
    f = derive(parse(text))
    assert all(not b.has(sp.Symbol("x", real=True)**2) for b in f.bodies.values())
    x, y = np.array([[-np.inf, 1.0]]), np.array([[1.0, 3.0]])
    pytest.importorskip("numba")
    from redalgebra.runtime import compile as compile_kernel

    for strategy in (None, "levels"):
        got = compile_kernel(f, "cpu", strategy)({"x": x.astype(np.float32), "y": y.astype(np.float32)})
        np.testing.assert_allclose(got["o"], evaluate(parse(text), {"x": x, "y": y})["o"], rtol=1e-6)


def test_a_centred_sum_read_by_a_later_reduction_fuses_as_analyze_says():
    # the rewrite's combination is guarded for an empty row (where(r0_count == 0, 0, …)); a later reduction reading
    # it saw a condition on a reduction result and derive refused what analyze had called fusable
    text = ("input x\nreduce r0 = mean(log(abs(x) + 1))\nreduce r1 = sum((sigmoid(x) - r0)**2)\n"
            "reduce r3 = mean(exp(r1) * (x + 0.5))\nout y = r3")
    assert analyze(parse(text)).fusable
    x = np.random.default_rng(3).normal(size=(3, 50)) * 0.3
    for strategy in (None, "levels"):
        _, _, got, want = _cpu(text, x, strategy)
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5)
    # a condition on a reduction result that is not an empty-row test is still refused
    assert not analyze(parse("input x\nreduce m = max(x)\nreduce s = sum(where(m > 0, x, 0))\nout y = s")).fusable


@pytest.mark.parametrize("text, row", [
    # exp(s) of a partial s = 100 on [100, -95] is inf in float32 while the row's exp(5) is not: the correction form's
    # state x·exp(s) was inf, then inf·0 (NaN for 742.07); ⊕x times exp(s) at the end cannot overflow
    ("input x\nreduce s = sum(x)\nreduce t = sum(exp(s) * x)\nout y = t", [100, -95]),
    # a mean's partial value too: exp(100) on the prefix, exp(2.5) for the row
    ("input x\nreduce s = mean(x)\nreduce t = sum(exp(s) * x)\nout y = t", [100, -95]),
    # a sigmoid underflows to 0 at a partial s = -200: its correction σ(s_new)/σ(s_old) was x/0 (NaN for -0.0335)
    ("input x\nreduce s = sum(x)\nreduce t = sum(sigmoid(s) * x)\nout y = t", [-200, 195]),
])
def test_an_exponential_of_a_dependency_beside_a_tame_g_is_deferred(text, row):
    x = np.array([row], dtype=np.float64)
    f, _, got, want = _cpu(text, x)
    assert analyze(parse(text))["t"].deferred and f.source is not None
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5)
    np.testing.assert_allclose(_cpu(text, x, "row")[2]["y"], want["y"], rtol=1e-5)
    # a softmax's exp(x - m) keeps its correction, the shift that keeps it in range; so does an exponential of a max
    # beside a tame G, the online normalisation: x·exp(-m) for m = max(log(x)) is at most 1 where ⊕x is inf
    assert not analyze(parse("input x\nreduce m = max(x)\nreduce l = sum(exp(x - m))\nout y = l"))["l"].deferred
    norm = "input x > 0\nreduce m = max(log(x))\nreduce t = sum(x * exp(-m))\nout y = t"
    assert not analyze(parse(norm))["t"].deferred
    big = np.array([[2e38, 2e38, 1e38]])
    np.testing.assert_allclose(_cpu(norm, big)[2]["y"], [2.5], rtol=1e-5)


def test_an_exponential_of_a_sum_beside_an_exponential_g_is_left_to_the_level_order():
    # max(exp(r0 - x)) with r0 = sum(y): G = exp(-x) is no tame G to defer beside, and the correction form's partial
    # exp(r0) = exp(200) is inf (NaN for 4.54e-5); named, with a guard, and the CPU's auto takes the level order
    text = "input x\ninput y\nreduce r0 = sum(y)\nreduce r2 = max(exp(r0 - x))\nout o = r2"
    f = derive(parse(text))
    assert f.uncorrectable == ("r2",) and any("sum-like dependency" in g for g in f.guards)
    pytest.importorskip("numba")
    from redalgebra.runtime import compile as compile_kernel

    inputs = {"x": np.zeros((1, 2), np.float32), "y": np.array([[200, -210]], np.float32)}
    kernel = compile_kernel(f, "cpu")
    assert kernel.strategy == "levels"
    np.testing.assert_allclose(kernel(inputs)["o"], evaluate(parse(text), inputs)["o"], rtol=1e-5)
    assert not derive(parse("input x\nreduce m = max(x)\nreduce l = sum(exp(x - m))\nout o = l")).uncorrectable


def test_a_skipped_side_whose_elements_give_nothing_is_left_to_the_one_pass_form():
    # exp(log(x) - m) is x·exp(-m), 0 at x = 0 (where max(log(x)) is -inf); max(x + z) at a -inf x still counts exp(z - m)
    from redalgebra.derive.fused import unskippable

    ok = derive(parse("input x >= 0\nreduce m = max(log(x))\nreduce l = sum(exp(log(x) - m))\nout y = l"))
    assert ok.uncorrectable == () and not any(unskippable(ra, ok.analysis) for ra in ok.analysis.reductions)
    other = derive(parse("input x\ninput z\nreduce m = max(x + z)\nreduce l = sum(exp(z - m))\nout y = l"))
    assert other.uncorrectable == ("l",)
    # x·z at x = -inf is -inf·sign(z): an infinity of either sign, taken as the identity perhaps (0.736 for 1.104)
    signed = derive(parse("input x\ninput z\nreduce m = max(x * z)\nreduce l = sum(exp(z - m))\nout y = l"))
    assert signed.uncorrectable == ("l",)


def test_a_deferred_reduction_a_later_one_reads_without_a_proved_range_is_refused_by_analyze_and_derive_alike():
    # r1 = sum(x / r0), r0 = sum(x) of any sign: no correction form (H = 1/r0's range unproved) and, read by r2, no
    # deferral either; analyze said fusable while derive raised about a count it had added itself
    from redalgebra.errors import NotFusableError

    for later in ("reduce r2 = sum(x + r1)", "reduce r2 = logsumexp(x + r1)"):
        c = parse(f"input x\nreduce r0 = sum(x)\nreduce r1 = sum(x / r0)\n{later}\nout y = r1")
        verdict = analyze(c)
        assert not verdict.fusable and "r2 reads r1 as the row goes" in verdict["r1"].reason
        with pytest.raises(NotFusableError, match="r2 reads r1 as the row goes"):
            derive(c)


def test_a_one_pass_strategy_named_for_a_form_the_guards_flag_warns():
    pytest.importorskip("numba")
    from redalgebra.errors import ExactnessHint
    from redalgebra.runtime import compile as compile_kernel

    f = derive(parse("input x >= 0\nreduce r0 = sum(x)\nreduce r1 = topk(2, x * r0)\nout y = r0"))
    with pytest.warns(ExactnessHint, match="r1"):
        compile_kernel(f, "cpu", "row")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compile_kernel(f, "cpu", "levels")
        compile_kernel(f, "cpu")


def test_a_product_of_sigmoids_of_masked_values_can_be_0():
    # sigmoid(-inf) = 0: a product over a row with a masked element is 0, so H = r0 of max(x * r0) may vanish
    # (deferred), where the correction r0_n / r0_a was 0/0: NaN for 0
    text = "input x\nparam n int\nlet s = where(pos >= n, x, -inf)\nreduce r0 = prod(sigmoid(s))\n" \
           "reduce r1 = max(x * r0)\nout y = r1"
    f = derive(parse(text))
    assert f.source_analysis.signs["r0"].sign == ">=0" and f.source_analysis["r1"].kind == "deferred"
    x = np.array([[0.4, -1.0, 0.5, 2.0, -0.3]] * 2)
    params = {"n": np.array([0, 2])}
    ev = Evaluator(f, {"x": x}, params)
    np.testing.assert_allclose(ev.finalize(ev.incremental())["y"], evaluate(f.source, {"x": x}, params)["y"], rtol=1e-12)


def test_partial_sums_subtracted_at_the_end_are_computed_as_written_where_they_would_cancel():
    # sum(exp(x - m) * (x - m)**2) is s2 - 2 m s1 + m² l over partial sums about 0: at x = 1e4 + N(0, 1) they cancel to
    # nothing (a named 'row' gave 22.4 for 5.24, silently). The CPU's auto and a named one-pass strategy's warning
    # already knew (combined_late); rows now stages them in passes too, each reduction with its dependencies final
    import warnings

    from redalgebra.runtime import compile

    text = "input x\nreduce m = max(x)\nreduce l = sum(exp(x - m))\nreduce s = sum(exp(x - m) * (x - m)**2)\nout y = s / l"
    f = derive(parse(text))
    assert f.combined_late == ("s",) and "s" in f.one_pass_inexact
    x = (1e4 + np.random.default_rng(0).normal(size=(2, 300))).astype(np.float32)
    want = evaluate(f.cascade, {"x": x.astype(np.float64)})["y"]
    np.testing.assert_allclose(compile(f, "cpu")({"x": x})["y"], want, rtol=1e-3)
    with pytest.warns(UserWarning, match="partial sums subtracted at the end"):
        compile(f, "cpu", "row")
    passes = compile(f, "cudasim", "rows", group=8, tile=1, threads=32)  # (300 elements in passes of 32)
    assert passes.spec_for(2, 300, {"x": "float32"})[1].staged
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (staged: no one-pass warning)
        np.testing.assert_allclose(passes({"x": x})["y"], want, rtol=1e-3)
