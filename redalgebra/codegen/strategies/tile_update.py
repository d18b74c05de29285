"""The derived update of a tile of scores held in the tensor cores' accumulator layout (``mma``, ``wgmma``).

Each thread holds its elements of a row tile of 16 (``slots``: rows ``g`` and ``g + 8``, elements ``8 j + 2 t`` and
``+ 1``). For a tile, :meth:`TileUpdate.updates` computes the per-element lets, then, reduction by reduction in
dependency order, the tile's terms with the *new* dependencies (``F_i(e, D_new)``), reduced over the thread's
elements, the 4 lanes of a row (two xor shuffles) and, with column groups, the groups (through shared memory, in
group order), and joins them to the old state times its correction — the derived incremental update applied to a
tile at once (the merge of the old state with the tile's). A vector reduction's accumulators are scaled by its
correction and its factors computed, for the products that follow (:mod:`.mma`).
"""

from __future__ import annotations

import sympy as sp

from ..tree import Assign, Barrier, If, Shuffle, scalar_load

#: Elements per tile (of keys: the scores of a 64-row block by 64 elements).
BN = 64
#: Partial folds of a row's terms in a tile (chains side by side), and their registers' names.
FOLDS = 4
FOLD_NAMES = ("tr", "tq", "tu", "tw")


