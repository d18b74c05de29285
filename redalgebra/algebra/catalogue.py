"""The monoid catalogue: ``add, mul, max, min, logaddexp, topk(k)`` and user monoids.

>>> from redalgebra.algebra import monoids
>>> monoids.max.identity
-oo
>>> monoids.topk(8).k
8
"""

from __future__ import annotations

from types import SimpleNamespace

import sympy as sp

from ..errors import MonoidError
from ..ir.monoid import ADD, LOGADDEXP, MAX, MIN, MUL, Monoid, topk, topk_named

_A, _B = sp.symbols("a b", real=True)


def user_monoid(name: str, op: sp.Lambda, identity, inverse: sp.Lambda | None = None) -> Monoid:
    """A monoid from a SymPy ``Lambda`` of two variables and its identity.

    The laws are not assumed: call :func:`~redalgebra.algebra.prove_monoid` on it.

    >>> import sympy as sp
    >>> x, y = sp.symbols("x y")
    >>> m = user_monoid("hypot", sp.Lambda((x, y), sp.sqrt(x**2 + y**2)), 0)
    >>> m.combine(3, 4)
    5
    """
    if not isinstance(op, sp.Lambda):
        raise MonoidError(f"the op of monoid {name!r} must be a sympy.Lambda of two variables, got {type(op).__name__}")
    if len(op.variables) != 2:
        raise MonoidError(f"the op of monoid {name!r} must take two variables, got {op.variables}")
    try:
        identity = sp.sympify(identity, strict=True)
    except sp.SympifyError as err:
        raise MonoidError(f"identity of monoid {name!r} must be a number or SymPy expression: {err}") from None
    if identity.has(sp.nan, sp.zoo) or identity.free_symbols or identity.is_extended_real is False:
        raise MonoidError(f"identity of monoid {name!r} must be a real number, inf or -inf, got {identity}")
    real_op = sp.Lambda((_A, _B), op(_A, _B))
    if inverse is not None and (not isinstance(inverse, sp.Lambda) or len(inverse.variables) != 1):
        raise MonoidError(f"the inverse of monoid {name!r} must be a sympy.Lambda of one variable")
    if inverse is not None:
        inverse = sp.Lambda(_A, inverse(_A))
    special = tuple(v for v in (sp.oo, -sp.oo) if identity == v)
    return Monoid(name, real_op, identity, inverse, special=special)


monoids = SimpleNamespace(add=ADD, mul=MUL, max=MAX, min=MIN, logaddexp=LOGADDEXP, topk=topk, user=user_monoid)
BY_NAME = {"add": ADD, "sum": ADD, "mul": MUL, "prod": MUL, "max": MAX, "min": MIN,
           "logaddexp": LOGADDEXP, "logsumexp": LOGADDEXP}


def lookup(name: str) -> Monoid:
    """A catalogue monoid by name (``"max"``, ``"sum"``, ``"top8"``/``"topk8"``/``"topk(8)"``)."""
    key = name.strip().lower().replace(" ", "")
    if key in BY_NAME:
        return BY_NAME[key]
    found = topk_named(key)
    if found is not None:
        return found
    raise MonoidError(f"unknown monoid {name!r}; known: {', '.join(sorted(BY_NAME))}, topk(K)")
