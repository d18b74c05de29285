r"""The identity prover: ``lhs = rhs`` over the reals, proved, refuted or unknown.

Three sound steps, in order:

1. **Simplification.** ``simplify(lhs - rhs) == 0`` with the variables declared
   real (and signed per the assumptions).  SymPy's ``simplify`` never uses
   ``force=True``, so ``sqrt(a**2) → Abs(a)`` and ``log(a*b)`` is not split.
2. **Search for a counterexample.** Rational points (respecting the
   assumptions) where the two sides differ.  A difference is confirmed exactly
   when both sides are rational there, otherwise at 50 significant digits.
   This step refutes; it never proves.
3. **Case analysis of max/min/abs.** Each ``Max``/``Min`` (``Abs(u)`` is
   ``Max(u, -u)``) is split on which argument wins, innermost first.  A branch's
   condition ``g > 0`` is removed by reparametrising a variable in which ``g`` is
   linear with a coefficient of known sign: :math:`v = (t - g|_{v=0})/g_v` with a
   fresh :math:`t > 0`.  Branches whose conditions become contradictory are
   empty; in every other branch the max/min-free difference must simplify to 0.
   Both sides are continuous and the branch interiors are dense, so an identity
   on every open branch holds everywhere (and on the closure of the assumptions:
   ``c >= 0`` is argued on ``c > 0`` and extended by continuity).  A branch whose
   difference does not vanish is searched for a point, which is confirmed on
   the original identity before anything is called refuted.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field, replace

import sympy as sp

from ..errors import RedalgebraError
from sympy.core.relational import Relational

from ..ir.nodes import SIGN_FLAGS
from .proof import Counterexample, Proof

_FLAGS = {**SIGN_FLAGS, "!=0": {"nonzero": True}}  # the param signs, and "nonzero" for laws
_INTERIOR = {">0": ">0", ">=0": ">0", "<0": "<0", "<=0": "<0", "!=0": "!=0"}
_POOL = [sp.Rational(n, d) for n, d in [(-3, 1), (-2, 1), (-3, 2), (-1, 1), (-1, 2), (-1, 3), (0, 1), (1, 3),
                                        (1, 2), (1, 1), (3, 2), (2, 1), (3, 1), (5, 1), (-7, 4), (7, 3)]]
_ACCEPT = {">0": lambda v: v > 0, ">=0": lambda v: v >= 0, "<0": lambda v: v < 0,
           "<=0": lambda v: v <= 0, "!=0": lambda v: v != 0, None: lambda v: True}
MAX_BRANCHES = 4096
_SLACKS = itertools.count(1)  # names of slack variables, restarted per case analysis
SAMPLES = 160


def normalize_assumptions(assumptions) -> dict[str, str]:
    """Accept ``{"c": ">= 0"}``, ``{c: ">=0"}``, ``[c >= 0]`` or ``c >= 0``; return ``{name: key}``."""
    if assumptions is None:
        return {}
    if isinstance(assumptions, Relational):
        assumptions = [assumptions]
    if isinstance(assumptions, dict):
        items = [(str(k), str(v).replace(" ", "")) for k, v in assumptions.items()]
    else:
        items = []
        for rel in assumptions:
            if not (isinstance(rel, Relational) and rel.lhs.is_Symbol and rel.rhs == 0):
                raise RedalgebraError(f"an assumption is a sign of one variable, like c >= 0; got {rel!r}")
            items.append((rel.lhs.name, rel.rel_op + "0"))
    for name, key in items:
        if key not in _FLAGS:
            raise RedalgebraError(f"assumption on {name}: sign must be one of {sorted(_FLAGS)}, got {key!r}")
    return dict(items)


def describe(assumptions: dict[str, str]) -> tuple[str, ...]:
    return tuple(f"{n} {k[:-1]} 0" for n, k in sorted(assumptions.items()))


def _signed(var: sp.Symbol, key: str | None) -> sp.Symbol:
    return sp.Symbol(var.name, real=True, **_FLAGS.get(key, {}))


def _evaluate(expr: sp.Expr, point: dict) -> sp.Expr:
    return expr.subs({s: point[s.name] for s in expr.free_symbols if s.name in point})


def confirm(lhs: sp.Expr, rhs: sp.Expr, point: dict) -> Counterexample | None:
    """Both sides at ``point`` (name → exact value); a Counterexample when they differ there."""
    lv, rv = _evaluate(lhs, point), _evaluate(rhs, point)
    if lv.free_symbols or rv.free_symbols:
        return None
    if any(v.has(sp.nan, sp.zoo) or v in (sp.oo, -sp.oo) for v in (lv, rv)):
        return None  # a side is undefined or infinite there: not evidence either way
    diff = lv - rv
    if diff.is_Rational:
        return Counterexample(dict(sorted(point.items())), lv, rv, True) if diff != 0 else None
    num = sp.N(diff, 50)
    if num.has(sp.nan) or not num.is_number:
        return None
    return Counterexample(dict(sorted(point.items())), lv, rv, False) if sp.Abs(num) > sp.Rational(1, 10**40) else None


def _search(lhs, rhs, variables, assumptions, conditions, rng) -> Counterexample | None:
    names = sorted(v.name for v in variables)
    for _ in range(SAMPLES):
        point = {n: rng.choice([p for p in _POOL if _ACCEPT[assumptions.get(n)](p)]) for n in names}
        if all(_evaluate(g, point) > 0 for g in conditions):
            found = confirm(lhs, rhs, point)
            if found is not None:
                return found
    return None


def prove_equal(lhs, rhs, *, claim: str, assumptions=None, conditions=(), seed: int = 0) -> Proof:
    """Prove ``lhs = rhs`` for all real values of the free symbols (subject to ``assumptions``).

    Parameters
    ----------
    lhs, rhs : sympy.Expr
        The two sides; their free symbols are the universally quantified variables.
    claim : str
        A short name for the identity ("max is associative").
    assumptions : dict or relational(s), optional
        Sign assumptions on variables, e.g. ``{"c": ">=0"}``.
    conditions : sequence of sympy.Expr
        Extra strict conditions ``g > 0`` restricting the variables (sortedness
        of a top-k state); proofs hold on their closure.
    """
    lhs, rhs = sp.sympify(lhs), sp.sympify(rhs)
    assumed = normalize_assumptions(assumptions)
    variables = (lhs.free_symbols | rhs.free_symbols).union(*[g.free_symbols for g in conditions])
    unknown_names = set(assumed) - {v.name for v in variables}
    if unknown_names:
        raise RedalgebraError(f"assumptions name {sorted(unknown_names)}, which the identity does not use; "
                         f"its variables are {sorted(v.name for v in variables)}")
    base = Proof(claim, "unknown", lhs, rhs, describe(assumed))
    closure = {v: _signed(v, assumed.get(v.name)) for v in variables}
    diff = sp.simplify((lhs - rhs).xreplace(closure))
    if diff == 0:
        return replace(base, status="proved", method="simplify",
                       steps=("simplify(lhs - rhs) = 0 with the variables real" +
                              (" and signed as assumed" if assumed else ""),))
    cx = _search(lhs, rhs, variables, assumed, conditions, random.Random(seed))
    if cx is not None:
        return replace(base, status="refuted", method="search", counterexample=cx,
                       steps=("a rational point where the two sides differ",))
    if lhs.has(sp.Max, sp.Min, sp.Abs) or rhs.has(sp.Max, sp.Min, sp.Abs):
        return _case_analysis(base, lhs, rhs, variables, assumed, conditions, seed)
    return replace(base, method="simplify", residual=diff,
                   steps=("simplify(lhs - rhs) did not reach 0; no counterexample was found by search",))


# -- case analysis ------------------------------------------------------------------------------

@dataclass
class _Branch:
    lhs: sp.Expr
    rhs: sp.Expr
    conds: list = field(default_factory=list)   # undecided strict conditions g > 0
    back: dict = field(default_factory=dict)    # original name -> expression in current variables
    free: set = field(default_factory=set)      # current variables that may be solved for
    path: tuple = ()

    def substitute(self, rule: dict) -> "_Branch":
        return _Branch(self.lhs.xreplace(rule), self.rhs.xreplace(rule), [g.xreplace(rule) for g in self.conds],
                       {n: e.xreplace(rule) for n, e in self.back.items()}, self.free - set(rule), self.path)

    def assume(self, conditions) -> "_Branch | None":
        """Add strict conditions; None when they contradict what is known."""
        branch, pending = self, list(conditions)
        while pending:
            g = sp.expand(pending.pop())
            if g.is_positive:
                continue
            if g.is_positive is False:
                return None
            var = _solvable(g, branch.free)
            if var is None:
                branch.conds.append(g)
                continue
            coeff = sp.diff(g, var)
            slack = sp.Dummy(f"t{next(_SLACKS)}", positive=True)
            rule = {var: (slack - g.xreplace({var: 0})) / coeff}
            branch = branch.substitute(rule)
            pending, branch.conds = [p.xreplace(rule) for p in pending] + branch.conds, []
        return None if _linear_infeasible(branch.conds) else branch


def _linear_infeasible(conds: list) -> bool:
    r"""Fourier–Motzkin: True when strict linear conditions :math:`g_k > 0` (with the
    signs of signed symbols) have no common solution.  Exact over the rationals;
    False whenever a condition is not linear with rational coefficients."""
    if not conds:
        return False
    symbols = sorted(set().union(*[g.free_symbols for g in conds]), key=sp.default_sort_key)
    rows = []
    for g in conds + [s for s in symbols if s.is_positive] + [-s for s in symbols if s.is_negative]:
        try:
            poly = sp.Poly(g, *symbols)
        except sp.PolynomialError:
            return False
        if poly or poly.total_degree() > 1 or not all(c.is_Rational for c in poly.coeffs()):
            return False
        rows.append(({s: poly.coeff_monomial(s) for s in symbols}, poly.coeff_monomial(1)))
    for s in symbols:
        pos = [r for r in rows if r[0][s] > 0]
        neg = [r for r in rows if r[0][s] < 0]
        rows = [r for r in rows if r[0][s] == 0]
        for (cp, kp) in pos:
            for (cn, kn) in neg:
                wp, wn = 1 / cp[s], -1 / cn[s]
                rows.append(({t: wp * cp[t] + wn * cn[t] for t in symbols}, wp * kp + wn * kn))
        if len(rows) > 2000:
            return False
    return any(k <= 0 for _, k in rows)


def _solvable(g: sp.Expr, free: set):
    for var in sorted(g.free_symbols & free, key=sp.default_sort_key):
        coeff = sp.diff(g, var)
        if var not in coeff.free_symbols and (coeff.is_positive or coeff.is_negative):
            return var
    return None


def _innermost(expr: sp.Expr):
    nodes = [n for n in expr.atoms(sp.Max, sp.Min) if not any(a.has(sp.Max, sp.Min) for a in n.args)]
    return min(nodes, key=sp.default_sort_key) if nodes else None


def _without_abs(expr: sp.Expr) -> sp.Expr:
    return expr.replace(lambda e: isinstance(e, sp.Abs), lambda e: sp.Max(e.args[0], -e.args[0]))


def _case_analysis(base: Proof, lhs, rhs, variables, assumed, conditions, seed) -> Proof:
    global _SLACKS
    _SLACKS = itertools.count(1)
    interior = {v: _signed(v, _INTERIOR.get(assumed.get(v.name))) for v in variables}
    start = _Branch(_without_abs(lhs.xreplace(interior)), _without_abs(rhs.xreplace(interior)),
                    back={v.name: interior[v] for v in variables},
                    free={interior[v] for v in variables if v.name not in assumed})
    start = start.assume([g.xreplace(interior) for g in conditions])
    tally = {"zero": 0, "empty": 0}
    rng = random.Random(seed)
    stack = [start] if start is not None else []
    steps = ["case split on which argument of each max/min wins (abs(u) = max(u, -u)), innermost first; "
             "branch conditions removed by substituting a positive slack for a variable"]
    visited = 0
    while stack:
        branch = stack.pop()
        visited += 1
        if visited > MAX_BRANCHES:
            return replace(base, method="cases", steps=tuple(steps + [f"gave up after {MAX_BRANCHES} branches"]))
        node = _innermost(sp.Add(branch.lhs, branch.rhs, evaluate=False))
        if node is None:
            verdict = _leaf(base, branch, lhs, rhs, assumed, rng, tally)
            if verdict is not None:
                return replace(verdict, steps=tuple(steps + list(verdict.steps)))
            continue
        for winner in node.args:
            sign = 1 if isinstance(node, sp.Max) else -1
            child = _Branch(branch.lhs.xreplace({node: winner}), branch.rhs.xreplace({node: winner}),
                            list(branch.conds), dict(branch.back), set(branch.free),
                            branch.path + (f"{node} -> {winner}",))
            child = child.assume([sign * (winner - other) for other in node.args if other != winner])
            if child is None:
                tally["empty"] += 1
            else:
                stack.append(child)
    steps.append(f"{tally['zero']} branch(es) where lhs - rhs simplifies to 0; "
                 f"{tally['empty']} branch(es) with contradictory conditions")
    steps.append("both sides are continuous and the open branches are dense, so the identity holds everywhere"
                 + (" (on the assumptions' closure by continuity)" if assumed else ""))
    return replace(base, status="proved", method="cases", steps=tuple(steps))


def _leaf(base, branch: _Branch, lhs, rhs, assumed, rng, tally) -> Proof | None:
    """None when the branch is closed; otherwise the refuted or unknown verdict."""
    diff = sp.simplify(branch.lhs - branch.rhs)
    if diff == 0:
        tally["zero"] += 1
        return None
    current = set().union(*[e.free_symbols for e in branch.back.values()])
    for _ in range(SAMPLES // 4):
        at = {s: rng.choice([p for p in _POOL if p != 0 and (not s.is_positive or p > 0)
                             and (not s.is_negative or p < 0)]) for s in current}
        if all(g.xreplace(at) > 0 for g in branch.conds):
            point = {n: e.xreplace(at) for n, e in branch.back.items()}
            cx = confirm(lhs, rhs, point)
            if cx is not None:
                return replace(base, status="refuted", method="cases", counterexample=cx,
                               steps=("in the branch " + "; ".join(branch.path) + f", lhs - rhs = {diff}",))
    return replace(base, method="cases", residual=diff,
                   steps=("undecided branch " + "; ".join(branch.path) +
                          (f" under {[f'{g} > 0' for g in branch.conds]}" if branch.conds else ""),))
