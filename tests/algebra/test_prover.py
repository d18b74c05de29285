"""The prover's required verdicts, its soundness traps, and its counterexamples."""

import mpmath
import pytest
import sympy as sp

from redalgebra import RedalgebraError
from redalgebra.algebra import Proof, monoids, prove_distributes, prove_equal, prove_monoid, user_monoid
from redalgebra.algebra.laws import prove_associative, prove_commutative, prove_identity

a, b, c = sp.symbols("a b c", real=True)
x, y = sp.symbols("x y")


def assert_really_violates(proof: Proof):
    """An independent check: evaluate both sides at the counterexample with mpmath at 40 digits."""
    cx = proof.counterexample
    assert cx is not None
    mpmath.mp.dps = 40
    at = {sp.Symbol(k, real=True): sp.sympify(v) for k, v in cx.values.items()}
    lhs = complex(sp.N(proof.lhs.xreplace(at), 40))
    rhs = complex(sp.N(proof.rhs.xreplace(at), 40))
    assert abs(lhs - rhs) > 1e-12 * max(1.0, abs(lhs), abs(rhs))


def test_add_distributes_over_max():
    p = prove_distributes(monoids.max, monoids.add)
    assert p.status == "proved"
    assert p.lhs == sp.Max(a, b) + c and p.rhs == sp.Max(a + c, b + c)


def test_mul_distributes_over_add():
    assert prove_distributes(monoids.add, monoids.mul).status == "proved"


@pytest.mark.parametrize("assumptions", [{"c": ">=0"}, {"c": ">= 0"}, [c >= 0], c >= 0, {c: ">0"}])
def test_mul_over_max_needs_a_sign_on_c(assumptions):
    bare = prove_distributes(monoids.max, monoids.mul)
    assert bare.status == "refuted"
    assert_really_violates(bare)
    assert bare.counterexample.values["c"] < 0
    signed = prove_distributes(monoids.max, monoids.mul, assumptions=assumptions)
    assert signed.status == "proved" and signed.assumptions and signed.assumptions[0].startswith("c >")


def test_add_does_not_distribute_over_mul():
    p = prove_distributes(monoids.mul, monoids.add)
    assert p.status == "refuted"
    assert p.counterexample.exact
    assert_really_violates(p)


def test_logaddexp_is_a_monoid_and_add_distributes_over_it():
    assert prove_monoid(monoids.logaddexp).status == "proved"
    assert prove_distributes(monoids.logaddexp, monoids.add).status == "proved"


def test_average_is_not_associative():
    avg = user_monoid("avg", sp.Lambda((x, y), (x + y) / 2), 0)
    p = prove_associative(avg)
    assert p.status == "refuted"
    assert_really_violates(p)
    assert prove_commutative(avg).status == "proved"
    assert prove_monoid(avg).status == "refuted"


def test_subtraction_is_not_commutative():
    sub = user_monoid("sub", sp.Lambda((x, y), x - y), 0)
    p = prove_commutative(sub)
    assert p.status == "refuted"
    assert_really_violates(p)


@pytest.mark.parametrize("lhs, rhs, assumptions", [
    (sp.sqrt(a**2), a, None),
    (sp.log(a * b), sp.log(a) + sp.log(b), None),
    (sp.Max(a * c, b * c), sp.Max(a, b) * c, None),
    (sp.Max(a, b) ** 2, sp.Max(a**2, b**2), None),
    (sp.Abs(a + b), sp.Abs(a) + sp.Abs(b), None),
    (sp.sqrt(a * b), sp.sqrt(a) * sp.sqrt(b), None),
])
def test_soundness_traps_are_never_proved(lhs, rhs, assumptions):
    p = prove_equal(lhs, rhs, claim="trap", assumptions=assumptions)
    assert p.status in ("refuted", "unknown")
    if p.status == "refuted":
        assert_really_violates(p)
    else:
        assert p.residual is not None


def test_traps_hold_under_the_right_assumption():
    assert prove_equal(sp.sqrt(a**2), a, claim="", assumptions={"a": ">=0"}).status == "proved"
    assert prove_equal(sp.log(a * b), sp.log(a) + sp.log(b), claim="",
                       assumptions={"a": ">0", "b": ">0"}).status == "proved"


def test_case_analysis_proves_max_min_identities():
    p = prove_equal(sp.Max(a, b) + sp.Min(a, b), a + b, claim="max + min")
    assert p.status == "proved" and p.method == "cases"
    assert any("branch" in s for s in p.steps)


def test_undecided_identity_is_unknown_with_a_residual():
    # true (exp is increasing) but needs exp(b) > exp(b - t) for t > 0, beyond the linear case analysis
    p = prove_equal(sp.exp(sp.Max(a, b)), sp.Max(sp.exp(a), sp.exp(b)), claim="exp is monotone")
    assert p.status == "unknown" and p.residual is not None and p.counterexample is None


