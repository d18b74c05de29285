"""What every statement-tree kernel builder starts from (``rows``, ``vrows``, ``columns``, ``mma``)."""

from __future__ import annotations

import itertools

import sympy as sp

from ...derive import FusedCascade
from ...errors import RedalgebraError
from ..emit import Layout, Spec
from ..printer import Constants, invariants, print_expr
from ..tree import Assign


class TreeKernel:
    """The derived cascade, its :class:`Spec` and :class:`Layout`, one table of float32 constants and temporaries
    (``shared``: another kernel's ``(constants, counter)``, for a second kernel of the same module), and ``size``:
    the concrete length of every vector (input, param, vector state) by name. ``refusal(fused)`` (a strategy's
    reason not to build the cascade, or None) is checked first."""

    def __init__(self, fused: FusedCascade, spec: Spec, refusal=None, shared: tuple | None = None):
        reason = refusal(fused) if refusal is not None else None
        if reason is not None:
            raise RedalgebraError(reason)
        self.f, self.spec, self.c = fused, spec, fused.cascade
        self.lay = Layout.of(fused, spec)
        self.consts, self.counter = shared or (Constants(), itertools.count())
        c = self.c
        vectors = [(x.name, x.size) for x in (*c.inputs, *c.params) if x.size is not None]
        vectors += [(r.name, c.sizes[r.name]) for r in c.reductions if c.sizes[r.name] is not None and r.monoid.k is None]
        self.size = {name: self.lay.constants[self.lay.size_const(size)] for name, size in vectors}

    def print(self, expr, acc, j: str | None = None):
        """``(statements, text)`` of ``expr`` read through ``acc`` (``j``: the vector component)."""
        return print_expr(expr, acc, self.consts, j, self.counter, tree=True)

    def hoist(self, exprs, fixed, acc, prefix: str) -> tuple[list, dict]:
        """The invariants of ``exprs`` (:func:`~..printer.invariants`, names for which ``fixed(names)`` holds; a divisor
        kept a divisor, so that each element is still divided by it, as written) computed once into registers
        ``<prefix><n>``, printed through ``acc``: ``(statements, {expr: register})``, the map for ``Access.named``."""
        out, named = [], {}
        for e, n in invariants(exprs, fixed, divisors=True).items():
            pre, text = self.print(e, acc)
            named[e] = f"{prefix}{n}"
            out += pre + [Assign(named[e], text)]
        return out, named


def named_nodes(exprs, kinds: tuple, prefix: str) -> dict:
    """Every distinct node of the types ``kinds`` in ``exprs`` (dot products, component sums), in order of appearance,
    mapped to a symbol ``{prefix}{n}`` that a kernel reads in its place (a value computed apart: by lane sums, by
    the tensor cores)."""
    found = {}
    for e in exprs:
        for node in sp.preorder_traversal(e):
            if isinstance(node, kinds) and node not in found:
                found[node] = sp.Symbol(f"{prefix}{len(found)}", real=True)
    return found
