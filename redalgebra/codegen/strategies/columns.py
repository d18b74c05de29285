"""``columns``: rows that share their vector inputs, processed together, the scalar reductions first.

FP8 quantisation + GEMM and RMSNorm + GEMM are cascades over a token's hidden dimension whose elements
are a scalar (the activation ``x``) and a weight row ``w[n]`` that every token shares. Run row by row,
each token re-reads all the weights; and the fused form rounds at a *running* scale, so FP8 outputs
differ from quantising at the row's absmax. This strategy takes the *level order* instead:

1. **The scalar reductions first** (``max(abs(x))``, ``sum(x**2)``, LayerNorm's statistics): they read
   only the small per-token operand, so a first kernel computes them exactly — the ``rows`` kernel of
   the cascade's scalar part — and writes one value per row.
2. **The vector reductions with their dependencies final**: every body is a scalar factor times a
   vector input (``fp8(x * 448 / max(a, 1e-12)) * w``), summed. A block takes a batch of ``BM`` rows
   and ``CB`` chunks of 16 bytes of the columns; per step it stages the factors of ``KT`` elements for
   its rows in shared memory, then each thread reads its chunk of ``w`` for ``KT / KS`` elements (one
   128-bit load each, all in flight) and adds ``factor × w`` into ``BM × vec`` registers. The weights
   are read once per batch of rows, not once per row. No correction, no rescaling: with the scale
   final, the FP8 rounding is the reference's, so the result is the unfused result up to float32
   summation order.
3. The ``KS`` threads that split a chunk's elements meet in shared memory; few blocks split the axis
   into segments across blocks, summed in order by a third kernel that finalizes and stores.
"""

from __future__ import annotations

import functools
import math

import sympy as sp

from ...derive import FusedCascade
from ...errors import RedalgebraError
from ...ir.functions import Dot, VSum
from ...ir.nodes import Cascade, Input, Let, Output, Param, Reduction
from ..emit import Spec
from ..tree import Assign, Barrier, For, If, Load, Shared, Store
from . import VEC, Problem, Strategy, pow2, register
from .base import TreeKernel

#: Accumulators a thread holds per vector reduction (rows of the batch × columns of its chunk).
ACCUMULATORS = 64
#: Elements of the axis each thread reads per inner step (its loads in flight).
UNROLL = 8
#: Elements per thread per pass of the scalar reductions' kernel.
PREPASS_TILE = 32
#: Shared memory for the staged factors of all vector reductions (float32, rows of the batch × elements of the
#: span); with the 32 KB where the threads of a chunk meet, under the 48 KB a block may declare statically.
STAGE_BYTES = 12 * 1024


def _vectors(expr, names) -> set:
    return {s.name for s in expr.free_symbols} & names


def refusal(fused: FusedCascade) -> str | None:
    """Why ``columns`` cannot build this cascade's kernels (None: it can)."""
    c = fused.cascade
    vin = {s.name for s in c.inputs if s.size is not None}
    if not vin:
        return f"the columns strategy is for elements with vector inputs shared by rows; {c.name} has none: use rows"
    if fused.per_element_outputs:
        return f"columns writes row outputs only; {c.name} has per-element outputs: use lanes or tile"
    for r in c.reductions:
        if r.monoid.k is not None:
            return f"columns does not hold top-k states ({c.name}); use lanes"
    for e in [e for _, e in fused.prologue.steps] + list(fused.bodies.values()) + [e for _, e in fused.finalize.steps]:
        if any(isinstance(a, (Dot, VSum)) for a in sp.preorder_traversal(e)):
            return f"columns needs the components independent; {c.name} has a dot product or a sum(v): use vrows"
    if any(_vectors(e, vin) for _, e in fused.prologue.steps):
        return f"columns: a per-element let of {c.name} reads a vector; use vrows or lanes"
    sizes = {c.sizes[s] for s in vin} | {c.sizes[r.name] for r in c.reductions if c.sizes[r.name] is not None}
    if len(sizes) != 1:
        return f"columns needs one vector length; {c.name} has {sorted(map(str, sizes))}: use vrows or lanes"
    vred = {r.name for r in c.reductions if c.sizes[r.name] is not None}
    for r in c.reductions:
        body = fused.bodies[r.name]
        if r.name not in vred:
            continue
        if r.monoid.name != "add":
            return f"columns sums its vector reductions; {r.name} is a {r.monoid.name}: use vrows or lanes"
        if _vectors(body, vred):
            return f"columns: the vector reduction {r.name} reads another vector reduction; use vrows or lanes"
        factor, vector = split_body(body, vin)
        if vector is None:
            return (f"columns needs each vector reduction's body as a scalar times a vector input; {r.name} = "
                    f"{body}: use vrows or lanes")
    return None


