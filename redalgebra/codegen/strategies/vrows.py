"""``vrows``: cascades whose elements carry vectors (attention's key and value rows), 16 bytes per lane.

Decode attention reads, per element, a key and a value row of ``d`` components and reduces them
against a query held for the whole row. Its speed is the speed of those reads, so the kernel is
laid out around them:

1. A *group* of ``G`` lanes (a power of two, at most a warp) shares an element: lane ``g`` of the
   group holds the chunks ``g, g + G, …`` of every vector, a chunk being 16 bytes of the input
   (8 bfloat16/float16, 4 float32) read by one 128-bit load. A warp holds ``32 / G`` elements at
   once (two 128-component bfloat16 rows per warp: ``G = 16``), the block ``threads / G``.
2. Each group takes ``TILE`` elements per step and issues all their loads before using any (the
   element index is clamped into the row, so the loads are unconditional and all in flight).
3. Dot products are a partial sum per lane, completed by a butterfly of shuffles over the group's
   lanes; the butterflies of the step's elements are interleaved, so their shuffles overlap.
4. The step's elements are folded by the non-incremental form (every reduction in turn over the
   registers, its dependencies from the step's own partial state), merged into the running state
   by the derived merge; at the end the groups of a warp merge over shuffles, the warps through
   shared memory.
5. Few rows (a decode batch of 32 heads over 64 K keys) are split into *segments* across blocks:
   each block writes its segment's state, and a second kernel merges a row's segments with the
   derived merge (FlashDecoding's structure), finalizes and stores.

Every vector state (``o = Σ p·v``) is held as ``TILE``-independent scalars per component of the
lane's share (:class:`~redalgebra.codegen.states.ComponentState`): no per-thread arrays, so no local
memory. Any vector length works: a chunk past the end of a vector is not read and contributes
nothing; inputs off the 16-byte grid are read element by element.
"""

from __future__ import annotations


import sympy as sp

from ...derive import FusedCascade
from ...errors import RedalgebraError
from ...ir.functions import Dot, VSum
from ..emit import Spec
from ..states import ComponentState, ScalarState, bind_program, merge_stmts, identity_text
from ..tree import Assign, Barrier, Call, For, If, Load, Shuffle, Store
from . import VEC, Problem, Strategy, pow2, register
from .base import TreeKernel, named_nodes

#: Components of its vector inputs one lane may hold (at 32 lanes per element: vectors of about 1500 in all).
#: Wider elements (a 7168-wide weight row) would need hundreds of registers per lane: other strategies.
MOST_PER_LANE = 48


