"""The laws of a monoid and distributivity, each a :class:`~.proof.Proof`.

Scalar monoids are checked on their SymPy op.  Top-k (tuple state) is checked
on its merge of descending value lists (:meth:`Monoid.combine_state`), with the
sortedness of each state as a condition, by case analysis for ``k <= 2``; for
larger ``k`` the case analysis grows too fast and the laws are proved by a
lemma on multisets (:func:`_topk_lemma`).  Indices ride along with their values
(ties broken by index, a total order), so the value proof is the whole proof.
Distributivity of top-k over ⊗ reduces, for every ``k``, to that of max and of
min over ⊗: the merge is a max/min network, and a map that commutes with max
and min commutes with the network.
"""

from __future__ import annotations

import sympy as sp

from ..errors import RedalgebraError

from ..ir.monoid import MAX, MIN, Monoid, as_monoid
from .budget import cache_decided
from .proof import Proof
from .prover import prove_equal

A, B, C = sp.symbols("a b c", real=True)


def _state(name: str, k: int) -> list[sp.Symbol]:
    return list(sp.symbols(f"{name}1:{k + 1}", real=True))


def _sorted(state: list) -> list:
    return [state[i] - state[i + 1] for i in range(len(state) - 1)]


def _prove_states(claim: str, left: list, right: list, conditions, assumptions=None) -> Proof:
    if len(left) == 1:
        return prove_equal(left[0], right[0], claim=claim, conditions=conditions, assumptions=assumptions)
    parts = [prove_equal(l, r, claim=f"{claim} [value {i + 1}]", conditions=conditions, assumptions=assumptions)
             for i, (l, r) in enumerate(zip(left, right))]
    return Proof.all_of(claim, parts)


def _states(m: Monoid):
    """Three symbolic states a, b, c of ``m`` and the sortedness conditions on them."""
    if m.k is None:
        return [A], [B], [C], []
    a, b, c = _state("a", m.k), _state("b", m.k), _state("c", m.k)
    return a, b, c, _sorted(a) + _sorted(b) + _sorted(c)


def prove_associative(m: Monoid) -> Proof:
    r"""Prove :math:`(a \oplus b) \oplus c = a \oplus (b \oplus c)`."""
    a, b, c, cond = _states(m)
    comb = m.combine_state
    return _prove_states(f"{m.name} is associative", comb(comb(a, b), c), comb(a, comb(b, c)), cond)


def prove_commutative(m: Monoid) -> Proof:
    r"""Prove :math:`a \oplus b = b \oplus a`."""
    a, b, _, cond = _states(m)
    return _prove_states(f"{m.name} is commutative", m.combine_state(a, b), m.combine_state(b, a), cond)


def prove_identity(m: Monoid) -> Proof:
    r"""Prove :math:`a \oplus 0 = a` for the declared identity :math:`0`."""
    a, _, _, cond = _states(m)
    zero = [m.identity] * len(a)
    return _prove_states(f"{m.identity} is the identity of {m.name}", m.combine_state(a, zero), a, cond)


#: Largest k whose top-k laws are machine-checked by case analysis (k = 3 takes minutes).
TOPK_CASES_MAX_K = 2


def _topk_lemma(m: Monoid) -> Proof:
    steps = (f"top_{m.k}(A) ⊕ top_{m.k}(B) is defined as top_{m.k}(A ⊎ B) on multisets of (value, index) pairs, "
             "totally ordered by value then index",
             "⊎ is associative and commutative with identity ∅ (the all -oo state)",
             f"absorption: top_{m.k}(top_{m.k}(X) ⊎ Y) = top_{m.k}(X ⊎ Y), since an element of X dropped by "
             f"top_{m.k}(X) has {m.k} larger elements in X, so it is not among the top {m.k} of X ⊎ Y",
             "hence (A ⊕ B) ⊕ C = top(A ⊎ B ⊎ C) = A ⊕ (B ⊕ C), A ⊕ B = B ⊕ A and A ⊕ ∅ = A",
             f"the same laws are machine-checked by case analysis for k <= {TOPK_CASES_MAX_K}")
    return Proof(f"{m.name} is a commutative monoid", "proved", method="lemma", steps=steps)


def prove_monoid(m: Monoid) -> Proof:
    """Associativity, commutativity and identity of ``m`` (a :class:`Monoid`, or a catalogue monoid's name), as one
    composite proof."""
    m = as_monoid(m, "prove_monoid")
    if m.k is not None and m.k > TOPK_CASES_MAX_K:
        return _topk_lemma(m)
    return Proof.all_of(f"{m.name} is a commutative monoid",
                        [prove_associative(m), prove_commutative(m), prove_identity(m)])


def prove_distributes(oplus: Monoid, otimes: Monoid, assumptions=None) -> Proof:
    r"""Prove condition 3 of fusion: :math:`(a \oplus b) \otimes c = (a \otimes c) \oplus (b \otimes c)`.

    In words, ":math:`\otimes` distributes over :math:`\oplus`" — e.g.
    ``prove_distributes(max, add)`` is :math:`\max(a, b) + c = \max(a + c, b + c)`.
    ``assumptions`` constrain ``c`` (or ``a``, ``b``), e.g. ``{"c": ">=0"}``. Either monoid may be given by name.
    """
    oplus, otimes = as_monoid(oplus, "prove_distributes"), as_monoid(otimes, "prove_distributes")
    if otimes.op is None:
        raise RedalgebraError(f"⊗ must be a scalar monoid; {otimes.name} has tuple state")
    if oplus.k is not None:
        return _topk_distributes(oplus, otimes, assumptions)
    a, b, _, cond = _states(oplus)
    times = lambda state: [otimes.combine(x, C) for x in state]  # noqa: E731 - a local shorthand
    claim = f"{otimes.name} distributes over {oplus.name}"
    return _prove_states(claim, times(oplus.combine_state(a, b)), oplus.combine_state(times(a), times(b)),
                         cond, assumptions)


def _topk_distributes(oplus: Monoid, otimes: Monoid, assumptions) -> Proof:
    parts = [prove_distributes(MAX, otimes, assumptions), prove_distributes(MIN, otimes, assumptions)]
    proof = Proof.all_of(f"{otimes.name} distributes over {oplus.name}", parts)
    step = (f"the merge of {oplus.name} is a network of max and min, so x ↦ x ⊗ c commutes with it when it "
            "commutes with max and with min")
    return Proof(proof.claim, proof.status, parts=proof.parts, method="reduction to max and min", steps=(step,))


@cache_decided
def monoid_laws(m: Monoid) -> Proof:
    """``prove_monoid(m)``, computed once per monoid and process."""
    return prove_monoid(m)
