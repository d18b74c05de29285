"""The routes: each a ⊗ beyond the monoids the analysis tries first (× and +), with its own state, tried on a
reduction whose body neither separates (:data:`ROUTES`; :mod:`.analysis` tries them, :func:`.multiterm.rewrite`
writes the state cascade)."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from ..algebra import Proof
from ..ir import ADD, MUL, Monoid


def _power(F: sp.Expr, elems, dep_syms, facts: dict):
    """``(G, H, proofs, None)`` when a product's body is ``G(e) ** H(D)`` with ``G >= 0`` (declared signs), else
    ``(None, None, (), why)``. The exponent may be a product of an element part and a dependency part
    (``x ** (w / W)``: ``G = x ** w``, ``H = 1 / W``). Then ``prod(G^H) = exp(H · sum(log G))``: proved for ``G > 0``
    on two elements (which extends to any number by induction on the sum); at ``G = 0`` both sides are ``0^H``
    (``log 0 = -inf``: 0 for ``H > 0``, inf for ``H < 0``), and ``H = 0`` is guarded (``0^0 = 1``)."""
    if not F.is_Pow:
        return None, None, (), f"the body {F} is not a power G(e) ** H({', '.join(map(str, dep_syms))})"
    base, ex = F.as_base_exp()
    rest, H = ex.as_independent(*dep_syms, as_Add=False)
    G = base ** rest if rest != 1 else base
    if G.free_symbols & set(dep_syms) or H.free_symbols & set(elems) or not H.free_symbols & set(dep_syms):
        return None, None, (), f"{F} is not G(e) ** H(D) with the elements in G and the dependencies in H"
    closed = {sp.Symbol(f.name, real=True): f.symbol for f in facts.values()}
    if not G.xreplace(closed).is_nonnegative:
        return None, None, (), (f"G = {G} is not shown to be >= 0 (declare the signs of what it reads, e.g. "
                                f"`input x >= 0`): a negative G makes G^H complex where H is not an integer")
    known = {sp.Symbol(f.name, real=True): f"{f.sign} ({f.reason})" for f in facts.values() if f.sign}
    steps = [f"{v}: {known.get(v) or ('>= 0 (declared)' if v.is_nonnegative else 'any sign')}"
             for v in sorted(G.free_symbols, key=sp.default_sort_key)]
    sign = Proof(f"G = {G} >= 0", "proved", method="sign inference", steps=tuple(steps))
    a, b = sp.symbols("a b", positive=True)
    h = sp.Symbol("h", real=True)
    lhs, rhs = a ** h * b ** h, sp.exp(h * (sp.log(a) + sp.log(b)))
    ok = sp.simplify(sp.powsimp(sp.expand_power_base(rhs, force=False), force=False) - lhs) == 0 or \
        sp.simplify(sp.expand_log(sp.log(lhs), force=False) - sp.log(rhs).expand(force=False)) == 0
    law = Proof("a^h · b^h = exp(h · (log a + log b)) for a, b > 0: prod(G^H) = exp(H · sum(log G))",
                "proved" if ok else "unknown", lhs=lhs, rhs=rhs, method="symbolic (SymPy simplify)")
    if not ok:
        return None, None, (), "the power law could not be proved"
    return G, H, (sign, law), None


@dataclass(frozen=True)
class Route:
    """A ⊗ beyond the monoids of :data:`CANDIDATES`, tried on a reduction by ``reducer`` whose body neither separates.

    ``find(F, elems, dep_syms, facts)`` gives ``(G, H, proofs, None)`` when ``F = G(e) ⊗ H(D)`` is proved, else
    ``(None, None, (), why)``; the state then keeps ``partial_monoid(partial(G))`` (named ``<reduction>_<suffix>``)
    and the reduction's value is ``combine(H, that state)``, or ``empty`` on an empty segment and where ``H = 0``
    (power: ``G^0 = 1``), written by :func:`.multiterm.rewrite`. A new ⊗ is one entry of :data:`ROUTES`."""

    name: str
    reducer: Monoid
    find: object
    partial_monoid: Monoid
    partial: object      # G -> the partial reduction's body
    combine: object      # (H, partial symbol) -> the reduction's value
    empty: sp.Expr
    suffix: str = "part"
    text: str = ""       # what the fused form is, for the reports


def _log_of_power(G: sp.Expr) -> sp.Expr:
    """``log G`` without forming ``G``: ``e · log b`` for ``G = b ** e`` (``x ** w`` overflows float32 where its log does
    not: 10 ** 50), 0 where ``e = 0`` (``0 ** 0 = 1``)."""
    if G.is_Pow:
        base, e = G.as_base_exp()
        return sp.Piecewise((sp.Integer(0), sp.Eq(e, 0)), (e * sp.log(base), True))
    return sp.log(G)


#: The routes tried after × and + (see :class:`Route`): ⊗ = power for products.
ROUTES = {"power": Route("power", MUL, _power, ADD, _log_of_power, lambda H, part: sp.exp(H * part), sp.Integer(1),
                         "log", "G >= 0: prod(G^H) = exp(H · sum(log G)), the state keeps sum(log G)")}
