"""SymPy function classes for the vector operations of the text format, and its conditionals.

``dot(a, b)`` contracts two vectors of one size into a scalar and ``vsum(t)``
sums the components of a vector (the top-k values in an epilogue).  Both stay
unevaluated so a cascade's formulas keep the shape the user wrote.

Conditionals are SymPy ``Piecewise`` values: ``where(c, a, b)`` is
``Piecewise((a, c), (b, True))`` and a comparison used as a number is its
indicator ``Piecewise((1, c), (0, True))`` (1 where it holds, 0 where not).
"""

from __future__ import annotations

import sympy as sp
from sympy.core.relational import Relational
from sympy.logic.boolalg import BooleanAtom, BooleanFunction

#: The comparison operators of the text format and the SymPy relations they build.
COMPARISONS = {"==": sp.Eq, "!=": sp.Ne, "<": sp.Lt, "<=": sp.Le, ">": sp.Gt, ">=": sp.Ge}


def is_condition(value) -> bool:
    """True for a comparison, a combination of comparisons, or ``True``/``False``."""
    return isinstance(value, (Relational, BooleanAtom, BooleanFunction))


def condition(value) -> sp.Basic:
    """``value`` as a condition: a comparison stays one, a number ``u`` means ``u != 0``."""
    return value if is_condition(value) else sp.Ne(value, 0)


def indicator(cond) -> sp.Expr:
    """The number a condition is in arithmetic: 1 where ``cond`` holds, else 0 (Iverson's bracket)."""
    return sp.Piecewise((1, cond), (0, True))


def number(value) -> sp.Expr:
    """``value`` as a number: a condition becomes its indicator, anything else stays."""
    return indicator(value) if is_condition(value) else value


def where(cond, a, b) -> sp.Expr:
    """``a`` where ``cond`` holds, else ``b`` (``cond`` a comparison, or a number meaning ``!= 0``)."""
    return sp.Piecewise((number(a), condition(cond)), (number(b), True))


def as_indicator(expr: sp.Basic):
    """The condition of an indicator ``Piecewise((1, c), (0, True))``, else None."""
    if isinstance(expr, sp.Piecewise) and len(expr.args) == 2 and expr.args[1].cond == sp.true \
            and expr.args[0].expr == 1 and expr.args[1].expr == 0:
        return expr.args[0].cond
    return None


class Dot(sp.Function):
    """Inner product of two vectors of equal size: ``dot(q, k)``."""

    nargs = 2

    def _eval_is_real(self):
        return all(a.is_real for a in self.args) or None

    def _sympystr(self, printer):
        return f"dot({printer._print(self.args[0])}, {printer._print(self.args[1])})"

    def _latex(self, printer):
        return rf"{printer._print(self.args[0])} \cdot {printer._print(self.args[1])}"


class VSum(sp.Function):
    """Sum of the components of one vector: ``sum(t)`` in an ``out`` line."""

    nargs = 1

    def _eval_is_real(self):
        return self.args[0].is_real

    def _sympystr(self, printer):
        return f"sum({printer._print(self.args[0])})"

    def _latex(self, printer):
        return rf"\textstyle\sum {printer._print(self.args[0])}"


class RoundE4M3(sp.Function):
    """Rounding to the nearest FP8 e4m3 value (saturating at ±448): ``fp8(x)``.

    In real arithmetic it is modelled as the identity — a fusion through it is
    exact in ℝ — while the reference evaluator rounds, so the measured effect
    of the rounding is visible rather than assumed away.
    """

    nargs = 1

    def _eval_is_real(self):
        return self.args[0].is_real

    def _sympystr(self, printer):
        return f"fp8({printer._print(self.args[0])})"

    def _latex(self, printer):
        return rf"\operatorname{{fp8}}\left({printer._print(self.args[0])}\right)"


#: Elementwise functions of the text format, by name.
ELEMENTWISE = {"exp": sp.exp, "log": sp.log, "sqrt": sp.sqrt, "abs": sp.Abs, "fp8": RoundE4M3}
#: Functions that are the identity in real arithmetic (casts, rounding).
CASTS = (RoundE4M3,)
