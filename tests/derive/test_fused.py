"""Fused == unfused: the incremental loop, any segmentation, any merge tree, the non-incremental form."""

import random

import numpy as np
import pytest
import sympy as sp
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from redalgebra import evaluate, parse, workloads
from redalgebra.derive import Evaluator, derive, random_bounds, real_arithmetic
from redalgebra.derive.rules import is_stable
from tests.catalogue import FUSABLE, fused, random_inputs


def reference_for(name):
    """The cascade the fused forms are exact for: casts removed (fp8 rounds differently at a running scale)."""
    c = workloads.get(name).cascade
    return real_arithmetic(c) if fused(name).exact_in_reals_only else c


def fused_exact(name):
    f = fused(name)
    return derive(real_arithmetic(f.cascade)) if f.exact_in_reals_only else f


_EXACT = {}


def exact(name):
    if name not in _EXACT:
        _EXACT[name] = fused_exact(name)
    return _EXACT[name]


def assert_matches(got: dict, want: dict, outputs, rtol=1e-9, atol=1e-12):
    """Equal within float64 tolerance, NaN exactly where the reference is NaN."""
    for key in outputs:
        g, w = np.asarray(got[key], dtype=float), np.asarray(want[key], dtype=float)
        assert g.shape == w.shape, key
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True, err_msg=key)


def output_keys(cascade):
    keys = [o.name for o in cascade.outputs]
    keys += [f"{r.name}.index" for r in cascade.reductions if r.monoid.k is not None]
    return keys


@st.composite
def problems(draw):
    name = draw(st.sampled_from(FUSABLE))
    rows, length = draw(st.integers(1, 3)), draw(st.integers(1, 12))
    seed = draw(st.integers(0, 2**31 - 1))
    keep = None
    if draw(st.booleans()):
        keep = np.array(draw(st.lists(st.booleans(), min_size=rows * length, max_size=rows * length))).reshape(rows, length)
        keep[0] = False if draw(st.booleans()) else keep[0]  # sometimes a fully masked row
    minus_inf = name in SCORES and draw(st.booleans())  # sometimes scores of -inf: a whole row, and some elements
    return name, rows, length, seed, keep, minus_inf


SCORES = {"safe_softmax": "x", "logsumexp": "x", "moe_routing": "g"}  # cascades whose input is a score


@settings(max_examples=60)
@given(problems())
def test_incremental_and_every_segmentation_match_the_reference(problem):
    name, rows, length, seed, keep, minus_inf = problem
    f = exact(name)
    inputs, params = random_inputs(f.cascade, rows, length, np.random.default_rng(seed))
    reference_keep = keep
    if minus_inf:  # a score of -inf is a masked element (DESIGN §2): the reference is told so, the fused form not
        score = inputs[SCORES[name]]
        score[0] = -np.inf
        score[:, ::3] = -np.inf
        reference_keep = np.isfinite(score) & (True if keep is None else keep)
        # but a top-k over probabilities selects an element of score -inf (probability 0, as torch.topk does) when
        # fewer than k others are left, where the masked reference leaves the slot empty: compare rows with k left
        k = max((r.monoid.k or 0) for r in f.cascade.reductions)
        assume(all(n == 0 or n >= k for n in reference_keep.sum(axis=1)))
    want = evaluate(f.cascade, inputs, params, keep=reference_keep)
    ev = Evaluator(f, inputs, params, keep=keep)
    rng = random.Random(seed)
    keys = output_keys(f.cascade)
    assert_matches(ev.finalize(ev.incremental()), want, keys)
    assert_matches(ev.finalize(ev.segmented(random_bounds(length, rng), rng=rng)), want, keys)
    if not minus_inf:  # the staged form is the unfused one: it computes -inf - (-inf) = nan like an unmasked reference
        got = ev.finalize(ev.segmented(random_bounds(length, rng), form="nonincremental", rng=rng))
        assert_matches(got, want, keys)