def too_wide(fused: FusedCascade, sizes: dict) -> bool:
    """Whether the vector inputs are too wide for registers even at 32 lanes per element, counted as
    :func:`configure` counts them (whole 16-byte chunks per lane) at the widest chunk any dtype gives."""
    widths = [s.size if isinstance(s.size, int) else sizes.get(s.size, 0) for s in fused.cascade.inputs if s.size]
    return max(sum(-(-(-(-w // vec)) // 32) * vec for w in widths) for vec in (1, 4, 8)) > MOST_PER_LANE


def refusal(fused: FusedCascade) -> str | None:
    """Why ``vrows`` cannot build this cascade's kernel at any size (None: it can)."""
    c = fused.cascade
    if not any(s.size is not None for s in c.inputs):
        return f"the vrows strategy is for elements with vectors; {c.name} has none: use rows"
    if any(r.monoid.k is not None for r in c.reductions):
        return f"vrows does not hold top-k states ({c.name}); use lanes"
    if fused.per_element_outputs:
        return (f"vrows writes row outputs only; {c.name} has per-element outputs "
                f"({', '.join(fused.per_element_outputs)}): use lanes or tile")
    exprs = [e for _, e in fused.prologue.steps] + list(fused.bodies.values()) + [e for _, e in fused.finalize.steps]
    for e in exprs:
        for node in sp.preorder_traversal(e):
            if isinstance(node, (Dot, VSum)) and any(isinstance(a, (Dot, VSum))
                                                     for a in sp.preorder_traversal(sp.Tuple(*node.args))):
                return f"vrows: a dot product inside a dot product ({node}); use lanes"
    return None


#: Whether the combine kernel of a row's segments is launched dependent on Hopper (``Spec.dependent``: its launch made
#: while the partial kernel runs, its blocks placed as the partial blocks end, waiting for the whole partial kernel
#: before it reads their states), as ``wgmma``'s is (:data:`~.wgmma_policy.DEPENDENT_COMBINE`, where it made MLA's
#: decode step 3–5 % faster on an H100). Off here until timed on decode attention (``gpu/sweep.py``).
DEPENDENT_COMBINE = 0

#: The states the combine kernel loads at once (one segment each) before merging them in order: their loads are in
#: flight together (a warp reading MLA's 16 segments one after the other, each merge waiting for its load, took
#: 15 µs of a 95 µs decode step; four at once, 6.2 µs over 8 segments).
COMBINE_SLOTS = ("o", "o1", "o2", "o3")


class VRowsKernel(TreeKernel):
    """Builds the statement trees of a ``vrows`` module (one kernel, or partial + combine when split)."""

    def __init__(self, fused: FusedCascade, spec: Spec, shared: tuple | None = None):
        super().__init__(fused, spec, refusal, shared)
        c = self.c
        self.g, self.vec, self.tile = spec.group, spec.vec, spec.tile
        if spec.threads % 32 or self.g > 32 or self.g & (self.g - 1):
            raise RedalgebraError(f"vrows: groups of {self.g} lanes in blocks of {spec.threads} threads: the group "
                                  f"must be a power of two of at most 32 and the block whole warps")
        self.groups = spec.threads // self.g
        #: the thread index whose first lane stores the row's outputs (the block's ``tid``; ``lane`` where each warp of
        #: a block merges rows of its own, :class:`~.mma.ClusterMerge`)
        self.lead_index = "tid"
        self.states = {}
        for r in c.reductions:
            ident = identity_text(fused, r.name, self.consts)
            self.states[r.name] = (ScalarState(r.name, ident) if c.sizes[r.name] is None
                                   else ComponentState(r.name, ident, self.count(self.size[r.name])))
        self.dtypes = dict(spec.dtypes)
        self.vinputs = [s.name for s in c.inputs if s.size is not None]
        self.sinputs = [s.name for s in c.inputs if s.size is None]
        # dot products and component sums: computed per element by a lane sum, then read as scalars
        exprs = [e for _, e in fused.prologue.steps] + [fused.bodies[r.name] for r in c.reductions]
        self.lane_sums = self._lane_sums(exprs)
        self.prologue = [(s, e.xreplace(self.lane_sums)) for s, e in fused.prologue.steps]
        self.bodies = {r.name: fused.bodies[r.name].xreplace(self.lane_sums) for r in c.reductions}

    # -- the lane's share of a vector -------------------------------------------------------------
    def slots(self, n: int) -> int:
        return -(-(-(-n // self.vec)) // self.g)

    def count(self, n: int) -> int:
        """Components of an ``n``-vector this lane holds (some past the end when ``n`` is not a multiple)."""
        return self.slots(n) * self.vec

    def component(self, c: int) -> str:
        """The vector index of the lane's ``c``-th component: chunk ``gl + G t``, element ``c % vec`` of it."""
        t, k = divmod(c, self.vec)
        off = self.g * self.vec * t + k
        return f"{self.vec} * gl + {off}" if off else f"{self.vec} * gl"

    def inside(self, n: int, c: int) -> str | None:
        """The condition that the lane's ``c``-th component of an ``n``-vector exists (None: always)."""
        if self.slots(n) * self.g * self.vec == n:
            return None
        return f"{self.component(c)} < {n}"

    def base_access(self):
        """The names every access starts from (the layout's; :class:`~.cluster_merge.ClusterMerge` divides
        otherwise)."""
        return self.lay.base_access()

    @staticmethod
    def _lane_sums(exprs) -> dict:
        return named_nodes(exprs, (Dot, VSum), "__ls")

    # -- access -------------------------------------------------------------------------------------
    def access(self, i: int | None, prefix: str):
        """Names for element ``i`` of the step (None: none, the finalize), the states read from ``prefix``."""
        acc = self.base_access()
        if self.spec.fast_exp:
            acc.exp = "fast_exp"
        for name, n in self.size.items():
            acc.size[name] = str(self.count(n))
        for p in self.c.params:
            if p.size is not None:
                acc.vector[p.name] = f"pv_{p.name}_{{j}}"
        if i is not None:
            for x in self.vinputs:
                acc.vector[x] = f"xv_{x}_{i}_{{j}}"
            for x in self.sinputs:
                acc.scalar[x] = f"e_{x}_{i}"
            for sym, _ in self.f.prologue.steps:
                acc.scalar[sym.name] = f"e_{sym.name}_{i}"
            for n, sym in enumerate(self.lane_sums.values()):
                acc.scalar[sym.name] = f"gen_ls_{n}_{i}"
            acc.scalar["element.index"] = f"gen_l_{i}"
            acc.scalar["pos"] = f"float32(gen_l_{i})"
        return bind_program(acc, self.f.update, self.states, {"": prefix})

    # -- pieces ---------------------------------------------------------------------------------------
    def threads_setup(self) -> list:
        return [Assign("tid", "cuda.threadIdx.x"), Assign("lane", "tid % 32"), Assign("warp", "tid // 32"),
                Assign("gl", f"tid % {self.g}"), Assign("eg", f"tid // {self.g}")]

    def row_setup(self, row: str) -> list:
        out = [Assign("row", row)]
        out += [Assign(f"p_{p.name}", f"{p.name}[row]") for p in self.c.params if p.size is None]
        # (a 32-bit division: numba's 64-bit one is a subroutine call; the row is a block's index, below 2**31)
        out += [Assign(f"rr_{s.name}", f"int32(uint32(row) // uint32(rep_{s.name}))") for s in self.c.inputs]
        for p in self.c.params:  # this lane's components of the vector params, once per row
            if p.size is not None:
                n = self.size[p.name]
                for c in range(self.count(n)):
                    load = Assign(f"pv_{p.name}_{c}", f"{p.name}[row, {self.component(c)}]")
                    cond = self.inside(n, c)
                    out += [load] if cond is None else [
                        If(cond, (load,), (Assign(f"pv_{p.name}_{c}", self.consts.name(0.0)),))]
        return out

    def loads(self, i: int, first: str, hi: str) -> list:
        """Element ``i`` of the step (``l_i``) into registers; its index clamped into the row for the reads."""
        out = [Assign(f"gen_l_{i}", f"{first} + {i * self.groups}"), Assign(f"lc_{i}", f"min(gen_l_{i}, {hi} - 1)")]
        for x in self.vinputs:
            n, dtype = self.size[x], self.dtypes.get(x, "float32")
            for t in range(self.slots(n)):
                regs = [f"xv_{x}_{i}_{t * self.vec + k}" for k in range(self.vec)]
                col = self.component(t * self.vec)
                load = [Load(tuple(regs), x, (f"rr_{x}", f"lc_{i}"), col, dtype)] if self.vec > 1 else \
                    [Load((regs[0],), x, (f"rr_{x}", f"lc_{i}"), col, dtype)]
                cond = self.inside(n, t * self.vec)
                out += load if cond is None else [If(cond, tuple(load),
                                                     tuple(Assign(r, self.consts.name(0.0)) for r in regs))]
        for x in self.sinputs:
            out.append(Load((f"e_{x}_{i}",), x, f"rr_{x}", f"lc_{i}", self.dtypes.get(x, "float32")))
        return out

    def sums(self, items) -> list:
        """Lane sums of ``items`` (``(register, Dot or VSum node, access)``): each lane's part, then one butterfly
        over the group for all of them, level by level (their shuffles in flight together)."""
        out = []
        for reg, node, acc in items:
            if isinstance(node, Dot):
                term, n = node.args[0] * node.args[1], self.size_of(node.args[0])
            else:
                term, n = node.args[0], self.size_of(node.args[0])
            parts = []
            for c in range(self.count(n)):
                pre, text = self.print(term, acc, str(c))
                cond = self.inside(n, c)
                step = [*pre, Assign(reg, text, "+")]
                parts += step if cond is None else [If(cond, tuple(step))]
            out += [Assign(reg, self.consts.name(0.0))] + parts
        off = self.g // 2
        while off >= 1:
            out += [Shuffle(f"{reg}_x", reg, str(off)) for reg, _, _ in items]
            out += [Assign(reg, f"{reg}_x", "+") for reg, _, _ in items]
            off //= 2
        return out

    def size_of(self, expr) -> int:
        for s in sp.preorder_traversal(expr):
            if isinstance(s, sp.Symbol) and s.name in self.size:
                return self.size[s.name]
        raise RedalgebraError(f"vrows: {expr} is not a vector")

    def elements(self) -> list:
        """The step's lane sums (interleaved over its elements) and the prologue of each element."""
        items = [(f"gen_ls_{n}_{i}", node, self.access(i, "s")) for i in range(self.tile)
                 for n, node in enumerate(self.lane_sums)]
        out = self.sums(items) if items else []
        for i in range(self.tile):
            acc = self.access(i, "s")
            for sym, expr in self.prologue:
                if acc.is_vector(expr):
                    raise RedalgebraError(f"vrows: the per-element vector {sym.name} is not supported; use lanes")
                pre, text = self.print(expr, acc)
                out += pre + [Assign(f"e_{sym.name}_{i}", text)]
        return out

    def ok(self, i: int, hi: str) -> str:
        ok = f"gen_l_{i} < {hi}"
        return f"{ok} and keep[row, gen_l_{i}] != 0" if self.spec.has_keep else ok

    def degenerate(self, name: str):
        if name not in self.f.degenerate:
            return None
        cond = self.f.degenerate[name].xreplace(
            {sp.Symbol(f"{d}_a", extended_real=True): sp.Symbol(d, extended_real=True) for d in self.states})
        return None if cond == sp.false else cond

    def folds(self, guarded: bool, hi: str) -> list:
        """The step's state in ``o_*``: every reduction in turn over the elements, dependencies from ``o_*``."""
        out = [s for st in self.states.values() for s in st.init("o")]
        for r in self.c.reductions:
            st, stmts = self.states[r.name], []
            for i in range(self.tile):
                fold = st.fold("o", r.monoid, self.bodies[r.name], self.access(i, "o"), self.consts, self.counter,
                               f"gen_l_{i}")
                stmts += [If(self.ok(i, hi), tuple(fold))] if guarded else fold
            cond = self.degenerate(r.name)
            if cond is not None:
                pre, text = self.print(cond, self.access(0, "o"))
                stmts = pre + [If(f"not ({text})", tuple(stmts))]
            out += stmts
        return out

    def merge(self, other: str = "o") -> list:
        """The derived merge of the ``s`` state with the ``other`` one, into ``s``."""
        acc = bind_program(self.base_access(), self.f.merge, self.states, {"a": "s", "b": other})
        if self.spec.fast_exp:
            acc.exp = "fast_exp"
        return merge_stmts(self.f.merge, acc, self.consts, self.states, self.counter)

    def each_state(self, method: str, *args) -> list:
        return [s for st in self.states.values() for s in getattr(st, method)(*args)]

    def fold_range(self, lo: str, hi: str) -> list:
        """Elements ``lo`` to ``hi`` of the row folded by the block: every thread ends with the state of the range
        for its lane's components."""
        step = self.groups * self.tile
        chunk = [s for i in range(self.tile) for s in self.loads(i, "base + eg", hi)] + self.elements()
        if self.spec.has_keep:  # every element tested
            chunk += self.folds(True, hi) + self.merge()
        else:  # untested when the step's elements are all in the range (the common case, branch-free)
            whole = f"base + {step} <= {hi}"
            chunk += [If(whole, tuple(self.folds(False, hi)), tuple(self.folds(True, hi)))] + self.merge()
        out = self.each_state("init", "s")
        # one trip count for the whole block: every lane reaches every shuffle (and, simulated, every barrier)
        out += [For("base", lo, hi, tuple(chunk), str(step))]
        off = self.g  # the groups of a warp, over shuffles
        while off < 32:
            out += self.each_state("shuffle", "s", "o", str(off)) + self.merge()
            off *= 2
        warps = self.spec.threads // 32
        if warps > 1:  # the warps, through shared memory: every thread merges them in order
            slots = str(warps * self.g)
            out += self.each_state("shared", "sh", slots)
            out += [If(f"lane < {self.g}", tuple(self.each_state("park", "s", "sh", f"warp * {self.g} + gl"))), Barrier()]
            out += self.each_state("fetch", "sh", "gl", "s")
            out += [For("wsrc", "1", str(warps), tuple(self.each_state("fetch", "sh", f"wsrc * {self.g} + gl", "o")
                                                       + self.merge()))]
        return out

    def outputs(self) -> list:
        """The row's outputs from ``s_*``: scalars by thread 0, vectors by the first group, a component each."""
        acc = bind_program(self.base_access(), self.f.finalize, self.states, {"": "s"})
        if self.spec.fast_exp:
            acc.exp = "fast_exp"
        for name, n in self.size.items():
            acc.size[name] = str(self.count(n))
        for p in self.c.params:
            if p.size is not None:
                acc.vector[p.name] = f"pv_{p.name}_{{j}}"
        steps = list(self.f.finalize.steps)
        finals = self._lane_sums([e for _, e in steps])
        if finals:  # dot products of the final state: summed over the group (every thread takes part)
            renamed = {node: sp.Symbol(f"__fs{n}", real=True) for n, node in enumerate(finals)}
            pre = self.sums([(f"fs{n}", node, acc) for n, node in enumerate(finals)])
            for n in range(len(finals)):
                acc.scalar[f"__fs{n}"] = f"fs{n}"
            steps = [(s, e.xreplace(renamed)) for s, e in steps]
        else:
            pre = []
        lead, vector = [], []
        outs = {o.name for o in self.c.outputs}
        for sym, expr in steps:
            size = self.c.sizes.get(sym.name)
            if size is None:  # every thread computes it (later steps read the register, never the global store)
                p, text = self.print(expr, acc)
                pre += p + [Assign(f"t_{sym.name}", text)]
                if sym.name in outs:
                    lead.append(Assign(f"out_{sym.name}[row]", f"t_{sym.name}"))
                acc.scalar[sym.name] = f"t_{sym.name}"
                continue
            if sym.name not in outs:
                raise RedalgebraError(f"vrows: the vector {sym.name} of the finalize is not an output; use lanes")
            vector += self.store_vector(sym.name, self.lay.constants[self.lay.size_const(size)], expr, acc)
        who = self.lead_index
        return pre + [If(f"{who} == 0", tuple(lead))] * bool(lead) + ([If(f"{who} < {self.g}", tuple(vector))] if vector
                                                                       else [])

    def store_vector(self, name: str, n: int, expr, acc) -> list:
        """``out_name[row, :]``: the lane's components, four float32 per 128-bit store where the chunk is whole."""
        out, values = [], []
        for c in range(self.count(n)):
            pre, text = self.print(expr, acc, str(c))
            out += pre + [Assign(f"y_{name}_{c}", text)]
            values.append(f"y_{name}_{c}")
        dtype = dict(self.spec.out_dtypes).get(name, "float32")  # (16 bits: the tensor-core strategies' combine)
        most = 4 if dtype == "float32" else 2
        wide = most if self.vec % most == 0 and n % most == 0 else 1
        for c in range(0, self.count(n), wide):
            store = Store(f"out_{name}", "row", self.component(c), tuple(values[c:c + wide]), dtype)
            cond = self.inside(n, c)
            out += [store] if cond is None else [If(cond, (store,))]
        return out

    # -- split: the segment's state to global memory, and the combine kernel ---------------------------
    def write_part(self) -> list:
        scal = [Assign(f"part_{r}[row, seg]", st.var("s")) for r, st in self.states.items()
                if not isinstance(st, ComponentState)]
        vec = []
        for r, st in self.states.items():
            if isinstance(st, ComponentState):
                for c in range(st.count):
                    store = Assign(f"part_{r}[row, seg, {self.component(c)}]", st.comp("s", c))
                    cond = self.inside(self.size[r], c)
                    vec += [store] if cond is None else [If(cond, (store,))]
        return [If("tid == 0", tuple(scal))] * bool(scal) + ([If(f"tid < {self.g}", tuple(vec))] if vec else [])

    def read_part(self, prefix: str = "o", seg: str = "seg") -> list:
        """Segment ``seg``'s state of the row (``part_*``) into the ``prefix`` registers."""
        out = []
        for r, st in self.states.items():
            if isinstance(st, ComponentState):
                for c in range(st.count):
                    load = Assign(st.comp(prefix, c), f"part_{r}[row, {seg}, {self.component(c)}]")
                    cond = self.inside(self.size[r], c)
                    out += [load] if cond is None else [If(cond, (load,), (Assign(st.comp(prefix, c), st.identity),))]
            else:
                out.append(Assign(st.var(prefix), f"part_{r}[row, {seg}]"))
        return out

    def kernels(self, nseg: int) -> list:
        from ..kernels import kernel_args

        args = kernel_args(self.c)
        if nseg <= 1:
            body = self.threads_setup() + self.row_setup("cuda.blockIdx.x") + self.fold_range("0", "length")
            return [("kernel", args, "rows", body + self.outputs())]
        common = [a for a in args if not a.startswith("out_") and a not in ("rows", "length")]
        part = [f"part_{r.name}" for r in self.c.reductions]
        outs = [a for a in args if a.startswith("out_")]
        body = self.threads_setup() + self.row_setup("cuda.blockIdx.x")
        body += [Assign("seg", "cuda.blockIdx.y"), Assign("lo", "seg * seglen"), Assign("hi", "min(lo + seglen, length)")]
        body += self.fold_range("lo", "hi") + self.write_part()
        # (launched dependent, Spec.dependent: the combine waits for the whole partial kernel before reading its states)
        combine = [Call("grid_wait", ())] * self.spec.dependent + self.combine()
        return [("partial", tuple(common + part + ["rows", "length", "seglen"]), "rows_segments", body),
                ("combine", tuple(common + part + outs + ["rows", "length", "nseg"]), "combine", combine)]

    def combine(self) -> list:
        """The combine kernel's body: a row's segments (``part_*``) merged in order by the derived merge, then its
        outputs. (Also the second kernel of the tensor-core strategies' segments, which write the same states.)"""
        return self.threads_setup() + self.row_setup("cuda.blockIdx.x") + self.merged_row()

    def merged_row(self, seg: str = "seg") -> list:
        """The row's ``nseg`` segment states (:meth:`read_part`) merged in order by the derived merge (the loop over
        them counted in ``seg``), then its outputs: the combine kernel's work on a row, which ``mma``'s cluster merge
        does too (:class:`~.mma.ClusterMerge`, the states read from the cluster's shared memory)."""
        # several segments' states loaded at once (the last segment's again past the end), then merged in order
        slots = COMBINE_SLOTS
        body = [s for u, pre in enumerate(slots) for s in self.read_part(pre, f"min({seg} + {u}, nseg - 1)")]
        for u, pre in enumerate(slots):
            body += self.merge(pre) if u == 0 else [If(f"{seg} + {u} < nseg", tuple(self.merge(pre)))]
        return self.each_state("init", "s") + [For(seg, "0", "nseg", tuple(body), str(len(slots)))] + self.outputs()

    def scratch(self) -> tuple:
        return tuple((f"part_{r.name}", "float32", "segments",
                      None if self.c.sizes[r.name] is None else self.lay.size_const(self.c.sizes[r.name]))
                     for r in self.c.reductions)


# -- registration ------------------------------------------------------------------------------------------
def build(fused: FusedCascade, spec: Spec, target: str):
    from ..module import assemble

    if target == "cpu":
        raise RedalgebraError("the vrows strategy is CUDA-only (a group of lanes per element)")
    k = VRowsKernel(fused, spec)
    kernels = k.kernels(spec.segments)
    c = fused.cascade
    outputs = tuple((o.name, "row", None if c.sizes[o.name] is None else k.lay.size_const(c.sizes[o.name]))
                    for o in c.outputs)
    src = assemble(fused, spec, target, "vrows", kernels, k.consts, k.lay.constants, outputs, {})
    if spec.segments > 1:
        from dataclasses import replace

        src = replace(src, scratch=k.scratch(), entries=tuple((n, a, g) for n, a, g, _ in kernels))
    return src


def configure(fused: FusedCascade, p: Problem) -> dict:
    """Lanes per element from the widest vector (16 bytes each), 128 threads, 4 elements per group in flight,
    and segments when the rows alone would not keep the GPU busy."""
    c = fused.cascade
    sizes, dtypes = dict(p.sizes), dict(p.dtypes)
    vectors = [s for s in c.inputs if s.size is not None]
    reason = refusal(fused)
    if reason is not None:
        raise RedalgebraError(reason)

    def length_of(s):
        return s.size if isinstance(s.size, int) else sizes[s.size]
    kinds = {VEC[dtypes.get(s.name, "float32")] for s in vectors}
    item = {s.name: 16 // VEC[dtypes.get(s.name, "float32")] for s in vectors}
    wide = p.vec_ok and len(kinds) == 1 and all(length_of(s) * item[s.name] % 16 == 0 for s in vectors)
    vec = kinds.pop() if wide else 1
    chunks = max(-(-length_of(s) // vec) for s in vectors)
    group = p.option("group") or min(32, pow2(chunks))
    held = sum(-(-(-(-length_of(s) // vec)) // group) * vec for s in vectors)
    if held > MOST_PER_LANE:
        raise RedalgebraError(f"vrows: each lane would hold {held} components of {c.name}'s vectors per element "
                              f"(at most {MOST_PER_LANE}); use lanes or split_lanes")
    threads = p.option("threads") or (64 if p.option("simulator") else 128)
    tile = p.option("tile") or (2 if p.option("simulator") else 4 if -(-chunks // group) * vec <= 16 else 2)
    per_step = threads // group * tile
    nseg = p.option("segments")
    if nseg is None:
        busy = p.busy_blocks()
        nseg = 1 if p.rows >= busy else min(-(-busy // max(p.rows, 1)), -(-p.length // (2 * per_step)))
    nseg = max(1, min(int(nseg), max(p.length, 1)))
    # (the combine launched while the partial kernel runs, on Hopper: :data:`DEPENDENT_COMBINE`)
    dependent = bool(DEPENDENT_COMBINE) and nseg > 1 and p.dependent_launch()
    return dict(threads=threads, group=group, vec=vec, tile=tile, segments=nseg, nseg=nseg,
                fast_exp=p.option("fast_exp", False), dependent=dependent)


def grid(rows: int, spec: Spec, named) -> dict:
    return {"rows": (rows, spec.threads), "rows_segments": ((rows, spec.segments), spec.threads),
            "combine": (rows, 32)}  # whole warps: the group's shuffles name every lane


register(Strategy("vrows", "cuda", "a group of lanes per element vector (attention's keys and values), 128-bit "
                  "loads, several elements in flight, segments across blocks for few rows", build, configure, grid,
                  whole_warps=True))
