"""Bring a cascade into the shape the analysis works on.

* **Element atoms.** Lets that vary along the axis but use no reduction result
  (attention's ``s = dot(q, k) * scale``) are kept as symbols: to the algebra
  they are just per-element values, computed once in the kernel's prologue.
* **Inlining.** Lets that use reduction results are substituted into the
  bodies that use them, so every reduction body ``F_i`` is written in element
  atoms, params and the reduction results ``D_i``.
* **Real arithmetic.** Casts (``fp8``) are the identity in ℝ; the analysis
  removes them and the derivation reports the fusion as exact in ℝ but not
  bitwise.
* **Sign facts.** Each name gets a symbol carrying what can be inferred about
  its sign (a sum of exponentials is positive — non-negative where a masked
  value, ``where(…, -inf)``, enters it with no max of such values subtracted,
  and a product of ``sigmoid`` or ``exp`` of such values wherever one enters —,
  a max of ``|x|`` is non-negative), with the reason in words.  They are SymPy's assumptions,
  which the functions state for themselves: ``sigmoid`` is positive, ``tanh``,
  ``erf`` and ``log1p`` of a positive value are positive, ``floor`` and
  ``round`` of a non-negative one non-negative (``round(-0.3)`` is 0, so
  nothing is claimed to be negative that may be 0).
* **Conditionals.** ``pos`` is a per-element value like an input.  In a body
  with dependencies, a comparison or ``where`` that uses no reduction result
  (``pos == label``, ``where(pos <= qpos, s, -inf)``) is a per-element value
  too, and becomes an atom ``[pos == label]``; one whose condition uses no
  reduction result but whose values do is written as the indicator-weighted
  sum ``[c]·a + (1 − [c])·b`` (exact for finite ``a``, ``b``).  A condition on
  a reduction result (``x > m``) is refused: see :func:`abstract_conditions`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import networkx as nx
import sympy as sp

from ..ir import Cascade, Input, Let, Output, Param, Reduction, build_graph, symbol
from ..ir.functions import CASTS, Sigmoid, as_indicator, indicator
from ..ir.nodes import POS
from ..ir.printer import CascadePrinter, reducer_text


def element_atoms(c: Cascade) -> list[str]:
    """Per-element lets that use no reduction result, in statement order."""
    g = build_graph(c)
    reductions = {r.name for r in c.reductions}
    varying = c.per_element()
    return [s.name for s in c.lets if s.name in varying and not (nx.ancestors(g, s.name) & reductions)]


def inline(expr: sp.Expr, c: Cascade, keep: set[str]) -> sp.Expr:
    """Substitute every let not in ``keep`` until none is left."""
    lets = {s.symbol: s.expr for s in c.lets if s.name not in keep}
    for _ in range(len(lets) + 1):
        new = expr.xreplace(lets)
        if new == expr:
            return expr
        expr = new
    return expr


def drop_casts(expr: sp.Expr) -> sp.Expr:
    """The expression in real arithmetic: casts such as ``fp8(u)`` become ``u``."""
    return expr.replace(lambda e: isinstance(e, CASTS), lambda e: e.args[0])


def has_casts(c: Cascade) -> bool:
    return any(s.expr.has(*CASTS) for s in c.statements if getattr(s, "expr", None) is not None)


def casts_in_reductions(c: Cascade) -> bool:
    """Whether a reduction's body rounds (a cast in it, or in a let it reads): where the fused form folds such a body
    at running dependencies, its cast rounds at a running scale; casts in the outputs alone apply to final values."""
    return any(cast_in_body(r, c) is not None for r in c.reductions)


def cast_in_body(r: Reduction, c: Cascade) -> sp.Expr | None:
    """A cast in reduction ``r``'s body (lets inlined), or None. A form that sums parts of the body apart (the
    multi-term rewrite works in real arithmetic, where ``fp8(u)`` is ``u``) would never round: ``sum(fp8(x - m))``
    is not ``sum(x) - L·m`` once rounded, nor is ``sum(fp8(x) - m)`` ``sum(x) - L·m``."""
    body = inline(r.body, c, set(element_atoms(c)))
    return next((e for e in sp.preorder_traversal(body) if isinstance(e, CASTS)), None)


def bodies(c: Cascade) -> dict[str, sp.Expr]:
    """``F_i`` of every reduction in element atoms, params and reduction results (real arithmetic)."""
    keep = set(element_atoms(c))
    return {r.name: drop_casts(inline(r.body, c, keep)) for r in c.reductions}


def outputs(c: Cascade) -> dict[str, sp.Expr]:
    """Every output in element atoms, params, reduction results (casts kept: they are applied as written)."""
    keep = set(element_atoms(c))
    return {o.name: inline(o.expr, c, keep | {p.name for p in c.outputs}) for o in c.outputs}


@dataclass(frozen=True)
class SignFact:
    """What is known about the sign of one name, and why."""

    name: str
    symbol: sp.Symbol   # the name's symbol with the inferred sign assumptions
    sign: str | None    # ">0", ">=0", "<0", "<=0" or None
    reason: str
    #: positive in the reals, but a sum of terms that each underflow to 0 in float32 (``sum(exp(x))`` at x < -103):
    #: 0 on some prefixes, which the proofs (in the reals) ignore and the float32 range checks do not
    underflows: bool = False


def sign_of(expr: sp.Expr) -> str | None:
    """The strongest sign SymPy's assumptions establish for ``expr``."""
    for sign, test in ((">0", "is_positive"), ("<0", "is_negative"), (">=0", "is_nonnegative"),
                       ("<=0", "is_nonpositive")):
        if getattr(expr, test):
            return sign
    return None


