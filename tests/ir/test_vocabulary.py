"""The elementwise functions tanh, sigmoid, erf, log1p, floor and round, each through the whole pipeline:
parse, signs, analysis, derivation, the float64 reference, text and LaTeX, and generated kernels."""

import math

import numpy as np
import pytest

import redalgebra as ra
from redalgebra.codegen.helpers import HELPER_CONSTANTS, HELPERS
from redalgebra.derive.prepare import sign_facts
from redalgebra.ir import to_text
from redalgebra.ir.printer import to_latex
from redalgebra.runtime.check import check
from redalgebra.runtime.formats import to_float

CASES = {
    # Gemma-2's logit soft-capping, then a softmax
    "tanh": ("input x\nlet t = 30 * tanh(x / 30)\nreduce m = max(t)\nreduce l = sum(exp(t - m))\nout y = exp(t - m) / l\n",
             r"\tanh"),
    "sigmoid": ("input x\nreduce s = sum(sigmoid(x))\nreduce m = max(x)\nreduce l = sum(exp(x - m) * sigmoid(x))\n"
                "out y = exp(x - m) * sigmoid(x) / l + s\n", r"\sigma"),
    # log-sum-exp as m + log1p(l - 1) (l >= 1), and softplus(x - m) per element
    "log1p": ("input x\nreduce m = max(x)\nreduce l = sum(exp(x - m))\nout y = m + log1p(l - 1)\n"
              "out z = log1p(exp(x - m))\n", r"\operatorname{log1p}"),
    "erf": ("input x\nreduce s = sum(x * x)\nout y = erf(x / sqrt(s))\n", r"\operatorname{erf}"),
    # int8 absmax quantisation, and its scale
    "round": ("input x\nreduce a = max(abs(x))\nout q = round(x * 127 / max(a, 1e-12))\nout scale = max(a, 1e-12) / 127\n",
              r"\operatorname{round}"),
    # int4 min-max quantisation (asymmetric, 0 … 15): the ends land on 0.5 and 15.5, away from floor's jumps
    "floor": ("input x\nreduce lo = min(x)\nreduce hi = max(x)\nout q = floor((x - lo) * 15 / max(hi - lo, 1e-12) + 0.5)\n",
              r"\lfloor"),
}
# every function in one kernel, for the simulator
ALL = """\
input x
let t = 30 * tanh(x / 30)
reduce m = max(t)
reduce l = sum(exp(t - m) * sigmoid(x))
reduce a = max(abs(x))
out y = exp(t - m) * sigmoid(x) / l + erf(x / max(a, 1e-12)) + log1p(l)
out q = round(x * 127 / max(a, 1e-12))
out f = floor(x * 7.5 / max(a, 1e-12))
"""


@pytest.mark.parametrize("name", CASES)
def test_each_function_fuses_and_its_cpu_kernel_matches_the_reference(name):
    results = check(ra.derive(ra.parse(CASES[name][0], name)), "cpu")
    assert all(r.passed for r in results), "\n".join(r.line() for r in results)


def test_every_function_on_the_cuda_simulator():
    # the rows kernels print through the statement tree, the others through the text skeletons: one each
    # would double the time; the printer's function table is shared, and the H200 ran both (rows, tile)
    results = check(ra.derive(ra.parse(ALL, "all")), "cudasim", "rows", shapes=((2, 37),))
    assert all(r.passed for r in results), "\n".join(r.line() for r in results)


@pytest.mark.parametrize("name", ["round", "floor"])
def test_quantised_values_are_the_references_exactly(name):
    """``check`` measures errors relative to the largest value, which a fully masked row makes huge:
    here, unmasked rows, and every quantised value equal to the float64 reference's."""
    f = ra.derive(ra.parse(CASES[name][0]))
    x = (np.random.default_rng(1).normal(size=(4, 301)) * 3).astype(np.float32)
    got = to_float(ra.compile(f, "cpu")({"x": x})["q"])
    want = ra.evaluate(f.cascade, {"x": x.astype(np.float64)})["q"]
    assert np.array_equal(got, want)
    assert {"round": (-127, 127), "floor": (0, 15)}[name] == (want.min(), want.max())


