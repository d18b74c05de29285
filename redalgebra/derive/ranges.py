"""The range of H: where the correction ``H(D_new) ⊗ H(D_old)⁻¹`` exists, by sign inference on the dependencies.

:func:`range_proof` shows H meets what the distributive law assumed and is invertible away from the degenerate
(empty) states, which the derived formulas guard; :func:`may_vanish` and :func:`may_diverge` say where it is not
even so, on a *non-empty* segment (a prefix of zeros under ``1/max(abs(x))``, ``log(Σx²)`` at the identity state),
which defers the reduction (``⊕G`` kept, H applied at the end), as does :func:`grows` (an exponential of a sum-like
dependency, whose partial values can leave float32's range); :func:`running_factors` splits what a deferred ``⊗ = ×``
still corrects as it goes (its exponentials of maxima and minima: the shift that keeps a sum in range) from what waits.
"""

from __future__ import annotations

import sympy as sp

from ..algebra import Proof
from ..ir import MUL, Cascade, Monoid
from ..ir.functions import Sigmoid
from .prepare import SignFact, at_own_extrema, bodies, elements_of, exponential_of, extrema_of


def range_proof(H: sp.Expr, otimes: Monoid, assumption: str | None, facts: dict[str, SignFact], deps) -> Proof:
    """Sign inference: H meets the distributivity assumption and is invertible on non-degenerate states."""
    strict = {f.symbol.func(f.name, real=True): state_symbol(f) for f in facts.values()}
    closed = {sp.Symbol(f.name, real=True): f.symbol for f in facts.values()}
    # a symbol the cascade divides by is not 0 where the cascade is defined (the reference is inf or NaN
    # there too): a temperature t of exp((x - m) / t) needs no declared sign for H = exp(-m/t) to be positive
    divisors = {e.base for e in sp.preorder_traversal(H) if e.is_Pow and e.exp.is_negative and e.base.is_Symbol}
    for v in divisors:
        known = strict.get(v, v)
        if v.is_real and known.is_nonzero is None and v.name not in deps:
            strict[v] = closed[v] = sp.Symbol(v.name, real=True, nonzero=True)
    used = [facts[d] for d in deps] + [f for f in facts.values() if f.sign and f.name not in deps
                                       and sp.Symbol(f.name, real=True) in H.free_symbols]
    steps = tuple(f"{f.name}: {f.sign or 'sign unknown'} ({f.reason})" for f in used)
    need = []
    if assumption == ">=0":
        need.append(("H >= 0", bool(H.xreplace(closed).is_nonnegative)))
    if otimes is MUL:
        need.append((NONZERO, bool(H.xreplace(strict).is_nonzero)))
    else:
        need.append(("H finite away from degenerate states", bool(H.xreplace(strict).is_finite)))
    claim = f"H = {H} satisfies " + " and ".join(n for n, _ in need)
    status = "proved" if all(ok for _, ok in need) else "unknown"
    return Proof(claim, status, method="sign inference", steps=steps,
                 residual=None if status == "proved" else H,
                 assumptions=tuple(n for n, ok in need if not ok))


NONZERO = "H != 0 away from degenerate states"


def state_symbol(f: SignFact, sound: bool = False) -> sp.Symbol:
    """A reduction result away from its degenerate (empty) states. A ``>= 0`` one is taken as positive for
    the correction's range (where it is 0 the reference divides 0 by 0 too, or H is deferred: see
    :func:`may_vanish`); ``sound``: as it is in float32, non-negative (``max(abs(x))`` over a row of zeros is 0;
    ``sum(exp(x))`` where every term underflows: :attr:`SignFact.underflows`)."""
    weak = dict(nonnegative=True) if sound else dict(positive=True)
    weak_neg = dict(nonpositive=True) if sound else dict(negative=True)
    sign = ">=0" if sound and f.underflows else f.sign  # (0 on a prefix in float32)
    flags = {">0": dict(positive=True), ">=0": weak, "<0": dict(negative=True), "<=0": weak_neg}.get(sign, {})
    return sp.Symbol(f.name, real=True, **flags)