_REDUCER_RULE = {
    "add": "a sum of {w} terms over a non-empty segment is {w}",
    "mul": "a product of {w} factors is {w}",
    "max": "a max of {w} values is {w}",
    "min": "a min of {w} values is {w}",
}
_WORDS = {">0": "positive", ">=0": "non-negative", "<0": "negative", "<=0": "non-positive"}


def sign_facts(c: Cascade) -> dict[str, SignFact]:
    """Sign facts for every name, in statement order; reductions are judged on non-empty segments."""
    facts: dict[str, SignFact] = {}
    signed: dict[sp.Symbol, sp.Symbol] = {}
    infinite = set()  # lets whose value can be ±inf (a where(…, -inf) mask), directly or through another
    F = extrema = None  # (bodies(c) and extrema_of(c), computed once, where a sum asks for them)
    for s in c.statements:
        underflows = False
        if isinstance(s, Input):
            sign, reason = s.sign, ("declared" if s.sign else "an input: any real")
        elif isinstance(s, Param):
            sign, reason = s.sign, ("declared" if s.sign else "a param: any real")
        elif isinstance(s, (Let, Output)):
            sign = sign_of(drop_casts(s.expr).xreplace(signed))
            reason = f"from {s.name} = {s.expr}"
            if s.expr.has(sp.oo, -sp.oo) or s.expr.free_symbols & infinite:
                infinite.add(s.symbol)
        else:
            sign, reason = _reduction_sign(s, signed)
            if sign == ">0" and (s.monoid.name == "add" and _masked_without_shift(s, c, infinite)
                                 or s.monoid.name == "mul" and s.body.free_symbols & infinite):
                sign, reason = ">=0", (f"{s.name} = {reducer_text(s)}: positive terms, but a term is 0 where a masked "
                                       f"element's value is -inf (exp(-inf), sigmoid(-inf)): 0 on such a prefix, or "
                                       f"over the row for a product (no max of them is subtracted from a sum, whose own "
                                       f"element would give exp(0) = 1)")
            elif sign == ">0" and s.monoid.name == "add" and exponential_of(
                    at_own_extrema((F := F or bodies(c))[s.name], extrema := extrema or extrema_of(c, F)),
                    elements_of(c)):
                underflows = True
                reason += (" (in the reals; in float32 each term underflows to 0 where its exponential's argument is "
                           "below -103, exp(-200), so the sum is 0 on such a prefix: no max of the arguments is "
                           "subtracted, whose own element would give exp(0) = 1)")
        sym = symbol(s.name, sign)
        signed[s.symbol] = sym
        facts[s.name] = SignFact(s.name, sym, sign, reason, underflows)
    return facts


