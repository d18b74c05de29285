r"""The derivation: a fusable cascade turned into segment states and their algebra.

For a segment :math:`A` the state is :math:`\sigma(A) = (r_1(A), \dots, r_n(A))`,
the cascade computed on :math:`A` alone.  In dependency order the merge is the
paper's Eq. 11,

.. math::
    r_i(A \cup B) = [r_i(A) \otimes c_i(A)] \oplus_i [r_i(B) \otimes c_i(B)],
    \qquad c_i(X) = H_i(D(A \cup B)) \otimes H_i(D(X))^{-1},

with the correction :math:`c_i` rewritten into a stable closed form
(:mod:`.rules`) and proved equal to the raw quotient.  Everything else is a
special case: *identity* (the empty segment), *lift* (one element),
*incremental update* ``merge(state, lift(e))`` — whose new term simplifies to
:math:`F_i(e, D_{new})` — and *finalize* (the epilogue on the root state).

**Guards.** A side that is *empty* — a dependency at its monoid's identity
where that value cannot arise from real elements (``m = -inf``: every score
masked; ``l = 0`` for a strictly positive sum) — contributes :math:`0_i` and is
skipped, never multiplied by NaN.  The guard tests the dependency values, never
:math:`H` itself, which can overflow in float32 although the corrected product
does not.  A dependency that can reach its identity on real elements (a sum
that cancels to 0) guards nothing.  A zero of a denominator of :math:`H`
(``1/a`` on a prefix of zeros, where the abs-max ``a`` is 0) has no correction:
the analysis defers such a reduction (:math:`\oplus G`, :math:`H` applied once
at the end); where a later reduction reads it, it keeps the correction form and
the guards say so: skipping such a side would be wrong in general, so it yields
NaN rather than a silently wrong value.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

import sympy as sp

from ..algebra import Proof, prove_equal
from ..algebra import budget as _budget
from ..errors import CascadeError, NotFusableError
from ..ir import ADD, MUL, Cascade, Monoid, Reduction, build_graph, reduction_dependencies
from ..ir.nodes import require_cascade
from ..ir.printer import CascadePrinter, reducer_text
from .analysis import Analysis, ReductionAnalysis, analyze, analyze_reduction
from .ranges import grows, may_diverge, may_vanish, overshoots, unbounded
from .multiterm import combination_proof, merge_proof, rewrite
from .prepare import bodies, element_atoms, has_casts, inline, outputs, sign_facts
from .program import Program, TopKMerge, build, exp_out_of_logs
from .rules import stabilize


def side(name: str, which: str) -> sp.Symbol:
    """The symbol of ``name`` on a side: ``a`` (left/old), ``b`` (right) or ``n`` (merged/new).

    Extended real: a state value can be an identity such as ``-oo``.
    """
    return sp.Symbol(f"{name}_{which}", extended_real=True)


def index_symbol(name: str) -> sp.Symbol:
    return sp.Symbol(f"{name}.index", real=True)


def combine(monoid: Monoid, u, v) -> sp.Expr:
    """``u ⊗ v`` for ⊗ = ``mul`` or ``add``."""
    return u * v if monoid is MUL else u + v


@dataclass(frozen=True)
class Correction:
    """``c_i(X)``: the stable form, the raw quotient it replaces, and the proof that they agree."""

    stable: sp.Expr
    raw: sp.Expr
    rules: tuple
    proof: Proof


@dataclass(frozen=True)
class FusedCascade:
    """Identity, lift, merge, update and finalize of a fusable cascade, as SymPy programs."""

    cascade: Cascade
    analysis: Analysis
    prologue: Program          # element atoms (per-element lets that use no reduction)
    identity: dict             # reduction -> 0_i
    lift: Program              # the state of one element, in element symbols
    merge: Program             # states _a and _b -> _n
    update: Program            # state _a and one element -> _n
    finalize: Program          # reduction symbols -> outputs
    per_element_outputs: tuple
    corrections: dict          # reduction -> Correction (in _a -> _n symbols)
    degenerate: dict           # reduction -> condition on a side's dependency values (in _a symbols)
    bodies: dict               # reduction -> F_i as written (casts kept), lets inlined
    naive: dict                # reduction -> (G, H): the one-pass (⊕ G) ⊗ H form
    guards: tuple              # the edge cases and how they are handled, in words
    # A multi-term sum (see .multiterm) is fused as partial sums: ``cascade`` is then the state cascade
    # (one partial reduction per term, the sum itself a let), ``source`` the cascade as written.
    source: Cascade | None = None
    source_analysis: Analysis | None = None
    rewrite: object = None     # the .multiterm.Rewrite, None when nothing was rewritten

    @property
    def reductions(self) -> tuple:
        return self.analysis.reductions

    @property
    def exact_in_reals_only(self) -> bool:
        return self.analysis.exact_in_reals_only

    @property
    def corrected_selections(self) -> tuple:
        """The top-k reductions whose kept values the one-pass forms correct as their dependencies move
        (``topk(8, exp(g - m) / s)``): each correction rounds, so values the reference ranks equal (equal elements,
        to the lower index) are ranked by their rounding there; the level order selects with the dependencies final."""
        return tuple(r.name for r in self.analysis.reductions if r.monoid.k is not None and r.deps)

    @functools.cached_property  # (a frozen value: asked at every compile, its simplifications done once)
    def uncorrectable(self) -> tuple:
        """The reductions whose correction does not exist on some non-empty prefix (:func:`uncorrectable`): the
        one-pass forms are NaN from there on, the level order computes them with the dependencies final."""
        return tuple(r.name for r in uncorrectable(self.analysis))

    @property
    def one_pass_inexact(self) -> tuple:
        """The reductions the one-pass forms compute otherwise than the reference on some rows: :attr:`uncorrectable`
        ones, :attr:`corrected_selections`, then :attr:`combined_late` ones (partial sums subtracted at the end, which
        lose every digit where the elements sit far from 0 against their spread: ``sum(exp(x - m) * (x - m)**2)`` at
        x = 1e4 + N(0, 1) came out 4× off). The level order computes each as the reference does."""
        named = self.uncorrectable + tuple(n for n in self.corrected_selections if n not in self.uncorrectable)
        return named + tuple(n for n in self.combined_late if n not in named)

    @property
    def combined_late(self) -> tuple:
        """The sums written as one reduction and fused as partial sums combined once, at the end, with no centred
        form (:func:`.multiterm._late`): where their terms nearly cancel the one-pass forms lose
        the digits that the level order of the cascade as written (:func:`as_written`) keeps."""
        return tuple(self.rewrite.late) if self.rewrite is not None else ()

    def monoid(self, name: str) -> Monoid:
        return self.analysis[name].monoid

    def text(self) -> str:
        from .report import fused_text
        return fused_text(self)

    def _repr_markdown_(self) -> str:
        """Jupyter: the lift, update, merge and finalize formulas in LaTeX, then the guards."""
        from .report import fused_latex
        return fused_latex(self) + "\n\n" + "\n".join(f"- {g}" for g in self.guards)


def _zero(monoid: Monoid) -> sp.Expr:
    return monoid.identity


def _marks_empty(name: str, analysis: Analysis) -> bool:
    """Whether ``name`` equals its monoid's identity only on an empty (or fully masked) segment.

    True for an infinite identity (a max is -inf only when every score is -inf, which is masking) and
    for a strictly signed result (a sum of exponentials is 0 only when there is no term).  A sum that
    can cancel to 0 on real elements is not a test of emptiness, so it guards nothing.
    """
    identity = analysis[name].monoid.identity
    return identity in (sp.oo, -sp.oo) or analysis.signs[name].sign in (">0", "<0")


def _inexact_empty(d: str, analysis: Analysis) -> bool:
    """Whether ``d`` marks emptiness only by a value its elements could also round to (a strictly signed
    sum such as ``sum(exp(x))``); an infinite identity or an element count (``sum(1)``) marks it exactly."""
    return (_marks_empty(d, analysis) and analysis[d].monoid.identity not in (sp.oo, -sp.oo)
            and not _is_count(d, analysis.cascade))


def _exact_empty(name: str, analysis: Analysis) -> str | None:
    """A reduction before ``name`` whose identity is infinite, or an element count: it is at its identity
    exactly when the segment is empty (or fully masked), whatever the values — every reduction of a row
    runs over the same elements. A strictly signed sum is not such a test: ``sum(exp(x))`` underflows to
    0 on a non-empty float32 segment at x = -110."""
    for r in analysis.reductions:
        if r.name == name:
            return None
        if r.monoid.identity in (sp.oo, -sp.oo) and r.monoid.k is None or _is_count(r.name, analysis.cascade):
            return r.name
    return None


def _is_count(name: str, c: Cascade) -> bool:
    return any(r.name == name and r.monoid is ADD and r.body == 1 for r in c.reductions)


def _degenerate(ra: ReductionAnalysis, c: Cascade, analysis: Analysis, which: str) -> sp.Basic:
    """The condition under which side ``which`` of reduction ``ra`` is empty and contributes nothing: a dependency
    at its infinite identity, or — for a strictly signed sum, which float32 can round to 0 on elements — the
    emptiness of an earlier reduction with an infinite identity, else of the element count."""
    tests = set()
    for d in ra.deps:
        if not _marks_empty(d, analysis):
            continue
        if _inexact_empty(d, analysis):
            d = _exact_empty(ra.name, analysis)  # present: _derive_fusable adds a count where none is
        tests.add(sp.Eq(side(d, which), _zero(analysis[d].monoid)))
    return sp.Or(*sorted(tests, key=sp.default_sort_key))


def _needs_count(analysis: Analysis) -> bool:
    """Whether some reduction's emptiness test needs an element count the cascade does not have."""
    return any(_inexact_empty(d, analysis) and _exact_empty(ra.name, analysis) is None
               for ra in analysis.reductions for d in ra.deps)