EDGES = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 0.49999997, -0.49999997, 8388607.5, 1e30, -0.0, 0.0,
                  -1.0, -2.0, -0.3, 1e-8, np.inf, -np.inf, np.nan], np.float32)
ELEMENTWISE = ("input x\nreduce m = max(x)\nout r = round(x)\nout f = floor(x)\nout t = tanh(x)\nout s = sigmoid(x)\n"
               "out e = erf(x)\nout p = log1p(x)\n")


def test_edges_and_ties_through_a_compiled_cpu_kernel():
    """Ties to even (0.5 → 0, 1.5 → 2, 2.5 → 2, -0.5 → -0), floor, ±inf, NaN, log1p at and below -1: the
    kernel's float32 values are the reference's, bit for bit where the reference is exact in float32."""
    f = ra.derive(ra.parse(ELEMENTWISE))
    got = ra.compile(f, "cpu")({"x": EDGES[None]})
    want = ra.evaluate(f.cascade, {"x": EDGES[None].astype(np.float64)})
    assert np.array_equal(got["r"][0], np.rint(EDGES), equal_nan=True)
    assert np.array_equal(got["r"][0, :7], [0, 2, 2, -0.0, -2, -2, 4])
    assert np.array_equal(np.signbit(got["r"][0]), np.signbit(np.rint(EDGES)))  # -0.5 rounds to -0, as in NumPy
    for name in "rf":
        assert np.array_equal(got[name][0], want[name][0].astype(np.float32), equal_nan=True), name
    for name in "tsep":
        g, w = got[name][0].astype(np.float64), want[name][0]
        assert np.array_equal(np.isnan(g), np.isnan(w)) and np.array_equal(g[np.isinf(w)], w[np.isinf(w)]), name
        finite = np.isfinite(w)
        np.testing.assert_allclose(g[finite], w[finite], rtol=2e-7, atol=1e-30, err_msg=name)
    p = dict(zip(EDGES.tolist(), got["p"][0].tolist()))
    assert p[-1.0] == -np.inf and np.isnan(p[-2.0]) and p[np.inf] == np.inf
    assert (got["t"][0, -3:-1] == [1, -1]).all() and (got["s"][0, -3:-1] == [1, 0]).all()
    assert (got["e"][0, -3:-1] == [1, -1]).all()


def test_the_helpers_round_and_floor_like_numpy_in_float32():
    namespace: dict = {}
    exec("import math\nimport numpy as np\nfrom numba import njit, int32, float32\n" + HELPER_CONSTANTS  # noqa: S102
         + HELPERS.replace("{device}", "njit"), namespace)
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)  # every exponent
    quarters = rng.integers(-2**25, 2**25, 20000) / 4  # ties and their neighbours, up to 2**23
    xs = np.concatenate([bits, quarters.astype(np.float32), (rng.normal(size=20000) * 10).astype(np.float32), EDGES])
    xs = xs[~np.isnan(xs)]
    for helper, want in (("rt_round", np.rint), ("rt_floor", np.floor)):
        fn = namespace[helper]
        got = np.array([fn(x) for x in xs], np.float32)
        assert np.array_equal(got.view(np.uint32), want(xs).view(np.uint32)), helper  # -0.0 included
        assert [str(s) for s in fn.nopython_signatures] == ["(float32,) -> float32"]  # no float64 on the way
    assert np.isnan(namespace["rt_round"](np.float32(np.nan))) and np.isnan(namespace["rt_floor"](np.float32(np.nan)))
    log1p = namespace["rt_log1p"]
    assert [log1p(np.float32(v)) for v in (-2, -1, 0, np.inf)][1:] == [-np.inf, 0, np.inf] and np.isnan(log1p(np.float32(-2)))
    assert [str(s) for s in log1p.nopython_signatures] == ["(float32,) -> float32"]


