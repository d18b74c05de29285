r"""Multi-term separability for sums: :math:`F(e, D) = \sum_t c_t(D)\, E_t(e, D)`.

A sum whose body is not one separable product may still be a *sum* of them:
two-pass variance :math:`\sum (x - s/n)^2 = \sum x^2 - 2\tfrac{s}{n}\sum x + \tfrac{s^2}{n^2}\sum 1`,
softmax entropy :math:`\sum e^{x-m}(x - m) = \sum x e^{x-m} - m \sum e^{x-m}`.  Expanding
:math:`F` (products and integer powers multiplied out; ``exp(x - m)`` is kept whole) and
collecting the additive terms by their factors that use an element value gives terms
:math:`c_t(D) \cdot E_t(e, D)` where the coefficient :math:`c_t` uses only reduction results
and params.  Each :math:`E_t` becomes a partial reduction ``sum(E_t)``, fused by the
single-term analysis (``x·exp(x - m)`` is :math:`\times`-separable with :math:`H = e^{-m}`),
a term without element values is a count (``sum(1)``), and the reduction becomes the
combination :math:`\sum_t c_t(D) P_t`, proved equal to :math:`\sum_l F(e_l, D)` by proving
:math:`\sum_t c_t E_t = F` symbolically.

**Stable moments.**  Summing :math:`\sum x^2` and :math:`\sum x` separately and combining
them at the end is :math:`E[x^2] - E[x]^2`: catastrophic cancellation in float32 when the
mean is large against the spread.  A degree-2 term whose linear parts are also terms
(:math:`x^2` beside :math:`x`; :math:`xy` beside :math:`x` and :math:`y`; :math:`x w` beside
:math:`w`) is therefore kept *centred*: the partial reduction is the sum of products of
deviations from the segment's own running mean :math:`K_u = P_u / \mathrm{count}`,

.. math::
    C = \sum (u_i - K_i)(u_j - K_j) \quad\text{or}\quad C = \sum (u - K_u)\, R,

and two segments merge by the binomial shift of the deviations to the merged mean
(:math:`\delta_X = K(X) - K(A \cup B)`),

.. math::
    C(A \cup B) = C(A) + C(B) + n_A \delta^i_A \delta^j_A + n_B \delta^i_B \delta^j_B
    \quad\text{or}\quad C(A) + C(B) + \delta_A P_R(A) + \delta_B P_R(B),

which is Chan's parallel algorithm (and, with one element on the right, Welford's update):
derived here from the deviation form and proved equal to the power-sum definition.  The
combination is then rewritten around :math:`C` (:math:`\sum x^2 = C + P_x^2/n`) and the
remaining power-sum part factored, so that ``v = C + n·(s/n_count - s/n)**2`` never subtracts
two large numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from ..algebra import Proof, prove_equal
from ..ir import ADD, Cascade, Let, Reduction
from ..ir.nodes import POSITION, infer_size
from ..ir.printer import CascadePrinter
from .ranges import running_factors

_printer = CascadePrinter()


def _show(e) -> str:
    return _printer.doprint(e)


@dataclass(frozen=True)
class Term:
    """One term ``c_t(D) · E_t``: ``E_t`` is the body of a partial reduction (1: a count)."""

    E: sp.Expr                 # element part, conditionals as written (may use reduction results)
    coefficient: sp.Expr       # uses reduction results and params only
    analysis: object = None    # the single-term ReductionAnalysis of sum(E_t) when E_t uses a reduction
    center: tuple = ()         # symbols whose deviation from the running mean the term is kept in
    rest: sp.Expr = sp.Integer(1)  # the other factor R of a centred ``(u - K)·R`` (1 for a covariance)

    @property
    def count(self) -> bool:
        return self.E == 1

    def describe(self) -> str:
        if self.count:
            body = "count (sum(1))"
        else:
            body = f"sum({_show(self.E)})"
        extra = ""
        a = self.analysis
        if a is not None and a.otimes is not None:
            extra = f" [⊗ = {'×' if a.otimes.name == 'mul' else '+'}, G = {_show(a.G)}, H = {_show(a.H)}]"
        if self.center:
            dev = "·".join(f"({_show(u)} - mean {_show(u)})" for u in self.center)
            if self.rest != 1:
                dev += f"·{_show(self.rest)}"
            extra += f" [kept centred: sum({dev}), Chan/Welford merge]"
        return f"({_show(self.coefficient)})·{body}{extra}"


@dataclass(frozen=True)
class MultiTerm:
    """The terms of a multi-term separable sum, and the proof that they add up to its body."""

    terms: tuple
    proof: Proof
    note: str

    def describe(self) -> str:
        return " + ".join(t.describe() for t in self.terms)

    def as_list(self) -> list:
        out = []
        for t in self.terms:
            a = t.analysis
            out.append({"E": _show(t.E), "coefficient": _show(t.coefficient), "count": t.count,
                        "otimes": None if a is None or a.otimes is None else a.otimes.name,
                        "G": _show(t.E if a is None or a.G is None else a.G),
                        "H": None if a is None or a.H is None else _show(a.H),
                        "centered": [str(u) for u in t.center]})
        return out


def _expand(F: sp.Expr) -> sp.Expr:
    """Products and integer powers multiplied out; ``exp(a + b)``, ``log`` and divisors left whole: ``1/(x + 1)**2``
    stays so, where SymPy would expand it to ``1/(x**2 + 2*x + 1)``, inf - inf at x = -inf (a masked value) where the
    written form is 0."""
    divisors = {p: sp.Dummy() for p in F.atoms(sp.Pow) if p.exp.is_negative and not p.base.is_Atom}
    out = sp.expand(F.xreplace(divisors), power_exp=False, power_base=False, log=False)
    return out.xreplace({d: p for p, d in divisors.items()})


def split(name: str, F: sp.Expr, elems: list, deps: list, atoms: dict, scalars: set, sub,
          positive: frozenset = frozenset()) -> tuple:
    """``(MultiTerm, None)`` when ``F`` is a sum of separable terms, else ``(None, why)``.

    ``elems``: the per-element symbols of ``F`` (inputs, element atoms, conditional atoms); ``deps``: the
    reduction results; ``atoms``: conditional atoms → their Piecewise; ``scalars``: per-element scalar
    symbols that may be centred; ``sub(E)``: the single-term analysis of ``sum(E)``; ``positive``: the names of
    the reductions known positive on a non-empty segment (a sum of exponentials): the log of a product of
    positive factors is the sum of their logs (``log(exp(x - m)/l) = x - m - log(l)``), and the proof assumes it.
    """
    elem_set = set(elems)
    signed = {d: sp.Symbol(d.name, positive=True) for d in deps if d.name in positive}
    if signed and F.has(sp.log):
        F_split = sp.expand_log(F.xreplace(signed)).xreplace({v: k for k, v in signed.items()})
    else:
        F_split = F
    groups: dict = {}
    for term in sp.Add.make_args(_expand(F_split)):
        coef, part = [], []
        for f in sp.Mul.make_args(term):
            (part if f.free_symbols & elem_set else coef).append(f)
        E = sp.Mul(*part)
        groups[E] = groups.get(E, sp.Integer(0)) + sp.Mul(*coef)
    groups = {E: sp.factor_terms(c) for E, c in groups.items() if sp.simplify(c) != 0}
    if not groups:
        return None, "F expands to 0"
    one = len(groups) == 1
    terms = []
    for E, c in groups.items():
        written = E.xreplace(atoms)
        analysis = None
        if E.free_symbols & set(deps):
            analysis = None if one and c == 1 else sub(written)  # F itself: already known not to separate
            if analysis is None or not analysis.fusable and one:
                mixed = [f for f in sp.Mul.make_args(E) if f.free_symbols & elem_set and f.free_symbols & set(deps)]
                what = " and ".join(_show(f.xreplace(atoms)) for f in mixed) or _show(written)
                return None, (f"it is not multi-term separable either: expanding F gives one term, and {what} "
                              f"mixes element values with reduction results in a way no product or sum of "
                              f"products separates (abs, a log or root of a difference, a quotient by one are "
                              f"not polynomial in it)")
            if not analysis.fusable:
                return None, (f"the term {_show(written)} of F (after expanding and collecting by the factors of "
                              f"the elements) is itself not separable: {analysis.reason}")
        terms.append(Term(written, c, analysis))
    terms = _centre(terms, scalars)
    steep = _unstable_degree(terms, scalars)
    if steep:
        return None, (f"expanding F gives power sums up to degree {steep[0]} (sum({_show(steep[1])})) "
                      f"combined with powers of reduction results: in float32 they cancel catastrophically when a "
                      f"result is large against the spread of the elements (for (x - m)**6, an error of 1e29 on a "
                      f"row of one element), and only degree-2 terms have a stable (centred, Chan) form here; run "
                      f"it unfused (strategy 'unfused')")
    total = sum((t.coefficient * t.E for t in terms), sp.Integer(0))
    F_written = F.xreplace(atoms)
    proof = prove_equal(total, F_written, claim=f"F_{name} is the sum of its {len(terms)} separable terms",
                        assumptions={d.name: ">0" for d in signed} if F_split is not F else None)
    if not proof.proved:
        return None, f"the expansion into terms could not be proved equal to F ({proof.status})"
    return MultiTerm(tuple(terms), proof, _note(terms)), None


def _centre(terms: list, scalars: set) -> list:
    """Mark degree-2 terms whose linear parts are terms too: they are kept as centred sums."""
    keys = {t.E for t in terms}
    out = []
    for t in terms:
        if t.analysis is not None or t.count or t.E.free_symbols - _all_symbols(terms):
            out.append(t)
            continue
        powers = t.E.as_powers_dict()
        us = [u for u, k in powers.items() if u in scalars and k in (1, 2)]
        factors = [u for u in us for _ in range(int(powers[u]))]
        if len(factors) == 2 and sp.Mul(*factors) == t.E and any(sp.simplify(t.E / u) in keys for u in factors):
            out.append(Term(t.E, t.coefficient, None, tuple(factors), sp.Integer(1)))
            continue
        single = [u for u in us if powers[u] == 1 and sp.simplify(t.E / u) in keys and sp.simplify(t.E / u) != 1]
        if single:
            u = single[0]
            out.append(Term(t.E, t.coefficient, None, (u,), sp.simplify(t.E / u)))
            continue
        out.append(t)
    return out


def _unstable_degree(terms: list, scalars: set) -> tuple | None:
    """(degree, E) of the highest-degree (>= 3) power sum of a combination whose coefficients use reduction
    results; None when there is none (such a combination cancels catastrophically in float32, and no
    centred form is derived for it)."""
    if len(terms) < 2 or not any(t.coefficient.free_symbols for t in terms):
        return None
    worst = (0, None)
    for t in terms:
        if t.center or t.count:
            continue
        used = sorted(t.E.free_symbols & scalars, key=sp.default_sort_key)
        if used and t.E.is_polynomial(*used):
            worst = max(worst, (sp.Poly(t.E, *used).total_degree(), t.E), key=lambda w: w[0])
    return worst if worst[0] >= 3 else None


def _all_symbols(terms) -> set:
    return set().union(*(t.E.free_symbols for t in terms))


def _note(terms) -> str:
    centred = [t for t in terms if t.center]
    loose = [t for t in terms if not t.center and t.coefficient.free_symbols]
    parts = []
    if centred:
        parts.append("the degree-2 terms are kept as sums of deviations from the running mean, merged by "
                     "Chan's formula (Welford's update): no E[x²] − E[x]² cancellation; the mean itself comes from a "
                     "float32 running sum, whose rounding shows in the deviations where the elements sit far from 0 "
                     "relative to their spread (mean/std = 1e5 over 10 000 elements: 12 % on the CPU's row kernel; "
                     "1e4: 8e-5): subtract a typical value first")
    if len(terms) > 1 and loose and not centred:
        parts.append("CAUTION: the partial sums are combined once, at the end; where the terms are large and "
                     "nearly cancel (a result far from 0 relative to the spread of the elements, e.g. |m| ≫ the "
                     "spread of x) float32 loses digits that the unfused two-pass form keeps")
    return "; ".join(parts) if parts else "one term: exact up to rounding, as the single-term fusion"


# --------------------------------------------------------------------------------------------------
# The rewrite: one partial reduction per term, the reduction itself a let of them.

@dataclass(frozen=True)
class Centered:
    """A centred partial reduction ``C = sum(Π (u - P_u/count) · R)`` and the reductions it uses."""

    name: str
    center: tuple          # element symbols u
    sums: tuple            # names of the reductions P_u = sum(u), in the order of ``center``
    count: str             # name of the count reduction
    rest: sp.Expr          # R
    rest_sum: str | None   # name of P_R = sum(R) (None when R = 1)
    power_sum: str         # name of nothing: the body Π u · R as text, for reports

    def body(self, symbols: dict) -> sp.Expr:
        n = symbols[self.count]
        out = self.rest
        for u, s in zip(self.center, self.sums):
            out = out * (u - symbols[s] / n)
        return out

    def shift(self, sym, X: str) -> sp.Expr:
        """What side ``X``'s ``C`` becomes about the merged means (``sym(name, side)`` gives state symbols)."""
        nX, nN = sym(self.count, X), sym(self.count, "n")
        deltas = [sym(s, X) / nX - sym(s, "n") / nN for s in self.sums]
        if len(deltas) == 2:
            return sym(self.name, X) + nX * deltas[0] * deltas[1]
        return sym(self.name, X) + deltas[0] * sym(self.rest_sum, X)

    def in_power_sums(self, sym, X: str, P) -> sp.Expr:
        """``C`` on side ``X`` written in power sums: ``P`` is the symbol of sum(Π u · R) there."""
        n = sym(self.count, X)
        if len(self.sums) == 2:
            return P - sym(self.sums[0], X) * sym(self.sums[1], X) / n
        return P - sym(self.sums[0], X) * sym(self.rest_sum, X) / n