def split_body(body, vector_inputs: set):
    """``(factor, vector input symbol)`` with ``body = factor * vector``, or ``(None, None)``. The factor may read other
    vector inputs through their dot products (``exp(dot(q, k) - m) * v``, attention written without a let): a
    scalar of the element, as a let naming the product is."""
    found = []
    for sym in (s for s in body.free_symbols if s.name in vector_inputs):
        factor, rest = body.as_independent(sym, as_Add=False)
        scalar = factor.replace(lambda e: isinstance(e, Dot), lambda e: sp.Integer(1))  # (its dot products' places)
        if rest == sym and not any(s.name in vector_inputs for s in scalar.free_symbols):
            found.append((factor, rest))
    return found[0] if len(found) == 1 else (None, None)


def scalar_part(fused: FusedCascade) -> FusedCascade | None:
    """The cascade's scalar reductions as a cascade of their own (outputs ``pre_<r>``), derived; None if none."""
    return _scalar_part(fused.cascade)


def scalars_fuse(fused: FusedCascade) -> bool:
    """Whether the scalar reductions fuse among themselves (their kernel is a one-pass ``rows`` kernel). The
    cascade as a whole need not fuse: the level order runs ``int8`` quantisation + GEMM, whose rounding does not
    separate, exactly as the unfused form."""
    sub = scalar_part(fused)
    return sub is None or sub.analysis.fusable


@functools.lru_cache(maxsize=64)
def _scalar_part(c: Cascade) -> FusedCascade | None:
    from ...derive import derive, unfused
    from ...errors import NotFusableError

    scal = [r for r in c.reductions if c.sizes[r.name] is None]
    if not scal:
        return None
    keep, stmts = set(), []
    for s in c.statements:
        if isinstance(s, (Input, Param)) and s.size is None:
            stmts.append(s)
            keep.add(s.name)
        elif isinstance(s, Let) and {x.name for x in s.expr.free_symbols} - {"pos"} <= keep:
            stmts.append(s)
            keep.add(s.name)
        elif isinstance(s, Reduction) and c.sizes[s.name] is None:
            stmts.append(s)
            keep.add(s.name)
    stmts += [Output(f"pre_{r.name}", r.symbol) for r in scal]
    sub = Cascade(tuple(stmts), name=f"{c.name}_scalars")
    try:
        return derive(sub)
    except NotFusableError:
        return unfused(sub)  # scalars_fuse says no; the kernel refuses it by name


def factor_part(fused: FusedCascade) -> tuple[FusedCascade, str] | None:
    """The scalar part (:func:`scalar_part`) with the factor of the one vector reduction as a per-element output
    (RMSNorm's ``g * x / sqrt(ss / h + eps)``), derived, and that output's name (``fac``, or a name no statement of the
    cascade takes): a ``rows`` kernel of it reduces a row held in registers and writes its factors from them. None
    where there is no scalar reduction, more than one vector reduction, or the scalar part does not fuse."""
    c = fused.cascade
    vin = {s.name for s in c.inputs if s.size is not None}
    vred = [r for r in c.reductions if c.sizes[r.name] is not None]
    sub = scalar_part(fused)
    if sub is None or len(vred) != 1 or not sub.analysis.fusable:
        return None
    factor, _ = split_body(fused.bodies[vred[0].name], vin)
    return _factor_part(sub.cascade, factor)


@functools.lru_cache(maxsize=64)
def _factor_part(sub: Cascade, factor) -> tuple[FusedCascade, str] | None:
    from ...derive import derive

    taken = {s.name for s in sub.statements if hasattr(s, "name")}
    out = next(name for name in (f"fac{'_' * n}" for n in range(len(taken) + 1)) if name not in taken)
    try:
        return derive(Cascade(sub.statements + (Output(out, factor),), name=sub.name)), out
    except RedalgebraError:  # (not fusable, or a form the derivation refuses: the module keeps columns' kernel)
        return None


