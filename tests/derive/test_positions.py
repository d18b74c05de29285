"""``pos``, integer params and conditionals in the analysis and the derived forms.

Verdicts (what fuses, what is refused and why) and fused == unfused on random data, through every
form of :mod:`redalgebra.derive.numeric`: the incremental loop, random segmentations merged by random
trees, the staged (non-incremental) segments and the one-pass naive form.
"""

import random

import numpy as np
import pytest
import sympy as sp

from redalgebra import NotFusableError, evaluate, parse, workloads
from redalgebra.derive import Evaluator, analyze, derive, random_bounds
from redalgebra.ir import POS, indicator
from redalgebra.workloads import masks

MASKED = """\
input x
param qpos int
reduce m = max(where(pos <= qpos, x, -inf))
reduce l = sum(where(pos <= qpos, exp(x - m), 0))
reduce p = sum(exp(x - m) * (pos == qpos))   # the probability of the last visible element
out y = p / l
"""

WINDOW = """\
input x
input v[d]
param qpos int
param w int > 0
let s = where(pos <= qpos and pos > qpos - w, x, -inf)   # a sliding window of w keys ending at qpos
reduce m = max(s)
reduce l = sum(exp(s - m))
reduce o = sum(exp(s - m) * v)
out y = o / l
"""


def sym(name, **flags):
    return sp.Symbol(name, real=True, **flags)


def forms(f, inputs, params, keep=None, seed=0):
    """Every derived form's outputs on one problem."""
    ev = Evaluator(f, inputs, params, keep=keep)
    rng = random.Random(seed)
    length = ev.length
    yield "incremental", ev.finalize(ev.incremental())
    for _ in range(3):
        yield "segmented", ev.finalize(ev.segmented(random_bounds(length, rng), rng=rng))
        yield "staged", ev.finalize(ev.segmented(random_bounds(length, rng), form="nonincremental", rng=rng))
    yield "naive", ev.naive()


def assert_all_forms_match(f, inputs, params, keep=None, seed=0, atol=1e-12):
    want = evaluate(f.cascade, inputs, params, keep=keep)
    for form, got in forms(f, inputs, params, keep, seed):
        for o in f.cascade.outputs:
            np.testing.assert_allclose(got[o.name], want[o.name], rtol=1e-9, atol=atol, equal_nan=True,
                                       err_msg=f"{form}: {o.name}")
    return want


# -- verdicts --------------------------------------------------------------------------------------

def test_the_label_term_is_a_reduction_without_dependencies():
    a = analyze(workloads.get("cross_entropy").cascade)
    assert a.fusable
    t = a["t"]
    assert t.fusable and t.deps == () and t.otimes is None and t.F.has(POS)
    assert a["s"].otimes.name == "mul" and a["s"].H == sp.exp(-sym("m"))


def test_alibi_mask_and_bias_are_per_element_atoms():
    a = analyze(workloads.get("alibi_attention").cascade)
    assert a.fusable and all(p.proved for r in a.reductions for p in r.proofs)
    sc = sym("sc")
    assert a["l"].G == sp.exp(sc) and a["l"].H == sp.exp(-sym("m"))
    f = derive(workloads.get("alibi_attention").cascade)
    assert [s.name for s in f.prologue.results] == ["s", "sc"]  # bias and mask computed once per element
    assert f.prologue.steps[1][1].has(POS) and f.prologue.steps[1][1].has(sp.Piecewise)


def test_a_conditional_without_dependencies_inside_a_body_is_an_atom():
    """where(pos <= qpos, exp(x - m), 0) = [pos <= qpos]·exp(x)·exp(-m): separable, G keeps the condition."""
    a = analyze(parse(MASKED))
    assert a.fusable
    qpos, x = sp.Symbol("qpos", integer=True), sym("x")
    assert a["l"].otimes.name == "mul" and a["l"].H == sp.exp(-sym("m"))
    assert sp.simplify(a["l"].G - indicator(POS <= qpos) * sp.exp(x)) == 0
    assert sp.simplify(a["p"].G - indicator(sp.Eq(POS, qpos)) * sp.exp(x)) == 0
    separable = a["l"].proofs[1]
    assert separable.proved and "[pos <= qpos]" in separable.claim