def _with_count(cascade: Cascade) -> Cascade:
    """``cascade`` with ``reduce count = sum(1)`` (a fresh name if ``count`` is taken) before its first reduction."""
    names = {s.name for s in cascade.statements}
    name = next(n for n in (f"count{k}" if k else "count" for k in range(len(names) + 1)) if n not in names)
    stmts = list(cascade.statements)
    first = next(i for i, st in enumerate(stmts) if isinstance(st, Reduction))
    stmts.insert(first, Reduction(name, ADD, sp.Integer(1)))
    return Cascade(tuple(stmts), name=cascade.name, source=None)


def _correction(ra: ReductionAnalysis, c: Cascade, which: str) -> Correction:
    new = ra.H.xreplace({c.symbols[d]: side(d, "n") for d in ra.deps})
    old = ra.H.xreplace({c.symbols[d]: side(d, which) for d in ra.deps})
    raw = new / old if ra.otimes is MUL else new - old
    stable, fired = stabilize(raw)
    proof = prove_equal(stable, raw, claim=f"the stable correction of {ra.name} equals H(D_new) ⊗ H(D_{which})⁻¹")
    return Correction(stable, raw, fired, proof)


def _guarded_term(ra, c, analysis, which, corrections) -> sp.Expr:
    """``0_i`` on a degenerate side, else ``r_i(X) ⊗ c_i(X)``."""
    value = side(ra.name, which)
    if not ra.deps:
        return value
    corr = corrections[which]
    return sp.Piecewise((_zero(ra.monoid), _degenerate(ra, c, analysis, which)),
                        (combine(ra.otimes, value, corr.stable), True))