def test_the_reference():
    x = np.array([[-np.inf, -3.0, -1.0, -0.5, 0.0, 0.5, 1.5, 2.5, 1e-12, np.inf]])
    out = ra.evaluate(ra.parse(ELEMENTWISE), {"x": x})
    assert np.array_equal(out["e"][0], [math.erf(v) for v in x[0]])
    assert np.array_equal(out["r"][0], np.rint(x[0])) and np.array_equal(out["f"][0], np.floor(x[0]))
    assert np.array_equal(out["t"][0], np.tanh(x[0])) and out["p"][0, 8] == np.log1p(1e-12) != np.log(1 + 1e-12)
    np.testing.assert_allclose(out["s"][0], 1 / (1 + np.exp(-x[0])), rtol=0)
    single = ra.evaluate(ra.parse(ELEMENTWISE), {"x": x}, dtype=np.float32)
    assert all(v.dtype == np.float32 for v in single.values())  # erf's vectorised math.erf included


@pytest.mark.parametrize("name", CASES)
def test_text_round_trip_and_latex(name):
    text, command = CASES[name]
    c = ra.parse(text)
    assert ra.parse(to_text(c)) == c and f"{name}(" in to_text(c)
    assert command in to_latex(c)


def test_signs_are_inferred_where_sound():
    c = ra.parse("input x\nreduce s = sum(sigmoid(x))\nreduce t = sum(tanh(exp(x)))\nreduce e = max(erf(-exp(x)))\n"
                 "reduce p = sum(log1p(x * x))\nreduce f = sum(floor(x * x))\nreduce r = sum(round(abs(x)))\n"
                 "reduce u = sum(tanh(x))\nreduce n = sum(log1p(-x * x))\nreduce k = max(round(-abs(x)))\n")
    signs = {name: fact.sign for name, fact in sign_facts(c).items()}
    assert signs == {"x": None, "s": ">0", "t": ">0", "e": "<0", "p": ">=0", "f": ">=0", "r": ">=0",
                     "u": None, "n": None, "k": "<=0"}  # round(-0.3) is 0: not negative


def test_a_positive_sum_of_sigmoids_scales_a_top_k_and_an_unsigned_one_does_not():
    fuses = ra.analyze(ra.parse("input x\nreduce s = sum(sigmoid(x))\nreduce t = topk(2, x / s)\nout y = sum(t)\n"))
    assert fuses.fusable and fuses["t"].otimes.name == "mul"
    assert not ra.analyze(ra.parse("input x\nreduce s = sum(tanh(x))\nreduce t = topk(2, x / s)\nout y = sum(t)\n")).fusable


def test_softplus_after_a_max_shift_is_refused_with_a_counterexample():
    c = ra.parse("input x\nreduce m = max(x)\nreduce p = sum(log1p(exp(x - m)))\nout y = m + p\n")
    assert not ra.analyze(c).fusable
    with pytest.raises(ra.NotFusableError, match="not separable"):
        ra.derive(c)


def test_the_prover_evaluates_them_and_knows_round_jumps():
    import sympy as sp

    from redalgebra.ir.functions import RoundHalfEven, Sigmoid
    a = sp.Symbol("a", real=True)
    assert RoundHalfEven(sp.Rational(5, 2)) == 2 and RoundHalfEven(sp.Rational(-1, 2)) == 0
    assert sp.N(RoundHalfEven(sp.exp(1))) == sp.Float(3) and Sigmoid(0) == sp.Rational(1, 2)
    assert abs(sp.N(Sigmoid(1), 30) - 1 / (1 + math.exp(-1))) < 1e-15
    p = ra.prove_equal(sp.floor(a + sp.Rational(1, 2)), RoundHalfEven(a), claim="round is floor(a + 1/2)")
    assert p.status == "refuted" and p.counterexample.values == {"a": sp.Rational(1, 2)}
    assert ra.prove_equal(Sigmoid(a) * Sigmoid(a), Sigmoid(2 * a), claim="not a square").status == "refuted"


