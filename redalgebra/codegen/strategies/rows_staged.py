"""``rows``' staged reductions: one reduction at a time over a row, each with its dependencies final (the level order),
reduced over the group by its own monoid rather than by the derived merge — over the registers of a resident row
(a top-k *selected* by rounds of a group-wide arg-max), or a pass over the row a reduction where the row is read in
passes and the one-pass form would compute otherwise than the reference (a top-k then merged as insertion lists).

A mixin of :class:`.rows.RowsKernel`, which holds the row's registers, states and loads these methods use.
"""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from ..printer import print_expr
from ..states import TopKState
from ..tree import Assign, Barrier, Call, If, Shared, Shuffle
from .selection import warp_rounds


class RowsStaged:
    """The staged forms of :class:`.rows.RowsKernel` (``Spec.staged``)."""

    # -- staged: one reduction at a time over the row ------------------------------------------------------
    def staged(self) -> list:
        """Every reduction in turn over the registers, its dependencies already the row's (``s_*``), then
        reduced over the group by its own monoid: no derived merge, and a top-k is *selected* — ``k``
        rounds of a group-wide arg-max, each removing its winner — rather than merged list by list.

        A per-element subexpression of a reduction's body that a later body or a per-element output
        also computes (softmax's ``exp(x - m)``, in ``l``'s body and in ``y``) is computed once per
        element into a register (``t<n>_<i>_<c>``) and read there: one ``exp`` per element, not two.
        Later expressions are the same expressions over the same final states, so the values are
        bit for bit those the later expression would compute. A row read in passes takes a pass a reduction
        instead (:meth:`level_pass`).
        """
        later = [self.f.bodies[r.name] for r in self.c.reductions]
        later += [e for s, e in self.f.finalize.steps if s.name in self.varying]
        out = []
        for n, r in enumerate(self.c.reductions):
            st = self.states[r.name]
            if not self.spec.resident:
                out += self.level_pass(r, st, later[n])
                continue
            shared = self.common_terms(later[n], later[n + 1:])
            for term in shared:
                out += self.cache_term(term)
            later = [e.xreplace(self.cached) for e in later]
            body = later[n]
            out += self.select(r, st, body) if isinstance(st, TopKState) else self.staged_scalar(r, st, body)
        return out

    def level_pass(self, r, st, body) -> list:
        """Reduction ``r`` over a row read in passes (too long for the registers), its dependencies the row's final
        states (``s_*``): a pass over the row a reduction, the level order. Chosen where the one-pass form
        computes otherwise than the reference (:attr:`FusedCascade.one_pass_inexact`: a top-k of corrected values,
        a correction that does not exist on a prefix). A top-k is folded into each thread's insertion list and the
        group's lists are merged as they are (no correction: the values are final)."""
        fold = self.passes(lambda first: self.chunks(first, self.early) + self.whole_or_tested(
            lambda guarded: self.fold_reduction(r, body, guarded, "s")))
        if not isinstance(st, TopKState):
            return self.staged_scalar(r, st, body, fold)
        merge = lambda: [Call("rt_topk_merge", (st.var("s"), st.index("s"), st.var("o"), st.index("o")))]  # noqa: E731
        return (st.init("o") + self.unless_degenerate(r.name, fold) + st.copy("o", "s")
                + self.group_merge({r.name: st}, merge))

    def element_names(self) -> set:
        """Names whose value varies along the row: the inputs, the prologue's results, positions, cached terms."""
        return (set(self.scalars) | {s.name for s in self.f.prologue.results} | {"pos", "element.index"}
                | {t.name for t in self.cached.values()})

    def common_terms(self, body, others) -> list:
        """The largest per-element subexpressions of ``body`` that occur in one of ``others``."""
        element = self.element_names()
        inside = set()
        for e in others:
            inside.update(sp.preorder_traversal(e))
        found, walk = [], sp.preorder_traversal(body)
        for node in walk:
            if node.is_Atom or not ({s.name for s in node.free_symbols} & element):
                continue
            if node in inside:
                found.append(node)
                walk.skip()
        return found

    def cache_term(self, term) -> list:
        """``t<n>_<i>_<c> = term`` for every register (unguarded: every later use finds it defined)."""
        sym = sp.Symbol(f"__t{len(self.cached)}", real=True)
        out = []
        for i in range(self.tile):
            for c in range(self.vec):
                pre, text = print_expr(term, self.element_access(i, c, "s"), self.consts, None, self.counter, tree=True)
                out += pre + [Assign(f"{sym.name[2:]}_{i}_{c}", text)]
        self.cached[term] = sym
        return out

    def whole_or_tested(self, make) -> list:
        """``make(guarded)`` twice: untested when every chunk of the thread is whole, tested otherwise
        (a partial chunk) — and only tested under a mask."""
        if self.spec.has_keep:
            return make(True)
        allfull = " and ".join(f"full_{i}" for i in range(self.tile))
        return [If(allfull, tuple(make(False)), tuple(make(True)))]

    def each_element(self, make) -> list:
        """``make(i, c, guarded)`` for every register, as :meth:`whole_or_tested`."""
        elements = [(i, c) for i in range(self.tile) for c in range(self.vec)]
        return self.whole_or_tested(lambda guarded: [s for i, c in elements for s in make(i, c, guarded)])

    def unless_degenerate(self, name: str, stmts: list) -> list:
        cond = self.degenerate(name)
        if cond is None:
            return stmts
        pre, text = print_expr(cond, self.element_access(0, 0, "s"), self.consts, None, self.counter, tree=True)
        return pre + [If(f"not ({text})", tuple(stmts))]

    def staged_scalar(self, r, st, body, fold: list | None = None) -> list:
        """Scalar reduction ``r`` folded over the registers (or by ``fold``, its passes over the row) into ``o_<r>``,
        its dependencies the row's states (``s_*``), then reduced over the group by its monoid."""
        a, b = sp.Symbol("__a", extended_real=True), sp.Symbol("__b", extended_real=True)
        acc = self.lay.base_access()
        acc.scalar.update({"__a": st.var("o"), "__b": f"x_{r.name}"})
        pre, combine = print_expr(r.monoid.combine(a, b), acc, self.consts, None, self.counter, tree=True)
        step = [*pre, Assign(st.var("o"), combine)]
        if fold is None:
            fold = self.whole_or_tested(lambda guarded: self.fold_reduction(r, body, guarded, "s"))
        out = st.init("o") + self.unless_degenerate(r.name, fold)
        out += self.group_reduce([Shuffle(f"x_{r.name}", st.var("o"), "")], step,
                                 [f"sh_{r.name}"], [st.var("o")], "float32")
        return out + [Assign(st.var("s"), st.var("o"))]

    def select(self, r, st, body) -> list:
        """``k`` rounds of arg-max over the row's values (the larger value; the smaller element index of equal
        values), each removing its winner, in two levels: every warp selects its own ``k`` best by shuffles
        alone, then each warp of the group selects the row's ``k`` from the group's ``warps × k`` candidates,
        read from shared memory after one barrier (group-wide rounds cost two barriers each: 2k instead of
        1). A lane keeps the best of its own registers between rounds and only the lane that held the
        winner looks again."""
        k, g = r.monoid.k, self.group
        vals = {(i, c): f"v_{r.name}_{i}_{c}" for i in range(self.tile) for c in range(self.vec)}

        def value(i, c, guarded):
            pre, text = print_expr(body, self.element_access(i, c, "s"), self.consts, None,
                                   self.counter, tree=True)
            stmts = [*pre, Assign(vals[i, c], text)]
            return [If(self.ok(i, c), tuple(stmts), (Assign(vals[i, c], "NEG_INF"),))] if guarded else stmts

        def keep(values: str, indices: str, slot):
            return lambda j: [Assign(f"{values}[{slot(j)}]", "bv"),
                              Assign(f"{indices}[{slot(j)}]", "pick(bv != NEG_INF, bi, int32(-1))")]

        out = [Assign(v, "NEG_INF") for v in vals.values()]
        out += self.unless_degenerate(r.name, self.each_element(value))
        regs = [(v, f"int32(c0_{i} + {c})") for (i, c), v in vals.items()]  # in increasing element order
        row_list = keep(st.var("s"), st.index("s"), str)
        if g <= 32:
            return out + warp_rounds(k, g, regs, row_list, ordered=True)
        per_group, warps = g // 32, self.spec.threads // 32
        box, boxi = f"shk_{r.name}", f"shki_{r.name}"
        # a warp's winners go to shared memory as they are found (every lane stores the same value at the same
        # address): not held in registers until the last round
        out += [Shared(box, (str(warps * k),)), Shared(boxi, (str(warps * k),), "int32")]
        out += warp_rounds(k, 32, regs, keep(box, boxi, lambda j: f"warp * {k} + {j}"), ordered=True)
        out += [Barrier()]
        count, cands = per_group * k, []
        for q in range(-(-per_group * k // 32)):
            slot, cv, ci = f"lane + {32 * q}", f"cv_{r.name}_{q}", f"ci_{r.name}_{q}"
            load = (Assign(cv, f"{box}[grp * {count} + {slot}]"), Assign(ci, f"{boxi}[grp * {count} + {slot}]"))
            if 32 * (q + 1) <= count:
                out += list(load)
            else:
                out += [If(f"{slot} < {count}", load, (Assign(cv, "NEG_INF"), Assign(ci, "int32(-1)")))]
            cands.append((cv, ci))
        return out + warp_rounds(k, 32, cands, row_list, ordered=False)

    def group_reduce(self, shuffles: list, step: list, boxes: list, regs: list, dtype: str) -> list:
        """All-reduce registers ``regs`` over the group: ``shuffles`` (their offset set here) bring the partner's
        values, ``step`` combines them; across warps through shared arrays ``boxes`` (of ``dtype``) and a barrier."""

        def butterfly(width):
            out, off = [], width // 2
            while off >= 1:
                out += [replace(s, offset=str(off)) for s in shuffles] + step
                off //= 2
            return out

        g = self.group
        out = butterfly(min(g, 32))
        if g <= 32:
            return out
        per_group, warps = g // 32, self.spec.threads // 32
        out += [Shared(b, (str(warps),), dtype) for b in boxes]
        out += [If("lane == 0", tuple(Assign(f"{b}[warp]", v) for b, v in zip(boxes, regs))), Barrier()]
        out += [Assign(v, f"{b}[grp * {per_group} + lane % {per_group}]") for b, v in zip(boxes, regs)]
        return out + butterfly(per_group)