def _join(ra: ReductionAnalysis, left: sp.Expr, right: sp.Expr, right_index: sp.Symbol) -> sp.Expr:
    if ra.monoid.k is not None:
        return TopKMerge(sp.Integer(ra.monoid.k), left, right, index_symbol(f"{ra.name}_a"), right_index)
    return ra.monoid.combine(left, right)


def _new_term(ra, body, c, analysis) -> sp.Expr:
    """The new element's term of the incremental update: ``F_i(e, D_new)``, guarded."""
    term = body.xreplace({c.symbols[d]: side(d, "n") for d in ra.deps})
    if not ra.deps:
        return term
    return sp.Piecewise((_zero(ra.monoid), _degenerate(ra, c, analysis, "n")), (term, True))


def _lift(analysis: Analysis, bodies: dict, c: Cascade) -> Program:
    lifted = {}
    steps = []
    for ra in analysis.reductions:
        value = _budget.simplified(bodies[ra.name].xreplace(lifted))
        lifted[c.symbols[ra.name]] = value
        steps.append((side(ra.name, "n"), value))
    return Program(tuple(steps), tuple(s for s, _ in steps))


#: The largest finite float32.
FLOAT32_MAX = 3.4028234663852886e38


def _range_notes(c: Cascade, bodies: dict) -> list[str]:
    """Sums of powers of the elements that leave float32's range for large elements (a documented limit:
    the unfused float32 computation overflows there too; the float64 reference does not)."""
    scalars = [c.symbols[s.name] for s in c.inputs if c.sizes[s.name] is None]
    notes = []
    for r in c.reductions:
        body = bodies[r.name]
        used = sorted(body.free_symbols & set(scalars), key=sp.default_sort_key)
        if r.monoid is not ADD or not used or not body.is_polynomial(*used):
            continue
        poly = sp.Poly(body, *used)
        k = max(poly.degree(v) for v in used)  # a power of one element (x**2), not a product of two inputs
        if k >= 2:
            notes.append(f"{r.name} = sum({CascadePrinter().doprint(r.body)}) grows as the elements to the power {k}: in "
                         f"float32 it overflows once they exceed about {FLOAT32_MAX ** (1 / k):.1e} (less by a factor "
                         f"L^(1/{k}) for rows of L), as the unfused float32 form does; scale the inputs first")
    return notes


