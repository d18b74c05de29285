"""Straight-line programs: the derived formulas as ordered assignments.

A :class:`Program` is a tuple of ``(symbol, expression)`` steps; common
subexpressions (a correction factor, ``exp(x - m)``) are computed once, as
temporaries placed just before their first use.  The evaluators run programs
with NumPy and the code generator prints them, so both see the same formulas.

Top-k merges are the one step that is not a scalar expression: a
:class:`TopKMerge` keeps the ``k`` largest of two candidate lists, carrying
each value's index along.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from ..ir.printer import latex


class TopKMerge(sp.Function):
    """``topk(k; left, right)``: the k largest of two descending lists, indices riding along.

    Arguments: ``k``, the left values, the right values, and the symbols that
    name the left and right index arrays.
    """

    nargs = 5

    def _sympystr(self, printer):
        k, left, right = self.args[:3]
        return f"top{k}({printer._print(left)} ∪ {printer._print(right)})"

    def _latex(self, printer):
        k, left, right = self.args[:3]
        return rf"\operatorname{{top}}_{{{k}}}\left({printer._print(left)} \cup {printer._print(right)}\right)"


@dataclass(frozen=True)
class Program:
    """Ordered assignments; ``results`` names the symbols the program defines for its caller."""

    steps: tuple
    results: tuple

    def __post_init__(self):  # (every program the kernels print: exp(a) taken out of the logs, exp_out_of_logs)
        object.__setattr__(self, "steps", tuple((s, exp_out_of_logs(e)) for s, e in self.steps))

    def __str__(self) -> str:
        return "\n".join(f"{sym} = {sp.sstr(expr)}" for sym, expr in self.steps)

    def latex(self) -> str:
        rows = [rf"{latex(sym)} &\leftarrow {latex(expr)}" for sym, expr in self.steps]
        return r"\begin{aligned}" + r" \\ ".join(rows) + r"\end{aligned}"


def exp_out_of_logs(expr: sp.Expr) -> sp.Expr:
    """``log(exp(a)·r)`` as ``a + log(r)`` throughout ``expr``: in float32, ``exp(a)`` underflows below -103 (overflows
    past 88) where the log is finite — a log-softmax ``log(exp(x - m)/l)`` was -inf at an element 103 below the row's
    max, and an entropy's ``p·log(p)`` NaN. Equal in the reals, and in floats wherever the product form is finite, and
    at its edges too: ``r <= 0`` gives NaN or -inf either way, ``a = ±inf`` ±inf or NaN as ``exp(a)·r`` does. Every
    :class:`Program` is written so, and :func:`build` writes its assignments so before their shared subexpressions are
    hoisted (a hoisted ``exp(x - m)`` hides the product); the bodies a ``FusedCascade`` keeps for the passes are too."""
    if not expr.has(sp.log):
        return expr

    def split(lg):
        factors = sp.Mul.make_args(lg.args[0])
        exps = [f.args[0] for f in factors if isinstance(f, sp.exp)]
        if not exps or len(exps) == len(factors):
            return lg
        return sp.Add(*exps) + sp.log(sp.Mul(*[f for f in factors if not isinstance(f, sp.exp)]))
    return expr.replace(lambda e: isinstance(e, sp.log), split)


def build(assignments: list[tuple[sp.Symbol, sp.Expr]], prefix: str = "c", vectors: frozenset = frozenset()) -> Program:
    """A program from assignments in dependency order, with shared subexpressions hoisted.

    Temporaries come from ``sympy.cse`` over all right-hand sides and are
    emitted on demand, just before the first assignment that needs them. A temporary whose value is a vector (a
    symbol of ``vectors`` outside a ``dot`` or ``vsum``: ``k / (3x + 1)`` of a vector state's update) is put back
    where it is used: the kernels print vectors a component at a time, and a temporary is one scalar.
    """
    symbols = [s for s, _ in assignments]
    temps, reduced = sp.cse([exp_out_of_logs(e) for _, e in assignments], symbols=sp.numbered_symbols(prefix, real=True),
                            ignore=[], optimizations=None)
    temps, reduced = _inline_trivial(temps, reduced)
    if vectors:
        temps, reduced = _inline_where(temps, reduced, lambda e: _vector_valued(e, vectors))
    temp_expr = dict(temps)
    emitted: set = set()
    steps = []

    def need(expr):
        for sym in sorted(expr.free_symbols & set(temp_expr) - emitted, key=sp.default_sort_key):
            need(temp_expr[sym])
            emitted.add(sym)
            steps.append((sym, temp_expr[sym]))

    for sym, expr in zip(symbols, reduced):
        need(expr)
        steps.append((sym, expr))
    names = iter(sp.numbered_symbols(prefix, real=True))
    rename = {t: next(names) for t, _ in steps if t in temp_expr}  # number temporaries in order of use
    return Program(tuple((rename.get(s, s), e.xreplace(rename)) for s, e in steps), tuple(symbols))


def _vector_valued(expr: sp.Expr, vectors: frozenset) -> bool:
    """Whether ``expr`` reads a symbol of ``vectors`` outside the reductions of a vector to a scalar."""
    from ..ir.functions import Dot, VSum

    scalar = expr.replace(lambda e: isinstance(e, (Dot, VSum)), lambda e: sp.Integer(1))
    return bool(scalar.free_symbols & vectors)


def _inline_where(temps, reduced, put_back):
    """Temporaries for which ``put_back(value)`` holds (a temporary's value may use an earlier one: its own value
    with those put back is what is tested) substituted into the later temporaries and the results."""
    kept, back = [], {}
    for t, e in temps:
        e = e.xreplace(back)
        if put_back(e):
            back[t] = e
        else:
            kept.append((t, e))
    return kept, [r.xreplace(back) for r in reduced]


def _inline_trivial(temps, reduced):
    """Put back temporaries too small to be worth a name (``c0 = -m``)."""
    temps, reduced = list(temps), list(reduced)
    while True:
        trivial = {t: e for t, e in temps if not isinstance(e, sp.core.relational.Relational)
                   and not isinstance(e, sp.logic.boolalg.Boolean) and sp.count_ops(e) <= 1}
        if not trivial:
            return temps, reduced
        for _ in range(len(trivial)):  # a trivial value may use another trivial temporary (c1 = c0*s)
            resolved = {t: e.xreplace(trivial) for t, e in trivial.items()}
            if resolved == trivial:
                break
            trivial = resolved
        temps = [(t, e.xreplace(trivial)) for t, e in temps if t not in trivial]
        reduced = [e.xreplace(trivial) for e in reduced]