def extrema_of(c: Cascade, F: dict | None = None) -> dict:
    """Each max or min reduction's symbol (not a top-k) -> ``(its body as :func:`bodies` writes it — ``F``, where
    given —, True for a max)``."""
    F = F or bodies(c)
    return {r.symbol: (F[r.name], r.monoid.name == "max") for r in c.reductions
            if r.monoid.name in ("max", "min") and r.monoid.k is None}


def elements_of(c: Cascade) -> set:
    """The symbols that vary along the axis: the inputs, ``pos`` and the lets computed from them."""
    return {c.symbols[n] for n in c.per_element()} | {POS}


def at_own_extrema(expr: sp.Expr, extrema: dict, only=None) -> sp.Expr:
    """``expr`` with each max or min of ``extrema`` (:func:`extrema_of`; of ``only``, where given) at the element's own
    value: what an element gives at a segment's extremum when it is the element attaining it (``exp(x - m)`` is 1
    there for ``m = max(x)``). Exponentials are combined, not simplified further (a bound SymPy leaves unsimplified
    reads as an exponential of the elements: the caller's cautious answer)."""
    at = {m: body for m, (body, _) in extrema.items() if m in expr.free_symbols and (only is None or m in only)}
    return sp.powsimp(expr.xreplace(at), combine="exp") if at else expr


def exponential_of(expr: sp.Expr, elements: set) -> bool:
    """Whether ``expr`` holds an exponential, a sigmoid or a power with a variable exponent of the ``elements``:
    a term that leaves float32's range (overflows or underflows) as the elements grow, where a polynomial does not."""
    return any(a.free_symbols & elements for a in expr.atoms(sp.exp, Sigmoid)) or \
        any(p.exp.free_symbols & elements for p in expr.atoms(sp.Pow))


def _masked_without_shift(r: Reduction, c: Cascade, infinite: set) -> bool:
    """Whether ``r``'s body reads a value that can be -inf (a masked element) and no max (or min) of such values: a
    sum of ``exp(s)`` is then 0 on a prefix of masked elements, where ``sum(exp(s - m))`` with ``m = max(s)`` is at
    least 1 on any segment whose max is finite (and an empty one where it is -inf); ``m = max(x)`` of the unmasked
    values is finite on the masked prefix, where ``exp(s - m)`` is 0."""
    shifts = {x.symbol for x in c.reductions if x.monoid.name in ("max", "min") and x.monoid.k is None
              and x.body.free_symbols & infinite}
    used = r.body.free_symbols
    return bool(used & infinite) and not used & shifts


def _reduction_sign(r: Reduction, signed: dict) -> tuple[str | None, str]:
    body_sign = sign_of(drop_casts(r.body).xreplace(signed))
    kind = "max" if r.monoid.k is not None else r.monoid.name
    if body_sign is None or kind not in _REDUCER_RULE or (kind == "mul" and body_sign not in (">0", ">=0")):
        return None, f"{r.name}: no sign known"
    rule = _REDUCER_RULE[kind].format(w=_WORDS[body_sign])
    return body_sign, f"{r.name} = {reducer_text(r)}: {rule}"


def real_arithmetic(c: Cascade) -> Cascade:
    """The same cascade with every cast removed: what the fusion is exact for."""
    stmts = []
    for s in c.statements:
        if isinstance(s, Reduction):
            s = replace(s, body=drop_casts(s.body))
        elif isinstance(s, (Let, Output)):
            s = replace(s, expr=drop_casts(s.expr))
        stmts.append(s)
    return Cascade(tuple(stmts), name=f"{c.name} (real arithmetic)")


@dataclass(frozen=True)
class Conditions:
    """A body with its conditionals made algebra: ``expr`` in atoms, ``atoms`` maps each atom back."""

    expr: sp.Expr | None
    atoms: dict            # atom symbol -> the Piecewise it stands for
    problem: str | None    # why the body is refused, None when it is not


class _Refused(Exception):
    pass


