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

from ..ir.functions import RoundHalfEven
from ..ir.nodes import SIGN_FLAGS
from ..errors import BudgetExhausted
from .budget import PROOF_SECONDS, budget, check
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
    return expr.xreplace({s: sp.sympify(point[s.name]) for s in expr.free_symbols if s.name in point})


def confirm(lhs: sp.Expr, rhs: sp.Expr, point: dict) -> Counterexample | None:
    """Both sides at ``point`` (name → exact value); a Counterexample when they differ there."""
    lv, rv = _evaluate(lhs, point), _evaluate(rhs, point)
    if lv.free_symbols or rv.free_symbols:
        return None
    if any(v.has(sp.nan, sp.zoo) or v in (sp.oo, -sp.oo) for v in (lv, rv)):
        return None  # a side is undefined or infinite there: not evidence either way
    diff = lv - rv
    if diff.is_Rational:
        found = Counterexample(dict(sorted(point.items())), lv, rv, True) if diff != 0 else None
    else:
        num = sp.N(diff, 50)
        if num.has(sp.nan) or not num.is_number:
            return None
        found = Counterexample(dict(sorted(point.items())), lv, rv, False) if sp.Abs(num) > sp.Rational(1, 10**40) \
            else None
    # a side real at the point only through a value that is not (sqrt(a)*sqrt(b) at a, b < 0: i·i) is outside the
    # real domain the claim is about: no evidence either way
    return found if found is None or (_real_throughout(lhs, point) and _real_throughout(rhs, point)) else None


def _real_throughout(e: sp.Expr, point: dict) -> bool:
    """Whether every power, log and function inside ``e`` is real at ``point`` (where they can be evaluated)."""
    for sub in sp.preorder_traversal(e):
        if isinstance(sub, (sp.Pow, sp.Function)) and sub.free_symbols:
            value = _evaluate(sub, point)
            if value.is_number and value.is_extended_real is False:
                return False
    return True


def _search(lhs, rhs, variables, assumptions, conditions, rng, sampling=None) -> Counterexample | None:
    """A confirmed counterexample at random rational points drawn under ``assumptions`` and kept only when they
    also meet ``sampling`` (the symbols' own signs as well)."""
    sampling = assumptions if sampling is None else sampling
    names = sorted(v.name for v in variables)
    for _ in range(SAMPLES):
        check()
        point = {n: rng.choice([p for p in _POOL if _ACCEPT[assumptions.get(n)](p)]) for n in names}
        if not all(_ACCEPT[sampling.get(n)](v) for n, v in point.items()):
            continue
        found = _try_point(lhs, rhs, point, conditions)
        if found is not None:
            return found
    return None


def _try_point(lhs, rhs, point, conditions) -> Counterexample | None:
    """A confirmed counterexample at ``point``, or None (also where a side cannot be evaluated there:
    ``max(log(-2), …)`` is not real, which is no evidence either way)."""
    try:
        if all(bool(_evaluate(g, point) > 0) for g in conditions):
            return confirm(lhs, rhs, point)
    except (TypeError, ValueError, ArithmeticError):
        return None
    return None


def prove_equal(lhs, rhs, *, claim: str, assumptions=None, conditions=(), seed: int = 0,
                budget_s: float | None = None) -> Proof:
    """Prove ``lhs = rhs`` for all real values of the free symbols (subject to ``assumptions``) where both sides are
    defined: a quotient is equal to its cancelled form, as SymPy simplifies it (``(t**2 - 1)/(t - 1) = t + 1`` is
    proved; at ``t = 1`` the left side is undefined, not different).

    Parameters
    ----------
    lhs, rhs : sympy.Expr
        The two sides; their free symbols are the universally quantified variables.  Two symbols
        with one name and different assumptions are two variables; a symbol's own sign assumption
        (``positive=True``) is an assumption of the proof.
    claim : str
        A short name for the identity ("max is associative").
    assumptions : dict or relational(s), optional
        Sign assumptions on variables, e.g. ``{"c": ">=0"}``.
    conditions : sequence of sympy.Expr
        Extra strict conditions ``g > 0`` restricting the variables (sortedness
        of a top-k state); proofs hold on their closure.
    budget_s : float, optional
        Seconds this proof may take (default :data:`~.budget.PROOF_SECONDS`); past them, and on any
        exception inside the prover, the verdict is ``"unknown"`` with the reason.
    """
    lhs, rhs = _expression(lhs, "lhs"), _expression(rhs, "rhs")
    conditions = [_expression(g, "a condition") for g in conditions]
    assumed = normalize_assumptions(assumptions)
    lhs, rhs, conditions, renamed = _distinct_names(lhs, rhs, conditions)
    variables = (lhs.free_symbols | rhs.free_symbols).union(*[g.free_symbols for g in conditions])
    unknown_names = set(assumed) - {v.name for v in variables}
    if unknown_names:
        raise RedalgebraError(f"assumptions name {sorted(unknown_names)}, which the identity does not use; "
                              f"its variables are {sorted(v.name for v in variables)}")
    if set(assumed) & set(renamed):
        raise RedalgebraError(f"assumptions name {sorted(set(assumed) & set(renamed))}, but the identity has two "
                              f"symbols of that name with different assumptions; give them different names")
    # a symbol's own sign (Symbol("s", positive=True)) only restricts where counterexamples are sought;
    # the proofs themselves hold for every real value, which is stronger
    own = {v.name: _own_sign(v) for v in variables if _own_sign(v) is not None}
    sampling = {**own, **assumed}
    base = Proof(claim, "unknown", lhs, rhs, describe(assumed))
    if renamed:
        base = replace(base, steps=(f"symbols of one name with different assumptions are different variables: "
                                    f"{', '.join(f'{k} -> {v}' for k, v in renamed.items())}",))
    try:
        with budget(PROOF_SECONDS if budget_s is None else budget_s, f"the proof of «{claim}»"):
            return _prove(base, lhs, rhs, variables, assumed, conditions, seed, sampling)
    except BudgetExhausted as err:
        return replace(base, method="budget", steps=base.steps + (f"{err}; undecided",))
    except Exception as err:  # noqa: BLE001 - any failure inside the prover is an undecided proof, with its reason
        return replace(base, method="error",
                       steps=base.steps + (f"the prover stopped on {type(err).__name__}: {str(err)[:300]}; "
                                           f"undecided",))


