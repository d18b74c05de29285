import re

import pytest
import sympy as sp

from redalgebra import RedalgebraError
from redalgebra.codegen import Spec, generate
from redalgebra.codegen.printer import Access, Constants, print_expr
from redalgebra.ir.functions import Dot
from tests.catalogue import FUSABLE, fused

x, m, l, q, k, o = (sp.Symbol(n, real=True) for n in "x m l q k o".split())
ACCESS = Access(scalar={"x": "e_x", "m": "s_m", "l": "s_l"},
                vector={"q": "q[row, {j}]", "k": "float32(k[rr_k, l, {j}])", "o": "s_o[{j}]"},
                size={"q": "D_d", "k": "D_d", "o": "D_d"})


def text(expr, j=None):
    consts = Constants()
    pre, out = print_expr(expr, ACCESS, consts, j)
    return pre, out, consts


def test_numbers_become_named_float32_constants():
    _, out, consts = text(448 * x / sp.Max(sp.Rational(1, 10**12), m) + sp.Rational(1, 2))
    assert "448" not in out and "0.5" not in out
    values = {line.split("(")[1].rstrip(")") for line in consts.lines()}
    assert values == {"448.0", "1e-12", "0.5"} and all(name in out for name in consts.names.values())


def test_rational_coefficients_are_not_integer_divisions():
    _, out, consts = text(x / 2)
    assert re.fullmatch(r"e_x/_K\d", out)


def test_functions_powers_and_guards():
    assert text(sp.exp(x - m) / l)[1] == "math.exp(-s_m + e_x)/s_l"
    assert text(x**2)[1] == "(e_x*e_x)"
    assert text(1 / sp.sqrt(l))[1] == "(_K1/rt_sqrt(s_l + _K0))"  # (+ 0: 1/sqrt(-0.0) is +inf, as pow(-0.0, -0.5))
    assert text(sp.log(l))[1] == "rt_log(s_l)"
    guard = sp.Piecewise((0, sp.Eq(sp.Symbol("m", extended_real=True), -sp.oo)), (x, True))
    assert re.fullmatch(r"\(_K0 if \(s_m == NEG_INF\) else e_x\)", text(guard)[1])


def test_dot_becomes_a_loop_before_the_line():
    pre, out, _ = text(Dot(q, k) * x)
    assert out == "e_x*_acc0"
    assert pre[1] == "for _j0 in range(D_d):" and "float32(k[rr_k, l, _j0])*q[row, _j0]" in pre[2]


def test_vector_expressions_print_at_the_component():
    assert text(o / l, j="j")[1] == "s_o[j]/s_l"


def test_generated_sources_have_no_float64_literals():
    float_literal = re.compile(r"(?<![\w.])\d+\.\d*(?![\w(])")
    for name in FUSABLE:
        for backend, strategy in (("cpu", "row"), ("cuda", "block")):
            src = generate(fused(name), backend, strategy, Spec((("d", 8), ("e", 4), ("n", 5), ("r", 16)))).source
            body = "\n".join(ln for ln in src.splitlines() if "np.float32(" not in ln and not ln.lstrip().startswith(('"""', "#")))
            assert not float_literal.findall(body), (name, backend, float_literal.findall(body)[:3])


def test_fast_exp_is_used_only_when_asked():
    f = fused("safe_softmax")
    fast = generate(f, "cuda", "tile", Spec(fast_exp=True)).source
    accurate = generate(f, "cuda", "tile", Spec()).source
    assert "fast_expf(" in fast and "math.exp(" not in fast.split("def kernel")[1]
    assert "fast_expf" not in accurate and "math.exp(" in accurate


def test_lane_mode_drops_the_component_guard_only_for_whole_slots():
    f = fused("decode_attention")
    whole = generate(f, "cuda", "lanes", Spec((("d", 128),))).source
    partial = generate(f, "cuda", "lanes", Spec((("d", 40),))).source
    assert "V_d = 4" in whole and "if j < D_d" not in whole and "if _j0 < D_d" not in whole
    assert "V_d = 2" in partial and "if j < D_d" in partial and "if _j0 < D_d" in partial
    assert "rt_lane_sum(_acc0_0)" in whole  # the dot product completed across the lanes


def test_constants_are_what_float32_makes_of_them_and_refused_past_its_range():
    # beyond float32's range (and beyond float64's: no OverflowError) or below it, a finite constant would be inf or
    # 0 in the kernel where the float64 reference computes the number: refused, named
    for expr, size in ((x * sp.Integer(10) ** 400, "1.00e\\+400, which is past"),
                       (x * sp.Rational(1, 10**400), "1.00e-400, which is below"),
                       (x - sp.Integer(10) ** 39, "-1.00e\\+39, which is past")):
        with pytest.raises(RedalgebraError, match=f"the derived form holds the constant {size} float32's range"):
            text(expr)
    _, out, consts = text(x * sp.Float(1e-12))
    assert {line.split("(", 1)[1].rstrip(")") for line in consts.lines()} == {"1e-12"}
    # a ratio of integers that float32 cannot hold is one constant (1 + 1e-400 is 1.0), not inf/inf
    _, out, consts = text((1 + sp.Rational(1, 10**400)) * x)
    assert "/" not in out and {line.split("(", 1)[1].rstrip(")") for line in consts.lines()} == {"1.0"}


