"""Frozen IR values: the statements of a cascade and the cascade itself.

A cascade is an ordered tuple of statements — inputs (per element of the
reduction axis), params (constant along it), lets (per-element prologue
values), reductions and epilogue outputs — whose mathematics is SymPy.  A
:class:`Cascade` validates itself on construction, so every cascade that
exists is well formed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import networkx as nx
import sympy as sp

from ..errors import CascadeError
from .functions import Dot, VSum
from .monoid import Monoid, reducer_name

Size = Union[int, str, None]  # None: scalar; int or a dimension name: a vector
SIGN_FLAGS = {">0": {"positive": True}, ">=0": {"nonnegative": True},
          "<0": {"negative": True}, "<=0": {"nonpositive": True}}


def symbol(name: str, sign: str | None = None) -> sp.Symbol:
    """The SymPy symbol that stands for ``name`` in a cascade (always real)."""
    return sp.Symbol(name, real=True, **SIGN_FLAGS.get(sign, {}))


@dataclass(frozen=True, slots=True)
class Input:
    """A per-element input: a scalar (``size=None``) or a vector of ``size``."""

    name: str
    size: Size = None

    @property
    def symbol(self) -> sp.Symbol:
        return symbol(self.name)


@dataclass(frozen=True, slots=True)
class Param:
    """A value constant along the axis, with an optional sign (``">0"``, ``">=0"``, ``"<0"``, ``"<=0"``)."""

    name: str
    size: Size = None
    sign: str | None = None

    def __post_init__(self):
        if self.sign is not None and self.sign not in SIGN_FLAGS:
            raise CascadeError(f"param {self.name}: sign must be one of {sorted(SIGN_FLAGS)}, got {self.sign!r}")

    @property
    def symbol(self) -> sp.Symbol:
        return symbol(self.name, self.sign)


@dataclass(frozen=True, slots=True)
class Let:
    """A named value computed from its expression (per element when it uses an input)."""

    name: str
    expr: sp.Expr

    @property
    def symbol(self) -> sp.Symbol:
        return symbol(self.name)


@dataclass(frozen=True, slots=True)
class Reduction:
    """``name = ⊕_l body(e_l, …)`` with the monoid ``monoid``."""

    name: str
    monoid: Monoid
    body: sp.Expr

    @property
    def symbol(self) -> sp.Symbol:
        return symbol(self.name)

    @property
    def expr(self) -> sp.Expr:
        return self.body


@dataclass(frozen=True, slots=True)
class Output:
    """An epilogue value: computed once per row from reduction results and params, or — when it
    uses a per-element value, like softmax's ``exp(x - m) / l`` — once per element after the
    reductions (a per-element output)."""

    name: str
    expr: sp.Expr

    @property
    def symbol(self) -> sp.Symbol:
        return symbol(self.name)


Statement = Union[Input, Param, Let, Reduction, Output]


def expr_of(stmt: Statement) -> sp.Expr | None:
    """The expression a statement computes, ``None`` for inputs and params."""
    return getattr(stmt, "expr", None)


def infer_size(expr: sp.Expr, sizes: dict[str, Size]) -> Size:
    """Size of ``expr`` given the sizes of its names; raises CascadeError on a mismatch."""
    if isinstance(expr, sp.Symbol):
        return sizes[expr.name]
    if expr.is_Number or expr in (sp.oo, -sp.oo) or not expr.args:
        return None
    parts = [infer_size(a, sizes) for a in expr.args]
    if isinstance(expr, Dot):
        if parts[0] is None or parts[0] != parts[1]:
            raise CascadeError(f"dot needs two vectors of the same size, got sizes {parts[0]} and {parts[1]} in {expr}")
        return None
    if isinstance(expr, VSum):
        if parts[0] is None:
            raise CascadeError(f"sum(...) in an out line needs a vector, got the scalar {expr.args[0]}")
        return None
    if isinstance(expr, sp.Pow) and parts[1] is not None:
        raise CascadeError(f"an exponent must be a scalar, got a vector in {expr}")
    vectors = {p for p in parts if p is not None}
    if len(vectors) > 1:
        raise CascadeError(f"vectors of different sizes {sorted(map(str, vectors))} meet in {expr}")
    return vectors.pop() if vectors else None


@dataclass(frozen=True, slots=True)
class Cascade:
    """An ordered, validated sequence of statements.

    Raises
    ------
    CascadeError
        On duplicate or undefined names, cycles, forward references, mismatched
        vector sizes, or a reduction whose body is constant along the axis.
    """

    statements: tuple
    name: str = "cascade"
    source: str | None = field(default=None, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "statements", tuple(self.statements))
        _validate(self)

    # -- views ---------------------------------------------------------
    def _of(self, kind) -> tuple:
        return tuple(s for s in self.statements if isinstance(s, kind))

    @property
    def inputs(self) -> tuple[Input, ...]:
        return self._of(Input)

    @property
    def params(self) -> tuple[Param, ...]:
        return self._of(Param)

    @property
    def lets(self) -> tuple[Let, ...]:
        return self._of(Let)

    @property
    def reductions(self) -> tuple[Reduction, ...]:
        return self._of(Reduction)

    @property
    def outputs(self) -> tuple[Output, ...]:
        return self._of(Output)

    def __getitem__(self, name: str) -> Statement:
        for s in self.statements:
            if s.name == name:
                return s
        raise KeyError(f"{self.name} has no statement named {name!r}; it has {[s.name for s in self.statements]}")

    @property
    def symbols(self) -> dict[str, sp.Symbol]:
        return {s.name: s.symbol for s in self.statements}

    @property
    def sizes(self) -> dict[str, Size]:
        sizes: dict[str, Size] = {}
        for s in self.statements:
            if isinstance(s, (Input, Param)):
                sizes[s.name] = s.size
            elif isinstance(s, Reduction) and s.monoid.k is not None:
                sizes[s.name] = s.monoid.k
            else:
                sizes[s.name] = infer_size(s.expr, sizes)
        return sizes

    def per_element(self) -> set[str]:
        """Names whose value varies along the reduction axis: inputs, and lets and outputs built on them."""
        varying: set[str] = set()
        for s in self.statements:
            if isinstance(s, Input) or (isinstance(s, (Let, Output)) and _names(s.expr) & varying):
                varying.add(s.name)
        return varying

    def __str__(self) -> str:
        from .printer import to_text
        return to_text(self)

    def _repr_latex_(self) -> str:
        from .printer import to_latex
        return to_latex(self)


def _names(expr: sp.Expr) -> set[str]:
    return {s.name for s in expr.free_symbols}


def _validate(c: Cascade) -> None:
    names = [s.name for s in c.statements]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise CascadeError(f"{c.name}: names defined more than once: {dupes}; each statement needs its own name")
    table = {s.name: s for s in c.statements}
    graph = nx.DiGraph()
    graph.add_nodes_from(names)
    for s in c.statements:
        e = expr_of(s)
        if e is None:
            continue
        if e.has(sp.zoo, sp.nan, sp.I, sp.oo, -sp.oo):
            raise CascadeError(f"{c.name}: {s.name} = {e} is undefined or not real (a division by zero, "
                               f"log(0) or the root of a negative constant)")
        for sym in e.free_symbols:
            if sym.name not in table:
                raise CascadeError(f"{c.name}: {s.name} uses the undefined name {sym.name!r}; defined are {names}")
            if sym != table[sym.name].symbol:
                raise CascadeError(f"{c.name}: {s.name} uses a symbol {sym.name!r} whose assumptions differ "
                                   f"from its declaration; build expressions from the declared symbols")
            graph.add_edge(sym.name, s.name)
    try:
        cycle = nx.find_cycle(graph)
        raise CascadeError(f"{c.name}: cyclic dependency " + " -> ".join([u for u, _ in cycle] + [cycle[0][0]]))
    except nx.NetworkXNoCycle:
        pass
    position = {n: i for i, n in enumerate(names)}
    for u, v in graph.edges:
        if position[u] > position[v]:
            raise CascadeError(f"{c.name}: {v} uses {u} before it is defined; move {u} above {v}")
    _validate_roles(c)


def _validate_roles(c: Cascade) -> None:
    sizes = c.sizes  # raises on mismatched vector sizes
    varying = c.per_element()
    for r in c.reductions:
        if not _names(r.body) & varying:
            raise CascadeError(f"{c.name}: reduction {r.name} = {reducer_name(r.monoid)}({r.body}) uses no "
                               f"per-element input, "
                               f"so it is constant along the axis; reduce an expression of an input")
        if r.monoid.k is not None and infer_size(r.body, sizes) is not None:
            raise CascadeError(f"{c.name}: topk reduction {r.name} needs a scalar body, got a vector")
