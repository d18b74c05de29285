"""Stable simplification as named rules applied by one driver.

A correction ``H(D_new) ⊗ H(D_old)⁻¹`` must never be evaluated as a quotient
of two separately overflowing terms: ``exp(-m_new)/exp(-m_old)`` becomes
``exp(m_old - m_new)``, which is at most 1 whenever ``m_new >= m_old``.  Each
rule is data (a name, what it does, a function); :func:`stabilize` applies them
to a fixed point and :func:`is_stable` checks the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import sympy as sp


@dataclass(frozen=True)
class Rule:
    name: str
    does: str
    apply: Callable[[sp.Expr], sp.Expr]


def _cancel(expr: sp.Expr) -> sp.Expr:
    out = sp.cancel(sp.together(expr))
    return out if sp.count_ops(out) <= sp.count_ops(expr) else expr


RULES = (
    Rule("combine exponentials", "exp(a)·exp(b) → exp(a + b), exp(a)/exp(b) → exp(a − b)",
         lambda e: sp.powsimp(e, combine="exp")),
    Rule("cancel", "one denominator, common factors cancelled (kept only when shorter)", _cancel),
    Rule("collect exponent", "exp(a − b + c) written with its exponent simplified",
         lambda e: e.replace(lambda u: isinstance(u, sp.exp), lambda u: sp.exp(sp.expand(u.args[0])))),
)


def stabilize(expr: sp.Expr, rules=RULES) -> tuple[sp.Expr, tuple[str, ...]]:
    """Apply ``rules`` to a fixed point; returns the expression and the names of the rules that fired."""
    fired = []
    for _ in range(8):
        before = expr
        for rule in rules:
            new = rule.apply(expr)
            if new != expr:
                fired.append(rule.name)
                expr = new
        if expr == before:
            break
    return expr, tuple(dict.fromkeys(fired))


def exp_count(expr: sp.Expr) -> int:
    return sum(1 for e in sp.preorder_traversal(expr) if isinstance(e, sp.exp))


def is_stable(expr: sp.Expr) -> bool:
    """True when no product or quotient of two exponentials is left (each would overflow on its own)."""
    for node in sp.preorder_traversal(expr):
        if isinstance(node, sp.Mul):
            factors = [f.base if f.is_Pow else f for f in node.args]
            if sum(isinstance(f, sp.exp) for f in factors) > 1:
                return False
    return True