def test_invariants_are_the_largest_parts_that_read_only_the_fixed_names():
    from redalgebra.codegen.printer import invariants

    x, g, ss, eps, h, m = sp.symbols("x g ss eps h m", real=True)
    fixed = {"ss", "eps", "h", "m"}.issuperset
    root = sp.sqrt(eps + ss / h)
    exprs = [g * x / root, sp.exp(x - m) / ss, x / (h + ss)]
    # the largest, first seen first (1 / sqrt(…) is a power of -1/2: a factor a product prints whole)
    assert invariants(exprs, fixed) == {1 / root: 0, 1 / ss: 1, -m: 2, 1 / (h + ss): 3}
    # as a product prints them: a reciprocal is its divisor, and a divisor that is a name is read as it is
    assert invariants(exprs, fixed, divisors=True) == {1 / root: 0, -m: 1, h + ss: 2}


def test_complex_infinity_and_nan_print_as_the_float32_nan():
    # 1/0 on a guard's branch (an epilogue's empty-state case) is SymPy's zoo: printed as it was, a NameError inside
    # numba at the first call; in the reals it has no sign, NaN as IEEE's 0/0
    guard = sp.Piecewise((sp.zoo, sp.Eq(l, 0)), (x / l, True))
    assert re.fullmatch(r"\(NAN if \(s_l == _K0\) else e_x/s_l\)", text(guard)[1])
    assert text(sp.nan)[1] == "NAN"


def test_a_cascade_whose_epilogue_divides_by_zero_when_empty_compiles():
    import numpy as np

    from redalgebra import derive, evaluate, parse
    from redalgebra.runtime import compile

    c = parse("input x\nreduce r0 = sum(x)\nreduce r1 = sum(x / r0)\nout y = r0 / r1")
    x = np.random.default_rng(0).normal(size=(2, 8)).astype(np.float32)
    np.testing.assert_allclose(compile(derive(c), "cpu")({"x": x})["y"], evaluate(c, {"x": x})["y"], rtol=1e-4)


def test_a_correction_divides_before_it_multiplies():
    # r1_a * r0_n / r0_a: the state over its side's factor (⊕G of that side) first; multiplied first, r1_a * r0_n
    # leaves float32 at r0 = exp(50), and r0_n / r0_a where the sides' factors are exp(60) and exp(-60)
    a0, n0, a1 = (sp.Symbol(n, extended_real=True) for n in ("r0_a", "r0_n", "r1_a"))
    access = Access(scalar={"r0_a": "s_r0", "r0_n": "n_r0", "r1_a": "s_r1"})
    assert print_expr(n0 * a1 / a0, access, Constants())[1] == "(s_r1/s_r0)*n_r0"
    assert "(" not in text(x * m / l)[1]  # no two sides of one state: as written


def test_a_corrected_max_of_large_products_stays_in_range():
    import numpy as np

    from redalgebra import derive, evaluate, parse
    from redalgebra.runtime import compile

    c = parse("input x\ninput z\nreduce r0 = max(exp(x))\nreduce r1 = max(z * r0)\nout y = r1")
    # r1 ≈ 1.3e23 with r0 ≈ 5e21: their product is inf; exp(60) / exp(-60) is inf too
    x = np.array([[50, 49, 48, 47], [1, 2, 3, 4], [-60, 60, 1, 2]], np.float32)
    z = np.array([[25, 24.5, 24, 23.5], [1, 2, 3, 4], [2, 1, 0, 0]], np.float32)
    for backend, strategy in (("cpu", "row"), ("cudasim", "thread")):
        got = compile(derive(c), backend, strategy=strategy)({"x": x, "z": z})["y"]
        np.testing.assert_allclose(got, evaluate(c, {"x": x, "z": z})["y"], rtol=1e-5)


def test_logsumexp_of_a_body_with_a_positive_factor_stays_in_log_space():
    # SymPy writes exp(log(|x| + 1) - m) as (|x| + 1)·exp(-m): logsumexp's ⊕ folding that body must still read as
    # two exponentials, or its second term underflows float32 below -103 (the level order gave -inf where the row's
    # value is -9988); a term of unknown sign is not taken apart
    folded = sp.log(sp.exp(l) + (sp.Abs(x) + 1) * sp.exp(-m))
    shifted = "-s_m + rt_log(abs(e_x) + _K0)"
    assert text(folded)[1] in (f"rt_logaddexp(s_l, {shifted})", f"rt_logaddexp({shifted}, s_l)")
    assert text(sp.log(sp.exp(l) + x * sp.exp(-m)))[1].startswith("rt_log(")


def test_the_level_order_folds_a_logsumexp_far_below_floats_range_of_exp():
    import numpy as np

    from redalgebra import derive, parse
    from redalgebra.runtime import compile

    f = derive(parse("input x >= 0\nreduce m = max(x)\nreduce l = logsumexp(log(x + 1) - m)\nout y = l\n"))
    x = (1e4 + np.random.default_rng(0).random((2, 50))).astype(np.float32)
    xd = x.astype(np.float64)
    want = np.log((xd + 1).sum(1)) - xd.max(1)
    np.testing.assert_allclose(compile(f, "cpu", "levels")({"x": x}, {})["y"], want, rtol=1e-6)


def test_a_function_without_a_kernel_rule_is_refused_even_where_sympy_prints_it_by_its_own_method():
    # Heaviside prints itself (its _sympystr): that name reached numba's typing as an undefined global
    import pytest

    from redalgebra.errors import RedalgebraError

    for f in (sp.Heaviside, sp.sin):
        with pytest.raises(RedalgebraError, match=f"no kernel rule for the function {f.__name__}"):
            text(f(x))
    assert "math.exp" in text(sp.exp(x))[1]  # (the rules the printer has still apply)