def uncorrectable(analysis: Analysis) -> list:
    """The reductions kept in the correction form (read by a later reduction, or a top-k) whose H may be 0 or infinite
    on a non-empty segment: their one-pass forms are NaN from such a prefix on; those whose skipped sides are not
    empty (:func:`unskippable`); and those whose H holds an exponential of a sum-like dependency (:func:`outgrown`).
    The guards say so; the CPU's auto takes the level order for them."""
    found = []
    for ra in analysis.reductions:
        if not ra.deps or ra.deferred or ra.otimes is None:
            continue
        deps = [analysis.cascade.symbols[d] for d in ra.deps]
        if may_vanish(ra.H, analysis.signs, deps) if ra.otimes is MUL else may_diverge(ra.H, analysis.signs, deps):
            found.append(ra)
        elif unskippable(ra, analysis) or outgrown(ra, analysis) or undershifted(ra, analysis):
            found.append(ra)
    return found


def undershifted(ra: ReductionAnalysis, analysis: Analysis) -> bool:
    """Whether ``ra``'s correction form shifts its exponentials by a running max or min that does not bound them
    (:func:`.ranges.overshoots`: ``exp(x - 2m)`` for ``m = max(x)``, ``exp(x - m)`` for ``m = max(2x)``): a prefix's
    terms overflow where the row's do not."""
    c = analysis.cascade
    return ra.otimes is MUL and not ra.deferred and overshoots(ra.F, ra.H, c, {c.symbols[d] for d in ra.deps})


def outgrown(ra: ReductionAnalysis, analysis: Analysis) -> bool:
    """Whether ``ra`` keeps a correction form whose H holds an exponential (or sigmoid) of a sum-like dependency (or of
    a max or min over one, :func:`.ranges.unbounded`), as
    ``max(exp(r0 - x))`` with ``r0 = sum(y)`` does: a partial ``r0`` can leave float32's range where the row's does
    not (inf·0 in the correction, NaN), and deferring it would not help where G is an exponential too (``exp(-x)``
    underflows where ``exp(r0 - x)`` does not). A G free of exponentials is deferred instead (:func:`.ranges.grows`)."""
    return ra.otimes is MUL and not ra.deferred and grows(sp.Integer(1), ra.H, unbounded(analysis.cascade, ra.deps,
                                                                                        analysis.signs))


def unskippable(ra: ReductionAnalysis, analysis: Analysis) -> str | None:
    """A dependency of ``ra`` whose infinite identity marks a side the merge skips as empty (``m = max(s)`` at -inf),
    where an element of that side — one at which the dependency's body is its identity: ``s`` at -inf (a -inf value,
    or one a ``where(…, -inf)`` mask wrote), ``x`` at 0 for ``max(log(x))`` — still contributes to ``ra``
    (``exp(tanh(s) - m)`` is ``exp(-1 - m)`` there, ``exp(sqrt(x) - m)`` is ``exp(-m)``, not 0): the skip loses it.
    None where every such element gives ``ra``'s identity (``exp(s - m)`` tends to 0) or no value (undefined in the
    reference: skipped, as a masked element is). Such elements are found as the limits of the body at 0, ±inf and the
    zeros of its logs' arguments and divisors in each of its symbols (the others finite); a limit SymPy cannot take
    (or a body too large to try, or an infinity whose sign depends on another symbol) counts as such an element, and
    as one that contributes."""
    for d in ra.deps:
        dep = analysis[d]
        if dep.monoid.k is not None or dep.monoid.identity not in (sp.oo, -sp.oo) or dep.deps:
            continue
        F, body = ra.F, dep.F
        if not body.is_Symbol:  # a compound body (dot(q, k)) that ra uses whole: one value, as a let would name it
            whole = sp.Dummy("whole", real=True)
            spelled = F.xreplace({body: whole})
            if whole in spelled.free_symbols and not spelled.free_symbols & body.free_symbols:
                F, body = spelled, whole
        for point in _identity_points(body, dep.monoid.identity, set(ra.deps)):
            value = _limit(F, *point)
            if value is None or (value != ra.monoid.identity and value is not sp.nan):
                return d
    return None


#: Bodies larger than this are not given to SymPy's limit (which can take minutes): taken as unknown.
_LIMIT_OPS = 40
#: Where an element's symbol may take a body to a max's or min's identity: 0 from either side, ±inf.
_POINTS = ((0, "+"), (0, "-"), (sp.oo, "-"), (-sp.oo, "+"))


def _limit(e: sp.Expr, u: sp.Symbol, at, direction: str):
    """``lim e`` as ``u`` tends to ``at`` from ``direction`` (other symbols fixed, finite); None if SymPy cannot say."""
    if u not in e.free_symbols:
        return e
    if sp.count_ops(e) > _LIMIT_OPS:
        return None
    try:  # substitution first (a continuous body at the point: tanh(-oo) = -1), the limit where it is undefined
        direct = e.subs(u, at)
    except (ValueError, TypeError):
        direct = sp.nan
    if direct in (sp.oo, -sp.oo) or not direct.has(sp.nan, sp.zoo, sp.oo, -sp.oo, sp.AccumBounds):
        return direct
    try:
        value = sp.limit(e, u, at, direction)
    except (NotImplementedError, ValueError, TypeError, RecursionError):
        return None
    if value.has(sp.Limit, sp.AccumBounds) or (value.free_symbols and value.has(sp.oo, -sp.oo, sp.zoo)):
        return None  # (unknown, or infinite with a sign that depends on the other symbols: -oo*sign(z))
    return value


