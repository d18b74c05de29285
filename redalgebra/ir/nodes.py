"""Frozen IR values: the statements of a cascade and the cascade itself.

A cascade is an ordered tuple of statements — inputs (per element of the
reduction axis), params (constant along it), lets (per-element prologue
values), reductions and epilogue outputs — whose mathematics is SymPy.  A
:class:`Cascade` validates itself on construction, so every cascade that
exists is well formed.

Besides the declared names, an expression may use :data:`POS`, the reserved
symbol ``pos``: the element's index along the axis (0, 1, …, L - 1; an
integer, per element).  It is not a statement; it varies along the axis like
an input.  Comparisons and ``where`` are ``Piecewise`` values (see
:func:`~redalgebra.ir.functions.indicator` and
:func:`~redalgebra.ir.functions.where`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Union

import networkx as nx
import sympy as sp
from sympy.core.relational import Relational
from sympy.logic.boolalg import BooleanAtom, BooleanFunction

from ..errors import CascadeError
from . import limits
from .functions import Dot, VSum
from .monoid import Monoid, reducer_name

Size = Union[int, str, None]  # None: scalar; int or a dimension name: a vector
SIGN_FLAGS = {">0": {"positive": True}, ">=0": {"nonnegative": True},
          "<0": {"negative": True}, "<=0": {"nonpositive": True}}


def implied_sign(op: str, c) -> str | None:
    """The sign (a key of ``SIGN_FLAGS``) that ``x op c`` implies, or None: ``> 1`` gives ``>0``, ``>= 0.5`` too,
    ``<= -2`` gives ``<0``, ``> -1`` nothing."""
    c = sp.Number(c)
    if op in (">", ">="):
        return ">0" if c > 0 or (c == 0 and op == ">") else ">=0" if c == 0 else None
    return "<0" if c < 0 or (c == 0 and op == "<") else "<=0" if c == 0 else None


#: The reserved name of an element's index along the axis.
POSITION = "pos"
#: ``pos``: the element's index along the axis, a non-negative integer per element.
POS = sp.Symbol(POSITION, integer=True, nonnegative=True)


def symbol(name: str, sign: str | None = None, integer: bool = False) -> sp.Symbol:
    """The SymPy symbol that stands for ``name`` in a cascade (always real; integer for ``int`` params)."""
    if integer:
        return sp.Symbol(name, integer=True, **SIGN_FLAGS.get(sign, {}))
    return sp.Symbol(name, real=True, **SIGN_FLAGS.get(sign, {}))


@dataclass(frozen=True, slots=True)
class Input:
    """A per-element input: a scalar (``size=None``) or a vector of ``size``; a scalar may declare its sign
    (``input x >= 0``), which the analysis may use and ``check`` draws by (kernels do not check it)."""

    name: str
    size: Size = None
    sign: str | None = None

    def __post_init__(self):
        if self.sign is not None and self.sign not in SIGN_FLAGS:
            raise CascadeError(f"input {self.name}: sign must be one of {sorted(SIGN_FLAGS)}, got {self.sign!r}")
        if self.sign is not None and self.size is not None:
            raise CascadeError(f"input {self.name}: a sign is declared for a scalar input, not a vector")

    @property
    def symbol(self) -> sp.Symbol:
        return symbol(self.name, self.sign)


@dataclass(frozen=True, slots=True)
class Param:
    """A value constant along the axis, with an optional sign (``">0"``, ``">=0"``, ``"<0"``, ``"<=0"``).

    ``integer=True`` (``param label int`` in the text) makes it one integer per row, such as a class
    label or a query's position; integer params are scalars.
    """

    name: str
    size: Size = None
    sign: str | None = None
    integer: bool = False
    #: ``(op, c)`` for a bound other than 0 (``param n > 1``): what ``check`` draws from; the analysis uses the
    #: sign it implies (``sign``: ``n > 1`` is ``> 0``, ``n > -1`` none), which is sound and may be weaker
    bound: tuple | None = None

    def __post_init__(self):
        if self.sign is not None and self.sign not in SIGN_FLAGS:
            raise CascadeError(f"param {self.name}: sign must be one of {sorted(SIGN_FLAGS)}, got {self.sign!r}")
        if self.bound is not None:
            op, c = self.bound
            if op not in (">", ">=", "<", "<=") or not (sp.Number(c).is_finite and c != 0):
                raise CascadeError(f"param {self.name}: a bound is (op, a nonzero number), got {self.bound!r}")
            if self.sign is not None and self.sign != implied_sign(op, c):
                raise CascadeError(f"param {self.name}: the sign {self.sign} is not the one {op} {c} implies")
        if self.integer and self.size is not None:
            raise CascadeError(f"param {self.name}: an integer param is one integer per row, a scalar; "
                               f"got the size [{self.size}] (declare 'param {self.name} int')")

    @property
    def symbol(self) -> sp.Symbol:
        return symbol(self.name, self.sign, self.integer)


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
        return None if expr == POS else sizes[expr.name]
    if expr.is_Number or expr in (sp.oo, -sp.oo) or not expr.args:
        return None
    if isinstance(expr, Relational):
        if any(infer_size(a, sizes) is not None for a in expr.args):
            raise CascadeError(f"a comparison is between two scalars, got a vector in {expr}")
        return None
    if isinstance(expr, sp.Piecewise):
        for _, cond in expr.args:
            infer_size(cond, sizes)
        return _common_size([infer_size(value, sizes) for value, _ in expr.args], expr)
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
    return _common_size(parts, expr)


def _common_size(parts: list, expr: sp.Expr) -> Size:
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
    #: the statements by kind, sorted once (a call reads the views several times: they were filtered at each)
    _kinds: dict = field(default=None, init=False, repr=False, compare=False)
    #: every statement's size, inferred at the first ask (the code generators and every call read it again and again)
    _sizes: dict = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "statements", tuple(self.statements))
        object.__setattr__(self, "_kinds", {kind: tuple(s for s in self.statements if isinstance(s, kind))
                                            for kind in (Input, Param, Let, Reduction, Output)})
        _validate(self)

    # -- views ---------------------------------------------------------
    def _of(self, kind) -> tuple:
        return self._kinds[kind]

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
        if self._sizes is None:
            object.__setattr__(self, "_sizes", self._infer_sizes())
        return dict(self._sizes)  # (a copy: the caller's to change)

    def _infer_sizes(self) -> dict[str, Size]:
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
        """Names whose value varies along the reduction axis: inputs, and lets and outputs built on them
        or on ``pos`` (which is not a statement, so not in the set)."""
        varying: set[str] = set()
        for s in self.statements:
            if isinstance(s, Input) or (isinstance(s, (Let, Output)) and _names(s.expr) & (varying | {POSITION})):
                varying.add(s.name)
        return varying

    def __str__(self) -> str:
        from .printer import to_text
        return to_text(self)

    def _repr_latex_(self) -> str:
        from .printer import to_latex
        return to_latex(self)


def require_cascade(obj, who: str) -> Cascade:
    """``obj`` if it is a :class:`Cascade`, else a :class:`CascadeError` that says what ``who`` takes (not an
    ``AttributeError`` from deep inside it)."""
    if isinstance(obj, Cascade):
        return obj
    hint = ": parse the text first, redalgebra.parse(text)" if isinstance(obj, str) else ""
    raise CascadeError(f"{who}() takes a Cascade (from redalgebra.parse), got {type(obj).__name__}{hint}")


def _names(expr: sp.Expr) -> set[str]:
    return {s.name for s in expr.free_symbols}


def _validate(c: Cascade) -> None:
    names = [s.name for s in c.statements]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise CascadeError(f"{c.name}: names defined more than once: {dupes}; each statement needs its own name")
    if POSITION in names:
        raise CascadeError(f"{c.name}: {POSITION!r} is reserved: it is the element's index along the axis "
                           f"(0, 1, …); pick another name")
    _check_names(c, names)
    table = {s.name: s for s in c.statements}
    graph = nx.DiGraph()
    graph.add_nodes_from(names)
    for s in c.statements:
        e = expr_of(s)
        if e is None:
            continue
        if e.has(sp.zoo, sp.nan, sp.I) or any(p.base.is_number and p.base.is_negative and p.exp.is_number and
                                              not p.exp.is_integer for p in e.atoms(sp.Pow)):
            raise CascadeError(f"{c.name}: {s.name} = {e} is undefined or not real (a division by zero, "
                               f"log(0), inf - inf or the root of a negative constant)")
        if isinstance(e, (Relational, BooleanAtom, BooleanFunction)):
            raise CascadeError(f"{c.name}: {s.name} = {e} is a condition, not a number; use it in "
                               f"where(cond, a, b), or as the 1/0 indicator(cond)")
        _check_sizes(c, s.name, e)
        for sym in e.free_symbols:
            if sym.name == POSITION:
                if sym != POS:
                    raise CascadeError(f"{c.name}: {s.name} uses a symbol 'pos' that is not the reserved position "
                                       f"symbol; build it as redalgebra.ir.POS (a non-negative integer)")
                continue
            if sym.name not in table:
                raise CascadeError(f"{c.name}: {s.name} uses the undefined name {sym.name!r}; defined are {names}")
            if sym != table[sym.name].symbol:
                raise CascadeError(f"{c.name}: {s.name} uses a symbol {sym.name!r} whose assumptions differ "
                                   f"from its declaration; build expressions from the declared symbols")
            if isinstance(table[sym.name], Output) and not isinstance(s, Output):
                raise CascadeError(f"{c.name}: {s.name} reads the output {sym.name}: an out line is a result of the "
                                   f"row, read only by later out lines; write it as `let {sym.name} = …` to use it "
                                   f"in a reduction or a let")
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


def _check_names(c: Cascade, names: list) -> None:
    """The parser's rules for a name, for cascades built without it (``CascadeBuilder``, ``Cascade``): an identifier
    of letters, digits and underscores, not a reserved word, at most ``MAX_NAME_CHARS`` long — what the kernels can
    be generated with."""
    from .lexer import RESERVED  # (the lexer imports this module)

    for name in names:
        if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
            raise CascadeError(f"{c.name}: {name!r} is not a name: a name is a letter or _ followed by letters, digits "
                               f"and _ (as in the text format)")
        if name in RESERVED:
            raise CascadeError(f"{c.name}: {name!r} is a reserved word of the text format (a keyword, function, "
                               f"reducer or constant) and cannot name a value; pick another name")
        if len(name) > limits.MAX_NAME_CHARS:
            raise CascadeError(f"{c.name}: a name of {len(name)} characters, more than {limits.MAX_NAME_CHARS} (the "
                               f"limit MAX_NAME_CHARS)")


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_sizes(c: Cascade, name: str, e: sp.Expr) -> None:
    """The parser's limits on constants and powers (:mod:`.limits`), for cascades built without it."""
    for n in e.atoms(sp.Rational):
        if max(n.p.bit_length(), n.q.bit_length()) > limits.MAX_NUMBER_BITS:
            raise CascadeError(f"{c.name}: {name} holds a constant of more than {limits.MAX_NUMBER_BITS} bits (the "
                               f"limit MAX_NUMBER_BITS)")
    for p in e.atoms(sp.Pow):
        if p.exp.is_Number and p.exp.is_finite and abs(p.exp) > limits.MAX_POWER:
            raise CascadeError(f"{c.name}: {name} raises a value to the power {str(p.exp)[:30]}, larger than "
                               f"{limits.MAX_POWER} in size (the limit MAX_POWER)")


def _validate_roles(c: Cascade) -> None:
    sizes = c.sizes  # raises on mismatched vector sizes
    varying = c.per_element() | {POSITION}
    if c.reductions and not c.inputs:
        raise CascadeError(f"{c.name}: reduction {c.reductions[0].name} has no input to reduce; the inputs give "
                           f"the axis its length (pos alone does not): declare an input")
    for r in c.reductions:
        if r.body.is_Number and r.monoid.name == "add" and r.body.is_finite and r.body != 0:
            continue  # sum(1): a count of the (unmasked) elements, sum(2): twice the count
        if not _names(r.body) & varying:
            raise CascadeError(f"{c.name}: reduction {r.name} = {reducer_name(r.monoid)}({r.body}) uses no "
                               f"per-element input, "
                               f"so it is constant along the axis; reduce an expression of an input (a count of "
                               f"the elements is sum(1))")
        if r.monoid.k is not None and infer_size(r.body, sizes) is not None:
            raise CascadeError(f"{c.name}: topk reduction {r.name} needs a scalar body, got a vector")