def test_monoid_catalogue_laws():
    for m in (monoids.add, monoids.mul, monoids.max, monoids.min, monoids.logaddexp, monoids.topk(1)):
        p = prove_monoid(m)
        assert p.status == "proved", str(p)
        assert [q.status for q in p.parts] == ["proved"] * 3


def test_max_identity_is_minus_infinity_and_zero_is_not():
    assert prove_identity(monoids.max).status == "proved"
    wrong = monoids.user("max0", sp.Lambda((x, y), sp.Max(x, y)), 0)
    p = prove_identity(wrong)
    assert p.status == "refuted" and p.counterexample.values["a"] < 0


@pytest.mark.slow
def test_top2_laws_are_proved_by_case_analysis():
    p = prove_monoid(monoids.topk(2))
    assert p.status == "proved" and p.method == "conjunction"


def test_larger_top_k_uses_the_multiset_lemma_and_distributes_by_reduction():
    p = prove_monoid(monoids.topk(8))
    assert p.status == "proved" and p.method == "lemma"
    assert prove_distributes(monoids.topk(8), monoids.add).status == "proved"
    assert prove_distributes(monoids.topk(8), monoids.mul).status == "refuted"
    assert prove_distributes(monoids.topk(8), monoids.mul, {"c": ">0"}).status == "proved"


def test_proof_values_serialise_and_print():
    p = prove_distributes(monoids.max, monoids.mul)
    d = p.as_dict()
    assert d["status"] == "refuted" and d["counterexample"]["exact"] is True
    assert "counterexample at" in str(p) and str(p).startswith("[refuted]")
    with pytest.raises(RedalgebraError):
        Proof("x", "maybe")
    with pytest.raises(RedalgebraError):
        Proof("x", "refuted")


def test_bad_assumptions_are_reported():
    with pytest.raises(RedalgebraError, match="sign must be one of"):
        prove_distributes(monoids.max, monoids.mul, assumptions={"c": "positive"})
    with pytest.raises(RedalgebraError, match="does not use"):
        prove_distributes(monoids.max, monoids.mul, assumptions={"z": ">0"})


def test_cache_decided_keeps_decided_results_up_to_its_bound():
    # the memo of the prover and the analysis: a result that `undecided` calls undecided is computed afresh each time,
    # at most `kept` results are kept (the least recently used go first), unhashable arguments are not kept
    from redalgebra.algebra.budget import cache_decided

    calls = []

    @cache_decided(undecided=lambda out: out < 0, kept=2)
    def f(x):
        calls.append(x)
        return x if not isinstance(x, list) else len(x)

    f(1), f(2), f(1), f(3)  # 3 drops 2, the least recently used
    assert calls == [1, 2, 3] and list(f.cache) == [(1,), (3,)]  # (kept by the arguments' tuple)
    f(2)
    assert calls == [1, 2, 3, 2]
    f(-1), f(-1)
    assert calls[-2:] == [-1, -1] and (-1,) not in f.cache
    assert f([1, 2]) == 2 and f([1, 2]) == 2 and calls[-2:] == [[1, 2], [1, 2]]


def test_a_point_where_a_side_is_real_only_through_an_imaginary_value_is_no_counterexample():
    # at a = -1/2, b = -1, sqrt(a)*sqrt(b) is i·i/sqrt(2): real, but outside the real domain the claim is about; it was
    # reported as a refutation of sqrt(a*b) = sqrt(a)*sqrt(b), which holds wherever both sides are real
    a, b = sp.symbols("a b", real=True)
    assert prove_equal(sp.sqrt(a * b), sp.sqrt(a) * sp.sqrt(b), claim="").status != "refuted"
    assert prove_equal(sp.sqrt(a ** 2), a, claim="").status == "refuted"  # (a real counterexample still refutes)


def test_a_user_monoid_needs_a_real_identity():
    # (nan reached SymPy's "not comparable" ValueError in prove_monoid)
    from redalgebra.errors import MonoidError

    x, y = sp.symbols("x y", real=True)
    for identity in (sp.nan, sp.I, x):
        with pytest.raises(MonoidError, match="must be a real number, inf or -inf"):
            user_monoid("mx", sp.Lambda((x, y), sp.Max(x, y)), identity)
    assert user_monoid("mx", sp.Lambda((x, y), sp.Max(x, y)), -sp.oo).identity == -sp.oo


def test_prove_distributes_takes_the_top_k_names_lookup_takes():
    # ('topk(3)' was refused here while lookup and `redalgebra laws topk(3)` took it)
    from redalgebra.algebra import lookup

    assert prove_distributes("topk(3)", "add").status == prove_distributes(lookup("topk(3)"), "add").status == "proved"
