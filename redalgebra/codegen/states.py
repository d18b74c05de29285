"""The kinds of reduction state, each a class that owns its statements.

A reduction's state is a scalar (``max``, ``sum``), a vector (``Σ p·v``: one value per component)
or a top-k list (values with their indices). Each kind says how its state is declared, set to the
identity, copied, exchanged with another lane (a shuffle), parked in and read back from shared
memory, folded with one element, and how the derived programs read and write it — so a strategy
never asks which kind it holds, and a new reducer (argmax with a payload) is one class here.

Names in generated code: state ``{prefix}_{r}`` (``s`` running, ``o`` the other side of a merge),
top-k indices ``{prefix}i_{r}``.
"""

from __future__ import annotations

import sympy as sp

from ..derive import FusedCascade
from ..derive.program import Program, TopKMerge
from ..errors import RedalgebraError
from .printer import Access, Constants, print_expr
from .tree import Assign, Call, For, If, Local, Shared, Shuffle


def identity_text(fused: FusedCascade, name: str, consts: Constants) -> str:
    value = fused.identity[name]
    return "NEG_INF" if value == -sp.oo else "POS_INF" if value == sp.oo else consts.name(float(value))


class ScalarState:
    """One float32 in a register."""

    def __init__(self, name: str, identity: str):
        self.name, self.identity = name, identity

    def var(self, prefix: str) -> str:
        return f"{prefix}_{self.name}"

    def declare(self, prefix: str) -> list:
        return []

    def init(self, prefix: str) -> list:
        return [Assign(self.var(prefix), self.identity)]

    def copy(self, src: str, dst: str) -> list:
        return [Assign(self.var(dst), self.var(src))]

    def shuffle(self, src: str, dst: str, offset: str) -> list:
        return [Shuffle(self.var(dst), self.var(src), offset)]

    def shared(self, box: str, count: str) -> list:
        return [Shared(f"{box}_{self.name}", (count,))]

    def park(self, prefix: str, box: str, slot: str) -> list:
        return [Assign(f"{box}_{self.name}[{slot}]", self.var(prefix))]

    def fetch(self, box: str, slot: str, dst: str) -> list:
        return [Assign(self.var(dst), f"{box}_{self.name}[{slot}]")]

    def bind(self, acc: Access, key: str, prefix: str) -> None:
        acc.scalar[key] = self.var(prefix)

    def fold(self, prefix: str, monoid, body: sp.Expr, acc: Access, consts: Constants, counter, element: str) -> list:
        """``state ← state ⊕ body`` for one element."""
        fold = sp.Symbol("__fold", extended_real=True)
        acc.scalar[fold.name] = self.var(prefix)
        pre, text = print_expr(monoid.combine(fold, body), acc, consts, None, counter, tree=True)
        return pre + [Assign(self.var(prefix), text)]


class VectorState(ScalarState):
    """``size`` float32 components in a per-thread array (registers: it is indexed by constants only)."""

    def __init__(self, name: str, identity: str, size: str):
        super().__init__(name, identity)
        self.size = size

    def _each(self, *stmts) -> list:
        return [For("j", "0", self.size, tuple(stmts))]

    def declare(self, prefix: str) -> list:
        return [Local(self.var(prefix), self.size)]

    def init(self, prefix: str) -> list:
        return self._each(Assign(f"{self.var(prefix)}[j]", self.identity))

    def copy(self, src: str, dst: str) -> list:
        return self._each(Assign(f"{self.var(dst)}[j]", f"{self.var(src)}[j]"))

    def shuffle(self, src: str, dst: str, offset: str) -> list:
        return self._each(Shuffle(f"{self.var(dst)}[j]", f"{self.var(src)}[j]", offset))

    def shared(self, box: str, count: str) -> list:
        return [Shared(f"{box}_{self.name}", (count, self.size))]

    def park(self, prefix: str, box: str, slot: str) -> list:
        return self._each(Assign(f"{box}_{self.name}[{slot}, j]", f"{self.var(prefix)}[j]"))

    def fetch(self, box: str, slot: str, dst: str) -> list:
        return self._each(Assign(f"{self.var(dst)}[j]", f"{box}_{self.name}[{slot}, j]"))

    def bind(self, acc: Access, key: str, prefix: str) -> None:
        acc.vector[key], acc.size[key] = f"{self.var(prefix)}[{{j}}]", self.size

    def fold(self, prefix, monoid, body, acc, consts, counter, element) -> list:
        fold = sp.Symbol("__fold", extended_real=True)
        acc.vector[fold.name], acc.size[fold.name] = f"{self.var(prefix)}[{{j}}]", self.size
        return self.assign(prefix, monoid.combine(fold, body), acc, consts, counter)

    def assign(self, prefix: str, expr: sp.Expr, acc: Access, consts: Constants, counter) -> list:
        """Every component of ``prefix_r`` set to ``expr`` at that component."""
        pre, text = print_expr(expr, acc, consts, "j", counter, tree=True)
        return pre + self._each(Assign(f"{self.var(prefix)}[j]", text))