def _expression(value, what: str) -> sp.Expr:
    """A SymPy expression from an expression or a number; strings are refused (SymPy would evaluate them)."""
    try:
        value = sp.sympify(value, strict=True)
    except sp.SympifyError:
        raise RedalgebraError(f"{what} of an identity is a SymPy expression or a number, got {type(value).__name__} "
                              f"{str(value)[:60]!r}; build it from sympy.Symbol(..., real=True)") from None
    if not isinstance(value, sp.Expr):
        raise RedalgebraError(f"{what} of an identity is a SymPy expression, got a {type(value).__name__}: "
                              f"{str(value)[:60]}")
    return value


def _prove(base: Proof, lhs, rhs, variables, assumed, conditions, seed, sampling) -> Proof:
    closure = {v: _signed(v, assumed.get(v.name)) for v in variables}
    diff = sp.simplify((lhs - rhs).xreplace(closure))
    check()
    if diff == 0:
        return replace(base, status="proved", method="simplify",
                       steps=base.steps + ("simplify(lhs - rhs) = 0 with the variables real" +
                                           (" and signed as assumed" if assumed else ""),))
    cx = _search(lhs, rhs, variables, assumed, conditions, random.Random(seed), sampling)
    if cx is not None:
        return replace(base, status="refuted", method="search", counterexample=cx,
                       steps=base.steps + ("a rational point where the two sides differ",))
    jumps = _jumps(lhs, rhs, *conditions)
    if jumps:
        cx = _at_jumps(lhs, rhs, variables, sampling, conditions, random.Random(seed))
        if cx is not None:
            return replace(base, status="refuted", method="search", counterexample=cx,
                           steps=base.steps + (f"a point where a function with a jump ({', '.join(jumps)}) jumps, "
                                               f"and the two sides differ",))
        return replace(base, method="simplify", residual=diff,
                       steps=base.steps + (f"simplify(lhs - rhs) did not reach 0 and no counterexample was found; "
                                           f"the case analysis is not tried, because it argues on open branches "
                                           f"and {', '.join(jumps)} jump(s) at points it would not see",))
    if lhs.has(sp.Max, sp.Min, sp.Abs) or rhs.has(sp.Max, sp.Min, sp.Abs):
        return _case_analysis(base, lhs, rhs, variables, assumed, conditions, seed, sampling)
    return replace(base, method="simplify", residual=diff,
                   steps=base.steps + ("simplify(lhs - rhs) did not reach 0; no counterexample was found by search",))


#: Functions with jumps: the case analysis (which assumes continuity) is never applied to them.
DISCONTINUOUS = (sp.sign, sp.Heaviside, sp.floor, sp.ceiling, sp.frac, RoundHalfEven, sp.Piecewise, sp.Mod,
                 sp.KroneckerDelta, sp.DiracDelta)


def _jumps(*exprs) -> list[str]:
    found = set()
    for e in exprs:
        found |= {type(a).__name__ for a in e.atoms(*DISCONTINUOUS)}
        if e.atoms(Relational) or e.has(sp.ITE):
            found.add("a comparison")
    return sorted(found)