class ColumnsKernel(TreeKernel):
    """Builds the kernels of a ``columns`` module: scalars (a rows kernel), the column tiles, their combine."""

    def __init__(self, fused: FusedCascade, spec: Spec):
        super().__init__(fused, spec, refusal)
        c = self.c
        self.pre = self._prepass_kernel()  # first: the module's constants are its table, shared from here on
        if self.pre:
            self.consts, self.counter = self.pre.consts, self.pre.counter
        self.vin = [s.name for s in c.inputs if s.size is not None]
        self.sin = [s.name for s in c.inputs if s.size is None]
        self.scalar_reds = [r.name for r in c.reductions if c.sizes[r.name] is None]
        self.vector_reds = [r.name for r in c.reductions if c.sizes[r.name] is not None]
        size = next(c.sizes[s] for s in self.vin)
        self.n_const = self.lay.size_const(size)
        self.n = self.lay.constants[self.n_const]
        self.factors = {r: split_body(fused.bodies[r], set(self.vin)) for r in self.vector_reds}
        self.dtypes = dict(spec.dtypes)
        self.vec, self.cb, self.bm, self.kt = spec.vec, spec.group, spec.batch, spec.tile
        self.check_launch()

    def check_launch(self) -> None:
        """Refuse a launch shape the tiles kernel cannot take."""
        spec = self.spec
        self.ks = spec.threads // self.cb
        self.step = self.ks * UNROLL  # elements of one inner step: UNROLL per thread, all loads in flight
        if spec.threads % self.cb or self.kt % self.step:
            raise RedalgebraError(f"columns: {spec.threads} threads hold whole groups of {self.cb} column chunks, "
                                  f"and a span of {self.kt} elements whole steps of {self.step}")

    def base(self):
        acc = self.lay.base_access()
        if self.spec.fast_exp:
            acc.exp = "fast_exp"
        return acc

    # -- 1. the scalar reductions ---------------------------------------------------------------
    def _prepass_kernel(self):
        """The ``rows`` kernel of the cascade's scalar part: a block per row walking it (the small operand)."""
        from .rows import RowsKernel

        sub = scalar_part(self.f)
        if sub is None:
            return None
        if not sub.analysis.fusable:
            raise RedalgebraError(f"columns: the scalar reductions of {self.c.name} do not fuse among themselves "
                                  f"({sub.guards[0]}); use unfused")
        names = {s.name for s in sub.cascade.inputs}
        # 32 elements per thread per pass, their loads in flight: a 7168-wide row in 2 passes (with 2 per thread,
        # 28 passes of one load's latency each made the FP8 GEMM's one-token call wait on this kernel), 16 bytes a
        # load where the rows are aligned (pre_vec)
        vec = self.spec.pre_vec
        threads = self.row_threads()
        spec = Spec(self.spec.sizes, tuple((k, v) for k, v in self.spec.dtypes if k in names), self.spec.has_keep,
                    threads=threads, group=threads, tile=max(1, PREPASS_TILE // vec), vec=vec,
                    resident=False, fast_exp=self.spec.fast_exp)
        return RowsKernel(sub, spec)

    def row_threads(self) -> int:
        """Threads of the scalar reductions' kernel (a block per row): the module's."""
        return self.spec.threads

    def bounds(self) -> dict:
        """Launch bounds of the kernels launched with other blocks than the module's, by name."""
        return {}

    def registers(self) -> dict:
        """A thread's registers at most, by kernel name, where capped (``max_registers``)."""
        return {}

    def prepass(self):
        from ..kernels import kernel_args

        if self.pre is None:
            return None
        return ("scalars", kernel_args(self.pre.c), "scalars", self.pre.body())

    # -- 2. the column tiles ----------------------------------------------------------------------
    def row_scalars(self, acc, row: str, held: bool = False) -> list:
        """Statements binding, for ``row``, the scalar params and the scalar reductions' final values (``held``:
        already in their registers ``p_<name>`` and ``f_<r>``: bound by the scalar kernel's body in this one)."""
        out = []
        if not held:
            out += [Assign(f"p_{p.name}", f"{p.name}[{row}]") for p in self.c.params if p.size is None]
            out += [Assign(f"f_{r}", f"out_pre_{r}[{row}]") for r in self.scalar_reds]
        for r in self.scalar_reds:
            acc.scalar[r] = f"f_{r}"
        return out

    def stage(self) -> list:
        """The factors of the step's ``KT`` elements for the batch's rows, into shared ``gen_sf_<r>[gen_m, gen_i]``."""
        acc = self.base()
        body = [Assign("gen_m", f"gen_idx // {self.kt}"), Assign("gen_i", f"gen_idx % {self.kt}"),
                Assign("l", "base + gen_i"), Assign("row", "min(r0 + gen_m, rows - 1)")]
        body += self.row_scalars(acc, "row")
        ok = "l < hi and r0 + gen_m < rows" + (" and keep[row, min(l, length - 1)] != 0" if self.spec.has_keep else "")
        inside = [Assign("lc", "min(l, hi - 1)")]
        for s in self.sin:
            inside.append(Assign(f"rr_{s}", f"row // rep_{s}"))
            inside.append(Load((f"e_{s}",), s, f"rr_{s}", "lc", self.dtypes.get(s, "float32")))
        acc.scalar["pos"] = "float32(lc)"
        acc.scalar["element.index"] = "lc"
        for sym, expr in self.f.prologue.steps:
            pre, text = self.print(expr, acc)
            inside += pre + [Assign(f"e_{sym.name}", text)]
        zero = self.consts.name(0.0)
        for r in self.vector_reds:
            factor, _ = self.factors[r]
            pre, text = self.print(factor, acc)
            inside += pre + [Assign(f"gen_sf_{r}[gen_m, gen_i]", text)]
        flag = [Assign("sk[gen_m, gen_i]", "1")] if self.spec.has_keep else []
        unflag = [Assign("sk[gen_m, gen_i]", "0")] if self.spec.has_keep else []
        body.append(If(ok, tuple(inside + flag), tuple([Assign(f"gen_sf_{r}[gen_m, gen_i]", zero) for r in self.vector_reds]
                                                       + unflag)))
        return [For("gen_idx", "tid", str(self.bm * self.kt), tuple(body), str(self.spec.threads))]

    def accumulate(self) -> list:
        """This thread's chunk of every vector input for its ``UNROLL`` elements of an inner step (index ``sub``
        within the span), times the factors."""
        out, v = [], self.vec
        vectors = sorted({str(self.factors[r][1]) for r in self.vector_reds})
        zero = self.consts.name(0.0)
        for u in range(UNROLL):
            out.append(Assign(f"l{u}", f"base + sub + kt + {u * self.ks}"))
            for x in vectors:
                regs = tuple(f"gen_w_{x}_{u}_{c}" for c in range(v))
                load = Load(regs, x, (f"gen_rw_{x}", f"min(l{u}, hi - 1)"), "col0", self.dtypes.get(x, "float32"))
                out.append(If("colok", (load,), tuple(Assign(r_, zero) for r_ in regs)))
                # past the range: the weights of the clamped element are not this one's (an inf there times the
                # factor's 0 would be NaN)
                out.append(If(f"l{u} >= hi", tuple(Assign(r_, zero) for r_ in regs)))
        for u in range(UNROLL):
            for r in self.vector_reds:
                x = str(self.factors[r][1])
                for m in range(self.bm):
                    out.append(Assign(f"s_{m}", f"gen_sf_{r}[{m}, sub + kt + {u * self.ks}]"))
                    fma = [Assign(f"gen_a_{r}_{m}_{c}", f"s_{m} * gen_w_{x}_{u}_{c}", "+") for c in range(v)]
                    # a masked element adds nothing, whatever its weights hold (the reference skips it)
                    out += [If(f"sk[{m}, sub + kt + {u * self.ks}] != 0", tuple(fma))] if self.spec.has_keep else fma
        return out

    def meet(self) -> list:
        """The ``KS`` threads of a chunk sum their accumulators in order; thread ``kt`` keeps rows ``kt, kt + KS, …``."""
        out, v = [], self.vec
        width = self.cb * v
        out.append(Shared("red", (str(self.ks), str(self.bm), str(width))))
        for r in self.vector_reds:
            out += [Assign(f"red[kt, {m}, ct * {v} + {c}]", f"gen_a_{r}_{m}_{c}") for m in range(self.bm) for c in range(v)]
            out.append(Barrier())
            for mi in range(-(-self.bm // self.ks)):
                keep = []
                for c in range(v):
                    total = f"t_{r}_{mi}_{c}"
                    keep.append(Assign(total, f"red[0, kt + {mi * self.ks}, ct * {v} + {c}]"))
                    keep.append(For("gen_k", "1", str(self.ks),
                                    (Assign(total, f"red[gen_k, kt + {mi * self.ks}, ct * {v} + {c}]", "+"),)))
                out.append(If(f"kt + {mi * self.ks} < {self.bm}", tuple(keep)))
            out.append(Barrier())
        return out

    def finish(self, row: str, col: str, totals, acc) -> list:
        """The outputs of ``row`` at column ``col`` and the ``len(totals) - 1`` columns after it, from each column's
        vector totals (``totals[k](r)``: text) and the scalars; a vector output of several columns is one store of
        their values (``st_f32x2`` for two neighbours), each computed where its column's totals are bound."""
        out, outs = [], {o.name for o in self.c.outputs}
        for sym, expr in self.f.finalize.steps:
            if self.c.sizes.get(sym.name) is None:
                # a scalar: every thread computes it (later steps read the register); the first column writes it out
                pre, text = self.print(expr, acc)
                out += pre + [Assign(f"t_{sym.name}", text)]
                if sym.name in outs:
                    out.append(If(f"{col} == 0", (Assign(f"out_{sym.name}[{row}]", f"t_{sym.name}"),)))
                acc.scalar[sym.name] = f"t_{sym.name}"
                continue
            values = []
            for k, total in enumerate(totals):
                for r in self.vector_reds:
                    acc.vector[r] = total(r)
                for p in self.c.params:
                    if p.size is not None:
                        acc.vector[p.name] = f"{p.name}[{row}, {col}{f' + {k}' if k else ''}]"
                pre, text = self.print(expr, acc, "0")
                if len(totals) > 1:  # (bound first: the next column's statements may reuse a temporary's name)
                    pre, text = pre + [Assign(f"sv_{k}_{sym.name}", text)], f"sv_{k}_{sym.name}"
                out += pre
                values.append(text)
            out.append(Store(f"out_{sym.name}", row, col, tuple(values), dict(self.spec.out_dtypes).get(sym.name, "float32")))
        return out

    def tiles(self) -> list:
        v, segmented = self.vec, self.spec.segments > 1
        out = [Assign("tid", "cuda.threadIdx.x"), Assign("ct", f"tid % {self.cb}"), Assign("kt", f"tid // {self.cb}"),
               Assign("col0", f"(cuda.blockIdx.y * {self.cb} + ct) * {v}"), Assign("colok", f"col0 < {self.n}"),
               Assign("r0", f"cuda.blockIdx.x * {self.bm}"), Assign("seg", "cuda.blockIdx.z"),
               Assign("lo", "seg * seglen"), Assign("hi", "min(lo + seglen, length)")]
        for x in self.vin:  # a batch shares its weight row (the policy makes the batch divide the repeat)
            out.append(Assign(f"gen_rw_{x}", f"min(r0, rows - 1) // rep_{x}"))
        out += [Shared(f"gen_sf_{r}", (str(self.bm), str(self.kt))) for r in self.vector_reds]
        if self.spec.has_keep:  # which staged elements the mask keeps
            out.append(Shared("sk", (str(self.bm), str(self.kt)), "int32"))
        zero = self.consts.name(0.0)
        out += [Assign(f"gen_a_{r}_{m}_{c}", zero) for r in self.vector_reds for m in range(self.bm) for c in range(v)]
        # the span's factors staged once, then inner steps without barriers (warps stream their loads freely)
        inner = For("sub", "0", f"min({self.kt}, hi - base)", tuple(self.accumulate()), str(self.step))
        span = self.stage() + [Barrier(), inner, Barrier()]
        out.append(For("base", "lo", "hi", tuple(span), str(self.kt)))
        out += self.meet()
        for mi in range(-(-self.bm // self.ks)):
            m, row = f"kt + {mi * self.ks}", f"r0 + kt + {mi * self.ks}"
            cols = []
            for c in range(v):
                col = f"col0 + {c}"
                if segmented:
                    stmts = [Assign(f"part_{r}[{row}, seg, {col}]", f"t_{r}_{mi}_{c}") for r in self.vector_reds]
                else:
                    acc = self.base()
                    stmts = self.row_scalars(acc, row) + self.finish(row, col, [lambda r: f"t_{r}_{mi}_{c}"], acc)
                cols.append(If(f"{col} < {self.n}", tuple(stmts)))
            out.append(If(f"{m} < {self.bm} and {row} < rows", tuple(cols)))
        return out

    # -- 3. the segments' sums ------------------------------------------------------------------
    def combine(self) -> list:
        acc = self.base()
        out = [Assign("tid", "cuda.threadIdx.x"), Assign("col", f"cuda.blockIdx.y * {self.spec.threads} + tid"),
               Assign("row", "cuda.blockIdx.x")]
        body = self.row_scalars(acc, "row")
        for r in self.vector_reds:
            body += [Assign(f"t_{r}", f"part_{r}[row, 0, col]"),
                     For("seg", "1", "nseg", (Assign(f"t_{r}", f"part_{r}[row, seg, col]", "+"),))]
        body += self.finish("row", "col", [lambda r: f"t_{r}"], acc)
        return out + [If(f"col < {self.n}", tuple(body))]

    def kernels(self) -> list:
        from ..kernels import kernel_args

        args = list(kernel_args(self.c))
        common = [a for a in args if a not in ("rows", "length")]
        pre = [f"out_pre_{r}" for r in self.scalar_reds]
        part = [f"part_{r}" for r in self.vector_reds] if self.spec.segments > 1 else []
        out = []
        first = self.prepass()
        if first is not None:
            out.append(first)
        out.append(("tiles", tuple(common + pre + part + ["rows", "length", "seglen"]), "tiles", self.tiles()))
        if part:
            out.append(("combine", tuple(common + pre + part + ["rows", "length", "nseg"]), "combine", self.combine()))
        return out

    def scratch(self) -> tuple:
        out = tuple((f"out_pre_{r}", "float32", "rows", None) for r in self.scalar_reds)
        if self.spec.segments > 1:
            out += tuple((f"part_{r}", "float32", "segments", self.n_const) for r in self.vector_reds)
        return out


# -- registration ----------------------------------------------------------------------------------------
def build(fused: FusedCascade, spec: Spec, target: str, kernel=None, name: str = "columns"):
    """The module of ``kernel`` (a :class:`ColumnsKernel` class; this one by default) for ``target``."""
    from dataclasses import replace

    from ..module import assemble

    if target == "cpu":
        raise RedalgebraError(f"the {name} strategy is CUDA-only")
    k = (kernel or ColumnsKernel)(fused, spec)
    kernels = k.kernels()
    c = fused.cascade
    outputs = tuple((o.name, "row", None if c.sizes[o.name] is None else k.lay.size_const(c.sizes[o.name]))
                    for o in c.outputs)
    constants = {**(k.pre.lay.constants if k.pre else {}), **k.lay.constants}
    src = assemble(fused, spec, target, name, kernels, k.consts, constants, outputs,
                   {n: d for n, d in spec.out_dtypes if d != "float32"}, k.bounds(), k.registers())
    return replace(src, scratch=k.scratch(), entries=tuple((n, a, g) for n, a, g, _ in kernels))


def prepass_vec(fused: FusedCascade, p: Problem) -> int:
    """Elements per load of the scalar reductions' kernel: 16 bytes where every row starts on a 16-byte boundary and
    the scalar inputs are of one width, else one."""
    kinds = {VEC[dict(p.dtypes).get(s.name, "float32")] for s in fused.cascade.inputs if s.size is None}
    return kinds.pop() if p.vec_ok and p.pitch_ok and len(kinds) == 1 else 1


def configure(fused: FusedCascade, p: Problem) -> dict:
    """Chunks of 16 bytes of the columns per block (32, or fewer for narrow vectors), 128 threads, a batch of rows
    as large as the accumulators allow that divides how often the vector inputs repeat, segments to fill the GPU."""
    reason = refusal(fused)
    if reason is not None:
        raise RedalgebraError(reason)
    c = fused.cascade
    sizes, dtypes, reps = dict(p.sizes), dict(p.dtypes), dict(p.reps)
    vectors = [s for s in c.inputs if s.size is not None]
    n = vectors[0].size if isinstance(vectors[0].size, int) else sizes[vectors[0].size]
    kinds = {VEC[dtypes.get(s.name, "float32")] for s in vectors}
    item = 16 // max(kinds)
    vec = kinds.pop() if p.vec_ok and len(kinds) == 1 and n * item % 16 == 0 else 1
    threads = p.option("threads") or (64 if p.option("simulator") else 128)
    chunks = -(-n // vec)
    cb = p.option("group") or min(32, pow2(chunks))
    cb = min(cb, threads)
    ks = threads // cb
    share = 0
    for s in vectors:  # rows that read the same vector row: a batch must not straddle two
        share = math.gcd(share, reps.get(s.name, 1))
    most = max(1, ACCUMULATORS // vec)
    batch = 1
    if share >= p.rows:  # one vector row for all rows: any batch
        while batch * 2 <= min(most, p.rows):
            batch *= 2
    else:
        while batch * 2 <= min(most, share) and share % (batch * 2) == 0:
            batch *= 2
    if p.option("batch"):
        want = p.option("batch")
        if want & (want - 1) or want > most or (share < p.rows and share % want):
            raise RedalgebraError(f"columns: a batch of {want} rows must be a power of two of at most {most} that "
                                  f"divides how many rows share each vector row ({share})")
        batch = want
    step = ks * UNROLL
    blocks = max(1, -(-chunks // cb) * -(-p.rows // batch))  # (no rows, or no columns: a launch of nothing)
    nseg = p.option("segments")
    if nseg is None:
        nseg = min(-(-p.busy_blocks() // blocks), max(1, -(-p.length // (4 * step))))
    nseg = max(1, min(int(nseg), max(p.length, 1)))
    # the span staged at once: the whole segment when its factors fit the shared memory, whole inner steps
    nvec = sum(1 for r in c.reductions if c.sizes[r.name] is not None)
    most_span = max(step, STAGE_BYTES // (4 * batch * nvec) // step * step)
    tile = p.option("tile") or min(most_span, -(-(-(-p.length // nseg)) // step) * step)
    if tile % step:
        raise RedalgebraError(f"columns: the staged span (tile) must be a multiple of {step} elements, got {tile}")
    return dict(threads=threads, group=cb, vec=vec, tile=tile, batch=batch, segments=nseg, nseg=nseg,
                fast_exp=p.option("fast_exp", False), pre_vec=prepass_vec(fused, p))


def vector_columns(spec: Spec, named) -> int:
    """The vector length n of a call's arguments: the last dimension of a vector input (the only 3-D arguments
    besides the scratch), or the first of one read K-major (:attr:`Spec.k_major`: bound as its (n, L) rows)."""
    if spec.k_major:
        return named[spec.k_major[0]].shape[0]
    return next(a.shape[2] for k, a in named.items() if getattr(a, "ndim", 0) == 3 and not k.startswith(("part_", "out_")))


def grid(rows: int, spec: Spec, named) -> dict:
    n = vector_columns(spec, named)
    chunks = -(-n // spec.vec)
    return {"scalars": (rows, spec.threads),
            # rows on x (up to 2**31 - 1 blocks), the columns on y (65535 blocks of 16-byte chunks: ample)
            "tiles": ((-(-rows // spec.batch), -(-chunks // spec.group), spec.segments), spec.threads),
            "combine": ((rows, -(-n // spec.threads)), spec.threads)}


register(Strategy("columns", "cuda", "rows sharing their vector inputs together: the scalar reductions first, then "
                  "column tiles of a batch of rows reading each vector element once, exact FP8 scales", build,
                  configure, grid, final_scales=True))