@pytest.mark.parametrize("body, fragment", [
    ("x * (x > m)", "the comparison m < x uses the reduction result m"),
    ("where(x > m, x, 0)", "uses the reduction result m"),
    ("exp(x - m) * (pos < m)", "uses the reduction result m"),
    ("where(m > 0 and pos < 3, x, 0)", "uses the reduction result m"),
    ("where(pos <= 3, x - m, -inf)", "chooses between a value that uses a reduction result and an infinite one"),
])
def test_a_condition_on_a_reduction_result_is_refused_with_its_reason(body, fragment):
    c = parse(f"input x\nreduce m = max(x)\nreduce r = sum({body})\nout y = r")
    a = analyze(c)
    r = a["r"]
    assert not a.fusable and not r.fusable and fragment in r.reason
    assert r.otimes is None and r.G is None and not any(p.proved for p in r.proofs)
    with pytest.raises(NotFusableError, match="r: "):
        derive(c)


def test_the_refusal_is_right_a_thresholded_sum_has_no_merge():
    """sum(x·[x > m]) with m = max(x) is the sum of the elements above the row max: 0. Segment by segment
    it is not (each segment's max is lower), and no correction of the partial sums can recover which
    elements pass, so fusing it would be wrong — the analysis must refuse it, and it does."""
    c = parse("input x\nreduce m = max(x)\nreduce r = sum(x * (x >= m))\nout y = r")
    x = np.array([[1.0, 3.0, 2.0, 5.0]])
    assert evaluate(c, {"x": x})["y"][0] == 5.0            # only the max itself passes
    left = evaluate(c, {"x": x[:, :2]})["r"][0]            # 3, the left segment's own max
    right = evaluate(c, {"x": x[:, 2:]})["r"][0]           # 5
    assert left + right != 5.0 and not analyze(c).fusable


def test_refutations_are_at_points_the_cascade_can_reach():
    """Not separable: the counterexample puts pos at an integer and writes the conditionals out."""
    for body in ("exp(pos * m)", "where(pos <= 2, exp(x - m), x - m)", "exp(x - m) * (pos == 3) + (x - m) * (pos != 3)"):
        r = analyze(parse(f"input x\nreduce m = max(x)\nreduce r = sum({body})"))["r"]
        assert not r.fusable or r.kind == "multi-term"  # a where between separable terms is a sum of them
        sep = next(a for a in r.attempts if a.otimes == "mul").proofs[-1]
        assert sep.status in ("refuted", "unknown")
        if sep.status == "refuted":
            values = sep.counterexample.values
            assert sp.sympify(values["pos"]).is_integer and not any(k.startswith("[") for k in values)
            at = {s: sp.sympify(values[s.name]) for s in sep.lhs.free_symbols | sep.rhs.free_symbols}
            assert abs(complex(sp.N(sep.lhs.xreplace(at) - sep.rhs.xreplace(at), 30))) > 1e-20


def test_codegen_contract_pos_and_integer_params_in_the_fused_cascade():
    f = derive(workloads.get("cross_entropy").cascade)
    label = f.cascade["label"]
    assert label.integer and label.size is None and label.symbol == sp.Symbol("label", integer=True)
    update = dict(f.update.steps)
    t_n = next(e for s, e in update.items() if s.name == "t_n")
    assert POS in t_n.free_symbols and label.symbol in t_n.free_symbols
    assert all(POS not in e.free_symbols for _, e in f.merge.steps)  # a merge sees no element
    assert [s.name for s in f.prologue.results] == []  # pos is read directly, not a prologue value


# -- fused == unfused -------------------------------------------------------------------------------