class ComponentState(VectorState):
    """``count`` components of a vector, each a named scalar (``s_o_3``): the share of a vector one lane holds
    when a group of lanes splits it (``vrows``). Every statement is unrolled, each component printed at its
    own index, so nothing is a per-thread array (no local memory, whatever the compiler unrolls)."""

    def __init__(self, name: str, identity: str, count: int):
        super().__init__(name, identity, str(count))
        self.count = count

    def comp(self, prefix: str, c) -> str:
        return f"{prefix}_{self.name}_{c}"

    def _each(self, make) -> list:
        return [s for c in range(self.count) for s in make(c)]

    def declare(self, prefix: str) -> list:
        return []

    def init(self, prefix: str) -> list:
        return self._each(lambda c: [Assign(self.comp(prefix, c), self.identity)])

    def copy(self, src: str, dst: str) -> list:
        return self._each(lambda c: [Assign(self.comp(dst, c), self.comp(src, c))])

    def shuffle(self, src: str, dst: str, offset: str) -> list:
        return self._each(lambda c: [Shuffle(self.comp(dst, c), self.comp(src, c), offset)])

    def shared(self, box: str, count: str) -> list:
        return [Shared(f"{box}_{self.name}", (count, str(self.count)))]

    def park(self, prefix: str, box: str, slot: str) -> list:
        return self._each(lambda c: [Assign(f"{box}_{self.name}[{slot}, {c}]", self.comp(prefix, c))])

    def fetch(self, box: str, slot: str, dst: str) -> list:
        return self._each(lambda c: [Assign(self.comp(dst, c), f"{box}_{self.name}[{slot}, {c}]")])

    def bind(self, acc: Access, key: str, prefix: str) -> None:
        acc.vector[key], acc.size[key] = self.comp(prefix, "{j}"), self.size

    def fold(self, prefix, monoid, body, acc, consts, counter, element) -> list:
        fold = sp.Symbol("__fold", extended_real=True)
        acc.vector[fold.name], acc.size[fold.name] = self.comp(prefix, "{j}"), self.size
        return self.assign(prefix, monoid.combine(fold, body), acc, consts, counter)

    def assign(self, prefix, expr, acc, consts, counter) -> list:
        def one(c):
            pre, text = print_expr(expr, acc, consts, str(c), counter, tree=True)
            return pre + [Assign(self.comp(prefix, c), text)]
        return self._each(one)