def _poles(body: sp.Expr, u: sp.Symbol) -> list:
    """The real values of ``u`` at which an argument of a log or a divisor of ``body`` is 0 (``max(log(abs(x - 1)))``
    at x = 1), from either side; those SymPy finds among small arguments."""
    found = []
    for arg in [e.args[0] for e in body.atoms(sp.log)] + [p.base for p in body.atoms(sp.Pow) if p.exp.is_negative]:
        if u not in arg.free_symbols or sp.count_ops(arg) > _LIMIT_OPS // 2:
            continue
        try:
            roots = sp.solveset(arg, u, sp.S.Reals)
        except (NotImplementedError, ValueError, TypeError):
            continue
        if isinstance(roots, sp.FiniteSet):
            found += [(r, d) for r in roots if r.is_number and r.is_finite and r != 0 for d in ("+", "-")]
    return found


def _identity_points(body: sp.Expr, identity, skip: set):
    """``(symbol, point, direction)`` at which ``body`` tends to ``identity`` (``max(log(x))``: x at 0 from above), or
    may: where the limit is unknown."""
    for u in sorted(body.free_symbols, key=sp.default_sort_key):
        if u.name in skip:
            continue
        for at, direction in _POINTS + tuple(_poles(body, u)):
            if (u.is_nonnegative and at == 0 and direction == "-") or (u.is_nonpositive and at == 0 and direction == "+"):
                continue
            value = _limit(body, u, at, direction)
            if value is None or value == identity:  # (unknown: perhaps, so checked)
                yield u, at, direction


def _guards(analysis: Analysis, bodies: dict) -> tuple[str, ...]:
    notes = ["the identity state is each reduction's 0 (max: -inf, sum: 0, top-k: -inf values, index -1)",
             "an empty or fully masked side (an earlier max at -inf, or an element count of 0) contributes "
             "0_i: it is skipped, never multiplied by NaN (a row whose every score is -inf, a mask written with "
             "where(…, -inf) that keeps nothing, is such a side: its sums are 0, as with the call's keep mask, where "
             "the unfused reference and the level order compute exp(-inf - (-inf)) = NaN)",
             "a length-1 segment is the lift of its element; masked elements leave the state unchanged"]
    notes += _range_notes(analysis.cascade, bodies)
    for ra in uncorrectable(analysis):
        if outgrown(ra, analysis) and not may_vanish(ra.H, analysis.signs,
                                                     [analysis.cascade.symbols[d] for d in ra.deps]):
            notes.append(f"{ra.name}: H = {ra.H} holds an exponential of a sum-like dependency (or of a max or min "
                         f"over one), whose partial values can leave float32's range where the row's does not (a "
                         f"prefix summing past 88): the one-pass "
                         f"forms are NaN there; the level order (strategy 'levels', the CPU's auto) is exact")
            continue
        skip = unskippable(ra, analysis)
        if skip is not None:
            notes.append(f"{ra.name}: a side whose {skip} is {analysis[skip].monoid.identity} is skipped as empty, but an "
                         f"element of such a side (its value at {analysis[skip].monoid.identity}: a -inf in the row, or "
                         f"a value a where(…, -inf) mask wrote) still contributes to {ra.name} here, where the "
                         f"reference counts it: the one-pass forms lose it on rows holding one; the level order "
                         f"(strategy 'levels', the CPU's auto) keeps it")
            continue
        if undershifted(ra, analysis):
            notes.append(f"{ra.name}: its exponentials are shifted by a running max or min that does not bound them "
                         f"({ra.name}'s terms at a dependency equal to the element's own value still hold an "
                         f"exponential of the element, as exp(x - 2*m) for m = max(x) does): a prefix's terms can "
                         f"overflow float32 where the row's do not, and the one-pass forms are NaN there; the level "
                         f"order (strategy 'levels', the CPU's auto) is exact")
            continue
        why = ("a top-k keeps its values, corrected as they go" if ra.monoid.k is not None else
               f"a later reduction reads {ra.name} (read only by outputs, it would be deferred: H applied at the end)")
        notes.append(f"{ra.name}: H = {ra.H} may be {'0 or infinite' if ra.otimes is MUL else 'infinite'} on a "
                     f"non-empty segment (a prefix of the row where a dependency of H is 0), where the correction is "
                     f"{'0/0' if ra.otimes is MUL else '-inf - (-inf)'}: the fused result is NaN there (loudly, not "
                     f"silently wrong); it is kept in this form because {why}; clamp a denominator or a log's "
                     f"argument, as quantisers clamp the abs-max with max(a, eps), or use the level order "
                     f"(strategy 'levels' on the CPU)")
    for ra in analysis.reductions:
        if ra.monoid.k is not None and ra.deps:
            notes.append(f"{ra.name}: the one-pass forms correct the kept values by H(D_new)/H(D_old) as "
                         f"{', '.join(ra.deps)} move, and each correction rounds: values equal in the reference (equal "
                         f"elements, ranked to the lower index) can be ranked by their rounding instead; the level order "
                         f"selects with the dependencies final, as the reference does (the CPU's auto takes it: "
                         f"'levels'; on the GPU 'rows' selects so over a row its registers hold)")
    signed = sorted({d for ra in analysis.reductions for d in ra.deps if _inexact_empty(d, analysis)})
    if signed:
        notes.append(f"{', '.join(signed)}: a strictly signed sum is not an emptiness test (float32 rounds sum(exp(x)) to "
                     f"0 on elements at x = -110): a side is empty when an earlier max/min is at its infinite "
                     f"identity, else when the element count is 0; a sum rounded to 0 on elements gives what float32 "
                     f"makes of it (NaN, inf), never a silent 0")
    if analysis.exact_in_reals_only:
        notes.append("casts (fp8) are the identity in real arithmetic: the fused forms are exact in ℝ but round "
                     "at a running scale in the incremental form, so they are not bitwise equal to the unfused one; "
                     "the level order keeps the cast's scale final and is exact: when the reductions the cast "
                     "depends on read only the small per-row operand (an activation row, which fits on chip), they "
                     "are computed first and the large operand is streamed once, rounded at the final scale (the "
                     "columns and nonincremental strategies; auto takes columns for a weight shared by the rows)")
    return tuple(notes)