@settings(max_examples=30)
@given(st.sampled_from(FUSABLE), st.integers(3, 12), st.integers(0, 2**31 - 1))
def test_merge_is_associative_and_commutative_on_real_states(name, length, seed):
    f = exact(name)
    inputs, params = random_inputs(f.cascade, 2, length, np.random.default_rng(seed))
    ev = Evaluator(f, inputs, params)
    i, j = sorted(random.Random(seed).sample(range(1, length), 2)) if length > 2 else (1, 2)
    a, b, c = ev.incremental(0, i), ev.incremental(i, j), ev.incremental(j, length)
    left, right = ev.merge(ev.merge(a, b), c), ev.merge(a, ev.merge(b, c))
    swapped = ev.merge(ev.merge(b, a), c)
    for key in left:
        np.testing.assert_allclose(left[key], right[key], rtol=1e-9, atol=1e-12, err_msg=key)
        np.testing.assert_allclose(left[key], swapped[key], rtol=1e-9, atol=1e-12, err_msg=key)


@pytest.mark.parametrize("name", FUSABLE)
def test_identity_is_neutral_and_length_one_segments_are_lifts(name, rng):
    f = exact(name)
    inputs, params = random_inputs(f.cascade, 2, 5, rng)
    ev = Evaluator(f, inputs, params)
    whole = ev.incremental()
    with_identity = ev.merge(ev.identity(), ev.merge(whole, ev.identity()))
    for key in whole:
        np.testing.assert_allclose(with_identity[key], whole[key], rtol=1e-12, err_msg=key)
    for l in range(5):
        lifted, staged = ev.lift(l), ev.nonincremental(l, l + 1)
        # an element masked by a score of -inf (alibi_attention's where(pos <= qpos, s, -inf)): staged, it
        # computes -inf - (-inf) = nan, like the unfused reference; its lift must act as the identity in a merge
        masked = np.zeros(2, bool)
        for key in lifted:
            masked |= np.isnan(staged[key]).reshape(2, -1).any(axis=1)
        for key in lifted:
            np.testing.assert_allclose(lifted[key][~masked], staged[key][~masked], rtol=1e-12, err_msg=key)
        if masked.any():
            merged = ev.merge(whole, lifted)
            for key in whole:
                np.testing.assert_allclose(merged[key][masked], whole[key][masked], rtol=1e-12, err_msg=key)


def test_a_row_of_minus_infinity_is_an_ordinary_input():
    f = fused("safe_softmax")
    x = np.array([[-np.inf] * 4, [1.0, -np.inf, 2.0, -np.inf]])
    want = evaluate(f.cascade, {"x": x})
    got = Evaluator(f, {"x": x}).finalize(Evaluator(f, {"x": x}).incremental())
    np.testing.assert_allclose(got["y"], want["y"], equal_nan=True)
    assert np.isnan(got["y"][0]).all() and got["l"][0] == 0  # 0/0: no element, and no NaN inside the state


def test_fp8_fusion_is_exact_in_reals_and_its_rounding_difference_is_measured(rng):
    f = fused("fp8_quant_gemm")
    inputs, params = random_inputs(f.cascade, 4, 64, rng)
    want = evaluate(f.cascade, inputs, params)["y"]
    ev = Evaluator(f, inputs, params)
    staged = ev.finalize(ev.nonincremental())["y"]
    running = ev.finalize(ev.incremental())["y"]
    np.testing.assert_allclose(staged, want, rtol=1e-12)  # one segment staged: the same rounding
    rel = np.abs(running - want).max() / np.abs(want).max()
    assert 0 < rel < 0.1  # quantised at a running scale: close, not bitwise
    zero = Evaluator(f, {"x": np.zeros((1, 8)), "w": np.ones((1, 8, 3))}, {})
    np.testing.assert_array_equal(zero.finalize(zero.incremental())["y"], np.zeros((1, 3)))