def may_vanish(H: sp.Expr, facts: dict, deps) -> bool:
    """Whether H can be 0 or infinite at a non-empty state, so that no correction ``H(D_new)/H(D_old)`` exists
    there: a factor of its numerator that can be 0 (``a`` for ``a = max(abs(x))`` over a row of zeros, or a
    dependency of unknown sign), or a factor of its denominator that can (``1/a``, ``1/sqrt(Σx²)``, ``1/c`` for a count
    of positive elements: a row whose first elements are 0, or negative, has such a prefix). The reference is finite
    at the row's final state even so, and the correction form would be NaN from the prefix on; a deferred reduction
    (``⊕G``, ``H`` applied once at the end) gives the reference's value. A pole only where the segment is empty (an
    element count, a sum of exponentials) is no such factor. Deferring gives up what dividing by a running maximum is
    for (a max-normalised sum of squares stays in float32's range): the guards say where ``⊕G`` overflows."""
    sound = _sound(facts)
    num, den = sp.fraction(sp.together(H))
    poles = [f for f in sp.Mul.make_args(den) if f.free_symbols & set(deps)]
    return not num.xreplace(sound).is_nonzero or any(not f.xreplace(sound).is_nonzero for f in poles)


def may_diverge(H: sp.Expr, facts: dict, deps) -> bool:
    """For ⊗ = +: whether H can be infinite at a non-empty state (``log(q)`` or ``-1/q`` for ``q = sum(x * x)``, 0 on a
    prefix of zeros; the identity state itself has ``q = 0``), where the correction ``H(D_new) - H(D_old)`` is
    ``-inf - (-inf)``. Decided at 0 for each dependency that can be 0 there (SymPy takes ``log`` of a non-negative
    symbol for finite)."""
    sound = _sound(facts)
    zeros = [d for d in deps if not sound.get(d, d).is_nonzero]
    return not H.xreplace(sound).is_finite or any(H.subs(d, 0).has(sp.zoo, sp.oo, -sp.oo, sp.nan) for d in zeros)


def running_factors(H: sp.Expr, deps, extrema) -> tuple[sp.Expr, sp.Expr]:
    """``(H_end, H_run)`` with ``H = H_end · H_run`` for a deferred ``⊗ = ×`` (an H with a factor that may be 0 or
    infinite at a non-empty state, :func:`may_vanish`, or one that grows, :func:`grows`): ``H_run`` its exponentials
    of dependencies that are all ``extrema`` (a max or min: ``exp(-m)``, the shift that keeps a sum of exponentials
    in range), kept in the state ``⊕(G · H_run)`` and corrected as the dependencies move; ``H_end`` the rest (``1/a``
    for ``a = max(abs(x))``, a mean that may be 0, a count, ``exp(s)`` of a sum, whose partial values can leave
    float32 where the row's does not), applied once they are final, rounded once."""
    keep, bounded = set(deps), set(extrema)
    factors = sp.Mul.make_args(sp.powsimp(H, combine="exp"))
    run = [f for f in factors if isinstance(f, sp.exp) and f.free_symbols & keep and f.free_symbols & keep <= bounded]
    H_run = sp.Mul(*run)
    return sp.simplify(H / H_run), H_run


def tame(G: sp.Expr) -> bool:
    """Whether ``G`` holds no exponential (nor a sigmoid) and no power with a variable exponent: its sums grow as the
    elements do."""
    return not G.has(sp.exp, Sigmoid) and all(p.exp.is_constant() for p in G.atoms(sp.Pow))


def grows(G: sp.Expr, H: sp.Expr, unbounded) -> bool:
    """Whether ``H`` holds an exponential (or a sigmoid, which underflows to 0 as its exponential overflows: the
    correction ``σ(s_new)/σ(s_old)`` is then x/0) of an ``unbounded`` dependency (a sum, a product, a logsumexp: one whose
    partial values say nothing of the row's, unlike a running max's) while ``G`` is :func:`tame`: H of a partial
    segment can leave float32 where the row's does not (``exp(s)`` for ``s = sum(x)`` at 100 on a prefix of
    [100, -95], whose total is 5: the correction form's state ``x·exp(s)`` is inf, then inf·0). ⊕G is in range
    wherever the written sum of the elements is. A max or min keeps its correction: its running value is the
    normalisation of the online forms (``x·exp(-m)`` for ``m = max(log(x))`` is at most 1 where ⊕x can overflow)."""
    return tame(G) and any(e.free_symbols & set(unbounded) for e in H.atoms(sp.exp, Sigmoid))