def derive(cascade: Cascade) -> FusedCascade:
    """Derive the fused forms of ``cascade``.

    A multi-term sum is first rewritten into one partial reduction per term (:func:`.multiterm.rewrite`);
    the returned ``FusedCascade.cascade`` is then that state cascade and ``.source`` the cascade as written.

    Raises
    ------
    NotFusableError
        When some reduction is not fusable; ``.analysis`` says which and why.
    """
    require_cascade(cascade, "derive")
    analysis = analyze(cascade)
    with _budget.budget(_budget.DEFAULT_SECONDS, f"the derivation of {cascade.name}"):
        try:
            return _derive_fusable(cascade, analysis)
        except ValueError as err:  # SymPy's max or min of a value it cannot order: one that is not real
            if "not comparable" not in str(err):
                raise
            what = re.search(r"'(.+)'", str(err))
            raise CascadeError(f"{cascade.name}: {what.group(1) if what else 'a body'} is "
                               f"not known to be real (SymPy cannot order it against a number: a log or root of a value "
                               f"that is never positive, such as log(min(x, 0))), so no max or min of it can be formed; "
                               f"clamp the argument (log(max(x, 1e-30)))") from None


def _derive_fusable(cascade: Cascade, analysis: Analysis) -> FusedCascade:
    if not analysis.fusable:
        bad = [r for r in analysis.reductions if not r.fusable]
        raise NotFusableError(f"{cascade.name} is not fusable: " +
                              "; ".join(f"{r.name}: {r.reason}" for r in bad), analysis)
    if _needs_count(analysis):  # an element count joins the state: emptiness is tested on it, not on a 0 sum
        counted = _with_count(cascade)
        return replace(_derive_fusable(counted, analyze(counted)), source=cascade, source_analysis=analysis)
    if not any(ra.terms is not None or ra.deferred or ra.route for ra in analysis.reductions):
        return _derive(cascade, analysis, {})
    atoms = set(element_atoms(cascade))
    rw = rewrite(cascade, analysis, lambda r: inline(r.body, cascade, atoms))
    state = _state_analysis(rw, analysis)
    for name in rw.partials:
        rw.proofs[name] = (combination_proof(name, rw, cascade.symbols),)
    for name, spec in rw.centered.items():
        rw.proofs[name] = (merge_proof(spec, None),)
    fused = _derive(rw.cascade, state, rw.centered)
    return replace(fused, source=cascade, source_analysis=analysis, rewrite=rw,
                   guards=fused.guards + _multi_guards(rw))