@pytest.mark.parametrize("name", ["safe_softmax", "logsumexp", "attention", "moe_routing", "cross_entropy"])
def test_float32_incremental_stays_finite_where_the_naive_fused_form_overflows(name, rng):
    f = fused(name)
    inputs, params = random_inputs(f.cascade, 3, 16, rng, scale=1e4, dtype=np.float32)
    ref = evaluate(f.cascade, inputs, params, dtype=np.float32)
    ev = Evaluator(f, inputs, params, dtype=np.float32)
    inc, naive = ev.finalize(ev.incremental()), ev.naive()
    out = f.cascade.outputs[0].name
    finite = np.isfinite(ref[out])
    assert finite.any()
    assert np.isfinite(inc[out])[finite].all()
    assert inc[out].dtype == np.float32
    assert not np.isfinite(naive[out]).all()  # sum of exp(x) overflows float32


@pytest.mark.parametrize("name", FUSABLE)
def test_corrections_are_stable_and_proved_equal_to_the_raw_quotient(name):
    f = fused(name)
    for corr in f.corrections.values():
        assert is_stable(corr.stable) and corr.proof.proved


def test_shared_subexpressions_are_computed_once():
    f = fused("attention")
    m_a, m_n = sp.Symbol("m_a", extended_real=True), sp.Symbol("m_n", extended_real=True)
    rhs = [e for _, e in f.merge.steps]
    assert sum(e == sp.exp(m_a - m_n) for e in rhs) == 1  # one correction, used by l and o
    uses = [e for e in rhs if any(isinstance(a, sp.exp) for a in sp.preorder_traversal(e))]
    assert len(uses) == 2  # exp(m_a - m_n) and exp(m_b - m_n), each once


def test_causal_attention_matches_the_reference_row_by_row(rng):
    from redalgebra.workloads.masks import causal

    f = fused("attention")
    heads, queries, keys = 2, 5, 7
    inputs, params = random_inputs(f.cascade, heads * queries, keys, rng)
    keep = causal(queries, keys, heads)
    assert keep[0].sum() == keys - queries + 1 and keep[queries - 1].all()
    ev = Evaluator(f, inputs, params, keep=keep)
    got = ev.finalize(ev.segmented([0, 3, 7], rng=random.Random(0)))
    assert_matches(got, evaluate(f.cascade, inputs, params, keep=keep), ["y"])


def test_a_segment_whose_sum_cancels_to_zero_is_not_mistaken_for_an_empty_one():
    """s = Σx can be 0 on real elements: the merge must not skip such a segment as if it were empty."""
    from redalgebra import parse

    f = derive(parse("input x\nreduce s = sum(x)\nreduce r = sum(x**2 * exp(s))\nout y = r"))
    x = np.array([[1.0, -1.0, 3.0, 2.0]])
    ev = Evaluator(f, {"x": x})
    got = ev.finalize(ev.segmented([0, 2, 4]))["y"]  # the first segment sums to 0
    np.testing.assert_allclose(got, evaluate(f.cascade, {"x": x})["y"], rtol=1e-12)


def test_a_vanishing_denominator_is_deferred_not_nan():
    from redalgebra import parse

    f = derive(parse("input x\nreduce a = max(abs(x))\nreduce r = sum((x + 1) / a)\nout y = r"))
    assert f.source_analysis["r"].kind == "deferred" and not f.uncorrectable
    x = np.array([[0.0, 0.0, 2.0]])  # the first element alone has a = 0: H = 1/a is not invertible there
    ev = Evaluator(f, {"x": x})
    np.testing.assert_allclose(ev.finalize(ev.incremental())["y"], evaluate(f.source, {"x": x})["y"], rtol=1e-12)


def test_a_top_k_list_read_inside_a_later_reduction_is_refused_with_its_reason():
    from redalgebra import NotFusableError, analyze, parse

    c = parse("input g\nreduce t = topk(8, g)\nreduce s = sum(exp(g - t))\nout y = s\n", "topk_later")
    verdict = analyze(c)["s"]
    assert not verdict.fusable and "top-k list t" in verdict.reason
    with pytest.raises(NotFusableError, match="not inside a later reduction"):
        derive(c)


@pytest.mark.parametrize("text,x", [("input x\nreduce t = topk(2, x)\nout w = t\n", [1, np.nan, 3, 2]),
                                    ("input x\nreduce m = max(x)\nreduce t = topk(4, exp(x - m))\nout w = t\n",
                                     [2, np.inf])])
