"""Monoids as frozen values: the reducers a cascade can use.

A :class:`Monoid` is a commutative-monoid *candidate* ``(S, ⊕, 0)``: the binary
operation as a SymPy ``Lambda``, its identity, and optionally an inverse.  This
module only describes monoids; whether the laws hold is the business of
:mod:`redalgebra.algebra`, which proves them.

The reducers of the text format map to monoids here (``sum → add``,
``prod → mul``, ``logsumexp → logaddexp``, ``topk(k) → topk(k)``), so that the
IR is self-contained.
"""

from __future__ import annotations

import functools
import numbers

from dataclasses import dataclass, field

import sympy as sp

from ..errors import MonoidError
from .limits import MAX_TOPK

_A, _B = sp.symbols("a b", real=True)


@dataclass(frozen=True, slots=True)
class Monoid:
    """A commutative monoid candidate ``(S, op, identity)``.

    Parameters
    ----------
    name : str
        Catalogue name (``"add"``, ``"max"``, ``"topk8"``, or a user name).
    op : sympy.Lambda or None
        The binary operation on scalars.  ``None`` for tuple-state monoids
        (top-k), whose combination is :meth:`combine_state`.
    identity : sympy.Expr
        The neutral element (``-oo`` for ``max``; extended reals are allowed).
    inverse : sympy.Lambda or None
        Unary inverse, when the monoid is a group on the values that occur
        (``-a`` for ``add``, ``1/a`` for ``mul``).
    k : int or None
        Number of kept values for top-k; ``None`` otherwise.
    special : tuple of sympy.Expr
        Extended values the carrier admits besides the reals (``±oo`` for
        ``max``); property tests draw from these.
    """

    name: str
    op: sp.Lambda | None
    identity: sp.Expr
    inverse: sp.Lambda | None = None
    k: int | None = None
    special: tuple = field(default=())

    def __post_init__(self):
        if self.op is None and self.k is None:
            raise MonoidError(f"monoid {self.name!r} needs a binary op (a SymPy Lambda of two variables)")
        if self.op is not None and len(self.op.variables) != 2:
            raise MonoidError(
                f"monoid {self.name!r}: the op must be a Lambda of two variables, "
                f"got one of {len(self.op.variables)}: {self.op}")
        if self.inverse is not None and len(self.inverse.variables) != 1:
            raise MonoidError(f"monoid {self.name!r}: the inverse must be a Lambda of one variable")
        if self.k is not None and self.k < 1:
            raise MonoidError(f"topk needs k >= 1, got k={self.k}")

    @property
    def is_tuple_state(self) -> bool:
        """True when the state is a tuple (top-k values with their indices)."""
        return self.op is None

    def combine(self, a, b) -> sp.Expr:
        """``a ⊕ b`` as a SymPy expression (scalar monoids only)."""
        if self.op is None:
            raise MonoidError(f"{self.name} has tuple state; use combine_state")
        return _apply(self.op, a, b)

    def combine_state(self, a: list, b: list) -> list:
        r"""Top-k merge of two descending value lists, as max/min expressions.

        The :math:`j`-th largest of :math:`A \cup B` for sorted :math:`A, B` is
        :math:`\max_{i=0}^{j} \min(a_i, b_{j-i})` with :math:`a_0 = b_0 = +\infty`.
        """
        if self.op is not None:
            return [self.op(a[0], b[0])]
        pa, pb = [sp.oo, *a], [sp.oo, *b]
        return [sp.Max(*[sp.Min(pa[i], pb[j - i]) for i in range(j + 1)]) for j in range(1, self.k + 1)]

    def __str__(self) -> str:
        return self.name

    def _repr_latex_(self) -> str:
        if self.op is None:
            return rf"$\mathrm{{top}}_{{{self.k}}}$ (tuple state: values and indices)"
        a, b = self.op.variables
        from .printer import latex  # the printer imports this module

        return rf"$a \oplus b = {latex(self.op(*self.op.variables))},\ 0 = {latex(self.identity)}$"


def _lam(expr) -> sp.Lambda:
    return sp.Lambda((_A, _B), expr)


