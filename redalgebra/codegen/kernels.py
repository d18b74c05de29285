"""Kernel skeletons, filled from the derived programs.

Strategies (DESIGN §3a and the paper's fusion levels):

* ``row`` (CPU): ``numba.njit(parallel=True)``, one fused pass per row over ``prange``;
* ``thread``: a CUDA thread per row runs the incremental loop over the whole row;
* ``warp``: a warp per row — each lane runs the incremental loop over a strided
  share of the row, then the derived merge across lanes with shuffles;
* ``block``: a block per row — lanes, then warps (shuffles), then the warps'
  states through shared memory, merged by the first warp;
* ``block_shared``: a block per row without warp operations — every thread's
  state in shared memory, merged by a tree of ``syncthreads`` steps (the
  variant the CUDA simulator runs, which has no shuffles);
* ``tile``: a block per row that merges per tile, not per element — each thread
  loads ``TILE`` elements into registers, reduces them with the non-incremental
  form (tile max first, then one ``exp`` per element), and merges the tile's
  state into its running state once; when the row fits in the block's
  registers (``length <= THREADS * TILE``) the per-element outputs are written
  from the registers, so the row is read once; ``tile_shared`` is the same
  with the shuffle-free merge;
* ``lanes``: a block per row whose warps each take an element at a time, the
  lanes splitting the element's vectors (attention's head dimension) —
  see :mod:`.lanes`; ``split_lanes`` runs it per segment (:mod:`.multikernel`);
* ``nonincremental``: a block per row that stages the row's per-element scalars
  in shared memory, then runs the reductions in sequence over it, each a plain
  block reduction with its monoid — no corrections at all (the paper's
  non-incremental form; only when the row fits on chip).

Every skeleton is the same three pieces — the incremental loop, merges, and
the outputs — around the printed programs; no kernel is written by hand for a
workload.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import sympy as sp

from ..errors import RedalgebraError

from ..derive import FusedCascade
from .emit import (Layout, Spec, element_loads, emit_program, final_access, identity_value, merge_access,
                   update_access)
from .helpers import CACHE_LINE, CUDA_HELPERS, HELPER_CONSTANTS, HELPERS, LANE_HELPERS, SIM_MATH_LINES, cpu_header
from .lanes import LaneSkeletons, split_partial_dots
from .printer import Constants, print_expr

LANE_SUM = {"lanes": "rt_lane_sum({v})", "lanes_shared": "rt_lane_sum_shared({v}, lane_red, tid)",
            "split_lanes": "rt_lane_sum({v})", "split_lanes_shared": "rt_lane_sum_shared({v}, lane_red, tid)"}
FULL = "0xFFFFFFFF"


#: A "tiles" scratch array holds a value per element, each row padded with zeros to a multiple of this many elements
#: (whole tiles for the kernels that stage it: columns_wgmma's factors, 64 16-bit values a tile); a "fragments" one
#: the same with the rows rounded up to a multiple of 16 (columns_mma's factors, in the order its lanes read them);
#: an "axis" one a row of ``width`` values per element of the axis (columns_wgmma's e4m3 weights widened); a
#: "transposed" one ``width`` rows of the padded axis (columns_wgmma's e4m3 weights as rows for the FP8 products).
SCRATCH_TILE = 128


def scratch_shape(layout: str, rows: int, length: int, nseg: int, width: int | None = None) -> tuple:
    """The shape of a scratch array of ``layout``: its leading dimensions, then ``width`` when it has one."""
    padded = -(-length // SCRATCH_TILE) * SCRATCH_TILE
    if layout == "transposed":
        return (width, padded)
    lead = {"rows": (rows,), "segments": (rows, nseg), "tiles": (rows, padded), "axis": (length,),
            "fragments": (-(-rows // 16) * 16, padded)}[layout]
    return lead + (() if width is None else (width,))


#: Elements a block of the CPU's level order folds into a partial state before the row's state takes it: a float32
#: sum of L terms in one running total rounds as L grows (softmax entropy's over 2**20 near-equal logits: 4.2e-4 of the
#: result), in blocks as the block's length and their count do (1024 + 1024 terms: 4.0e-8).
LEVEL_BLOCK = 1024


def collective(lines: list) -> bool:
    """Whether printed statements sum a value over the lanes (``sum(o)`` of a vector the lanes hold in parts): a
    whole warp's collective (a block's through shared memory), which every thread must reach — never one thread
    under a branch."""
    return any("rt_lane_sum" in ln for ln in lines)


@dataclass(frozen=True)
class KernelSource:
    """Generated module text and how to call its kernel."""

    source: str
    backend: str
    strategy: str
    args: tuple          # kernel argument names, in order
    outputs: tuple       # (name, kind, size constant or None); kind: row | element
    constants: dict
    threads: int
    entries: tuple = ()  # multi-kernel strategies: (function name, argument names, grid), launched in order
    scratch: tuple = ()  # multi-kernel strategies: (array name, dtype, "segments" | "rows" | "tiles" | "fragments", width or None)
    out_dtypes: tuple = ()  # ((output name, stored dtype), ...) where not float32
    spec: object = None     # the Spec it was generated for
    written: tuple = ()     # scratch arrays not zero-filled per call: every launch writes whole before reading them
    #                         (or what it reads unwritten cannot reach a stored output: the strategy's build says)
    bounds: tuple = ()      # ((kernel name, launch bounds), ...) of kernels launched with other blocks than spec's


def kernel_args(c) -> tuple:
    """The argument names of a one-kernel module, in order: inputs, their row repeats, params, the mask,
    outputs (top-k indices last), the shape."""
    names = [s.name for s in c.inputs] + [f"rep_{s.name}" for s in c.inputs] + [p.name for p in c.params] + ["keep"]
    names += [f"out_{o.name}" for o in c.outputs] + [f"out_{r.name}_index" for r in c.reductions if r.monoid.k]
    return tuple(names + ["rows", "length"])


#: Elements the CPU's ``row`` kernel folds into a fresh state before merging it into the row's (:meth:`_Gen._body_row`).
CPU_CHUNK = 128


class _Gen(LaneSkeletons):
    def __init__(self, fused: FusedCascade, spec: Spec, backend: str, strategy: str):
        self.f, self.spec, self.backend, self.strategy = fused, spec, backend, strategy
        self.lay = Layout.of(fused, spec, LANE_SUM.get(strategy))
        self.consts = Constants()
        self.counter = itertools.count()
        self.c = fused.cascade
        self.varying = set(fused.per_element_outputs)

    # -- allocation and state ----------------------------------------------------------------------
    def local(self, size: str, kind: str = "float32") -> str:
        if self.backend == "cpu":
            return f"np.empty({size}, np.{kind})"
        return f"cuda.local.array({size}, {kind})"

    def alloc_state(self, prefixes=("s",)) -> list[str]:
        lines = []
        for p in prefixes:
            for r, size in self.lay.vector_state.items():
                lines.append(f"{p}_{r} = {self.local(self.lay.state_length(size))}")
            for r, size in self.lay.topk_state.items():
                lines += [f"{p}_{r} = {self.local(size)}", f"{p}i_{r} = {self.local(size, 'int32')}"]
        return lines

    def init_state(self, p: str = "s") -> list[str]:
        lines = []
        for r in self.lay.scalar_state:
            lines.append(f"{p}_{r} = {identity_value(self.lay, r, self.consts)}")
        for r, size in self.lay.vector_state.items():
            lines += self.lay.vector_loop(size, [f"{self.lay.state_ref(p, r)} = {identity_value(self.lay, r, self.consts)}"])
        for r, size in self.lay.topk_state.items():
            lines += [f"for j in range({size}):", f"    {p}_{r}[j] = NEG_INF", f"    {p}i_{r}[j] = -1"]
        return lines

    def copy_state(self, src, dst, src_index: str = "", dst_index: str = "") -> list[str]:
        """``dst ← src`` for every component; ``*_index`` selects a row of a shared array."""
        def at(name, idx, j=None):
            if idx and j is not None:
                return f"{name}[{idx}, {j}]"
            if idx:
                return f"{name}[{idx}]"
            return f"{name}[{j}]" if j is not None else name
        lines = [f"{at(f'{dst}_{r}', dst_index)} = {at(f'{src}_{r}', src_index)}" for r in self.lay.scalar_state]
        if self.lay.lanes:  # a lane's slots of each vector: local ``[t]``, shared ``[index, j]``
            for r, size in self.lay.vector_state.items():
                left = at(f"{dst}_{r}", dst_index, "j") if dst_index else self.lay.state_ref(dst, r)
                right = at(f"{src}_{r}", src_index, "j") if src_index else self.lay.state_ref(src, r)
                lines += self.lay.vector_loop(size, [f"{left} = {right}"])
        for r, size in {**({} if self.lay.lanes else self.lay.vector_state), **self.lay.topk_state}.items():
            lines += [f"for j in range({size}):", f"    {at(f'{dst}_{r}', dst_index, 'j')} = {at(f'{src}_{r}', src_index, 'j')}"]
            if r in self.lay.topk_state:
                lines.append(f"    {at(f'{dst}i_{r}', dst_index, 'j')} = {at(f'{src}i_{r}', src_index, 'j')}")
        return lines

    def shuffle(self, src: str, dst: str, call: str) -> list[str]:
        """``dst ← call(src)`` for every component (``call`` is a format with ``{v}``)."""
        lines = [f"{dst}_{r} = {call.format(v=f'{src}_{r}')}" for r in self.lay.scalar_state]
        for r, size in {**self.lay.vector_state, **self.lay.topk_state}.items():
            lines += [f"for j in range({size}):", f"    {dst}_{r}[j] = {call.format(v=f'{src}_{r}[j]')}"]
            if r in self.lay.topk_state:
                lines.append(f"    {dst}i_{r}[j] = {call.format(v=f'{src}i_{r}[j]')}")
        return lines

    # -- the pieces --------------------------------------------------------------------------------
    def row_setup(self) -> list[str]:
        lines = [f"p_{p.name} = {p.name}[row]" for p in self.c.params if p.size is None]
        lines += [f"rr_{s.name} = row // rep_{s.name}" for s in self.c.inputs]
        return lines

    def incremental(self, start: str, step: str, end: str = "length") -> list[str]:
        body = []
        if self.spec.has_keep:
            body.append("if keep[row, l] != 0:")
            inner = element_loads(self.lay, self.consts, self.counter)
            inner += emit_program(self.f.update, update_access(self.lay), self.consts, self.lay, self.counter, "update")
            body += ["    " + ln for ln in inner]
        else:
            body += element_loads(self.lay, self.consts, self.counter)
            body += emit_program(self.f.update, update_access(self.lay), self.consts, self.lay, self.counter, "update")
        return [f"for l in range({start}, {end}, {step}):"] + ["    " + ln for ln in body]

    def merge(self) -> list[str]:
        return emit_program(self.f.merge, merge_access(self.lay), self.consts, self.lay, self.counter, "merge")

    def outputs(self, lead: str, start: str, step: str, rows: bool = True, elements: bool = True) -> list[str]:
        """Row outputs (scalars by the thread where ``lead`` holds, vectors strided) and per-element outputs."""
        acc = final_access(self.lay)
        sizes = self.c.sizes
        scalar, strided, element, shared = [], [], [], []
        one = bool(self.lay.topk_state) and lead != "True" and not self.lay.lanes
        # with a top-k, one thread writes every vector component: threads hold the same top k, not always in the
        # same order (see RowsKernel.spread), and components from different threads could repeat an element.
        # (Under ``lanes`` every lane folds the same elements in the same order: their lists agree.) The
        # per-element outputs stay spread over the threads.
        vstart, vstep = ("0", "1") if one else (start, step)
        for sym, expr in self.f.finalize.steps:
            name = sym.name
            if name in self.varying:
                element.append((name, expr))
                continue
            size = sizes[name]
            if size is None:
                pre, text = print_expr(expr, acc, self.consts, None, self.counter)
                if collective(pre):  # (every thread holds the final states: each computes, ``lead`` stores)
                    shared += pre + [f"y_{name} = {text}"]
                    scalar.append(f"out_{name}[row] = y_{name}")
                else:
                    scalar += pre + [f"y_{name} = {text}", f"out_{name}[row] = y_{name}"]
            else:
                const = self.lay.size_const(size)
                pre, text = print_expr(expr, acc, self.consts, "j", self.counter)
                if self.lay.lanes:  # the first warp's lanes hold the components
                    loop = self.lay.vector_loop(const, pre + [f"out_{name}[row, j] = {text}"])
                    strided += ["if warp == 0:"] + ["    " + ln for ln in loop]
                else:
                    strided += pre + [f"for j in range({vstart}, {const}, {vstep}):", f"    out_{name}[row, j] = {text}"]
        for r, size in self.lay.topk_state.items():
            strided += [f"for j in range({vstart}, {size}, {vstep}):", f"    out_{r}_index[row, j] = si_{r}[j]"]
        lines = []
        if rows:
            lines += shared
            if scalar:
                lines += scalar if lead == "True" else [f"if {lead}:"] + ["    " + ln for ln in scalar]
            if one and strided:
                strided = [f"if {lead}:"] + ["    " + ln for ln in strided]
            lines += strided
        if elements and element:
            body = element_loads(self.lay, self.consts, self.counter)
            for name, expr in element:
                if sizes[name] is None:
                    pre, text = print_expr(expr, acc, self.consts, None, self.counter)
                    body += pre + [f"out_{name}[row, l] = {text}"]
                else:
                    pre, text = print_expr(expr, acc, self.consts, "j", self.counter)
                    body += pre + [f"for j in range({self.lay.size_const(sizes[name])}):",
                                   f"    out_{name}[row, l, j] = {text}"]
            lines += [f"for l in range({start}, length, {step}):"] + ["    " + ln for ln in body]
        return lines

    # -- signature ---------------------------------------------------------------------------------
    def args(self) -> tuple:
        return kernel_args(self.c)

    def output_specs(self) -> tuple:
        specs = []
        for o in self.c.outputs:
            size = self.c.sizes[o.name]
            specs.append((o.name, "element" if o.name in self.varying else "row",
                          None if size is None else self.lay.size_const(size)))
        specs += [(f"{r}.index", "index", k) for r, k in self.lay.topk_state.items()]
        return tuple(specs)

    # -- skeletons -----------------------------------------------------------------------------------
    def kernel_body(self) -> list[str]:
        return getattr(self, "_body_" + self.strategy)()

    def _body_row(self) -> list[str]:
        """A row in chunks of :data:`CPU_CHUNK` elements: each folded into a fresh state, then merged into the row's
        by the derived merge. A float32 running sum of L elements gathers an error growing with L (1.4e-4 of a mean
        at an offset of 1e4 over 5000 elements, where NumPy's pairwise sum keeps 2e-5); in chunks, with
        ``CPU_CHUNK + L / CPU_CHUNK``, as a two-level tree does (the GPU's strategies merge threads' states alike)."""
        body = self.alloc_state(("s", "o")) + self.row_setup() + self.init_state("s") + self.init_state("o")
        chunk = self.init_state("s") + self.incremental("c0", "1", f"min(c0 + {CPU_CHUNK}, length)")
        chunk += self.merge() + self.copy_state("s", "o")
        body += [f"for c0 in range(0, length, {CPU_CHUNK}):"] + ["    " + ln for ln in chunk]
        body += self.outputs("True", "0", "1")
        return ["for row in prange(rows):"] + ["    " + ln for ln in body]

    def _body_levels(self) -> list[str]:
        """CPU, the level order: every reduction in turn over the row, its dependencies final. No correction and no
        running scale: an ``fp8(…)`` cast rounds at the row's final scale, and a cascade that does not fuse runs as
        its unfused form does (a pass per reduction)."""
        a, b = sp.Symbol("__a", extended_real=True), sp.Symbol("__b", extended_real=True)
        body = self.alloc_state() + self.row_setup()
        for r in self.c.reductions:
            name, ident = r.name, identity_value(self.lay, r.name, self.consts)
            acc = final_access(self.lay)  # the earlier reductions, final; this one's state is the fold's left side
            element = element_loads(self.lay, self.consts, self.counter)
            merge = None  # a block's partial state folded into the row's (sums in blocks: see LEVEL_BLOCK)
            if name in self.lay.topk_state:
                size = self.lay.topk_state[name]
                body += [f"for j in range({size}):", f"    s_{name}[j] = NEG_INF", f"    si_{name}[j] = -1"]
                pre, text = print_expr(self.f.bodies[name], acc, self.consts, None, self.counter)
                element += pre + [f"rt_topk_insert(s_{name}, si_{name}, {text}, l)"]
            elif name in self.lay.vector_state:
                size = self.lay.vector_state[name]
                acc.vector[a.name], acc.size[a.name] = f"p_{name}[{{j}}]", size
                body += [f"p_{name} = np.empty({size}, np.float32)",
                         f"for j in range({size}):", f"    s_{name}[j] = {ident}"]
                pre, text = print_expr(r.monoid.combine(a, self.f.bodies[name]), acc, self.consts, "j", self.counter)
                element += [f"for j in range({size}):"] + ["    " + ln for ln in pre + [f"p_{name}[j] = {text}"]]
                both = self.lay.base_access()
                both.scalar.update({a.name: f"s_{name}[j]", b.name: f"p_{name}[j]"})
                _, joined = print_expr(r.monoid.combine(a, b), both, self.consts, None, self.counter)
                start = [f"for j in range({size}):", f"    p_{name}[j] = {ident}"]
                merge = (start, [f"for j in range({size}):", f"    s_{name}[j] = {joined}"])
            else:
                acc.scalar[a.name] = f"p_{name}"
                body.append(f"s_{name} = {ident}")
                pre, text = print_expr(r.monoid.combine(a, self.f.bodies[name]), acc, self.consts, None, self.counter)
                element += pre + [f"p_{name} = {text}"]
                both = self.lay.base_access()
                both.scalar.update({a.name: f"s_{name}", b.name: f"p_{name}"})
                _, joined = print_expr(r.monoid.combine(a, b), both, self.consts, None, self.counter)
                merge = ([f"p_{name} = {ident}"], [f"s_{name} = {joined}"])
            if self.spec.has_keep:
                element = ["if keep[row, l] != 0:"] + ["    " + ln for ln in element]
            if merge is None:
                body += ["for l in range(length):"] + ["    " + ln for ln in element]
            else:  # (each block's partial state, then the row's: a sum's rounding grows as the block and the blocks)
                start, fold = merge
                inner = [f"for l in range(lo, min(lo + {LEVEL_BLOCK}, length)):"] + ["    " + ln for ln in element]
                body += [f"for lo in range(0, length, {LEVEL_BLOCK}):"] + ["    " + ln for ln in start + inner + fold]
        body += self.outputs("True", "0", "1")
        return ["for row in prange(rows):"] + ["    " + ln for ln in body]

    def _body_thread(self) -> list[str]:
        lines = ["row = cuda.grid(1)", "if row < rows:"]
        body = self.alloc_state() + self.row_setup() + self.init_state() + self.incremental("0", "1")
        body += self.outputs("True", "0", "1")
        return lines + ["    " + ln for ln in body]

    def _warp_reduce(self) -> list[str]:
        loop = self.shuffle("s", "o", f"cuda.shfl_down_sync({FULL}, {{v}}, off)") + self.merge() + ["off //= 2"]
        return ["off = 16", "while off > 0:"] + ["    " + ln for ln in loop]

    def _body_warp(self) -> list[str]:
        lines = ["tid = cuda.threadIdx.x", "lane = tid % 32", f"row = cuda.blockIdx.x * {self.spec.threads // 32} + tid // 32",
                 "if row < rows:"]
        body = self.alloc_state(("s", "o")) + self.row_setup() + self.init_state() + self.incremental("lane", "32")
        body += self._warp_reduce()
        body += self.shuffle("s", "s", f"cuda.shfl_sync({FULL}, {{v}}, 0)")
        body += self.outputs("lane == 0", "lane", "32")
        return lines + ["    " + ln for ln in body]

    def shared_decls(self, count: str, prefix: str = "sh") -> list[str]:
        lines = [f"{prefix}_{r} = cuda.shared.array({count}, float32)" for r in self.lay.scalar_state]
        for r, size in {**self.lay.vector_state, **self.lay.topk_state}.items():
            lines.append(f"{prefix}_{r} = cuda.shared.array(({count}, {size}), float32)")
            if r in self.lay.topk_state:
                lines.append(f"{prefix}i_{r} = cuda.shared.array(({count}, {size}), int32)")
        return lines

    def _body_block(self) -> list[str]:
        nw = self.spec.threads // 32
        lines = self.shared_decls(str(nw))
        lines += ["tid = cuda.threadIdx.x", "lane = tid % 32", "warp = tid // 32", "row = cuda.blockIdx.x"]
        lines += self.alloc_state(("s", "o")) + self.row_setup() + self.init_state() + self.incremental("tid", str(self.spec.threads))
        lines += self._shuffle_tree()
        lines += self.outputs("tid == 0", "tid", str(self.spec.threads))
        return lines

    def _shared_tree(self) -> list[str]:
        """Every thread's state through shared memory, merged by a tree of syncthreads steps."""
        lines = self.copy_state("s", "sh", dst_index="tid") + ["cuda.syncthreads()"] + tree_loop(self.spec.threads)
        step = [tree_merges(self.spec.threads)]
        step += ["    " + ln for ln in self.copy_state("sh", "o", src_index="tid + stride") + self.merge()
                 + self.copy_state("s", "sh", dst_index="tid")]
        step += ["cuda.syncthreads()", "stride //= 2"]
        return lines + ["    " + ln for ln in step] + self.copy_state("sh", "s", src_index="0")

    def _shuffle_tree(self) -> list[str]:
        """Lanes by shuffles, then the warps' states through shared memory, merged by the first warp."""
        nw = self.spec.threads // 32
        lines = self._warp_reduce()
        lines += ["if lane == 0:"] + ["    " + ln for ln in self.copy_state("s", "sh", dst_index="warp")]
        lines += ["cuda.syncthreads()", "if warp == 0:"]
        first = [f"if lane < {nw}:"] + ["    " + ln for ln in self.copy_state("sh", "s", src_index="lane")]
        first += ["else:"] + ["    " + ln for ln in self.init_state()]
        first += self._warp_reduce()
        first += ["if lane == 0:"] + ["    " + ln for ln in self.copy_state("s", "sh", dst_index="0")]
        lines += ["    " + ln for ln in first]
        return lines + ["cuda.syncthreads()"] + self.copy_state("sh", "s", src_index="0")

    def _body_block_shared(self) -> list[str]:
        nt = self.spec.threads
        lines = self.shared_decls(str(nt))
        lines += ["tid = cuda.threadIdx.x", "row = cuda.blockIdx.x"]
        lines += self.alloc_state(("s", "o")) + self.row_setup() + self.init_state() + self.incremental("tid", str(nt))
        lines += self._shared_tree()
        lines += self.outputs("tid == 0", "tid", str(nt))
        return lines

    # -- tiles ---------------------------------------------------------------------------------------
    def _register_names(self) -> list[str]:
        return [s.name for s in self.c.inputs if s.size is None] + [sym.name for sym in self.f.prologue.results]

    def _tile_access(self):
        acc = self.lay.base_access()
        for name in self._register_names():
            acc.scalar[name] = f"xs_{name}_@I@"
        self._lane_registers(acc)
        self.lay.state_access(acc, "", "o")
        return acc

    def _unroll(self, template: list[str]) -> list[str]:
        """The template once per tile slot, ``@I@`` replaced by the slot: registers, not local memory."""
        return [ln.replace("@I@", str(i)) for i in range(self.spec.tile) for ln in template]

    def _slot_element(self, nt: int) -> str:
        """The element of tile slot ``@I@``: thread ``tid`` of the block, or warp ``warp`` in lane mode."""
        return f"base + @I@ * {nt // 32} + warp" if self.lay.lanes else f"base + @I@ * {nt} + tid"

    def _tile_load(self, nt: int, hi: str = "length") -> list[str]:
        ok = f"l < {hi}" + (" and keep[row, l] != 0" if self.spec.has_keep else "")
        acc = self.lay.base_access()
        self._lane_registers(acc)
        inner = element_loads(self.lay, self.consts, self.counter, acc)
        inner += [f"xs_{n}_@I@ = e_{n}" for n in self._register_names()]
        head = [f"l = {self._slot_element(nt)}", f"ok_@I@ = {ok}"]
        if self.lay.lanes:  # every lane takes part in the lane sums: past the end, read the last element
            at = [f"l = min({self._slot_element(nt)}, {hi} - 1)"]
            partial, rest = split_partial_dots(inner)
            fetch = head + [f"l = min(l, {hi} - 1)"] + self._stage_vectors() + partial
            return self._unroll(fetch) + self._unroll(at + rest)
        return self._unroll(head + ([f"if l < {hi}:"] + ["    " + ln for ln in inner] if inner else []))

    def _tile_state(self, nt: int) -> list[str]:
        """The tile's own state in ``o_*`` by the non-incremental form over the registers."""
        lines = self.init_state("o")
        acc = self._tile_access()
        fold = sp.Symbol("__fold", extended_real=True)
        for r in self.c.reductions:
            body = self.f.bodies[r.name]
            inner = [f"l = {self._slot_element(nt)}"]
            if r.name in self.lay.topk_state:
                pre, text = print_expr(body, acc, self.consts, None, self.counter)
                inner += pre + [f"rt_topk_insert(o_{r.name}, oi_{r.name}, {text}, l)"]
            elif r.name in self.lay.vector_state:
                acc.vector[fold.name] = self.lay.state_ref("o", r.name, template=True)
                acc.size[fold.name] = self.lay.vector_state[r.name]
                pre, text = print_expr(r.monoid.combine(fold, body), acc, self.consts, "j", self.counter)
                inner += pre + self.lay.vector_loop(self.lay.vector_state[r.name], [f"{self.lay.state_ref('o', r.name)} = {text}"])
            else:
                acc.scalar[fold.name] = f"o_{r.name}"
                acc.vector.pop(fold.name, None)  # (a vector reduction before this one bound it as a vector)
                pre, text = print_expr(r.monoid.combine(fold, body), acc, self.consts, None, self.counter)
                inner += pre + [f"o_{r.name} = {text}"]
            lines += self._unroll(["if ok_@I@:"] + ["    " + ln for ln in inner])
        return lines

    def _register_outputs(self, nt: int) -> list[str]:
        """Per-element outputs from the registers (the row was read once)."""
        acc = final_access(self.lay)
        sizes = self.c.sizes
        body = [f"e_{n} = xs_{n}_@I@" for n in self._register_names()]
        for sym, expr in self.f.finalize.steps:
            if sym.name not in self.varying:
                continue
            if sizes[sym.name] is not None:
                return []  # vector per-element outputs: read again from global memory
            pre, text = print_expr(expr, acc, self.consts, None, self.counter)
            body += pre + [f"out_{sym.name}[row, l] = {text}"]
        return self._unroll([f"l = @I@ * {nt} + tid", "if l < length:"] + ["    " + ln for ln in body])

    def _body_tile(self, shuffles: bool = True) -> list[str]:
        nt, tile = self.spec.threads, self.spec.tile
        lines = self.shared_decls(str(nt // 32 if shuffles else nt))
        lines += ["tid = cuda.threadIdx.x", "lane = tid % 32", "warp = tid // 32", "row = cuda.blockIdx.x"]
        lines += self.alloc_state(("s", "o"))
        lines += self._unroll([f"xs_{n}_@I@ = {self.consts.name(0.0)}" for n in self._register_names()])
        lines += self.row_setup() + self.init_state()
        chunk = self._tile_load(nt) + self._tile_state(nt) + self.merge()
        lines += [f"for base in range(0, length, {nt * tile}):"] + ["    " + ln for ln in chunk]
        lines += self._shuffle_tree() if shuffles else self._shared_tree()
        register_outputs = self._register_outputs(nt) if self.varying else []
        if register_outputs:
            lines += self.outputs("tid == 0", "tid", str(nt), elements=False)
            lines += [f"if length <= {nt * tile}:"] + ["    " + ln for ln in register_outputs]
            lines += ["else:"] + ["    " + ln for ln in self.outputs("tid == 0", "tid", str(nt), rows=False)]
        else:
            lines += self.outputs("tid == 0", "tid", str(nt))
        return lines

    # -- non-incremental ------------------------------------------------------------------------
    def _body_nonincremental(self) -> list[str]:
        nt, cap = self.spec.threads, self.spec.tile
        names = self._register_names()
        lines = [f"st_{n} = cuda.shared.array({cap}, float32)" for n in names]
        lines += [f"st_ok = cuda.shared.array({cap}, int32)", f"red = cuda.shared.array({nt}, float32)"]
        for r, size in self.lay.vector_state.items():
            lines.append(f"fv_{r} = cuda.shared.array({size}, float32)")
        lines += self.shared_decls(str(nt), "tk") if self.lay.topk_state else []
        lines += ["tid = cuda.threadIdx.x", "row = cuda.blockIdx.x"] + self.alloc_state(("s", "o")) + self.row_setup()
        ok = "1 if keep[row, l] != 0 else 0" if self.spec.has_keep else "1"
        stage = element_loads(self.lay, self.consts, self.counter) + [f"st_{n}[l] = e_{n}" for n in names]
        lines += [f"for l in range(tid, length, {nt}):"] + ["    " + ln for ln in stage + [f"st_ok[l] = {ok}"]]
        lines.append("cuda.syncthreads()")
        acc = self.lay.base_access()
        for n in names:
            acc.scalar[n] = f"st_{n}[l]"
        for r in self.c.reductions:
            if r.name in self.lay.vector_state:
                acc.vector[r.name], acc.size[r.name] = f"fv_{r.name}[{{j}}]", self.lay.vector_state[r.name]
            elif r.name in self.lay.topk_state:
                acc.vector[r.name], acc.size[r.name] = f"s_{r.name}[{{j}}]", self.lay.topk_state[r.name]
            else:
                acc.scalar[r.name] = f"s_{r.name}"
        a, b = sp.Symbol("__a", extended_real=True), sp.Symbol("__b", extended_real=True)
        for r in self.c.reductions:
            lines += self._staged_reduction(r, acc, a, b, nt)
        final = final_access(self.lay)
        final.vector.update({k: v for k, v in acc.vector.items() if k in self.lay.vector_state})
        body = [f"e_{n} = st_{n}[l]" for n in names]
        lines += self._outputs_with(final, body, nt)
        return lines

    def _staged_reduction(self, r, acc, a, b, nt, guard: str = "st_ok[l] != 0", loads=(), vector_out=None) -> list[str]:
        """One reduction as a plain block reduction: ``guard`` admits an element, ``loads`` reads it."""
        body = self.f.bodies[r.name]
        ident = identity_value(self.lay, r.name, self.consts)
        visit = [f"if {guard}:"] + ["    " + ln for ln in loads]
        if r.name in self.lay.vector_state:
            size = self.lay.vector_state[r.name]
            acc.vector[a.name], acc.size[a.name] = "acc_v", size
            acc.scalar[a.name] = "acc_v"
            pre, text = print_expr(r.monoid.combine(a, body), acc, self.consts, "j", self.counter)
            loop = [f"acc_v = {ident}", "for l in range(length):"] + ["    " + ln for ln in visit]
            loop += ["        " + ln for ln in pre] + [f"        acc_v = {text}", f"{vector_out or f'fv_{r.name}[j]'} = acc_v"]
            return [f"for j in range(tid, {size}, {nt}):"] + ["    " + ln for ln in loop] + ["cuda.syncthreads()"]
        if r.name in self.lay.topk_state:
            pre, text = print_expr(body, acc, self.consts, None, self.counter)
            fold = [f"for j in range({self.lay.topk_state[r.name]}):", f"    s_{r.name}[j] = NEG_INF",
                    f"    si_{r.name}[j] = -1", f"for l in range(tid, length, {nt}):"] + ["    " + ln for ln in visit]
            fold += ["        " + ln for ln in pre] + [f"        rt_topk_insert(s_{r.name}, si_{r.name}, {text}, l)"]
            return fold + self._staged_topk_tree(r.name, nt)
        acc.scalar[a.name] = "part"
        acc.vector.pop(a.name, None)  # (a vector reduction before this one bound it as a vector)
        pre, text = print_expr(r.monoid.combine(a, body), acc, self.consts, None, self.counter)
        fold = [f"part = {ident}", f"for l in range(tid, length, {nt}):"] + ["    " + ln for ln in visit]
        fold += ["        " + ln for ln in pre] + [f"        part = {text}", "red[tid] = part", "cuda.syncthreads()"]
        acc2 = self.lay.base_access()
        acc2.scalar.update({a.name: "red[tid]", b.name: "red[tid + stride]"})
        _, comb = print_expr(r.monoid.combine(a, b), acc2, self.consts, None, self.counter)
        tree = tree_loop(nt) + [f"    {tree_merges(nt)}", f"        red[tid] = {comb}",
                "    cuda.syncthreads()", "    stride //= 2", f"s_{r.name} = red[0]", "cuda.syncthreads()"]
        return fold + tree

    def _staged_topk_tree(self, r: str, nt: int) -> list[str]:
        size = self.lay.topk_state[r]
        lines = [f"for j in range({size}):", f"    tk_{r}[tid, j] = s_{r}[j]", f"    tki_{r}[tid, j] = si_{r}[j]",
                 "cuda.syncthreads()", *tree_loop(nt), f"    {tree_merges(nt)}",
                 f"        for j in range({size}):", f"            o_{r}[j] = tk_{r}[tid + stride, j]",
                 f"            oi_{r}[j] = tki_{r}[tid + stride, j]",
                 f"        rt_topk_merge(s_{r}, si_{r}, o_{r}, oi_{r})", f"        for j in range({size}):",
                 f"            tk_{r}[tid, j] = s_{r}[j]", f"            tki_{r}[tid, j] = si_{r}[j]",
                 "    cuda.syncthreads()", "    stride //= 2", f"for j in range({size}):",
                 f"    s_{r}[j] = tk_{r}[0, j]", f"    si_{r}[j] = tki_{r}[0, j]", "cuda.syncthreads()"]
        return lines

    def _outputs_with(self, acc, element_prefix: list[str], nt: int) -> list[str]:
        """Row outputs by thread 0 / strided, per-element outputs from the staged row."""
        sizes = self.c.sizes
        lines, element, vector = [], list(element_prefix), []
        one = bool(self.lay.topk_state)
        start, step = ("0", "1") if one else ("tid", str(nt))
        for sym, expr in self.f.finalize.steps:
            name = sym.name
            if name in self.varying:
                j = None if sizes[name] is None else "j"
                pre, text = print_expr(expr, acc, self.consts, j, self.counter)
                if j is None:
                    element += pre + [f"out_{name}[row, l] = {text}"]
                else:
                    element += pre + [f"for j in range({self.lay.size_const(sizes[name])}):",
                                      f"    out_{name}[row, l, j] = {text}"]
            elif sizes[name] is None:
                pre, text = print_expr(expr, acc, self.consts, None, self.counter)
                # (a collective: every thread holds the final states and computes, thread 0 stores)
                everyone, first = (pre, []) if collective(pre) else ([], pre)
                lines += everyone + ["if tid == 0:"] + ["    " + ln for ln in first + [f"out_{name}[row] = {text}"]]
            else:
                pre, text = print_expr(expr, acc, self.consts, "j", self.counter)
                vector += pre + [f"for j in range({start}, {self.lay.size_const(sizes[name])}, {step}):",
                                 f"    out_{name}[row, j] = {text}"]
        for r, size in self.lay.topk_state.items():
            vector += [f"for j in range({start}, {size}, {step}):", f"    out_{r}_index[row, j] = si_{r}[j]"]
        # with a top-k, thread 0 writes every component (see outputs)
        lines += ["if tid == 0:"] + ["    " + ln for ln in vector] if one and vector else vector
        if len(element) > len(element_prefix):
            lines += [f"for l in range(tid, length, {nt}):"] + ["    " + ln for ln in element]
        return lines

    def _body_tile_shared(self) -> list[str]:
        return self._body_tile(shuffles=False)

    # -- the module ----------------------------------------------------------------------------------
    def kernels(self) -> list:
        """``(name, args, grid, body)`` for each kernel; one ``kernel`` unless a strategy needs several."""
        return [("kernel", self.args(), "rows", self.kernel_body())]

    def scratch(self) -> tuple:
        return ()

    def module(self) -> KernelSource:
        kernels = self.kernels()  # printing the bodies registers the constants the header lists
        if self.backend == "cpu":
            header, device, kernel = cpu_header()
        else:
            # launch bounds let the compiler fit the registers to the block (a 1024-thread block
            # launches); the simulator takes no such option
            header = ["from numba import config, cuda, float32, int32", CACHE_LINE, *SIM_MATH_LINES, "",
                      f"BOUNDS = {{}} if config.ENABLE_CUDASIM else {{'launch_bounds': {self.spec.launch_bounds}, 'cache': CACHE}}"]
            device, kernel = "cuda.jit(device=True)", "cuda.jit(fastmath=False, **BOUNDS)"
        text = [f"# Generated by redalgebra from the cascade {self.c.name!r}: backend {self.backend}, "
                f"strategy {self.strategy}.", "# Do not edit; regenerate with redalgebra.codegen.generate().",
                "import math", "", "import numpy as np", *header, HELPER_CONSTANTS.strip(), *self.consts.lines()]
        text += [f"{k} = {v}" for k, v in sorted(self.lay.constants.items())]
        text.append(HELPERS.replace("{device}", device))
        if self.backend == "cuda":
            text.append(CUDA_HELPERS)
        if self.lay.lanes:
            text.append(LANE_HELPERS.replace("{device}", device))
        if self.spec.fast_exp:
            text.insert(text.index("import math") + 1, "from numba.cuda.libdevice import fast_expf")
        for name, args, _, body in kernels:
            text += ["", f"@{kernel}", f"def {name}({', '.join(args)}):"] + ["    " + ln for ln in body]
        entries = tuple((n, a, g) for n, a, g, _ in kernels) if len(kernels) > 1 else ()
        return KernelSource("\n".join(text) + "\n", self.backend, self.strategy, kernels[0][1], self.output_specs(),
                            dict(self.lay.constants), self.spec.threads, entries, self.scratch())


def generate(fused: FusedCascade, backend: str = "cpu", strategy: str | None = None,
             spec: Spec | None = None) -> KernelSource:
    """Kernel source for ``fused`` on ``backend`` (``cpu`` | ``cuda`` | ``cudasim``) with a registered strategy.

    ``cudasim`` prints for the CUDA simulator; a strategy with a simulator twin (``strategies.REGISTRY``)
    must be asked for by the twin's name there.
    """
    from .strategies import REGISTRY, get

    if backend not in ("cpu", "cuda", "cudasim"):
        raise RedalgebraError(f"unknown back end {backend!r}; choose one of cpu, cuda, cudasim")
    family = "cpu" if backend == "cpu" else "cuda"
    strategy = strategy or next(n for n, s in REGISTRY.items() if s.backend == family)
    src = get(strategy, backend).build(fused, spec or Spec(), backend)
    _no_argument_assigned(src, fused.cascade)
    return src


#: A statement's assigned names in the generated code: ``for a in``, ``a = ``, ``a, b = ``, ``a += `` (the printer's
#: forms; a subscripted target, ``out_y[r] = ``, writes into an array, not over a name).
_TARGETS = re.compile(r"^[ \t]*(?:for[ \t]+([A-Za-z_][\w, ]*?)[ \t]+in\b|([A-Za-z_][\w, ]*?)[ \t]*"
                      r"(?:\+|-|\*|/|//|%|\*\*|&|\||\^|<<|>>)?=(?!=))", re.M)


def _no_argument_assigned(src: KernelSource, c) -> None:
    """Refuse generated kernels that assign one of the cascade's inputs or params: a local of the generator's that
    took a user's name (:mod:`.names` renames the names it knows the generator uses; this catches one it does not,
    which would otherwise overwrite the argument: a crash or a wrong number). The module's helpers (``rt_*``) have
    their own locals; only the kernels' lines are read, by the printer's statement forms."""
    arguments = {s.name for s in c.inputs} | {p.name for p in c.params}
    kernels = {e[0] for e in src.entries} or {"kernel"}
    for chunk in re.split(r"(?m)^(?=def )", src.source):
        name = chunk[4:chunk.find("(")] if chunk.startswith("def ") else None
        if name not in kernels:
            continue
        for m in _TARGETS.finditer(chunk):
            for target in (m.group(1) or m.group(2)).split(","):
                if target.strip() in arguments:
                    raise RedalgebraError(
                        f"{c.name or 'the cascade'}: the {src.strategy} kernel {name!r} uses the name "
                        f"{target.strip()!r} for its own variable (a name redalgebra should have renamed: please "
                        f"report it); rename {target.strip()!r} in the cascade to run it")


def tree_loop(nt: int) -> list[str]:
    """The head of a block's merge tree over ``nt`` threads' states: strides halving from the largest power of two
    below ``nt`` (no step for a single thread), each step a merge of thread ``tid + stride`` into ``tid``."""
    return [f"stride = {(1 << (nt - 1).bit_length()) // 2}", "while stride > 0:"]


def tree_merges(nt: int) -> str:
    """Which threads merge at a step of :func:`tree_loop`: those with a partner (all of the lower half where ``nt`` is
    a power of two; otherwise the partner must exist, ``tid + stride < nt``)."""
    return "if tid < stride:" if nt & (nt - 1) == 0 else f"if tid < stride and tid + stride < {nt}:"