class TopKState(VectorState):
    """The ``k`` largest values, descending, with their element indices (-1: empty)."""

    def index(self, prefix: str) -> str:
        return f"{prefix}i_{self.name}"

    def declare(self, prefix: str) -> list:
        return [Local(self.var(prefix), self.size), Local(self.index(prefix), self.size, "int32")]

    def init(self, prefix: str) -> list:
        return self._each(Assign(f"{self.var(prefix)}[j]", "NEG_INF"), Assign(f"{self.index(prefix)}[j]", "-1"))

    def copy(self, src: str, dst: str) -> list:
        return self._each(Assign(f"{self.var(dst)}[j]", f"{self.var(src)}[j]"),
                          Assign(f"{self.index(dst)}[j]", f"{self.index(src)}[j]"))

    def shuffle(self, src: str, dst: str, offset: str) -> list:
        return self._each(Shuffle(f"{self.var(dst)}[j]", f"{self.var(src)}[j]", offset),
                          Shuffle(f"{self.index(dst)}[j]", f"{self.index(src)}[j]", offset, "int32"))

    def shared(self, box: str, count: str) -> list:
        return [Shared(f"{box}_{self.name}", (count, self.size)), Shared(f"{box}i_{self.name}", (count, self.size), "int32")]

    def park(self, prefix: str, box: str, slot: str) -> list:
        return self._each(Assign(f"{box}_{self.name}[{slot}, j]", f"{self.var(prefix)}[j]"),
                          Assign(f"{box}i_{self.name}[{slot}, j]", f"{self.index(prefix)}[j]"))

    def fetch(self, box: str, slot: str, dst: str) -> list:
        return self._each(Assign(f"{self.var(dst)}[j]", f"{box}_{self.name}[{slot}, j]"),
                          Assign(f"{self.index(dst)}[j]", f"{box}i_{self.name}[{slot}, j]"))

    def fold(self, prefix, monoid, body, acc, consts, counter, element) -> list:
        pre, text = print_expr(body, acc, consts, None, counter, tree=True)
        return pre + [Call("rt_topk_insert", (self.var(prefix), self.index(prefix), text, element))]

    def merge_step(self, expr: TopKMerge, acc: Access, consts: Constants, counter) -> list:
        """``s ← top-k(left ∪ right)``: both sides written out (corrected; an empty slot stays -inf, which a
        correction of 0 or NaN would not keep), then merged in registers."""
        k, left, right = expr.args[:3]
        out = []
        for side, vals in (("s", left), ("o", right)):
            pre, text = print_expr(vals, acc, consts, "j", counter, tree=True)
            v, i = f"{side}_{self.name}[j]", f"{side}i_{self.name}[j]"
            out += pre + self._each(Assign(v, f"(NEG_INF if {i} < 0 else {text})"),
                                    If(f"{v} == NEG_INF", (Assign(i, "-1"),)))
        return out + [Call("rt_topk_merge", (self.var("s"), self.index("s"), self.var("o"), self.index("o")))]


def states_of(fused: FusedCascade, consts: Constants, size_const) -> dict:
    """One state object per reduction, in the cascade's order; ``size_const`` names a vector size."""
    out = {}
    sizes = fused.cascade.sizes
    for r in fused.cascade.reductions:
        ident = identity_text(fused, r.name, consts)
        if r.monoid.k is not None:
            out[r.name] = TopKState(r.name, ident, size_const(r.monoid.k))
        elif sizes[r.name] is not None:
            out[r.name] = VectorState(r.name, ident, size_const(sizes[r.name]))
        else:
            out[r.name] = ScalarState(r.name, ident)
    return out


def merge_stmts(program: Program, acc: Access, consts: Constants, states: dict, counter) -> list:
    """The derived merge ``s ← merge(s, o)`` as statements (``acc`` binds ``r_a`` to ``s``, ``r_b`` to ``o``)."""
    out, fresh = [], []
    results = {sym.name for sym in program.results}
    for sym, expr in program.steps:
        name = sym.name
        if isinstance(expr, TopKMerge):
            out += states[name[:-2]].merge_step(expr, acc, consts, counter)
            continue
        red = name[:-2] if name in results else None
        state = states.get(red)
        if isinstance(state, VectorState):  # updated in place: later steps read the new components
            out += state.assign("s", expr, acc, consts, counter)
            state.bind(acc, name, "s")
            continue
        pre, text = print_expr(expr, acc, consts, None, counter, tree=True)
        target = f"n_{red}" if red is not None else f"t_{name}"
        out += pre + [Assign(target, text)]
        acc.scalar[name] = target
        if red is not None:
            fresh.append(red)
    return out + [Assign(f"s_{r}", f"n_{r}") for r in fresh]


def bind_program(acc: Access, program: Program, states: dict, sides: dict) -> Access:
    """Access for a program over states: ``sides`` maps a suffix (``a``, ``b``, ``""``) to a prefix."""
    for suffix, prefix in sides.items():
        for r, state in states.items():
            state.bind(acc, f"{r}_{suffix}" if suffix else r, prefix)
    results = set(program.results)
    for sym, _ in program.steps:
        if sym not in results:
            acc.scalar[sym.name] = f"t_{sym.name}"
    return acc


def require_scalar_elements(fused: FusedCascade, strategy: str) -> None:
    """Strategies that hold elements in registers take per-element scalars only."""
    vectors = [s.name for s in fused.cascade.inputs if s.size is not None]
    if vectors:
        raise RedalgebraError(f"the {strategy} strategy holds scalar elements in registers; {fused.cascade.name} has "
                              f"per-element vectors ({', '.join(vectors)}): use vrows (or lanes)")


__all__ = ["ComponentState", "ScalarState", "TopKState", "VectorState", "bind_program", "identity_text", "merge_stmts",
           "require_scalar_elements", "states_of"]
