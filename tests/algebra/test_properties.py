"""Property tests: whatever the prover calls proved holds on random floats, specials included."""

import itertools
import math

import numpy as np
import pytest
import sympy as sp
from hypothesis import assume, given
from hypothesis import strategies as st

from redalgebra.algebra import monoids, prove_distributes, prove_monoid

SCALAR = [monoids.add, monoids.mul, monoids.max, monoids.min, monoids.logaddexp]
a, b, c = sp.symbols("a b c", real=True)


def numeric(m):
    return sp.lambdify((a, b), m.combine(a, b), modules="numpy")


def values(m):
    """Finite floats of moderate size, ±0, and the extended values the monoid admits."""
    specials = [float(v) for v in m.special] + [0.0, -0.0]
    return st.one_of(st.floats(-50, 50, allow_nan=False), st.sampled_from(specials))


def close(u, v):
    if math.isinf(u) or math.isinf(v):
        return u == v
    return math.isclose(u, v, rel_tol=1e-9, abs_tol=1e-9)


@pytest.mark.parametrize("m", SCALAR, ids=lambda m: m.name)
def test_every_proved_monoid_law_holds_numerically(m):
    assert prove_monoid(m).status == "proved"
    op = numeric(m)

    @given(values(m), values(m), values(m))
    def laws(u, v, w):
        with np.errstate(all="ignore"):
            left, right = op(op(u, v), w), op(u, op(v, w))
            assume(not (np.isnan(left) or np.isnan(right)))
            assert close(float(left), float(right))
            assert close(float(op(u, v)), float(op(v, u)))
            assert close(float(op(u, float(m.identity))), float(u))

    laws()


PAIRS = [(o, t, asm) for o, t in itertools.product(SCALAR, [monoids.add, monoids.mul])
         for asm in (None, {"c": ">=0"})]


@pytest.mark.parametrize("oplus, otimes, assumptions", PAIRS,
                         ids=[f"{t.name}-over-{o.name}-{bool(asm)}" for o, t, asm in PAIRS])
def test_distributivity_verdicts_agree_with_numbers(oplus, otimes, assumptions):
    p = prove_distributes(oplus, otimes, assumptions)
    if p.status == "refuted":  # the counterexample breaks the law numerically
        at = {sp.Symbol(k, real=True): v for k, v in p.counterexample.values.items()}
        assert abs(complex(sp.N(p.lhs.xreplace(at) - p.rhs.xreplace(at)))) > 1e-12
        return
    if p.status != "proved":
        return
    lhs = sp.lambdify((a, b, c), p.lhs, modules="numpy")
    rhs = sp.lambdify((a, b, c), p.rhs, modules="numpy")
    lo = 0.0 if assumptions else -20.0

    @given(st.floats(-20, 20), st.floats(-20, 20), st.floats(lo, 20))
    def holds(u, v, w):
        assert close(float(lhs(u, v, w)), float(rhs(u, v, w)))

    holds()


def test_the_property_check_itself_catches_a_false_law():
    """Guard the guard: the numeric check fails on a law the prover refutes."""
    p = prove_distributes(monoids.max, monoids.mul)
    lhs = sp.lambdify((a, b, c), p.lhs)
    rhs = sp.lambdify((a, b, c), p.rhs)
    assert not close(lhs(1.0, 2.0, -1.0), rhs(1.0, 2.0, -1.0))


@given(st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=2).map(sorted),
       st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=2).map(sorted),
       st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=2).map(sorted))
def test_top2_merge_formula_is_the_top2_of_the_union(u, v, w):
    m = monoids.topk(2)
    syms_a, syms_b = sp.symbols("p1 p2", real=True), sp.symbols("q1 q2", real=True)
    merged = sp.lambdify((*syms_a, *syms_b), m.combine_state(list(syms_a), list(syms_b)))
    A, B = u[::-1], v[::-1]
    assert merged(*A, *B) == sorted(A + B, reverse=True)[:2]
