r"""Fusion analysis: for each reduction, choose ⊗ by proof.

For a reduction :math:`r_i = \bigoplus_l F_i(e_l, D_i)` with dependencies, each
candidate :math:`\otimes` of the catalogue (``mul``, then ``add``) is tried:

1. *distributivity* — ``prove_distributes(⊕_i, ⊗)``, bare or with ``c >= 0``;
2. *separability* — the anchored identity
   :math:`F(e, D) \otimes F(e_0, D_0) = F(e, D_0) \otimes F(e_0, D)`, proved
   symbolically, giving :math:`G(e) = F(e, D_0)` and
   :math:`H(D) = F(e_0, D) \otimes F(e_0, D_0)^{-1}`;
3. *range of H* — sign inference shows :math:`H(D)` meets the assumption the
   distributive law needed (:math:`H \ge 0`) and is invertible away from the
   degenerate states (an empty segment, a zero abs-max), which the derived
   formulas guard.

The first candidate that passes all three is chosen; otherwise the reduction
is not fusable and the analysis keeps each candidate's failed condition, its
residual and a counterexample.

Comparisons and ``where`` are prepared first (:func:`.prepare.abstract_conditions`):
those that use no dependency become per-element atoms (``[pos == label]``), and
a body whose condition uses a dependency (``sum(x * (x > m))``) is refused with
its reason before any proof is tried.  Atoms and variables that only take
integer values (``pos``, ``param n int``) are proved over the reals, which is
sound; a refutation counts only at a point the cascade can reach, so one found
at an atom's value or a fractional ``pos`` is searched again with the
conditionals written out (:func:`_genuine`), else reported as undecided.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field, replace
import sympy as sp

from ..algebra import Counterexample, Proof, prove_distributes, prove_equal
from ..algebra import budget as _budget
from ..errors import BudgetExhausted
from ..ir import ADD, MUL, Cascade, Input, Monoid, Reduction, build_graph, reduction_dependencies
from ..ir.nodes import require_cascade
from ..ir.printer import CascadePrinter, latex, reducer_text
from .multiterm import MultiTerm, split
from .ranges import NONZERO, grows, may_diverge, may_vanish, range_proof, unbounded
from .routes import ROUTES
from .prepare import abstract_conditions, bodies, cast_in_body, element_atoms, has_casts, \
    integer_symbols, sign_facts, sign_of

CANDIDATES = (MUL, ADD)
_ANCHOR_VALUES = (0, 1, 2)


@dataclass(frozen=True)
class Attempt:
    """One candidate ⊗ for one reduction: which condition failed (None if none) and the proofs."""

    otimes: str
    failed: str | None
    proofs: tuple
    G: sp.Expr | None = None
    H: sp.Expr | None = None
    assumption: str | None = None
    deferred: bool = False    # H may be 0 or infinite where the state is not empty: kept as ⊕G, H applied at the end


@dataclass(frozen=True)
class ReductionAnalysis:
    """The verdict on one reduction."""

    name: str
    monoid: Monoid
    text: str
    F: sp.Expr
    deps: tuple
    fusable: bool
    otimes: Monoid | None = None
    G: sp.Expr | None = None
    H: sp.Expr | None = None
    proofs: tuple = ()
    reason: str | None = None
    counterexample: Counterexample | None = None
    refuted: Proof | None = None   # the refuted condition the counterexample breaks
    attempts: tuple = field(default=())
    terms: MultiTerm | None = None  # a multi-term separable sum: its terms (then otimes, G, H are None)
    centered: bool = False          # a centred partial sum of a multi-term one (its merge is Chan's formula)
    #: ⊗ = × with an H that may be 0 or infinite on a non-empty segment (``max(x * a)`` or ``sum(x / a)`` with
    #: ``a = max(abs(x))``, 0 on a prefix of zeros): no correction H(D_new)/H(D_old) exists there, so the state keeps
    #: ⊕G and the result is H(D) ⊗ ⊕G, formed once the dependencies are final (distributivity, as proved)
    deferred: bool = False
    #: a ⊗ beyond the catalogue's monoids (:data:`ROUTES`), e.g. ``"power"``: ``prod(G(e) ** H(D))`` with ``G >= 0`` is
    #: ``exp(H(D) · sum(log G))``, so the state keeps the sum of logs and H is applied at the end
    route: str | None = None

    @property
    def kind(self) -> str:
        """``"single"`` (one separable term, or no dependencies), ``"multi-term"``, ``"centered"``, ``"deferred"``
        or ``"power"``."""
        return ("multi-term" if self.terms is not None else "centered" if self.centered else
                "deferred" if self.deferred else self.route or "single")

    @property
    def H_inverse(self) -> sp.Expr | None:
        if self.otimes is None:
            return None
        return sp.simplify(1 / self.H) if self.otimes is MUL else -self.H

    def as_dict(self) -> dict:
        p = CascadePrinter()
        return {"name": self.name, "reduction": self.text, "depends_on": list(self.deps), "fusable": self.fusable,
                "otimes": self.route or (None if self.otimes is None else self.otimes.name),
                "G": None if self.G is None else p.doprint(self.G), "H": None if self.H is None else p.doprint(self.H),
                "reason": self.reason,
                "counterexample": None if self.counterexample is None else
                dict(self.counterexample.as_dict(), claim=self.refuted.claim),
                "proofs": [q.as_dict() for q in self.proofs],
                "attempts": [{"otimes": a.otimes, "failed": a.failed} for a in self.attempts],
                "kind": self.kind,
                "terms": None if self.terms is None else self.terms.as_list(),
                "numerics": None if self.terms is None else self.terms.note}


@dataclass(frozen=True)
class Analysis:
    """Per-reduction verdicts for a cascade; ``fusable`` when every reduction is."""

    cascade: Cascade
    reductions: tuple
    signs: dict
    exact_in_reals_only: bool

    @property
    def fusable(self) -> bool:
        return all(r.fusable for r in self.reductions)

    def __getitem__(self, name: str) -> ReductionAnalysis:
        return next(r for r in self.reductions if r.name == name)

    def as_dict(self) -> dict:
        return {"cascade": self.cascade.name, "fusable": self.fusable,
                "exact_in_reals_only": self.exact_in_reals_only,
                "reductions": [r.as_dict() for r in self.reductions]}

    def text(self, verbose: bool = False) -> str:
        p = CascadePrinter()
        verdict = "fusable" if self.fusable else "NOT fusable"
        lines = [f"{self.cascade.name}: {verdict}"
                 + (" (exact in real arithmetic; casts make it differ bitwise)" if self.exact_in_reals_only else "")]
        for r in self.reductions:
            head = f"  {r.name} = {r.text}"
            if r.reason and r.reason.startswith("unknown"):  # (undecided: the budget, or an error, said why)
                lines.append(f"{head}: {r.reason}")
            elif not r.deps:
                lines.append(f"{head}: no dependencies, fusable as is")
            elif r.centered:
                lines.append(f"{head}: a centred partial sum (deviations from the running mean of "
                             f"{', '.join(r.deps)}), merged by Chan's formula")
            elif r.terms is not None:
                lines.append(f"{head}: multi-term separable, {len(r.terms.terms)} terms c_t({', '.join(r.deps)})·"
                             f"sum(E_t), one partial sum each:")
                lines += [f"      {t.describe()}" for t in r.terms.terms]
                lines.append(f"      numerics: {r.terms.note}")
            elif r.route:
                lines.append(f"{head}: ⊗ = {r.route}, G = {p.doprint(r.G)}, H({', '.join(r.deps)}) = {p.doprint(r.H)}: "
                             f"{ROUTES[r.route].text}")
            elif r.fusable:
                lines.append(f"{head}: ⊗ = {_SYMBOL[r.otimes.name]}, G = {p.doprint(r.G)}, H({', '.join(r.deps)}) = "
                             f"{p.doprint(r.H)}" + (_deferred_words(r) if r.deferred else ""))
            else:
                lines.append(f"{head}: not fusable — {r.reason}")
                if r.refuted is not None:
                    lines.append(f"      counterexample to «{r.refuted.claim}»: {r.counterexample}")
            within = [q for q in r.proofs if q.claim.endswith(WITHIN)]
            if r.fusable and within:  # the verdict read F where the states keep it (|m - x| = m - x)
                lines.append(f"      on the states the cascade reaches (bounds of its reductions): "
                             f"{within[0].claim.removesuffix(WITHIN)} [{within[0].status}]")
            if verbose:
                for q in r.proofs:
                    lines += ["      " + ln for ln in str(q).splitlines()]
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        """A table in Jupyter: one row per reduction with ⊗, G and H in LaTeX; the proofs below."""
        verdict = "fusable" if self.fusable else "**not fusable**"
        rows = [f"**{self.cascade.name}**: {verdict}", "",
                "| reduction | verdict | ⊗ | G | H | why not / counterexample |", "|---|---|---|---|---|---|"]
        for r in self.reductions:
            if r.reason and r.reason.startswith("unknown"):
                rows.append(f"| `{r.name} = {r.text}` | undecided | | | | {r.reason} |")
            elif not r.deps:
                rows.append(f"| `{r.name} = {r.text}` | fusable as is | | | | |")
            elif r.centered:
                rows.append(f"| `{r.name} = {r.text}` | fusable, centred (Chan) | | | | |")
            elif r.terms is not None:
                terms = " + ".join(f"$({latex(t.coefficient)})\\sum {latex(t.E)}$" for t in r.terms.terms)
                rows.append(f"| `{r.name} = {r.text}` | fusable, multi-term | | {terms} | | {r.terms.note} |")
            elif r.route:
                rows.append(f"| `{r.name} = {r.text}` | fusable, {ROUTES[r.route].text} | {r.route} | ${latex(r.G)}$ | "
                            f"${latex(r.H)}$ | |")
            elif r.fusable:
                rows.append(f"| `{r.name} = {r.text}` | fusable{', deferred H' if r.deferred else ''} | "
                            f"{_SYMBOL[r.otimes.name]} | ${latex(r.G)}$ | ${latex(r.H)}$ | |")
            else:
                why = r.reason + (f"; counterexample: `{r.counterexample}`" if r.refuted is not None else "")
                rows.append(f"| `{r.name} = {r.text}` | not fusable | | | | {why} |")
        return "\n".join(rows) + "\n\n<details><summary>proofs</summary>\n\n```\n" + self.text(verbose=True) + \
            "\n```\n</details>"


_SYMBOL = {"mul": "×", "add": "+"}


@_budget.cache_decided
def _distributes(oplus: Monoid, otimes: Monoid) -> tuple[Proof, str | None]:
    """Distributivity bare, else with c >= 0: the proof and the assumption it needed."""
    bare = prove_distributes(oplus, otimes)
    if bare.proved:
        return bare, None
    signed = prove_distributes(oplus, otimes, assumptions={"c": ">=0"})
    return (signed, ">=0") if signed.proved else (bare, None)


def _combine(otimes: Monoid, u, v):
    return u * v if otimes is MUL else u + v


def _quotient(otimes: Monoid, u, v):
    return u / v if otimes is MUL else u - v


def _anchors(F: sp.Expr, elems: list, deps: list, otimes: Monoid) -> tuple:
    """Valid anchors (F(e0, D0) finite, real, invertible under ⊗), simplest G and H first."""
    return _anchors_of(F, tuple(elems), tuple(deps), otimes)


@functools.lru_cache(maxsize=256)
def _anchors_of(F: sp.Expr, elems: tuple, deps: tuple, otimes: Monoid) -> tuple:
    """:func:`_anchors`, once per body: an analysis asks again for the same body (each of a refused reduction's
    hints re-analyses it; ``derive`` analyses the rewritten cascade), and each anchor costs SymPy simplifications."""
    elems, deps = list(elems), list(deps)
    found = []
    for values in itertools.product(_ANCHOR_VALUES, repeat=len(elems) + len(deps)):
        point = dict(zip(elems + deps, values))
        try:
            candidate = _anchor(F, elems, deps, otimes, point)
        except (TypeError, ValueError, ArithmeticError):  # SymPy refuses max(zoo, m): log(0) at this anchor
            candidate = None
        if candidate is None:
            continue
        found.append(candidate)
        if len(found) >= 6:
            break
    found.sort(key=lambda t: (t[0], t[1]))
    return tuple(found)


def _tame(F: sp.Expr, symbols: tuple, values: tuple) -> bool:
    """Whether ``F`` with exponentials inside exponentials stays within float64's range at the point, evaluated in
    floats from the inside out: an anchor's ``exp(exp(exp(…)))`` past it is refused here, before SymPy builds the
    number (its evaluation of an exponential asks mpmath for the value, which at such sizes runs for minutes and cannot
    be interrupted by the analysis's budget). ``F`` with no nested exponential, or one Python's math cannot evaluate
    (a function of ours, a complex value), is left to SymPy."""
    if not any(inner.has(sp.exp) for outer in F.atoms(sp.exp) for inner in outer.args):
        return True
    try:
        number = _in_floats(F, symbols)(*(float(v) for v in values))
    except OverflowError:
        return False
    except (ArithmeticError, TypeError, ValueError, NameError, AttributeError):  # not in floats: SymPy decides
        return True  # (never the budget's own exception: it must reach the analysis)
    return not isinstance(number, float) or math.isfinite(number)


@functools.lru_cache(maxsize=64)
def _in_floats(F: sp.Expr, symbols: tuple):
    """``F`` as a Python function of ``symbols`` on floats (math's functions)."""
    return sp.lambdify(symbols, F, modules="math")


def _anchor(F, elems, deps, otimes, point):
    """(cost, nonzeros, point, F0, G, H) for one anchor point, or None when it is not a valid anchor."""
    values = tuple(point.values())
    if not _tame(F, tuple(point), values):
        return None
    F0 = sp.simplify(F.xreplace(point))
    if F0.free_symbols & set(elems + deps) or F0.has(sp.zoo, sp.nan, sp.oo, -sp.oo):
        return None
    if F0.is_real is False or F0.is_finite is False or (otimes is MUL and not F0.is_nonzero):
        return None
    G = sp.simplify(F.xreplace({d: point[d] for d in deps}))
    H = sp.simplify(_quotient(otimes, F.xreplace({e: point[e] for e in elems}), F0))
    # constants (params, numbers) of G belong to H: G = 448·w·x → G = w·x, H = 448/max(ε, a)
    const, G = G.as_independent(*elems, as_Add=otimes is ADD)
    H = sp.simplify(_combine(otimes, H, const))
    if G.has(sp.zoo, sp.nan) or H.has(sp.zoo, sp.nan):
        return None
    return sp.count_ops(G) + sp.count_ops(H), sum(v != 0 for v in values), point, F0, G, H


def _genuine(proof: Proof, integers: set, atoms: dict) -> Proof:
    """A refutation only counts at a point the cascade can reach.

    The identity is proved with conditionals as free atoms (sound: for every value, so for the values they
    take), but a point that gives an atom a value on its own may be unreachable (``[pos == 3] = 5``), and one
    that gives ``pos`` or an integer param a fraction is.  Such a refutation is searched again on the identity
    with the atoms put back, over the variables themselves, integers at integers; failing that it is undecided.
    """
    cx = proof.counterexample
    if proof.status != "refuted" or cx is None:
        return proof
    names = {s.name for s in atoms}
    if not _bad_values(cx.values, integers) and not names & set(cx.values):
        return proof
    lhs, rhs = proof.lhs.xreplace(atoms), proof.rhs.xreplace(atoms)
    for seed in range(4):
        retry = prove_equal(lhs, rhs, claim=proof.claim, seed=seed)
        if retry.status == "refuted" and not _bad_values(retry.counterexample.values, integers):
            return replace(proof, lhs=lhs, rhs=rhs, counterexample=retry.counterexample,
                           steps=proof.steps + ("found again with the conditionals written out, at a point the "
                                                "cascade can reach (integers at integers)",))
    return replace(proof, status="unknown", counterexample=None,
                   steps=proof.steps + (f"the sides differ {cx}, but that point gives a conditional or an integer a "
                                        f"value it cannot take, and none was found with them written out",))


def _bad_values(values: dict, integers: set) -> list[str]:
    return [k for k, v in values.items() if k in integers and not sp.sympify(v).is_integer]


def bounds(c: Cascade, deps, F: sp.Expr) -> list:
    """What every state the cascade reaches satisfies between an element and the reductions it is part of, as pairs
    ``(upper, lower)`` with ``upper >= lower``: a max is at least the element's term, a min at most, a sum of
    non-negative terms at least each term (a count at least 1), a sum of non-positive ones at most. Only those over
    ``F``'s own symbols."""
    terms = _bodies(c)
    out = []
    for d in deps:
        r = next(x for x in c.reductions if x.name == d)
        body, m = terms[d], c.symbols[d]
        if r.monoid.k is not None or not body.free_symbols | {m} <= F.free_symbols:
            continue
        if r.monoid.name == "max" or (r.monoid is ADD and body.is_nonnegative):
            out.append((m, body))
        elif r.monoid.name == "min" or (r.monoid is ADD and body.is_nonpositive):
            out.append((body, m))
    return out


@functools.lru_cache(maxsize=64)
def _bodies(c: Cascade) -> dict:
    """:func:`bodies`, once per cascade: every reduction with dependencies asks for its dependencies' terms."""
    return bodies(c)


def relations(c: Cascade, deps, F: sp.Expr) -> list:
    """:func:`bounds` as conditions ``g > 0`` (on their closure ``g >= 0``): counterexamples are sought where they hold
    (``m = 3, x = 5`` is no state of ``m = max(x)``)."""
    return [hi - lo for hi, lo in bounds(c, deps, F)]


#: The end of the claim of :func:`within_bounds`'s proofs.
WITHIN = " on the states the cascade reaches"


def within_bounds(F: sp.Expr, c: Cascade, deps) -> tuple[sp.Expr, Proof | None]:
    """``F`` with what :func:`bounds` decides written out — ``abs(m - x)`` is ``m - x`` and ``max(x, m)`` is ``m`` where
    ``m = max(x)`` — and the proof that the two agree on those states (``m = x + u``, ``u >= 0``); ``(F, None)``
    when nothing changes. Σ|x − max| is then ``L·max − Σx``: multi-term separable."""
    rules = {}
    pairs = bounds(c, deps, F)
    for hi, lo in pairs:
        rules[sp.Abs(hi - lo)] = hi - lo
        rules[sp.Abs(lo - hi)] = hi - lo
        rules[sp.Max(hi, lo)] = hi
        rules[sp.Min(hi, lo)] = lo
    G = F.xreplace(rules)
    if G == F:
        return F, None
    gap = sp.Symbol("u__gap", real=True)
    moved = {hi: lo + gap for hi, lo in pairs if isinstance(hi, sp.Symbol) and hi not in lo.free_symbols}
    if not moved:  # a lower bound that is the reduction (a min): write it as the upper one minus the gap
        moved = {lo: hi - gap for hi, lo in pairs if isinstance(lo, sp.Symbol) and lo not in hi.free_symbols}
    proof = prove_equal(F.xreplace(moved), G.xreplace(moved), assumptions={gap.name: ">=0"} if moved else None,
                        claim=f"{sp.sstr(F)} = {sp.sstr(G)}{WITHIN}")
    if not proof.proved or len(moved) != 1:
        return F, None
    return G, proof


def _separate(F, elems, deps, otimes, name, integers=frozenset(), atoms=None, within=()):
    """(G, H, proof) for ⊗, or (None, None, proof) when not separable. ``within``: the relations of the states the
    cascade reaches (:func:`relations`), where a counterexample is sought first."""
    anchors = _anchors(F, elems, deps, otimes)
    if not anchors:
        return None, None, Proof(f"{name} is ⊗-separable", "unknown", F, F,
                                 steps=("no anchor (e0, D0) with F(e0, D0) finite and invertible",),
                                 method="separability")
    _, _, point, F0, G, H = anchors[0]
    e0 = {e: point[e] for e in elems}
    d0 = {d: point[d] for d in deps}
    lhs, rhs = _combine(otimes, F, F0), _combine(otimes, F.xreplace(d0), F.xreplace(e0))
    at = ", ".join(f"{k} = {v}" for k, v in point.items())
    claim = f"F_{name} is separable under {otimes.name} (anchored at {at})"
    proof = prove_equal(lhs, rhs, claim=claim, conditions=within)
    if within and proof.status not in ("proved", "refuted"):  # none where the cascade goes: say where one is
        wide = prove_equal(lhs, rhs, claim=claim)
        if wide.status == "refuted":
            broken = ", ".join(f"{sp.sstr(g)} >= 0" for g in within)
            proof = replace(wide, counterexample=replace(
                wide.counterexample, domain=f"outside the states the cascade reaches ({broken} fails there; none "
                                            f"was found where it holds)"))
    proof = _genuine(proof, integers, atoms)
    if not proof.proved:
        return None, None, proof
    return G, H, proof


def _try(otimes, r, F, elems, deps, facts, integers=frozenset(), atoms=None, within=(), rounds=False,
         growing=()) -> Attempt:
    dist, assumption = _distributes(r.monoid, otimes)
    if not dist.proved:
        return Attempt(otimes.name, "distributivity", (dist,))
    G, H, sep = _separate(F, elems, deps, otimes, r.name, integers, atoms or {}, within)
    if G is None:
        return Attempt(otimes.name, "separability", (dist, sep))
    rng = range_proof(H, otimes, assumption, facts, [d.name for d in deps])
    # H may be 0 or infinite on a non-empty segment (a factor or a denominator that is >= 0, or of unknown sign):
    # then no correction H(D_new)/H(D_old) exists, but none is needed if the state keeps ⊕G and H is applied once.
    # A max or min with ⊗ = + always so: max(G) + H rounds once, as each G + H would, and needs no H of a partial
    # segment, which can be infinite where the row's is not (log(q) at q = Σx² = 0 on a prefix of zeros, the identity
    # state's own q = 0; -m for m = max(x) on a prefix of -inf elements, which min(x - m) skipped as if masked). A
    # logsumexp only where H may be infinite: its running logaddexp of the raw G rounds at |G|'s scale, where the
    # shifted G + H (x - m) it corrects keeps the digits
    # Never a body that rounds (fp8 of a value H scales): ⊕G is G in real arithmetic, which never rounds at H's scale
    # An exponential of a sum-like dependency with G free of exponentials (ranges.grows): H of a partial segment can
    # leave float32 where the row's does not (exp(s) for s = sum(x) at 100 on a prefix of [100, -95], whose total is
    # 5; G·H = inf and its correction inf·0): deferred too. A softmax's G = exp(x) keeps its correction (the shift),
    # and so does an exponential of a max or min (the online normalisation)
    shifted = r.monoid.name in ("max", "min")
    defer = r.monoid.k is None and not rounds and (may_vanish(H, facts, deps) or grows(G, H, growing) if otimes is MUL
                                                   else shifted or may_diverge(H, facts, deps))
    if not rng.proved:
        if defer and rng.assumptions == (NONZERO,):
            return Attempt(otimes.name, None, (dist, sep, rng), G, H, assumption, deferred=True)
        return Attempt(otimes.name, "range of H", (dist, sep, rng), G, H, assumption)
    return Attempt(otimes.name, None, (dist, sep, rng), G, H, assumption, deferred=defer)


def _deferred_words(r) -> str:
    if r.otimes is MUL:
        return (f"; H may be 0 or infinite on a non-empty segment, so the state keeps {r.monoid.name}(G) (with H's "
                f"exponentials) and H's other factors are applied at the end")
    return f"; the state keeps {r.monoid.name}(G) and H is added at the end"


def _reason(attempts) -> tuple[str, Proof | None]:
    """Why no candidate passed, and the most telling refuted proof (separability first)."""
    words = {"distributivity": "⊗ does not distribute over the reducer",
             "separability": "F is not separable", "range of H": "H could not be shown to meet the assumptions"}
    parts = [f"⊗ = {_SYMBOL[a.otimes]}: {words[a.failed]} ({a.proofs[-1].status})" for a in attempts]
    refuted = sorted((a for a in attempts if a.proofs[-1].counterexample is not None),
                     key=lambda a: a.failed != "separability")
    return "; ".join(parts), (refuted[0].proofs[-1] if refuted else None)


def analyze_reduction(r, F: sp.Expr, deps: tuple, c: Cascade, facts, multi: bool = True) -> ReductionAnalysis:
    """The verdict for one reduction with body ``F`` and dependency names ``deps``; a sum that is not one
    separable term is split into several (``multi``, see :mod:`.multiterm`)."""
    text = reducer_text(r)
    dep_syms = [c.symbols[d] for d in deps]
    lists = [d for d in deps if next(x for x in c.reductions if x.name == d).monoid.k is not None]
    if lists:  # a top-k result is a list of k values: per element, a body would be a list too
        return ReductionAnalysis(r.name, r.monoid, text, F, deps, False,
                                 reason=f"its body reads the top-k list {', '.join(lists)} per element; a top-k "
                                        f"result can be read by outputs (e.g. `out w = t / sum(t)`), not inside "
                                        f"a later reduction")
    if not (F.free_symbols & set(dep_syms)):
        return ReductionAnalysis(r.name, r.monoid, text, F, (), True)
    written, domain = F, None
    if multi:  # on the states the cascade reaches (a max at least each term), abs and max of the two are decided
        F, domain = within_bounds(F, c, deps)
    counts = frozenset(c.symbols[d] for d in deps
                       if any(x.name == d and x.monoid is ADD and x.body == 1 for x in c.reductions))
    growing = unbounded(c, deps, facts)
    cond = abstract_conditions(F, set(dep_syms), counts)
    if cond.problem is not None:
        return ReductionAnalysis(r.name, r.monoid, text, F, deps, False, reason=cond.problem)
    algebra = cond.expr
    elems = sorted(algebra.free_symbols - set(dep_syms) - {p.symbol for p in c.params}, key=sp.default_sort_key)
    attempts, within = [], relations(c, deps, algebra)
    for otimes in CANDIDATES:
        attempts.append(_try(otimes, r, algebra, elems, dep_syms, facts, integer_symbols(c), cond.atoms, within,
                             cast_in_body(r, c) is not None, growing))
        if attempts[-1].failed is None and not attempts[-1].deferred:
            break
    # a ⊗ with a correction first; a deferred one (H applied at the end) when no other separates F
    chosen = [a for a in attempts if a.failed is None]
    if chosen:
        a = min(chosen, key=lambda a: a.deferred)
        otimes = next(o for o in CANDIDATES if o.name == a.otimes)
        G, H = a.G.xreplace(cond.atoms), a.H.xreplace(cond.atoms)  # atoms back to their conditionals
        return ReductionAnalysis(r.name, r.monoid, text, written, deps, True, otimes, G, H,
                                 (domain,) * bool(domain) + a.proofs, attempts=tuple(attempts), deferred=a.deferred)
    reason, refuted = _reason(attempts)
    for route in ROUTES.values():
        if r.monoid is not route.reducer:
            continue
        G, H, proofs, why = route.find(algebra, elems, dep_syms, facts)
        if G is not None:
            return ReductionAnalysis(r.name, r.monoid, text, written, deps, True, None, G.xreplace(cond.atoms),
                                     H.xreplace(cond.atoms), (domain,) * bool(domain) + proofs,
                                     attempts=tuple(attempts), route=route.name)
        reason = f"{reason}; ⊗ = {route.name}: {why}"
    if multi and r.monoid is ADD:
        terms, why = _multi_term(r, algebra, elems, dep_syms, cond.atoms, c, facts, deps)
        if terms is not None:
            return ReductionAnalysis(r.name, r.monoid, text, written, deps, True,
                                     proofs=(domain,) * bool(domain) + (terms.proof,), attempts=tuple(attempts),
                                     terms=terms)
        reason = f"{reason}; {why}"
    return ReductionAnalysis(r.name, r.monoid, text, F, deps, False, reason=reason,
                             counterexample=None if refuted is None else refuted.counterexample,
                             refuted=refuted, proofs=tuple(p for a in attempts for p in a.proofs),
                             attempts=tuple(attempts))


def _multi_term(r, algebra, elems, dep_syms, atoms, c: Cascade, facts, deps):
    """The body as a sum of separable terms (:func:`.multiterm.split`), or the reason it is not one."""
    sizes = c.sizes
    scalars = {c.symbols[n] for n in [s.name for s in c.inputs] + element_atoms(c) if sizes[n] is None}

    def sub(E):
        used = tuple(d for d in deps if c.symbols[d] in E.free_symbols)
        part = Reduction(f"{r.name}[term]", ADD, E)
        return analyze_reduction(part, E, used, c, facts, multi=False)

    if algebra.has(sp.oo, -sp.oo, sp.zoo):
        return None, "it is not multi-term separable either: the body is infinite somewhere"
    cast = cast_in_body(r, c)
    if cast is not None:  # rounding is not additive: the terms' sums would never round
        return None, (f"it is not multi-term separable either: the cast {cast} rounds each element, which sums of "
                      f"separate terms of the body cannot reproduce")
    positive = frozenset(d for d in deps if d in facts and facts[d].sign == ">0")
    terms, why = split(r.name, algebra, elems, dep_syms, atoms, scalars, sub, positive)
    if terms is None:
        return None, why if why.startswith("it is not") else f"it is not multi-term separable either: {why}"
    return terms, None


def _verdicts(cascade: Cascade, F: dict, facts: dict, deps: dict) -> list:
    reds = []
    for r in cascade.reductions:
        d = tuple(sorted(deps[r.name], key=_order(cascade)))
        try:
            # (a reduction reached once the budget is spent is undecided, however quickly its proofs would go: a
            # verdict must not depend on whether this one happens to reach a check of the clock — a cached body
            # and a max's instant proof reached none, and read "fusable as is" under a spent budget now and then)
            _budget.check()
            reds.append(analyze_reduction(r, F[r.name], d, cascade, facts))
        except (BudgetExhausted, Exception) as err:  # noqa: BLE001 - an undecided verdict, with its reason
            reds.append(_undecided(r, F[r.name], d, cascade, err))
    return reds


def _with_hint(r: ReductionAnalysis, c: Cascade) -> ReductionAnalysis:
    """A refused reduction whose body uses a scalar param or input of no declared sign: the declaration
    under which the analysis (the same proofs) fuses it, named in the reason."""
    if r.fusable or r.reason is None or r.reason.startswith("unknown"):
        return r
    unsigned = [s for s in (*c.params, *c.inputs) if s.sign is None and s.size is None
                and not getattr(s, "integer", False) and s.symbol in r.F.free_symbols]
    for p in unsigned:
        kind = "input" if isinstance(p, Input) else "param"
        for sign in ((">=0", "<=0") if kind == "input" else (">0", "<0")):
            old, new = p.symbol, replace(p, sign=sign).symbol
            try:
                stmts = tuple(replace(s, sign=sign) if s is p else
                              replace(s, body=s.body.xreplace({old: new})) if isinstance(s, Reduction) else
                              replace(s, expr=s.expr.xreplace({old: new})) if hasattr(s, "expr") else s
                              for s in c.statements)
                signed = Cascade(stmts, name=c.name, source=None)
                again = analyze_reduction(signed[r.name], bodies(signed)[r.name], r.deps, signed, sign_facts(signed))
            except BudgetExhausted:
                raise
            except Exception:  # noqa: BLE001 - SymPy refusing the declared form: no hint from this sign
                continue
            if again.fusable:
                return replace(r, reason=f"{r.reason}; it fuses when the sign of {p.name} is declared: "
                                         f"`{kind} {p.name} {sign[:-1]} 0`")
    return r


def analyze(cascade: Cascade, budget_s: float | None = None, hints: bool = True) -> Analysis:
    """Decide, with proofs, whether and how each reduction of ``cascade`` fuses.

    The analysis runs under a time budget (``budget_s`` seconds, default
    :data:`redalgebra.algebra.budget.DEFAULT_SECONDS`): a reduction it has not decided when the budget
    runs out, and one whose analysis fails inside SymPy, is reported not fusable with the reason
    ("unknown: ..."), never a hang or a traceback. ``hints``: for a refused reduction whose body uses a
    param of no declared sign, try each sign and name the declaration that makes it fuse.
    """
    require_cascade(cascade, "analyze")
    seconds = _budget.DEFAULT_SECONDS if budget_s is None else budget_s
    return _analyze(cascade, seconds, bool(hints))[0]


def _cut_short(value, depth: int = 0) -> bool:
    """Whether a budget cut any of ``value``'s proofs short (a :class:`Proof` whose ``exhausted`` is true, anywhere in
    the verdicts, their attempts and terms), or a verdict says it is unknown: such an analysis is not kept."""
    if depth > 8:
        return False
    if getattr(value, "exhausted", False) is True or (isinstance(value, ReductionAnalysis)
                                                      and (value.reason or "").startswith("unknown")):
        return True
    if isinstance(value, (tuple, list)):
        return any(_cut_short(v, depth + 1) for v in value)
    if hasattr(value, "__dataclass_fields__"):
        return any(_cut_short(getattr(value, f), depth + 1) for f in value.__dataclass_fields__
                   if not isinstance(getattr(value, f), (str, int, float, bool, type(None), sp.Basic)))
    return False


#: Analyses kept in a process, by (cascade, budget, hints), the most recently used last.
ANALYSES_KEPT = 256


@_budget.cache_decided(undecided=lambda out: not out[1] or _cut_short(out[0].reductions), kept=ANALYSES_KEPT)
def _analyze(cascade: Cascade, seconds: float, hints: bool) -> tuple:
    """:func:`analyze`'s work: (the analysis, whether the budget let it finish). A cascade is a frozen value and its
    analysis a function of it (the proofs are symbolic), so an equal cascade analysed again — a notebook's cell re-run,
    ``compile`` or ``check`` deriving what ``derive`` derived — gets the kept verdicts at once; an analysis that a
    budget cut short (:func:`_cut_short`) is not kept: a later call may have the time."""
    deps = reduction_dependencies(build_graph(cascade))
    with _budget.budget(seconds, f"the analysis of {cascade.name}"):
        try:
            F, facts = bodies(cascade), sign_facts(cascade)
        except BudgetExhausted as err:
            order = _order(cascade)  # (each undecided with its dependencies: they are the graph's, not the proofs')
            return Analysis(cascade, tuple(_undecided(r, None, tuple(sorted(deps[r.name], key=order)), cascade, err)
                                           for r in cascade.reductions), {}, False), False
        reds = _verdicts(cascade, F, facts, deps)
        complete = True
        try:
            reds = [_with_hint(r, cascade) for r in reds] if hints else reds
        except BudgetExhausted:
            complete = False  # the verdicts stand without hints
    # a deferred result is formed only at the end, so a later reduction that reads it would compare with
    # its emptiness guard: there the correction form is kept where its range was proved (H != 0 taken
    # away from empty states, as before deferral existed)
    read = {d for r in cascade.reductions for d in deps[r.name]}
    readers = {d: sorted(r.name for r in cascade.reductions if d in deps[r.name]) for d in read}
    reds = [(replace(r, deferred=False) if r.proofs[-1].proved else _unread_deferral(r, readers[r.name]))
            if r.deferred and r.name in read else r for r in reds]
    return Analysis(cascade, tuple(reds), facts, has_casts(cascade)), complete


def _unread_deferral(r: ReductionAnalysis, readers: list) -> ReductionAnalysis:
    """A deferred reduction a later one reads, whose correction form has no proved range either: not fusable (the
    later reduction would read a value formed only at the end)."""
    return replace(r, fusable=False, deferred=False, reason=(
        f"H = {r.H} may be 0 or infinite on a non-empty segment, so {r.name} would keep {r.monoid.name}(G) and apply H "
        f"at the end, but {', '.join(readers)} reads {r.name} as the row goes; the correction form needs "
        f"{' and '.join(r.proofs[-1].assumptions) or 'a range of H'}, which could not be shown (declare the signs "
        f"that make the dependency nonzero, or clamp it: max(d, eps))"))


def _undecided(r: Reduction, F, deps, c: Cascade, err: Exception) -> ReductionAnalysis:
    """A reduction the analysis could not decide: not fusable, the reason saying why it is unknown."""
    if isinstance(err, BudgetExhausted):
        why = f"unknown: {err} (give more time with analyze(..., budget_s=...) or `--budget SECONDS`)"
    else:
        why = f"unknown: the analysis stopped on {type(err).__name__}: {str(err)[:300]}"
    return ReductionAnalysis(r.name, r.monoid, reducer_text(r), r.body if F is None else F, deps, False, reason=why)


def _order(c: Cascade):
    position = {s.name: i for i, s in enumerate(c.statements)}
    return lambda n: position[n]


__all__ = ["Analysis", "Attempt", "ReductionAnalysis", "analyze", "analyze_reduction", "element_atoms", "sign_of"]
