"""A builder for writing cascades in Python (notebooks), the twin of the text format.

>>> from redalgebra.ir.builder import CascadeBuilder
>>> import sympy as sp
>>> b = CascadeBuilder("safe_softmax")
>>> x = b.input("x")
>>> m = b.reduce("m", "max", x)
>>> l = b.reduce("l", "sum", sp.exp(x - m))
>>> c = b.build()
>>> [r.name for r in c.reductions]
['m', 'l']
"""

from __future__ import annotations

import sympy as sp

from ..errors import CascadeError
from .monoid import REDUCERS, Monoid, topk
from .nodes import POS, Cascade, Input, Let, Output, Param, Reduction


class CascadeBuilder:
    """Add statements in order; each method returns the new name's SymPy symbol.

    ``pos`` (the element's index along the axis) is :attr:`pos`; conditionals are built with
    :func:`~redalgebra.ir.functions.where` and :func:`~redalgebra.ir.functions.indicator`.
    """

    pos = POS

    def __init__(self, name: str = "cascade"):
        self.name = name
        self._statements: list = []

    def _add(self, stmt) -> sp.Symbol:
        Cascade((*self._statements, stmt), name=self.name)  # validates the new statement
        self._statements.append(stmt)
        return stmt.symbol

    def input(self, name: str, size=None, sign: str | None = None) -> sp.Symbol:
        return self._add(Input(name, size, sign))

    def param(self, name: str, size=None, sign: str | None = None, integer: bool = False) -> sp.Symbol:
        return self._add(Param(name, size, sign, integer))

    def let(self, name: str, expr) -> sp.Symbol:
        return self._add(Let(name, _expression(name, expr)))

    def reduce(self, name: str, reducer: str | Monoid, body, k: int | None = None) -> sp.Symbol:
        if isinstance(reducer, Monoid):
            monoid = reducer
        elif reducer == "topk":
            monoid = topk(k)
        elif reducer in REDUCERS:
            monoid = REDUCERS[reducer]
        else:
            raise CascadeError(f"unknown reducer {reducer!r}; use one of {[*REDUCERS, 'topk']} or a Monoid")
        return self._add(Reduction(name, monoid, _expression(name, body)))

    def out(self, name: str, expr) -> sp.Symbol:
        return self._add(Output(name, _expression(name, expr)))

    def build(self) -> Cascade:
        return Cascade(tuple(self._statements), name=self.name)


def _expression(name: str, value) -> sp.Expr:
    """A statement's expression: a SymPy expression or a number (text is the parser's: ``parse``)."""
    try:
        return sp.sympify(value, strict=True)
    except sp.SympifyError:
        raise CascadeError(f"{name}: {value!r} is not a SymPy expression or a number; build it from the symbols the "
                           f"builder returns (b.input('x') ...), or write the cascade as text for redalgebra.parse"
                           ) from None