def unbounded(c: Cascade, deps, facts: dict) -> list:
    """The symbols of ``deps`` (names) whose partial values say nothing of the row's (:func:`grows`): a sum, a
    product, a logsumexp; and a max or min over another reduction's result whose running value does not move one way
    (:func:`_monotone`: ``r = min(c + x²)`` for a count ``c`` is 19601 after 140, the first of 60 elements, and 60 at
    the row's end, so ``exp(x - r)`` underflows on the prefix and its correction overflows)."""
    reductions = {r.name: r for r in c.reductions}
    extrema = [d for d in deps if d in reductions and reductions[d].monoid.name in ("max", "min")]
    F = bodies(c) if extrema else {}  # (lets that read a reduction inlined: min(z) for let z = c + x²)
    return [c.symbols[d] for d in deps if d in reductions and not (d in extrema and _monotone(c, d, facts, F))]


def _monotone(c: Cascade, name: str, facts: dict, F: dict) -> bool:
    """Whether the running value of the max (min) ``name`` only rises (falls) along the row, as a max of the elements
    does: each reduction its body ``F[name]`` holds moves one way (:func:`_trend`) and moves the body the same way as
    the new elements do — ``max(x + log(q))`` for ``q = sum(x²)`` rises, ``min(c + x²)`` for a count ``c`` does not
    fall. Undecided is not monotone."""
    results = {c.symbols[x.name]: x for x in c.reductions}
    way = 1 if next(x for x in c.reductions if x.name == name).monoid.name == "max" else -1
    # (each result away from its degenerate states, as the corrections are: the slope 1/q of log(q) is positive)
    away = {f.symbol.func(f.name, real=True): state_symbol(f) for f in facts.values()}
    for d in F[name].free_symbols & results.keys():
        trend = _trend(c, results[d], facts, F)
        try:
            slope = sp.diff(F[name], d).xreplace(away)
        except (TypeError, ValueError):  # (a body SymPy does not differentiate: undecided)
            return False
        turn = 1 if slope.is_nonnegative else -1 if slope.is_nonpositive else 0
        if trend * turn != way:
            return False
    return True


def _trend(c: Cascade, r, facts: dict, F: dict) -> int:
    """1 where the running value of reduction ``r`` only rises along the row, -1 where it only falls, 0 otherwise
    or undecided: a max or min that is :func:`_monotone`, a sum of terms of one sign."""
    if r.monoid.name in ("max", "min") and r.monoid.k is None:
        return (1 if r.monoid.name == "max" else -1) if _monotone(c, r.name, facts, F) else 0
    if r.monoid.name == "add" and not F[r.name].free_symbols & {c.symbols[x.name] for x in c.reductions}:
        return 1 if F[r.name].is_nonnegative else -1 if F[r.name].is_nonpositive else 0
    return 0


def overshoots(F: sp.Expr, H: sp.Expr, c: Cascade, deps) -> bool:
    """Whether a running max or min among ``deps`` shifts the exponentials of ``H`` too little to keep a prefix's
    terms in range. The state's terms are ``F`` at the prefix's dependencies; where H's exponentials shrink as a
    running max grows (or a running min falls), a prefix's terms are larger than the row's, and at most ``F`` with
    each such dependency at the element's own value (``exp(x - m) ≤ exp(0)``): that bound must hold no exponential
    of the elements. It does not for ``exp(x - 2m)`` (``exp(-x)``: at ``x = m = -100`` a prefix's term is
    ``exp(100)``, inf in float32, where the row's maximum 50 gives ``exp(-200)``), nor for ``exp(x - m)`` with
    ``m = max(2x)``; the correction form is then inf·0 on such rows. Dependencies that move H the other way leave a
    prefix's terms below the row's."""
    moving, extrema = set(), extrema_of(c)
    for d, (_, is_max) in extrema.items():
        if d not in deps or not any(d in e.free_symbols for e in H.atoms(sp.exp)):
            continue
        slope = sp.diff(sp.expand_log(sp.log(H), force=True), d)
        if not (slope.is_nonnegative if is_max else slope.is_nonpositive):  # (undecided: taken as growing)
            moving.add(d)
    return bool(moving) and exponential_of(at_own_extrema(F, extrema, moving), elements_of(c))


def _sound(facts: dict) -> dict:
    """Each reduction result as it is on non-empty states: a ``>= 0`` one may be 0 there (:func:`state_symbol`)."""
    return {f.symbol.func(f.name, real=True): state_symbol(f, sound=True) for f in facts.values()}