def abstract_conditions(F: sp.Expr, deps: set, counts: frozenset = frozenset()) -> Conditions:
    r"""``F`` with every comparison and ``where`` turned into something the separability test can prove.

    * A conditional that uses no dependency is a per-element value (it may use ``pos``, inputs,
      params): an atom such as ``[label == pos]``.  Proving separability for *every* real value of
      the atom proves it for the values it takes, so this is sound.
    * ``where(c, a, b)`` whose condition uses no dependency but whose values do becomes
      :math:`[c]\,a + (1 - [c])\,b`, exact when ``a`` and ``b`` are finite.
    * Otherwise the body is refused, with the reason: a condition on a reduction result
      (``sum(x * (x > m))``) is not separable in general — which elements pass changes as ``m``
      changes along the axis, and no correction of a partial result can tell which did — and a
      ``where`` between a reduction-dependent value and an infinite one has no real-arithmetic form.
    * But ``where(n == 0, e, a)`` with ``n`` among ``counts`` (dependencies that are element counts, ``sum(1)``) is
      ``a``: the empty-row guard a multi-term rewrite puts on its combination (``let v = where(n == 0, 0, …)``), read
      by a later reduction. A side whose count is 0 is empty, and every fused form skips an empty side (its
      degenerate test) and guards the new element's term alike, so ``e`` is never what a correction or an update
      reads.
    """
    atoms: dict = {}
    try:
        expr = _abstract(F, deps, atoms, counts)
    except _Refused as why:
        return Conditions(None, atoms, str(why))
    return Conditions(expr, atoms, None)


def _abstract(e: sp.Basic, deps: set, atoms: dict, counts: frozenset = frozenset()) -> sp.Basic:
    if not e.has(sp.Piecewise):
        return e
    if not isinstance(e, sp.Piecewise):
        return e.func(*[_abstract(a, deps, atoms, counts) for a in e.args])
    if not (e.free_symbols & deps):
        return _atom(e, atoms)
    if e.args[-1].cond == sp.true and all(_empty_test(cond, counts) for _, cond in e.args[:-1]):
        return _abstract(e.args[-1].expr, deps, atoms, counts)
    p = CascadePrinter()
    for _, cond in e.args:
        used = sorted(s.name for s in cond.free_symbols & deps)
        if used:
            where = (f"the comparison {p.doprint(cond)}" if as_indicator(e) is not None
                     else f"the condition {p.doprint(cond)} of {p.doprint(e)}")
            raise _Refused(f"{where} uses the reduction result "
                           f"{', '.join(used)}: a comparison with a reduction result is not separable in general "
                           f"(which elements pass changes as {', '.join(used)} changes along the axis, and no "
                           f"correction of a partial result can tell which did), so it is not fused")
    if e.args[-1].cond != sp.true:
        raise _Refused(f"{p.doprint(e)} has no value where every condition fails; write where(c, a, b)")
    out = _finite(_abstract(e.args[-1].expr, deps, atoms), e, p)
    for value, cond in reversed(e.args[:-1]):
        w = _atom(indicator(cond), atoms)
        out = w * _finite(_abstract(value, deps, atoms), e, p) + (1 - w) * out
    return out


def _empty_test(cond: sp.Basic, counts: frozenset) -> bool:
    """Whether ``cond`` is ``n == 0`` for element counts ``n`` (one, or an ``Or`` of such)."""
    return all(isinstance(t, sp.Eq) and {t.lhs, t.rhs} & counts and 0 in (t.lhs, t.rhs) for t in sp.Or.make_args(cond))


def _finite(value: sp.Expr, e: sp.Piecewise, p: CascadePrinter) -> sp.Expr:
    if value.has(sp.oo, -sp.oo, sp.zoo):
        raise _Refused(f"{p.doprint(e)} chooses between a value that uses a reduction result and an infinite "
                       f"one, which has no form in real arithmetic; mask the element before the reduction "
                       f"instead, in a let: let s2 = where(cond, s, -inf)")
    return value


def _atom(e: sp.Piecewise, atoms: dict) -> sp.Symbol:
    for sym, known in atoms.items():
        if known == e:
            return sym
    cond = as_indicator(e)
    text = CascadePrinter().doprint(e)
    name = f"[{text[1:-1]}]" if cond is not None else text
    while any(s.name == name for s in atoms):
        name += "'"
    sym = sp.Symbol(name, real=True)
    atoms[sym] = e
    return sym


def integer_symbols(c: Cascade) -> set[str]:
    """Names that only take integer values: ``pos`` and the integer params."""
    return {POS.name} | {p.name for p in c.params if p.integer}