def test_the_derived_forms_rank_a_top_k_as_the_reference_with_nan_and_infinite_maxima(text, x):
    # the numeric evaluation of the incremental form and of segment merges: NaN above every number, an empty slot
    # -inf at index -1 whatever its correction (0 or NaN where the max reaches +inf) made of it (the elements after
    # such a max have no correction: only the two elements of [2, inf] are asked)
    from redalgebra.derive.numeric import Evaluator

    f = derive(parse(text))
    x = np.array([x], float)
    want = evaluate(f.cascade, {"x": x})["t.index"]
    ev = Evaluator(f, {"x": x})
    for got in (ev.incremental(), ev.segmented([0, 1, x.shape[1]]), ev.segmented([0, x.shape[1] - 1, x.shape[1]])):
        np.testing.assert_array_equal(np.asarray(got["t.index"]).reshape(want.shape), want)


def test_the_evaluator_finalizes_a_constant_output_in_the_references_layout():
    # an output that is a number (out y = 1) stayed 0-d and the layout's indexing failed (IndexError)
    c = parse("input x\nreduce s = sum(x)\nout y = 1\nout z = s * 2")
    x = np.arange(16.0).reshape(2, 8)
    ev = Evaluator(derive(c), {"x": x})
    got, want = ev.finalize(ev.incremental()), evaluate(c, {"x": x})
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize("text,x", [
    ("input x\nreduce m = max(x)\nreduce s = sum(exp(x - 2*m))\nout y = s", [-100.0, 50.0]),
    ("input x\nreduce m = max(2*x)\nreduce s = sum(exp(x - m))\nout y = s", [-100.0, 50.0]),
    ("input x\nreduce n = min(x)\nreduce s = sum(exp(2*n - x))\nout y = s", [100.0, -50.0]),
    ("input x\nreduce r = max(abs(x))\nreduce s = min(exp(2*(x*x - r)))\nout y = s", [10.0, 100.0])])
def test_a_running_max_that_does_not_bound_the_exponentials_is_named_and_the_cpu_computes_it_exactly(text, x):
    # a prefix's terms overflow where the row's do not (exp(x - 2m) at x = m = -100 is exp(100)): the one-pass forms
    # are NaN there, so the guards say so and the CPU's auto takes the level order
    from redalgebra.runtime import compile

    f = derive(parse(text))
    assert f.uncorrectable == ("s",)
    assert any("does not bound them" in g for g in f.guards)
    row = np.array([x], np.float32)
    want = evaluate(f.cascade, {"x": row.astype(np.float64)})["y"]
    assert np.isfinite(want).all()
    np.testing.assert_allclose(compile(f, "cpu")({"x": row})["y"], want, rtol=1e-5)
    with pytest.warns(UserWarning, match="one-pass form"):
        assert np.isnan(compile(f, "cpu", "row")({"x": row})["y"]).all()  # (what the guard warns of)


@pytest.mark.parametrize("text", [
    "input x\nreduce c = sum(1)\nreduce r = min(c + x * x)\nreduce s = sum(exp(x - r))\nout y = s",
    "input x\nreduce c = sum(x >= 0)\nreduce r = min((x > 0) + c)\nreduce s = sum(exp(x - r))\nout y = s",
    "input x\nreduce c = sum(1)\nlet z = c + x * x\nreduce r = min(z)\nreduce s = sum(exp(x - r))\nout y = s"])
def test_a_min_over_a_count_is_no_running_min_and_the_cpu_computes_it_exactly(text):
    # r = min(c + x²) is corrected as the count c grows: 19601 after 140, the first of 60 elements, and 60 at the row's
    # end. It neither only falls nor only rises, so exp(x - r) underflows on the prefix and its correction overflows
    # (the one-pass form NaN or inf, where the row's sum is 5.5e34); it was taken for a running min that bounds them
    from redalgebra.runtime import compile

    f = derive(parse(text))
    assert f.uncorrectable == ("s",) and any("or of a max or min over one" in g for g in f.guards)
    row = np.zeros((1, 60), np.float32)
    row[0, 0] = 140.0
    want = evaluate(f.cascade, {"x": row.astype(np.float64)})["y"]
    assert np.isfinite(want).all()
    np.testing.assert_allclose(compile(f, "cpu")({"x": row})["y"], want, rtol=1e-5)
    with pytest.warns(UserWarning, match="one-pass form"):
        assert not np.isfinite(compile(f, "cpu", "row")({"x": row})["y"]).all()  # (what the guard warns of)