@pytest.mark.parametrize("text,message", [
    ("input x\nreduce s = sum(tanh(x, x))", "tanh takes one argument, got 2"),
    ("input x\nreduce s = sum(round())", "expected a number, a name or '('"),
    ("input x\nreduce s = sum(tanhh(x))", "known functions: exp, log, log1p, sqrt, abs, tanh, sigmoid, erf, floor, round"),
    ("input round\nreduce s = sum(round)", "'round' is a reserved word"),
    ("input x\nreduce s = sum(x * sigmoid)", "sigmoid is a function; call it as sigmoid(...)"),
])
def test_misuse_is_a_syntax_error_with_a_message(text, message):
    with pytest.raises(ra.CascadeSyntaxError) as err:
        ra.parse(text)
    assert message in str(err.value)


MEAN = """\
input x
reduce mu = mean(x)
reduce var = mean((x - mu)**2)
out rstd = 1 / sqrt(var + 1e-5)
out centred = (x - mu) * rstd
"""


def test_mean_is_a_sum_over_a_count_of_the_kept_elements_through_the_pipeline():
    c = ra.parse(MEAN)
    names = [s.name for s in c.statements]
    assert names[:4] == ["x", "mu_sum", "mu_count", "mu"] and "var" in names
    assert ra.parse(to_text(c)) == c  # it prints as what it means and reads back the same
    x = np.random.default_rng(3).normal(2.0, 1.5, size=(4, 33))
    keep = np.random.default_rng(4).random((4, 33)) > 0.3
    ref = ra.evaluate(c, {"x": x}, {}, keep)
    for r in range(4):
        k = x[r][keep[r]]
        assert math.isclose(ref["rstd"][r], 1 / math.sqrt(k.var() + 1e-5), rel_tol=1e-12)
    fused = ra.derive(c)
    results = check(fused, "cpu", dtypes=("float32", "bfloat16"))
    assert all(r.passed for r in results), "\n".join(r.line() for r in results)
    # only after 'reduce NAME =' is mean the reducer: it still names a value, and its parts avoid taken names
    other = ra.parse("input x\nreduce m = mean(x)\nlet m_sum = x * 2\nreduce s = sum(m_sum - m)\nout mean = s\n")
    assert [s.name for s in other.reductions][:2] == ["m_sum1", "m_count"]
    with pytest.raises(ra.CascadeSyntaxError, match="reduces one expression"):
        ra.parse("input x\nreduce m = mean(x, x)\nout y = m\n")


def test_param_bounds_other_than_zero_are_read_printed_and_drawn_inside():
    from redalgebra.runtime.check import random_problem

    text = ("input x\nparam n > 1\nparam c >= 0.5\nparam t < -2\nparam k int > 2\nreduce s = sum(x)\n"
            "reduce v = sum((x - s / n)**2)\nout var = v / (n - 1) + c / t\nout kk = k\n")
    c = ra.parse(text)
    params = {p.name: p for p in c.params}
    assert params["n"].bound == (">", 1) and params["n"].sign == ">0"   # the analysis knows n > 0
    assert params["t"].sign == "<0" and params["c"].sign == ">0" and params["k"].integer
    assert ra.parse(to_text(c)) == c and "param c >= 0.5" in to_text(c)
    assert ra.parse("input x\nparam m > -1\nreduce s = sum(x)\nout y = s\n").params[0].sign is None
    fused = ra.derive(c)
    for seed in range(5):
        _, drawn, _ = random_problem(fused, 4, 7, np.random.default_rng(seed))
        assert drawn["n"] > 1 and drawn["c"] >= 0.5 and drawn["t"] < -2 and (drawn["k"] > 2).all()
    results = check(fused, "cpu")
    assert all(r.passed for r in results), "\n".join(r.line() for r in results)
    with pytest.raises(ra.CascadeSyntaxError, match="for a scalar param"):
        ra.parse("input x\nparam q[d] > 1\nreduce s = sum(x)\nout y = s\n")
    with pytest.raises(ra.CascadeSyntaxError, match="bound is a number"):
        ra.parse("input x\nparam n > y\nreduce s = sum(x)\nout y = s\n")