@dataclass
class Rewrite:
    """The state cascade and what each new reduction is."""

    cascade: Cascade
    centered: dict = field(default_factory=dict)     # name -> Centered
    partials: dict = field(default_factory=dict)     # multi-term name -> tuple of (Term, partial name)
    sub_analysis: dict = field(default_factory=dict)  # partial name -> single-term analysis
    combination: dict = field(default_factory=dict)  # multi-term name -> its let expression
    proofs: dict = field(default_factory=dict)       # multi-term name -> proofs of the rewrite
    deferred: dict = field(default_factory=dict)     # deferred name -> the reduction of its G (see analysis)
    added: set = field(default_factory=set)          # deferred names whose H is added (⊗ = +: a max or min)
    powers: dict = field(default_factory=dict)       # product name -> the reduction of its sum(log G)
    late: tuple = ()                                 # multi-term names whose partial sums may cancel (_late)


def _fresh(base: str, taken: set) -> str:
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}{k}"
    taken.add(name)
    return name


def rewrite(c: Cascade, analysis, inline_body) -> Rewrite:
    """Each multi-term reduction replaced by its partial reductions and a let combining them.

    ``inline_body(r)``: a reduction's body in element atoms (lets that use reductions inlined), used to
    reuse an existing reduction with the same body (``sum(x)`` is both ``s`` and a term of the variance).
    """
    taken = {s.name for s in c.statements}
    stmts: list = []
    known: dict = {}   # body -> name of a sum reduction already in stmts
    out = Rewrite(c)
    symbols = dict(c.symbols)
    sizes = {**c.sizes, POSITION: None}

    def reduction(body: sp.Expr, base: str, sub=None) -> str:
        if body in known:
            return known[body]
        name = _fresh(base, taken)
        r = Reduction(name, ADD, body)
        stmts.append(r)
        symbols[name] = r.symbol
        known[body] = name
        if sub is not None:
            out.sub_analysis[name] = sub
        return name

    for s in c.statements:
        ra = analysis[s.name] if isinstance(s, Reduction) else None
        if ra is not None and ra.deferred:
            # r = ⊕(G ⊗ H(D)) = H(D) ⊗ ⊕G: the state keeps ⊕G; an empty one stays the identity. With ⊗ = ×, H's
            # exponentials stay in the state, corrected (⊕(G · exp(-m)): the shift that keeps it in range), the rest
            # of H waits for the end
            g = _fresh(f"{s.name}_g", taken)
            if ra.otimes is ADD:
                H_v, body = ra.H, ra.G
            else:
                extrema = [c.symbols[d] for d in ra.deps if analysis[d].monoid.name in ("max", "min")]
                H_v, H_run = running_factors(ra.H, [c.symbols[d] for d in ra.deps], extrema)
                body = sp.powsimp(ra.G * H_run, combine="exp")  # (exp(x)·exp(-m) as exp(x - m): no exp(x) alone)
            part = Reduction(g, s.monoid, body)
            stmts.append(part)
            symbols[g] = part.symbol
            expr = H_v + part.symbol if ra.otimes is ADD else H_v * part.symbol
            guard = _empty_guard(expr, stmts, symbols, c, analysis)  # a -inf dependency times ⊕G: count == 0
            if guard is not None:
                expr = sp.Piecewise((s.monoid.identity, guard), (expr, True))
            stmts.append(Let(s.name, expr))
            out.deferred[s.name] = g
            if ra.otimes is ADD:
                out.added.add(s.name)
            out.combination[s.name] = expr
            out.proofs[s.name] = tuple(ra.proofs[:2])  # distributivity and separability
            continue
        if ra is not None and ra.route is not None:
            # a ⊗ of routes.ROUTES: power's r = prod(G^H(D)) = exp(H(D) · sum(log G)) for G >= 0 keeps the sum of
            # logs (a product of the G would overflow where the G^H do not); H = 0 gives 1, as 0^0 = 1
            from .routes import ROUTES

            route = ROUTES[ra.route]
            g = _fresh(f"{s.name}_{route.suffix}", taken)
            part = Reduction(g, route.partial_monoid, route.partial(ra.G))
            stmts.append(part)
            symbols[g] = part.symbol
            # an empty segment is the reduction's identity, whatever H is there (1/W with W = 0: NaN)
            expr = sp.Piecewise((route.empty, _empty(stmts, symbols, c, f"{s.name}_count") | sp.Eq(ra.H, 0)),
                                (route.combine(ra.H, part.symbol), True))
            stmts.append(Let(s.name, expr))
            out.powers[s.name] = g
            out.combination[s.name] = expr
            out.proofs[s.name] = tuple(ra.proofs)
            continue
        if ra is None or getattr(ra, "terms", None) is None:
            stmts.append(s)
            if isinstance(s, Reduction) and s.monoid is ADD:
                known.setdefault(inline_body(s), s.name)
            continue
        mt = ra.terms
        pieces, combination, plain = [], sp.Integer(0), sp.Integer(0)
        k = iter(range(1, 1000))
        count_name, centred_sums = None, []
        for t in mt.terms:
            if t.center:
                sums = tuple(reduction(u, f"{s.name}_{next(k)}") for u in t.center)
                centred_sums += [symbols[x] for x in sums]
                count_name = reduction(sp.Integer(1), "count" if "count" not in taken else f"{s.name}_count")
                cname = _fresh(f"{s.name}_{next(k)}", taken)
                # A vector state is updated in place by the kernels, so the centred sum, which reads the old
                # sum(R) of each side, must come before it: a vector sum(R) defined earlier gets a copy after.
                vector = infer_size(t.rest, sizes) is not None
                rest_sum = None if t.rest == 1 else (known.get(t.rest) if not vector else None)
                if t.rest != 1 and rest_sum is None:
                    rest_sum = _fresh(f"{s.name}_{next(k)}", taken)
                spec = Centered(cname, t.center, sums, count_name, t.rest, rest_sum, _show(t.E))
                symbols[cname] = sp.Symbol(cname, real=True)
                if rest_sum is not None and rest_sum not in symbols:
                    symbols[rest_sum] = sp.Symbol(rest_sum, real=True)
                r = Reduction(cname, ADD, spec.body(symbols))
                stmts.append(r)
                if rest_sum is not None and rest_sum not in {x.name for x in stmts}:
                    stmts.append(Reduction(rest_sum, ADD, t.rest))
                    known.setdefault(t.rest, rest_sum)
                out.centered[cname] = spec
                pieces.append((t, cname))
                n = symbols[count_name]
                mean_part = t.rest * sp.Mul(*[symbols[x] for x in sums]) / n
                if t.rest != 1:
                    mean_part = symbols[sums[0]] * symbols[rest_sum] / n
                combination += _zero_if_empty(t.coefficient, symbols[cname], stmts)
                plain += _zero_if_empty(t.coefficient, mean_part, stmts)
                continue
            if t.count:
                name = reduction(sp.Integer(1), "count" if "count" not in taken else f"{s.name}_count")
            else:
                name = reduction(t.E, f"{s.name}_{next(k)}", t.analysis)
            pieces.append((t, name))
            plain += _zero_if_empty(t.coefficient, symbols[name], stmts)
        out.partials[s.name] = tuple(pieces)
        # the power-sum part, factored: the variance's s**2/count - 2*s**2/n + count*s**2/n**2 is
        # s**2*(count - n)**2/(count*n**2), which never subtracts two large numbers, then written as
        # count*(s/count - s/n)**2, which squares no sum either (_deviations)
        tidy = _factor(plain) if count_name is not None else plain
        if sp.count_ops(tidy) > 3 * sp.count_ops(plain) + 10:
            tidy = plain
        if count_name is not None:
            tidy = _deviations(tidy, plain, centred_sums, symbols[count_name])
        expr = combination + tidy
        if _late(tidy, {c.symbols[d] for d in ra.deps}, {symbols[name] for _, name in pieces}):
            out.late += (s.name,)
        guard = _empty_guard(expr, stmts, symbols, c, analysis)
        if guard is not None:
            expr = sp.Piecewise((sp.Integer(0), guard), (expr, True))
        stmts.append(Let(s.name, expr))
        out.combination[s.name] = expr
    out.cascade = Cascade(tuple(stmts), name=c.name, source=None)
    return out