@pytest.mark.parametrize("text", ["input x\nreduce m = max(log(x))\nreduce s = sum(x * exp(-m))\nout y = s",
                                  "input x\nreduce m = max(x)\nreduce s = sum(x * exp(x - m))\nout y = s",
                                  "input x\nreduce m = max(x + 1)\nreduce s = sum(exp(x - m))\nout y = s"])
def test_a_running_max_that_bounds_the_exponentials_keeps_the_one_pass_form(text):
    # x·exp(-m) ≤ 1 for m = max(log x); x·exp(x - m) ≤ x; exp(x - m) ≤ exp(-1) for m = max(x + 1)
    assert derive(parse(text)).uncorrectable == ()


@pytest.mark.parametrize("text,name", [
    ("input x\nreduce s = sum(exp(x))\nreduce r = sum(x / s)\nout y = r", None),
    ("input x\ninput z\nreduce s = sum(sigmoid(z))\nreduce r = max(x * x / s)\nout y = r", None),
    ("input x\nreduce s = sum(exp(x))\nreduce r = sum(x / s)\nreduce q = sum(x * r)\nout y = q", "r")])
def test_a_sum_of_exponentials_that_underflows_to_zero_on_a_prefix_is_no_safe_denominator(text, name):
    # positive in the reals, 0 in float32 on a prefix of elements below -103 (exp(-200)): the correction 1/s was
    # x/0 there and the result NaN; read by outputs alone the division is deferred to the row's s, read by a later
    # reduction it is named and the CPU's auto takes the level order
    from redalgebra.runtime import compile

    f = derive(parse(text))
    assert f.analysis.signs["s"].underflows and f.uncorrectable == ((name,) if name else ())
    row = np.array([[-200.0, 5.0, 1.0]], np.float32)
    inputs = {"x": row, "z": row} if "input z" in text else {"x": row}
    want = evaluate(f.cascade, {k: v.astype(np.float64) for k, v in inputs.items()})["y"]
    np.testing.assert_allclose(compile(f, "cpu")(inputs)["y"], want, rtol=1e-5)
    if name is None:  # (deferred: the one-pass form is exact too)
        np.testing.assert_allclose(compile(f, "cpu", "row")(inputs)["y"], want, rtol=1e-5)


def test_a_shifted_sum_of_exponentials_is_at_least_one_on_any_prefix():
    # the max's own element gives exp(0) = 1: no prefix sums to 0, so softmax's l divides as before
    f = derive(parse("input x\nreduce m = max(x)\nreduce l = sum(exp(x - m))\nreduce r = sum(x / l)\nout y = r"))
    assert not f.analysis.signs["l"].underflows and f.uncorrectable == ()


def test_a_compound_max_body_used_whole_is_read_as_one_value_when_checking_skipped_sides():
    # exp(x*t - m) for m = max(x*t) tends to 0 where x*t is -inf, as exp(s - m) does with a let s = x*t: the check took
    # limits in x and t apart, could not say, and named l uncorrectable (the CPU then ran the level order)
    assert derive(parse("input x\nparam t\nreduce m = max(x*t)\nreduce l = sum(exp(x*t - m))\nout y = l")
                  ).uncorrectable == ()
    # where the body's value at -inf still contributes, it is named, as with the let
    for text in ("input x\nparam t\nreduce m = max(x*t)\nreduce l = sum(exp(tanh(x*t) - m))\nout y = l",
                 "input x\nparam t\nlet s = x*t\nreduce m = max(s)\nreduce l = sum(exp(tanh(s) - m))\nout y = l"):
        assert derive(parse(text)).uncorrectable == ("l",)