ADD = Monoid("add", _lam(_A + _B), sp.Integer(0), sp.Lambda(_A, -_A), special=())
MUL = Monoid("mul", _lam(_A * _B), sp.Integer(1), sp.Lambda(_A, 1 / _A), special=())
MAX = Monoid("max", _lam(sp.Max(_A, _B)), sp.S.NegativeInfinity, special=(sp.oo, -sp.oo))
MIN = Monoid("min", _lam(sp.Min(_A, _B)), sp.S.Infinity, special=(sp.oo, -sp.oo))
LOGADDEXP = Monoid("logaddexp", _lam(sp.log(sp.exp(_A) + sp.exp(_B))), sp.S.NegativeInfinity,
                   special=(-sp.oo,))


def topk(k: int) -> Monoid:
    """The top-k monoid: state is the k largest values (descending) with their indices."""
    if not isinstance(k, numbers.Integral) or isinstance(k, bool):  # (NumPy's integers too)
        raise MonoidError(f"topk needs an integer k, got {k!r}")
    k = int(k)
    if not 1 <= k <= MAX_TOPK:
        raise MonoidError(f"topk needs 1 <= k <= {MAX_TOPK} (the limit MAX_TOPK), got k={k}")
    return Monoid(f"top{k}", None, sp.S.NegativeInfinity, k=k, special=(-sp.oo,))


def topk_named(key: str) -> Monoid | None:
    """The top-k monoid a name spells (``"top8"``, ``"topk8"``, ``"topk(8)"``; spaces and case as given are the
    caller's to fold), or None where it spells none; a k past :data:`MAX_TOPK` is a named error."""
    for prefix, close in (("topk(", ")"), ("topk", ""), ("top", "")):
        digits = key.removeprefix(prefix).removesuffix(close) if key.endswith(close) else ""
        if key.startswith(prefix) and digits.isascii() and digits.isdigit():
            if len(digits) > len(str(MAX_TOPK)) or not 0 < int(digits) <= MAX_TOPK:
                raise MonoidError(f"k of topk(K) is a positive integer of at most {MAX_TOPK} (the limit MAX_TOPK); "
                                  f"got {digits if len(digits) <= 20 else f'{digits[:10]}… ({len(digits)} digits)'}")
            return topk(int(digits))
    return None


#: The reducer names of the text format and the monoid each one folds with.
REDUCERS = {"sum": ADD, "prod": MUL, "max": MAX, "min": MIN, "logsumexp": LOGADDEXP}


def as_monoid(m, who: str) -> Monoid:
    """``m`` if it is a :class:`Monoid`; a monoid's or a reducer's name (``"add"``, ``"sum"``, ``"logsumexp"``) as
    that monoid; else a :class:`MonoidError` saying what ``who`` takes."""
    if isinstance(m, Monoid):
        return m
    named = {**{mm.name: mm for mm in REDUCERS.values()}, **REDUCERS}
    if isinstance(m, str) and m in named:
        return named[m]
    found = topk_named(m.strip().lower().replace(" ", "")) if isinstance(m, str) else None
    if found is not None:
        return found
    names, got = (f" or one of the names {', '.join(sorted(named))}, topk(K)", repr(m)) if isinstance(m, str) else \
        ("", type(m).__name__)
    raise MonoidError(f"{who}() takes a Monoid (redalgebra.monoids.add, .max, .topk(k), .user(...)){names}; got {got}")


def reducer_name(m: Monoid) -> str:
    """The text-format reducer of a monoid (``add → sum``), or the monoid's own name."""
    if m.k is not None:
        return "topk"
    return next((r for r, mm in REDUCERS.items() if mm == m), m.name)


@functools.lru_cache(maxsize=4096)
def _apply(op: sp.Lambda, a, b) -> sp.Expr:
    """``op(a, b)``, remembered: the code generators fold the same bodies again for every launch shape, and SymPy
    evaluates a ``Max`` of symbolic arguments by comparing them (``Max(__fold, x)`` took a sixth of the simulator tests'
    time). SymPy's expressions are immutable, so a remembered result is the result."""
    return op(a, b)