def _deviations(tidy: sp.Expr, plain: sp.Expr, sums: list, count: sp.Symbol) -> sp.Expr:
    """The power-sum part with each of its parts of degree two or more in the centred sums written as ``count`` times
    a product of differences of means, where it is one: the variance's ``s**2*(count - h)**2/(count*h**2)`` as
    ``count*(s/count - s/h)**2``, the covariance's ``count*(sx/count - sx/h)*(sy/count - sy/h)`` — the parallel-axis
    shift from the running mean to ``s/h``; a part of degree one (``sum(3*(x - s/n)**2 + x)``'s ``s``) stays as it
    is, beside it. The factored form squares the sum itself, which overflows float32 once ``|s|`` passes about 1.8e19
    (elements of 6e16 in a row of 300) and then gives ``inf * 0 = NaN`` where ``h`` is the count; the means'
    difference is 0 there and squares nothing larger than the mean. ``tidy`` as it is where a part has another
    shape."""
    if not sums or tidy == 0:
        return tidy
    means = {u: sp.Dummy(f"mean_{u.name}") for u in sums}
    back = {m: u / count for u, m in means.items()}
    numerator, denominator = sp.fraction(sp.together(plain.xreplace({u: count * means[u] for u in sums})))
    if denominator.free_symbols & set(means.values()):
        return tidy
    try:
        poly = sp.Poly(sp.expand(numerator), *means.values())
    except sp.PolynomialError:
        return tidy
    by_degree: dict = {}
    for powers, coefficient in poly.terms():
        term = coefficient * sp.Mul(*[m ** e for m, e in zip(means.values(), powers)])
        by_degree[sum(powers)] = by_degree.get(sum(powers), 0) + term
    if max(by_degree) < 2:  # (a sum to the first power squares nothing)
        return tidy
    form = sp.Integer(0)
    for degree, part in sorted(by_degree.items()):
        part = sp.factor(part / denominator)
        if degree < 2:
            form += _factor(part.xreplace(back))
            continue
        coefficient, factors = (part / count).as_coeff_mul()
        powers = [f.as_base_exp() for f in factors]
        moments = [(b, e) for b, e in powers if b in means.values()]
        rest = [(b, e) for b, e in powers if b not in means.values()]
        if any(not (e.is_Integer and e > 0) for _, e in moments) or \
                any(b.free_symbols & set(means.values()) or not (e.is_Integer and e % degree == 0) for b, e in rest):
            return tidy
        root = sp.Mul(*[b ** (e // degree) for b, e in rest])  # (the scale each mean's difference carries)
        form += count * coefficient * sp.Mul(*[sp.expand((m * root).xreplace(back)) ** e for m, e in moments])
    return form if sp.simplify(form - plain) == 0 else tidy


def _late(plain: sp.Expr, deps: set, partials: set) -> bool:
    """Whether the plain (not centred) part of a multi-term combination subtracts partial sums scaled by reduction
    results: a sum in its numerator with two or more terms holding partial sums, one of them with a dependency —
    ``count**2 * s_1 - sum**2 * s_2`` for ``sum((x - mean)**2 / (3*x + 1)**2)``, where ``s_1`` and ``mean**2 * s_2``
    are large and nearly equal when the elements sit far from 0 against their spread (90 times the result off in
    float32), or ``r0 * (s_1 - r0 * s_2)`` with the dependency factored out. The variance's factored
    ``s**2 * (h - count)**2 / (count * h**2)`` subtracts no two partial sums (``h`` is a param), and is 0 when ``h``
    is the count."""
    numerator = sp.fraction(sp.together(plain))[0]
    for node in sp.preorder_traversal(numerator):
        if isinstance(node, sp.Add):
            held = [t for t in node.args if t.free_symbols & partials]
            if len(held) > 1 and any(t.free_symbols & deps for t in held):
                return True
    return False


def _factor(expr: sp.Expr) -> sp.Expr:
    """``expr`` factored as a rational function of its symbols, roots and functions kept whole (factoring
    through ``sqrt`` would need signs: ``sqrt(h)*sqrt(h*eps + v)`` is ``sqrt(h*(h*eps + v))`` only for h >= 0)."""
    opaque = {}

    def hide(e):
        if e.is_Atom:
            return e
        if (e.is_Pow and not e.exp.is_Integer) or isinstance(e, sp.Function) or isinstance(e, sp.Piecewise):
            return opaque.setdefault(e, sp.Dummy(f"g{len(opaque)}"))
        return e.func(*[hide(a) for a in e.args])

    hidden = hide(expr)
    back = {d: e for e, d in opaque.items()}
    return sp.factor(sp.together(hidden)).xreplace(back)


def _infinite(stmts) -> list:
    """The reductions whose empty value is infinite (a max's -inf, a min's inf)."""
    return [s for s in stmts if isinstance(s, Reduction) and s.monoid.identity in (sp.oo, -sp.oo)]


def _zero_if_empty(coefficient: sp.Expr, partial: sp.Expr, stmts) -> sp.Expr:
    """A term ``c_t · S_t`` of the combination; 0 where its partial sum is 0 and ``c_t`` reads a max or min (which is
    ±inf where its own elements are none: ``sum(where(pos < w, x - m, 0))`` with ``m = max(where(pos < w, x, -inf))``
    on a row that selects nothing is 0 in the reference, and ``-m · sum([pos < w])`` would be ``inf · 0``)."""
    term = coefficient * partial
    if not any(s.symbol in coefficient.free_symbols for s in _infinite(stmts)):
        return term
    return sp.Piecewise((sp.Integer(0), sp.Eq(partial, 0)), (term, True))


def _empty_guard(expr, stmts, symbols, c, analysis):
    """``count == 0`` when the combination is not finite on an empty segment (a max of -inf, a division by the
    count or by a sum that is 0 there) — there the sum is 0 — else None.  A count is added to the state when one is
    needed."""
    risky = any(s.symbol in expr.free_symbols for s in _infinite(stmts))
    # the combination at the empty state (every reduction its identity) is not finite: a division by the count
    # (0 / 0), 1/sqrt(ss) · Σk (zoo · 0)
    reds = [s for s in stmts if isinstance(s, Reduction) and s.symbol in expr.free_symbols]
    at_empty = expr.xreplace({s.symbol: s.monoid.identity for s in reds})
    risky |= at_empty is sp.nan or at_empty.has(sp.nan, sp.zoo, sp.oo, -sp.oo)
    if not risky:
        return None
    return _empty(stmts, symbols, c)


def _empty(stmts, symbols, c, base: str = "count"):
    """``count == 0``: the segment is empty; a count (named from ``base``) is added to the state when there is none."""
    counts = [s for s in stmts if isinstance(s, Reduction) and s.body == 1 and s.monoid is ADD]
    if not counts:
        taken = {s.name for s in stmts} | {s.name for s in c.statements}
        r = Reduction(_fresh(base, taken), ADD, sp.Integer(1))
        # the count goes right after the last input-free prefix: before the first reduction that needs it
        stmts.insert(next(i for i, s in enumerate(stmts) if isinstance(s, Reduction)), r)
        symbols[r.name] = r.symbol
        counts = [r]
    return sp.Eq(counts[0].symbol, 0)


def merge_proof(spec: Centered, sym) -> Proof:
    """The centred merge equals the power-sum definition on the union (Chan's formula, derived)."""
    P = {X: sp.Symbol(f"P_{X}", real=True) for X in "ab"}
    n = {X: sp.Symbol(f"{spec.count}_{X}", positive=True) for X in "ab"}
    sums = {(s, X): sp.Symbol(f"{s}_{X}", real=True) for s in spec.sums + ((spec.rest_sum,) if spec.rest_sum else ())
            for X in "ab"}

    def plain(name, X):
        if name == spec.count:
            return n[X] if X in "ab" else n["a"] + n["b"]
        if name == spec.name:
            return spec.in_power_sums(plain, X, P[X] if X in "ab" else P["a"] + P["b"])
        return sums[(name, X)] if X in "ab" else sums[(name, "a")] + sums[(name, "b")]

    merged = spec.shift(plain, "a") + spec.shift(plain, "b")
    union = spec.in_power_sums(plain, "n", P["a"] + P["b"])
    return prove_equal(merged, union, claim=f"the merge of {spec.name} (deviations shifted to the merged mean) "
                                            f"equals sum({spec.power_sum}) - its mean part on the union")


def combination_proof(name: str, rw: Rewrite, source_symbols: dict) -> Proof:
    """The let equals Σ_t c_t · P_t with every centred sum written in power sums."""
    state = {s.name: s.symbol for s in rw.cascade.statements}
    expr = rw.combination[name]
    if isinstance(expr, sp.Piecewise):
        expr = expr.args[-1].expr
    target = sp.Integer(0)
    subs = {}
    for t, pname in rw.partials[name]:
        P = sp.Symbol(f"sum({_show(t.E)})", real=True) if pname in rw.centered else state[pname]
        target += t.coefficient * P
        if pname in rw.centered:
            spec = rw.centered[pname]
            subs[state[pname]] = spec.in_power_sums(lambda nm, X: state[nm], "", P)
    return prove_equal(expr.xreplace(subs), target,
                       claim=f"{name} = Σ_t c_t·sum(E_t), with the centred sums written in power sums")


__all__ = ["Centered", "MultiTerm", "Rewrite", "Term", "combination_proof", "merge_proof", "rewrite", "split"]
