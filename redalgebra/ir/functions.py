"""SymPy function classes for the vector operations of the text format, its conditionals, and the
elementwise functions SymPy has no class for (``sigmoid``, ``log1p`` as written, ``round`` with ties to even).

``dot(a, b)`` contracts two vectors of one size into a scalar and ``vsum(t)``
sums the components of a vector (the top-k values in an epilogue).  Both stay
unevaluated so a cascade's formulas keep the shape the user wrote.

Conditionals are SymPy ``Piecewise`` values: ``where(c, a, b)`` is
``Piecewise((a, c), (b, True))`` and a comparison used as a number is its
indicator ``Piecewise((1, c), (0, True))`` (1 where it holds, 0 where not).
"""

from __future__ import annotations

from fractions import Fraction

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


class Sigmoid(sp.Function):
    """The logistic function ``1/(1 + exp(-x))``: ``sigmoid(x)``.

    A function of its own rather than the quotient, so that formulas, proofs and LaTeX say
    ``sigmoid`` where the user wrote it.  To the analysis it is a function of its argument like
    ``tanh``: ``sigmoid(x - m)`` is not separable in either form, so the quotient would fuse
    nothing more.  Like ``tanh`` it stays unevaluated at a number other than 0 and ±∞ (the
    quotient would turn ``sigmoid(1)/2`` into a sum the text format cannot print back as written)
    and is evaluated numerically there; its sign is known (positive); every evaluator computes the
    quotient, which is right at the IEEE edges (``exp(-x)`` overflowing to ``inf`` gives 0).
    """

    nargs = 1

    @classmethod
    def eval(cls, arg):
        if arg.is_zero:
            return sp.S.Half
        if arg is sp.oo or arg is -sp.oo:
            return sp.S.One if arg is sp.oo else sp.S.Zero

    @staticmethod
    def quotient(arg):
        """``1/(1 + exp(-arg))``, the form every evaluator computes."""
        return 1 / (1 + sp.exp(-arg))

    def _eval_rewrite_as_exp(self, arg, **kwargs):
        return self.quotient(arg)

    def _eval_evalf(self, prec):
        return self.quotient(self.args[0])._eval_evalf(prec)

    def _eval_is_real(self):
        return self.args[0].is_real

    def _eval_is_positive(self):
        return True if self.args[0].is_real else None

    def _sympystr(self, printer):
        return f"sigmoid({printer._print(self.args[0])})"

    def _latex(self, printer):
        return rf"\sigma\left({printer._print(self.args[0])}\right)"


class Log1p(sp.Function):
    """``log(1 + x)``, accurate for small ``x``: ``log1p(x)``.

    SymPy's own (in ``sympy.codegen``) turns ``log1p`` of a rational into ``log(1 + r)``, which
    float32 computes as ``log(1) = 0`` for a tiny ``r``; this one stays as written (0 at 0) and is
    evaluated numerically.  Below -1 it is not real (NaN in the evaluators; -inf at -1).
    """

    nargs = 1

    @classmethod
    def eval(cls, arg):
        if arg.is_zero:
            return sp.S.Zero

    def _eval_rewrite_as_log(self, arg, **kwargs):
        return sp.log(1 + arg)

    def _eval_evalf(self, prec):
        return sp.log(1 + self.args[0])._eval_evalf(prec)

    def _eval_is_real(self):
        return (self.args[0] + 1).is_positive

    # the sign of x where it is defined: x > -1 for a negative value
    def _eval_is_positive(self):
        return self.args[0].is_positive

    def _eval_is_nonnegative(self):
        return True if self.args[0].is_nonnegative else None

    def _eval_is_zero(self):
        return self.args[0].is_zero

    def _eval_is_negative(self):
        return True if self.args[0].is_negative and (self.args[0] + 1).is_positive else None

    def _sympystr(self, printer):
        return f"log1p({printer._print(self.args[0])})"

    def _latex(self, printer):
        return rf"\operatorname{{log1p}}\left({printer._print(self.args[0])}\right)"


class RoundHalfEven(sp.Function):
    """Rounding to the nearest integer, ties to even (NumPy's ``rint``): ``round(x)``.

    SymPy's ``round`` rounds numbers only, with ties away from zero.  Unlike ``fp8`` this is not a
    cast: it is kept in real arithmetic, an integer-valued function with jumps (the prover knows it
    among its discontinuous functions).
    """

    nargs = 1

    @classmethod
    def eval(cls, arg):
        if arg.is_Rational:
            return sp.Integer(round(Fraction(arg.p, arg.q)))  # Python rounds a Fraction ties to even

    def _eval_evalf(self, prec):
        # ties are rational arguments, which eval rounds exactly; any other number rounds as floor(x + 1/2)
        return sp.floor(self.args[0] + sp.S.Half)._eval_evalf(prec)

    def _eval_is_integer(self):
        return True if self.args[0].is_real else None

    # True or None, never False: False would claim round(x) < 0 for every x < 0, and round(-0.3) is 0
    def _eval_is_nonnegative(self):
        return True if self.args[0].is_nonnegative else None

    def _eval_is_nonpositive(self):
        return True if self.args[0].is_nonpositive else None

    def _sympystr(self, printer):
        return f"round({printer._print(self.args[0])})"

    def _latex(self, printer):
        return rf"\operatorname{{round}}\left({printer._print(self.args[0])}\right)"


#: Elementwise functions of the text format, by name.
ELEMENTWISE = {"exp": sp.exp, "log": sp.log, "log1p": Log1p, "sqrt": sp.sqrt, "abs": sp.Abs, "tanh": sp.tanh,
               "sigmoid": Sigmoid, "erf": sp.erf, "floor": sp.floor, "round": RoundHalfEven, "fp8": RoundE4M3}
#: Functions that are the identity in real arithmetic (casts, rounding).
CASTS = (RoundE4M3,)