class TileUpdate:
    """The element-wise work of a tile, mixed into :class:`~.mma.MmaKernel`, whose attributes it reads: the cascade
    (``f``, ``c``, ``prologue``, ``bodies``, ``factors``, ``scal``, ``vred``, ``sin``, ``dtypes``), the layout
    (``slots``, ``rows``, ``access``, ``bm``, ``ncol``, ``key0``, ``selects``) and ``whole``/``kept`` for the tile
    being built."""

    def side(self, cond, which: str):
        """A degenerate condition (in ``_a`` symbols) read on side ``which`` (``a``: old, ``n``: new)."""
        return cond.xreplace({sp.Symbol(f"{d}_a", extended_real=True): sp.Symbol(f"{d}_{which}", extended_real=True)
                              for d in (r.name for r in self.c.reductions)})

    def ok(self, m: int, j: int, i: int) -> str:
        """Whether element ``(j, i)`` of the tile counts (in the row, not masked): a test, not a register (a predicate
        per element would not fit the predicate registers)."""
        at = f"lt + {8 * j + (i & 1)}"
        # in a whole tile every element is in the row; else 32 bits (``rem``: the row's elements from ``lt`` on)
        tests = [] if self.whole else [f"({8 * j + (i & 1)} < rem)"]
        if self.spec.has_keep:  # the mask read at a clamped position, so that both tests are computed (no branch)
            tests.append(f"(keep[rc_{2 * m + (i >> 1)}, {at if self.whole else f'min({at}, length - 1)'}] != 0)")
        return " & ".join(tests) or None

    def whole_test(self) -> str:
        """Whether the tile takes the whole path: every element in the row, and, with a gate true on a prefix of the
        row, the gate true for all of them (``op``, found at the loop's barrier): no test per element at all."""
        test = f"kb + {self.kt} <= length"
        return f"op != 0 and {test}" if self.prefix else test

    def elements(self) -> list:
        """The per-element inputs and lets of the thread's 32 elements (``lt``: its first element's position); on the
        whole path of a gate true on a prefix (:meth:`whole_test`), the gate's let is its value, unmasked."""
        out = [Assign("lt", f"kb{self.key0} + 2 * t"), Assign("lf", "float32(lt)"),
               Assign("rem", f"int32(min(length - lt, {self.kt}))")]
        for m, j, i in self.slots():
            # a whole tile's elements are all in the row; a partial tile's past it read the last (and do not count)
            at = f"lt + {8 * j + (i & 1)}" if self.whole else f"min(lt + {8 * j + (i & 1)}, length - 1)"
            h = 2 * m + (i >> 1)
            for x in self.sin:
                dt = self.dtypes.get(x, "float32")
                rr = f"uint32(rc_{h}) // uint32(rep_{x})"
                out.append(Assign(f"e_{x}_{m}_{j}_{i}", scalar_load(dt, x, rr, at)))
            acc = self.access(h, m, j, i)
            for sym, expr in self.prologue:
                if self.whole and self.prefix and sym == self.gate[0]:
                    expr = expr.args[0].expr  # where(cond, s, -inf) with cond true: s
                pre, text = self.print(expr, acc)
                out += pre + [Assign(f"e_{sym.name}_{m}_{j}_{i}", text)]
        return out

    def left(self, r, h: int):
        """The old state's side of the join: ``0_r`` when degenerate, else ``r_a ⊗ c_r`` (text), or None when ``r``
        has no dependencies (the state as is)."""
        ra = self.f.analysis[r.name]
        if not ra.deps:
            return None
        corr = self.f.corrections[r.name].stable
        value = sp.Symbol(f"{r.name}_a", extended_real=True) if self.c.sizes[r.name] is None else sp.Integer(1)
        term = value * corr if ra.otimes.name == "mul" else value + corr
        cond = self.f.degenerate.get(r.name, sp.false)
        ident = self.f.identity[r.name] if self.c.sizes[r.name] is None else sp.Integer(0)
        expr = term if cond == sp.false else sp.Piecewise((ident, cond), (term, True))
        return self.print(expr, self.access(h))

    def new_term(self, r, body):
        """``F_r(e, D_new)``, the identity where the new dependencies are degenerate."""
        cond = self.f.degenerate.get(r.name, sp.false)
        if not self.f.analysis[r.name].deps or cond == sp.false:
            return body
        ident = self.f.identity[r.name] if self.c.sizes[r.name] is None else sp.Integer(0)
        floored = self.floored(r, body, cond, ident)
        if floored is not None:
            return floored
        return sp.Piecewise((ident, self.side(cond, "n")), (body, True))

    def floored(self, r, body, cond, ident):
        """``exp(e - M)`` where ``M = max(e)`` is the one dependency, degenerate at ``-inf``, and the identity is 0
        (softmax's factors): ``exp(e - M_z)`` with ``M_z`` the new maximum, or 0 where it is ``-inf``
        (:meth:`floors`), a value a row, instead of a select an element. Where ``M = -inf`` every element counted is
        ``-inf`` too (``M >= e``; a NaN would make ``M`` NaN), so ``exp(-inf - 0) = 0``, the identity, as the guard
        gives; elsewhere the two are one expression. None where the term is of another form."""
        deps = self.f.analysis[r.name].deps
        if len(deps) != 1 or ident != 0:
            return None
        x = deps[0]
        red = next(q for q in self.c.reductions if q.name == x)
        if red.monoid.name != "max" or self.c.sizes[x] is not None:
            return None
        if cond != sp.Eq(sp.Symbol(f"{x}_a", extended_real=True), -sp.oo):
            return None
        top = next((s for s in body.free_symbols if s.name == x), None)
        if top is None or body != sp.exp(self.bodies[x] - top):
            return None
        return body.xreplace({top: sp.Symbol(f"{x}_z", real=True)})

    def floors(self, r) -> list:
        """``z_{M}_{h}``: the new maximum of each row, or 0 where it is ``-inf``, once ``n_M`` is known — where a term
        reads it (:meth:`floored`)."""
        z = sp.Symbol(f"{r.name}_z", real=True)
        terms = [self.new_term(q, self.bodies[q.name]) for q in self.scal]
        terms += [self.new_term(v, self.factors[v.name][0]) for v in self.vred]
        if not any(z in t.free_symbols for t in terms):
            return []
        new = sp.Symbol(f"{r.name}_n", extended_real=True)
        out = []
        for h in self.rows:
            pre, text = self.print(sp.Piecewise((sp.Integer(0), sp.Eq(new, -sp.oo)), (new, True)), self.access(h))
            out += pre + [Assign(f"z_{r.name}_{h}", text)]
            if self.spec.fast_exp:  # (exp(e - z) as ex2(e·log2(e) - z·log2(e)), one fused multiply-add: access)
                out.append(Assign(f"zn_{r.name}_{h}", f"-(z_{r.name}_{h} * LOG2E)"))
        return out

    def shares(self, r) -> str | None:
        """The vector reduction whose factor is this sum's term (attention's ``l`` and ``o``: ``exp(s - m)``): the
        term is then computed once per element, kept for the product."""
        if r.monoid.name != "add":
            return None
        term = self.new_term(r, self.bodies[r.name])
        return next((v.name for v in self.vred if self.new_term(v, self.factors[v.name][0]) == term
                     and v.name not in self.kept), None)

    def scalar_update(self, r) -> list:
        out = []
        fold = sp.Symbol("__fold", extended_real=True)
        term = self.new_term(r, self.bodies[r.name])
        ident = self.identity(r.name)
        kept = self.shares(r)
        # partial folds per row, each over every FOLDS-th n8 tile: chains of dependent instructions in flight side
        # by side instead of one (the monoids are commutative: the tile's terms are reduced in any order anyway)
        # where every element counts (a whole tile, no mask), a fold starts at its first term, not at the identity
        folds = FOLD_NAMES[:max(1, min(FOLDS, self.bn // 8))]
        first = set()
        if any(self.ok(m, j, i) is not None for m, j, i in self.slots()):
            for h in self.rows:
                out += [Assign(f"{a}_{h}", ident) for a in folds]
            first = {f"{a}_{h}" for a in folds for h in self.rows}
        for m, j, i in self.slots():
            h = 2 * m + (i >> 1)
            into = f"{folds[j % len(folds)]}_{h}"
            acc = self.access(h, m, j, i)
            acc.scalar[fold.name] = into
            started = into in first
            first.add(into)
            if kept is None:
                pre, text = self.print(r.monoid.combine(fold, term) if started else term, acc)
                out += self.chosen(into, pre, text, m, j, i, None)
                continue
            pre, text = self.print(term, acc)
            pf = f"pf_{kept}_{m}_{j}_{i}"
            out += self.chosen(pf, pre, text, m, j, i, self.consts.name(0.0)) + [Assign(into, pf, "+" if started else "")]
        if kept is not None:
            self.kept.add(kept)
        other = sp.Symbol("__other", extended_real=True)
        step = 1
        while step < len(folds):  # the partial folds joined pairwise into the first
            for k in range(0, len(folds) - step, 2 * step):
                for h in self.rows:
                    acc = self.access(h)
                    acc.scalar[fold.name], acc.scalar[other.name] = f"{folds[k]}_{h}", f"{folds[k + step]}_{h}"
                    pre, text = self.print(r.monoid.combine(fold, other), acc)
                    out += pre + [Assign(f"{folds[k]}_{h}", text)]
            step *= 2
        for off in (1, 2):
            for h in self.rows:
                acc = self.access(h)
                acc.scalar[fold.name], acc.scalar[other.name] = f"tr_{h}", f"tx_{h}"
                pre, text = self.print(r.monoid.combine(fold, other), acc)
                out += [Shuffle(f"tx_{h}", f"tr_{h}", str(off))] + pre + [Assign(f"tr_{h}", text)]
        join = []
        for h in self.rows:
            left = self.left(r, h)
            acc = self.access(h)
            acc.scalar[fold.name], acc.scalar[other.name] = "tl", f"tr_{h}"
            pre, text = self.print(r.monoid.combine(fold, other), acc)
            head = [Assign("tl", f"s_{r.name}_{h}")] if left is None else left[0] + [Assign("tl", left[1])]
            join += head + pre + [Assign(f"n_{r.name}_{h}", text)]
        if self.deferrable(r):  # the partials written now, read and joined after the factor tile's barrier
            write, read = self.exchange(r, fold, other, split=True)
            self.deferred = read + join
            return out + write
        return out + self.exchange(r, fold, other) + join + self.floors(r)

    #: What a deferred exchange leaves for after the factor tile's barrier (:meth:`deferrable`).
    deferred: list = []

    def deferrable(self, r) -> bool:
        """Whether the column groups' exchange of ``r``'s partials can wait for the barrier that publishes the factor
        tile (one barrier a tile fewer): nothing of the tile reads ``r``'s new state — no other reduction depends on
        it (attention's row sum ``l``: the factors and the corrections depend on the maximum alone). Only the last
        such reduction (one slot of statements)."""
        if self.bn == self.kt or not self.vred:  # (one group, or groups handing the tile over: no exchange)
            return False
        free = [q for q in self.scal if all(q.name not in self.f.analysis[o.name].deps
                                           for o in self.c.reductions if o is not q)]
        return bool(free) and r is free[-1]

    def exchange(self, r, fold, other, split: bool = False):
        """With column groups: each group's partial ``tr_{h}`` of reduction ``r`` over its elements of the tile,
        through shared memory, combined in group order (so that every group holds the same state, bit for bit).
        ``split``: ``(the writes, the reads)``, for a barrier between them that is not the exchange's own. None where
        a group computes the whole tile (one group, or column groups handing the tile over: :attr:`~.wgmma.WgmmaKernel.handover`)."""
        if self.bn == self.kt:
            return []
        slot = self.scal.index(r) * self.ncol * self.bm
        write = [If("t == 0", tuple(Assign(f"smf[xf + {slot} + cg * {self.bm} + 16 * rw + lg + {8 * h}]", f"tr_{h}")
                                    for h in self.rows))]
        out = []
        for h in self.rows:
            at = f"xf + {slot} + 16 * rw + lg + {8 * h}"
            out.append(Assign(f"tr_{h}", f"smf[{at}]"))
            for g in range(1, self.ncol):
                acc = self.access(h)
                acc.scalar[fold.name], acc.scalar[other.name] = f"tr_{h}", f"tx_{h}"
                pre, text = self.print(r.monoid.combine(fold, other), acc)
                out += [Assign(f"tx_{h}", f"smf[{at} + {g * self.bm}]")] + pre + [Assign(f"tr_{h}", text)]
        return (write, out) if split else write + [Barrier()] + out

    def chosen(self, target: str, pre: list, text: str, m: int, j: int, i: int, otherwise: str | None) -> list:
        """``target = text`` (after ``pre``) where element ``(m, j, i)`` counts, else ``otherwise`` (None: ``target`` kept):
        a select on the GPU (both computed: every operand is a register, the elements past the end read zero-filled
        tiles and clamped inputs), a branch in the simulator."""
        ok = self.ok(m, j, i)
        if ok is None:
            return pre + [Assign(target, text)]
        if self.selects:
            return pre + [Assign(target, f"pick({ok}, {text}, {target if otherwise is None else otherwise})")]
        head = [] if otherwise is None else [Assign(target, otherwise)]
        return head + [If(ok, tuple(pre + [Assign(target, text)]))]

    def vector_update(self, r) -> list:
        factor, x = self.factors[r.name]
        out = []
        for h in self.rows:
            left = self.left(r, h)
            if left is not None:
                # deferred, each vector sum's correction keeps its own name until its scaling
                cf = f"cf_{h}" if self.scaling is None else f"cf_{r.name}_{h}"
                out += left[0] + [Assign(cf, left[1])]
                scale = self.scaled(r, h, cf)
                if self.scaling is None:
                    out += scale
                else:  # the accumulators may still be written by products in flight: scaled once they are done
                    self.scaling[r.name, h] = scale
        term = self.new_term(r, factor)
        zero = self.consts.name(0.0)
        for m, j, i in self.slots() if r.name not in self.kept else ():  # else computed with the sum that shares it
            pre, text = self.print(term, self.access(2 * m + (i >> 1), m, j, i))
            out += self.chosen(f"pf_{r.name}_{m}_{j}_{i}", pre, text, m, j, i, zero)
        return out

    def scaled(self, r, h: int, cf: str) -> list:
        """Vector sum ``r``'s accumulators of the thread's row ``h`` (its columns, :meth:`cols`) times the correction
        ``cf``."""
        m, hh = divmod(h, 2)
        return [Assign(f"o_{r.name}_{m}_{j}_{i}", cf, "*") for j in range(self.cols(r) // 8)
                for i in (2 * hh, 2 * hh + 1)]

    #: Where the vector accumulators' scaling goes when it must wait (``{(reduction, row): statements}``), or None: with
    #: the factors (:meth:`vector_update`).
    scaling = None

    def updates(self, whole: bool) -> list:
        """The tile's element-wise work: its elements, each scalar reduction's update, each vector reduction's scaled
        accumulators and factors. ``whole``: every element of the tile is in the row (no test per element)."""
        self.whole, self.kept = whole, set()
        out = self.elements()
        for r in self.scal:
            out += self.scalar_update(r)
        for r in self.vred:
            out += self.vector_update(r)
        self.whole = False
        return out
