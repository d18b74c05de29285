"""Print a cascade back to the text format, and to LaTeX.

``parse(to_text(c)) == c`` for every cascade: the text printer is the inverse
of the parser (tested as a property).
"""

from __future__ import annotations

import sympy as sp
from sympy.printing.precedence import precedence
from sympy.printing.latex import LatexPrinter as SympyLatexPrinter
from sympy.printing.str import StrPrinter

from .functions import COMPARISONS, as_indicator
from .monoid import reducer_name
from .nodes import Cascade, Input, Let, Output, Param, Reduction

_OPERATORS = {cls: op for op, cls in COMPARISONS.items()}


class CascadePrinter(StrPrinter):
    """SymPy's str printer with the function names of the cascade format.

    Conditionals print as the parser reads them: an indicator
    ``Piecewise((1, c), (0, True))`` as ``(c)``, any other ``Piecewise`` as
    nested ``where(c, a, b)``, relations with ``== != < <= > >=`` combined by
    ``and``/``or``/``not``, ``oo`` as ``inf``.
    """

    def _print_Infinity(self, expr):
        return "inf"

    def _print_NegativeInfinity(self, expr):
        return "-inf"

    def _print_Relational(self, expr):
        op = _OPERATORS.get(type(expr), expr.rel_op)
        return f"{self._print(expr.lhs)} {op} {self._print(expr.rhs)}"

    def _print_And(self, expr):
        return " and ".join(self._operand(a) for a in expr.args)

    def _print_Or(self, expr):
        return " or ".join(self._operand(a) for a in expr.args)

    def _print_Not(self, expr):
        return f"not ({self._print(expr.args[0])})"

    def _operand(self, cond) -> str:
        """A condition inside and/or: parenthesised unless it is a comparison."""
        text = self._print(cond)
        return text if cond.is_Relational else f"({text})"

    def _print_Piecewise(self, expr):
        cond = as_indicator(expr)
        if cond is not None:
            return f"({self._print(cond)})"
        pairs = list(expr.args)
        out = self._print(pairs[-1].expr) if pairs[-1].cond == True else "nan"  # noqa: E712 (SymPy's true)
        for value, cond in reversed(pairs[:-1] if pairs[-1].cond == True else pairs):  # noqa: E712
            out = f"where({self._print(cond)}, {self._print(value)}, {out})"
        return out

    def _print_Rational(self, expr):
        """A power-of-ten fraction as a reader writes it (``1e-12``, not ``1/1000000000000``); the parser
        reads it back exactly."""
        return _scientific(expr.p, expr.q) or super()._print_Rational(expr)

    def _print_Mul(self, expr):
        coeff, rest = expr.as_coeff_Mul()
        if coeff.is_Rational and not coeff.is_Integer and _scientific(coeff.p, coeff.q):  # 1e-12*x, not x/10**12
            return f"{self._print(coeff)}*{self.parenthesize(rest, precedence(expr))}"
        return super()._print_Mul(expr)

    def _print_Abs(self, expr):
        return f"abs({self._print(expr.args[0])})"

    def _print_Exp1(self, expr):
        return "exp(1)"

    def _print_Max(self, expr):
        return "max(" + ", ".join(self._print(a) for a in expr.args) + ")"

    def _print_Min(self, expr):
        return "min(" + ", ".join(self._print(a) for a in expr.args) + ")"


class LatexPrinter(SympyLatexPrinter):
    """SymPy's LaTeX with power-of-ten fractions as a reader writes them (``10^{-12}``, ``2.5 \\cdot 10^{-5}``,
    not ``\\frac{1}{1000000000000}``)."""

    def _print_Rational(self, expr):
        text = _scientific(expr.p, expr.q)
        if text is None:
            return super()._print_Rational(expr)
        mantissa, exponent = text.split("e")
        sign = "-" if mantissa.startswith("-") else ""
        mantissa = mantissa.lstrip("-")
        power = f"10^{{{int(exponent)}}}"
        return f"{sign}{power}" if mantissa == "1" else f"{sign}{mantissa} \\cdot {power}"

    def _print_Mul(self, expr):
        coeff, rest = expr.as_coeff_Mul()
        if coeff.is_Rational and not coeff.is_Integer and _scientific(coeff.p, coeff.q):  # 10^{-12} x, not x/10^12
            return f"{self._print(coeff)}\\, {self.parenthesize(rest, precedence(expr))}"
        return super()._print_Mul(expr)