def _state_analysis(rw, analysis: Analysis) -> Analysis:
    """The analysis of the state cascade, reusing the proofs of the source: kept reductions and the partial sums
    of terms keep their verdicts; a reduction whose dependencies changed (it reads a multi-term result) is
    analysed again; a centred sum is fused by its own merge."""
    c = rw.cascade
    deps = reduction_dependencies(build_graph(c))
    facts = sign_facts(c)
    F = bodies(c)
    position = {s.name: i for i, s in enumerate(c.statements)}
    out = []
    for r in c.reductions:
        d = tuple(sorted(deps[r.name], key=position.__getitem__))
        if r.name in rw.centered:
            out.append(ReductionAnalysis(r.name, r.monoid, reducer_text(r), F[r.name], d, True, centered=True))
            continue
        known = rw.sub_analysis.get(r.name)
        if known is None and r.name in {x.name for x in analysis.cascade.reductions}:
            known = analysis[r.name]
        if known is not None and tuple(known.deps) == d:
            out.append(replace(known, name=r.name, text=reducer_text(r)))
            continue
        if not d:
            out.append(ReductionAnalysis(r.name, r.monoid, reducer_text(r), F[r.name], (), True))
            continue
        again = analyze_reduction(r, F[r.name], d, c, facts, multi=False)
        if not again.fusable:
            raise NotFusableError(f"{c.name}: the partial sum {r.name} of the multi-term rewrite is not fusable: "
                                  f"{again.reason}", analysis)
        out.append(again)
    return Analysis(c, tuple(out), facts, has_casts(c))


def _multi_guards(rw) -> tuple:
    notes = []
    for name, pieces in rw.partials.items():
        parts = ", ".join(p for _, p in pieces)
        notes.append(f"{name} is a multi-term sum: its partial sums {parts} are the state, and {name} = "
                     f"{CascadePrinter().doprint(rw.combination[name])} (an empty segment, count = 0, gives 0)")
        if name in rw.late:
            notes.append(f"{name}'s partial sums are subtracted at the end: where they are large and nearly equal (the "
                         f"elements far from 0 against their spread) float32 loses the digits of the result; the "
                         f"level order sums {name} as written (the CPU's auto takes it; on CUDA 'rows' where a row is "
                         f"staged in registers, and 'unfused')")
    for name, g in rw.powers.items():
        notes.append(f"{name} = prod(G^H) is computed as exp(H · {g}) with {g} = sum(log G) (G >= 0, proved): the "
                     f"state keeps the sum of logs, which does not overflow where the product of the G would; "
                     f"H = 0 gives 1 (0^0 = 1)")
    for name, g in rw.deferred.items():
        kept = f"{g} = {CascadePrinter().doprint(rw.cascade[g].body)}"
        formed = f"{name} = {CascadePrinter().doprint(rw.combination[name])} once the dependencies are final"
        if name in rw.added:
            notes.append(f"{name}: a {rw.cascade[g].monoid.name} of G + H: the state keeps {kept} and {formed} (H added "
                         f"once, rounded once, as each G + H would be; no H of a partial segment, which can be "
                         f"infinite where the row's is not)")
        else:
            notes.append(f"{name}: H may be 0 or infinite on a non-empty segment, where no correction H(D_new)/H(D_old) "
                         f"exists: the state keeps {kept} (its exponentials of the dependencies corrected as they "
                         f"move) and {formed}; G held without H's other factors can leave float32's range sooner "
                         f"than the written form, which divides as it goes (the guard on powers says where)")
    for name, spec in rw.centered.items():
        notes.append(f"{name} = sum({CascadePrinter().doprint(rw.cascade[name].body)}) is a centred sum: a side with "
                     f"{spec.count} = 0 is skipped, and the deviations are shifted to the merged mean (Chan)")
    return tuple(notes)


def _centered_term(name: str, spec, which: str) -> sp.Expr:
    """Side ``which``'s centred sum about the merged means, 0 for an empty side."""
    shifted = spec.shift(side, which)
    return sp.Piecewise((sp.Integer(0), sp.Eq(side(spec.count, which), 0)), (shifted, True))


def _derive(cascade: Cascade, analysis: Analysis, centered: dict) -> FusedCascade:
    c = cascade
    atoms = element_atoms(c)
    bodies = {r.name: inline(r.body, c, set(atoms)) for r in c.reductions}
    corrections = {ra.name: {w: _correction(ra, c, w) for w in "ab"} for ra in analysis.reductions
                   if ra.deps and ra.name not in centered}
    merge, update = [], []
    for ra in analysis.reductions:
        if ra.name in centered:
            spec = centered[ra.name]
            left = _centered_term(ra.name, spec, "a")
            merge.append((side(ra.name, "n"), left + _centered_term(ra.name, spec, "b")))
            update.append((side(ra.name, "n"), left + _new_term(ra, bodies[ra.name], c, analysis)))
            continue
        corr = corrections.get(ra.name, {})
        left = _guarded_term(ra, c, analysis, "a", corr)
        merge.append((side(ra.name, "n"), _join(ra, left, _guarded_term(ra, c, analysis, "b", corr),
                                                 index_symbol(f"{ra.name}_b"))))
        update.append((side(ra.name, "n"), _join(ra, left, _new_term(ra, bodies[ra.name], c, analysis),
                                                  index_symbol("element"))))
    outs = outputs(c)
    varying = c.per_element()
    vectors = _vector_symbols(c)
    return FusedCascade(
        cascade=c, analysis=analysis,
        prologue=Program(tuple((c.symbols[a], c[a].expr) for a in atoms), tuple(c.symbols[a] for a in atoms)),
        identity={ra.name: _zero(ra.monoid) for ra in analysis.reductions},
        lift=_lift(analysis, bodies, c), merge=build(merge, vectors=vectors), update=build(update, vectors=vectors),
        finalize=Program(tuple((c.symbols[o.name], outs[o.name]) for o in c.outputs),
                         tuple(c.symbols[o.name] for o in c.outputs)),
        per_element_outputs=tuple(o.name for o in c.outputs if o.name in varying),
        corrections={n: v["a"] for n, v in corrections.items()},
        degenerate={ra.name: _degenerate(ra, c, analysis, "a") for ra in analysis.reductions if ra.deps},
        bodies={k: exp_out_of_logs(v) for k, v in bodies.items()},
        naive={ra.name: (ra.G, ra.H) for ra in analysis.reductions if ra.deps and ra.name not in centered},
        guards=_guards(analysis, bodies))