def _at_jumps(lhs, rhs, variables, sampling, conditions, rng) -> Counterexample | None:
    """Search the points where ``sign``/``Heaviside``/``Piecewise`` arguments vanish: one variable solved for,
    the others drawn from the pool.  A jump sits on a set of measure zero that random points miss."""
    points = set()
    for atom in (lhs.atoms(sp.sign, sp.Heaviside) | rhs.atoms(sp.sign, sp.Heaviside)):
        points.add(atom.args[0])
    for rel in (lhs.atoms(Relational) | rhs.atoms(Relational)):
        points.add(rel.lhs - rel.rhs)
    names = sorted(v.name for v in variables)
    for u in sorted(points, key=sp.default_sort_key)[:8]:
        u = u.replace(lambda e: isinstance(e, sp.Abs), lambda e: e.args[0])
        for v in sorted(u.free_symbols & variables, key=sp.default_sort_key):
            check()
            try:
                roots = [r for r in sp.solve(u, v) if r.is_real is not False][:4]
            except Exception:  # noqa: BLE001 - SymPy cannot solve it: no point from this argument
                continue
            for root in roots:
                for _ in range(8):
                    point = {n: rng.choice([p for p in _POOL if _ACCEPT[sampling.get(n)](p)]) for n in names}
                    try:
                        value = sp.nsimplify(_evaluate(root, point), rational=True) if not root.is_Rational else root
                    except Exception:  # noqa: BLE001
                        continue
                    if not (value.is_Rational and _ACCEPT[sampling.get(v.name)](value)):
                        continue
                    point[v.name] = value
                    found = _try_point(lhs, rhs, point, conditions)
                    if found is not None:
                        return found
    return None


def _own_sign(v: sp.Symbol) -> str | None:
    """The sign a symbol carries itself (``Symbol("s", positive=True)`` -> ``">0"``)."""
    for key, test in ((">0", v.is_positive), ("<0", v.is_negative), (">=0", v.is_nonnegative),
                      ("<=0", v.is_nonpositive), ("!=0", v.is_nonzero if v.is_real else None)):
        if test:
            return key
    return None


def _distinct_names(lhs, rhs, conditions):
    """Symbols that share a name but not their assumptions get distinct names (``a``, ``a__2``)."""
    symbols = (lhs.free_symbols | rhs.free_symbols).union(*[g.free_symbols for g in conditions])
    by_name: dict[str, list] = {}
    for s in sorted(symbols, key=sp.default_sort_key):
        by_name.setdefault(s.name, []).append(s)
    taken = set(by_name)
    rule, renamed = {}, {}
    for name, group in by_name.items():
        for i, s in enumerate(group[1:], 2):
            new = f"{name}__{i}"
            while new in taken:
                new += "_"
            taken.add(new)
            rule[s] = (sp.Dummy if isinstance(s, sp.Dummy) else sp.Symbol)(new, **s.assumptions0)
            renamed[name] = new
    if not rule:
        return lhs, rhs, list(conditions), {}
    return lhs.xreplace(rule), rhs.xreplace(rule), [g.xreplace(rule) for g in conditions], renamed


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


def _case_analysis(base: Proof, lhs, rhs, variables, assumed, conditions, seed, sampling) -> Proof:
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
    steps = list(base.steps) + ["case split on which argument of each max/min wins (abs(u) = max(u, -u)), innermost first; "
             "branch conditions removed by substituting a positive slack for a variable"]
    visited = 0
    while stack:
        check()
        branch = stack.pop()
        visited += 1
        if visited > MAX_BRANCHES:
            return replace(base, method="cases", steps=tuple(steps + [f"gave up after {MAX_BRANCHES} branches"]))
        node = _innermost(sp.Add(branch.lhs, branch.rhs, evaluate=False))
        if node is None:
            verdict = _leaf(base, branch, lhs, rhs, sampling, rng, tally)
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


def _leaf(base, branch: _Branch, lhs, rhs, sampling, rng, tally) -> Proof | None:
    """None when the branch is closed; otherwise the refuted or unknown verdict."""
    diff = sp.simplify(branch.lhs - branch.rhs)
    if diff == 0:
        tally["zero"] += 1
        return None
    current = set().union(*[e.free_symbols for e in branch.back.values()])
    for _ in range(SAMPLES // 4):
        at = {s: rng.choice([p for p in _POOL if p != 0 and (not s.is_positive or p > 0)
                             and (not s.is_negative or p < 0)]) for s in current}
        check()
        try:
            inside = all(bool(g.xreplace(at) > 0) for g in branch.conds)
        except (TypeError, ValueError, ArithmeticError):
            continue
        point = {n: e.xreplace(at) for n, e in branch.back.items()} if inside else {}
        if inside and all(_ACCEPT[sampling.get(n)](v) for n, v in point.items() if v.is_Rational):
            cx = _try_point(lhs, rhs, point, ())
            if cx is not None:
                return replace(base, status="refuted", method="cases", counterexample=cx,
                               steps=("in the branch " + "; ".join(branch.path) + f", lhs - rhs = {diff}",))
    return replace(base, method="cases", residual=diff,
                   steps=("undecided branch " + "; ".join(branch.path) +
                          (f" under {[f'{g} > 0' for g in branch.conds]}" if branch.conds else ""),))