def latex(expr) -> str:
    """``expr`` in LaTeX, numbers as a reader writes them (every LaTeX the package shows goes through here)."""
    return LatexPrinter().doprint(expr)


def _scientific(p: int, q: int) -> str | None:
    """``p/q`` in scientific notation when it is a short finite decimal (six digits at most) with
    ``q >= 10**4``, else None."""
    a, b = _multiplicity(2, q), _multiplicity(5, q)
    if q < 10**4 or q != 2**a * 5**b:
        return None
    k = max(a, b)
    digits = str(abs(p) * 10**k // q).rstrip("0")
    exponent = len(str(abs(p) * 10**k // q)) - 1 - k
    if len(digits) > 6:
        return None
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{'-' * (p < 0)}{mantissa}e{exponent}"


def _multiplicity(prime: int, n: int) -> int:
    count = 0
    while n % prime == 0:
        n, count = n // prime, count + 1
    return count


def _size(size) -> str:
    return "" if size is None else f"[{size}]"


def reducer_text(r: Reduction, p: CascadePrinter | None = None) -> str:
    """The right-hand side of a reduce statement, e.g. ``topk(8, exp(g - m)/s)``."""
    p = p or CascadePrinter()
    if r.monoid.k is not None:
        return f"topk({r.monoid.k}, {p.doprint(r.body)})"
    return f"{reducer_name(r.monoid)}({p.doprint(r.body)})"


def _decimal(c) -> str:
    """A bound as the decimal literal it was read from (its denominator divides a power of ten), exactly."""
    from decimal import Decimal, localcontext

    c = sp.Rational(c)
    if c.q == 1:
        return str(c.p)
    with localcontext() as ctx:
        ctx.prec = len(str(c.p)) + len(str(c.q)) + 10
        return format(Decimal(c.p) / Decimal(c.q), "f")


def statement_text(s, p: CascadePrinter | None = None) -> str:
    """One statement in the text format."""
    p = p or CascadePrinter()
    sign = "" if getattr(s, "sign", None) is None else f" {s.sign[:-1]} 0"
    if isinstance(s, Input):
        return f"input {s.name}{_size(s.size)}{sign}"
    if isinstance(s, Param):
        if s.bound is not None:
            sign = f" {s.bound[0]} {_decimal(s.bound[1])}"
        return f"param {s.name}{_size(s.size)}{' int' if s.integer else ''}{sign}"
    if isinstance(s, Let):
        return f"let {s.name} = {p.doprint(s.expr)}"
    if isinstance(s, Reduction):
        return f"reduce {s.name} = {reducer_text(s, p)}"
    if isinstance(s, Output):
        return f"out {s.name} = {p.doprint(s.expr)}"
    raise TypeError(f"not a statement: {s!r}")


def to_text(c: Cascade) -> str:
    """The cascade in the text format, one statement per line."""
    p = CascadePrinter()
    return "\n".join(statement_text(s, p) for s in c.statements) + "\n"


def to_latex(c: Cascade) -> str:
    """A LaTeX ``aligned`` block: reductions as big operators, outputs as equations."""
    ops = {"add": r"\sum_l", "mul": r"\prod_l", "max": r"\max_l", "min": r"\min_l",
           "logaddexp": r"\operatorname{logsumexp}_l"}
    rows = []
    for s in c.statements:
        if isinstance(s, Let):
            rows.append(rf"{latex(s.symbol)} &= {latex(s.expr)}")
        elif isinstance(s, Reduction):
            op = ops.get(s.monoid.name, rf"\operatorname{{top}}_{{{s.monoid.k}}}" if s.monoid.k else s.monoid.name)
            rows.append(rf"{latex(s.symbol)} &= {op}\, {latex(s.body)}")
        elif isinstance(s, Output):
            rows.append(rf"{latex(s.symbol)} &= {latex(s.expr)}")
    return r"$\begin{aligned}" + r" \\ ".join(rows) + r"\end{aligned}$"