def unfused(cascade: Cascade) -> FusedCascade:
    """The forms a baseline of one kernel per reduction needs (prologue, bodies, finalize), for any cascade,
    fusable or not: ``derive`` when it fuses, else forms without merge, update or corrections, which only
    the ``unfused`` strategy runs (``compile`` refuses the others with the reason the cascade does not fuse)."""
    try:
        return derive(cascade)
    except NotFusableError as err:
        if err.analysis is None:
            raise
        analysis = err.analysis
    return _level_forms(cascade, analysis, (
        f"not fusable ({'; '.join(f'{r.name}: {r.reason}' for r in analysis.reductions if not r.fusable)}): "
        f"only the unfused strategy, a kernel per reduction, runs it",))


def _vector_symbols(c: Cascade) -> frozenset:
    """The symbols of ``c``'s vectors in the merge and update programs: vector inputs and params, and each vector
    reduction's sides and result (``s_a``, ``s_b``, ``s_n``)."""
    names = [n for n, size in c.sizes.items() if size is not None]
    return frozenset(c.symbols[n] for n in names if n in c.symbols) | frozenset(
        side(n, k) for n in names if any(r.name == n for r in c.reductions) for k in "abn")


def as_written(fused: FusedCascade) -> FusedCascade:
    """The forms of the cascade as written for the strategies that run a pass per reduction, the earlier ones final
    (the CPU's ``levels``, CUDA's ``unfused``): ``fused`` itself, or, where :func:`derive` rewrote the cascade (a
    multi-term sum into partial sums, an element count added; not a product of powers, whose route it keeps), the
    source's own reductions — bodies, prologue and
    outputs as written, no merge, update or corrections. The partial sums' combination is then never formed, so a
    sum whose terms nearly cancel (:attr:`FusedCascade.combined_late`) is computed as the reference computes it."""
    if fused.source is None or fused.source is fused.cascade:
        return fused
    if fused.rewrite is not None and fused.rewrite.powers:
        # a product of powers as written, prod(G^H), overflows float32 where its route exp(H · sum(log G)) does not:
        # such a cascade keeps its rewritten form, multi-term sums included
        return fused
    return _level_forms(fused.source, fused.source_analysis or analyze(fused.source), (
        "the level order of the cascade as written: a pass per reduction, the earlier ones final (its multi-term "
        "sums summed as written, not as partial sums)",))


def _level_forms(c: Cascade, analysis: Analysis, guards: tuple) -> FusedCascade:
    """Prologue, bodies and finalize of ``c`` as written (no merge, update or corrections): a pass per reduction."""
    atoms = element_atoms(c)
    bodies = {r.name: inline(r.body, c, set(atoms)) for r in c.reductions}
    outs = outputs(c)
    varying = c.per_element()
    nothing = Program((), ())
    return FusedCascade(
        cascade=c, analysis=analysis,
        prologue=Program(tuple((c.symbols[a], c[a].expr) for a in atoms), tuple(c.symbols[a] for a in atoms)),
        identity={r.name: _zero(r.monoid) for r in c.reductions}, lift=nothing, merge=nothing, update=nothing,
        finalize=Program(tuple((c.symbols[o.name], outs[o.name]) for o in c.outputs),
                         tuple(c.symbols[o.name] for o in c.outputs)),
        per_element_outputs=tuple(o.name for o in c.outputs if o.name in varying), corrections={}, degenerate={},
        bodies={k: exp_out_of_logs(v) for k, v in bodies.items()}, naive={}, guards=guards)


__all__ = ["Correction", "FusedCascade", "as_written", "combine", "derive", "index_symbol", "side", "unfused"]
