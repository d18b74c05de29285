"""Print a cascade back to the text format, and to LaTeX.

``parse(to_text(c)) == c`` for every cascade: the text printer is the inverse
of the parser (tested as a property).
"""

from __future__ import annotations

import sympy as sp
from sympy.printing.str import StrPrinter

from .monoid import reducer_name
from .nodes import Cascade, Input, Let, Output, Param, Reduction


class CascadePrinter(StrPrinter):
    """SymPy's str printer with the function names of the cascade format."""

    def _print_Abs(self, expr):
        return f"abs({self._print(expr.args[0])})"

    def _print_Exp1(self, expr):
        return "exp(1)"

    def _print_Max(self, expr):
        return "max(" + ", ".join(self._print(a) for a in expr.args) + ")"

    def _print_Min(self, expr):
        return "min(" + ", ".join(self._print(a) for a in expr.args) + ")"


def _size(size) -> str:
    return "" if size is None else f"[{size}]"


def reducer_text(r: Reduction, p: CascadePrinter | None = None) -> str:
    """The right-hand side of a reduce statement, e.g. ``topk(8, exp(g - m)/s)``."""
    p = p or CascadePrinter()
    if r.monoid.k is not None:
        return f"topk({r.monoid.k}, {p.doprint(r.body)})"
    return f"{reducer_name(r.monoid)}({p.doprint(r.body)})"


def statement_text(s, p: CascadePrinter | None = None) -> str:
    """One statement in the text format."""
    p = p or CascadePrinter()
    if isinstance(s, Input):
        return f"input {s.name}{_size(s.size)}"
    if isinstance(s, Param):
        sign = "" if s.sign is None else f" {s.sign[:-1]} 0"
        return f"param {s.name}{_size(s.size)}{sign}"
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
            rows.append(rf"{sp.latex(s.symbol)} &= {sp.latex(s.expr)}")
        elif isinstance(s, Reduction):
            op = ops.get(s.monoid.name, rf"\operatorname{{top}}_{{{s.monoid.k}}}" if s.monoid.k else s.monoid.name)
            rows.append(rf"{sp.latex(s.symbol)} &= {op}\, {sp.latex(s.body)}")
        elif isinstance(s, Output):
            rows.append(rf"{sp.latex(s.symbol)} &= {sp.latex(s.expr)}")
    return r"$\begin{aligned}" + r" \\ ".join(rows) + r"\end{aligned}$"
