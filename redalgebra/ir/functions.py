"""SymPy function classes for the vector operations of the text format.

``dot(a, b)`` contracts two vectors of one size into a scalar and ``vsum(t)``
sums the components of a vector (the top-k values in an epilogue).  Both stay
unevaluated so a cascade's formulas keep the shape the user wrote.
"""

from __future__ import annotations

import sympy as sp


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