def test_cross_entropy_all_forms_against_a_numpy_oracle(rng):
    f = derive(workloads.get("cross_entropy").cascade)
    rows, length = 6, 29
    x = rng.normal(size=(rows, length)) * 8
    label = rng.integers(0, length, size=rows)
    want = assert_all_forms_match(f, {"x": x}, {"label": label}, atol=1e-11)
    oracle = np.logaddexp.reduce(x, axis=1) - x[np.arange(rows), label]
    np.testing.assert_allclose(want["loss"], oracle, rtol=0, atol=1e-11)
    keep = rng.random((rows, length)) > 0.3
    keep[np.arange(rows), label] = True
    assert_all_forms_match(f, {"x": x}, {"label": label}, keep=keep, seed=1, atol=1e-11)


def test_segments_see_their_positions_in_the_whole_row(rng):
    """A staged segment [lo, hi) must use pos = lo..hi-1: the label at the end of the row is found."""
    f = derive(workloads.get("cross_entropy").cascade)
    x = rng.normal(size=(2, 12))
    ev = Evaluator(f, {"x": x}, {"label": np.array([11, 6])})
    for form in ("incremental", "nonincremental"):
        got = ev.finalize(ev.segmented([0, 4, 8, 12], form=form))
        np.testing.assert_allclose(got["t"], [x[0, 11], x[1, 6]], rtol=0, atol=0)


def test_alibi_attention_all_forms_with_causal_positions_and_a_fully_masked_row(rng):
    f = derive(workloads.get("alibi_attention").cascade)
    heads, queries, keys, d = 2, 5, 11, 3
    rows = heads * queries
    k, v = rng.normal(size=(rows, keys, d)), rng.normal(size=(rows, keys, d))
    qpos = masks.query_positions(queries, keys, heads)
    qpos[0] = -1  # a query that sees no key: 0/0 = nan, as the reference says
    params = {"q": rng.normal(size=(rows, d)), "scale": 0.4, "slope": masks.alibi_slopes(heads, queries), "qpos": qpos}
    want = assert_all_forms_match(f, {"k": k, "v": v}, params)
    assert np.isnan(want["y"][0]).all() and np.isfinite(want["y"][1:]).all()


def test_masks_in_bodies_and_sliding_windows_all_forms(rng):
    rows, length = 5, 14
    x = rng.normal(size=(rows, length)) * 4
    qpos = np.array([0, 3, 13, 20, 7])
    want = assert_all_forms_match(derive(parse(MASKED)), {"x": x}, {"qpos": qpos})
    visible = np.arange(length)[None, :] <= qpos[:, None]
    p = np.where(visible, np.exp(x - np.where(visible, x, -np.inf).max(1, keepdims=True)), 0)
    last = np.where(qpos < length, p[np.arange(rows), np.minimum(qpos, length - 1)], 0)
    np.testing.assert_allclose(want["y"], last / p.sum(1), rtol=1e-12)
    v = rng.normal(size=(rows, length, 3))
    want = assert_all_forms_match(derive(parse(WINDOW)), {"x": x, "v": v}, {"qpos": qpos, "w": 4})
    j = np.arange(length)[None, :]
    inside = (j <= qpos[:, None]) & (j > qpos[:, None] - 4)
    s = np.where(inside, x, -np.inf)
    with np.errstate(invalid="ignore"):  # the empty window: -inf - (-inf)
        e = np.exp(s - s.max(1, keepdims=True))
        oracle = np.einsum("rl,rld->rd", e / e.sum(1, keepdims=True), v)
    np.testing.assert_allclose(want["y"], oracle, rtol=1e-12, equal_nan=True)
    assert np.isnan(want["y"][3]).all()  # qpos = 20 > L - 1 + 4: the window holds no key


def test_float32_forms_keep_integers_exact(rng):
    f = derive(workloads.get("cross_entropy").cascade)
    x = (rng.normal(size=(3, 40)) * 1e3).astype(np.float32)
    label = np.array([0, 39, 17])
    ev = Evaluator(f, {"x": x}, {"label": label}, dtype=np.float32)
    got = ev.finalize(ev.segmented([0, 13, 40]))
    assert got["loss"].dtype == np.float32
    np.testing.assert_array_equal(got["t"], x[np.arange(3), label])
