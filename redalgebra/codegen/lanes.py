"""The ``lanes`` skeletons: a warp per element, its lanes splitting the vectors.

Attention-like cascades carry vectors per element (a key and a value row of 128 components): one
thread per element would hold a 128-wide state in local memory. Here lane ``lane`` of a warp holds the
components ``lane + 32 t`` of every vector (``t`` a slot, ``Layout.slots``), dot products are completed
by a lane sum (shuffles, or shared memory under the simulator), scalars are computed by every lane
alike, and each warp folds a tile of ``TILE`` elements at a time:

1. every slot's vector inputs are read into registers, all before any is used (``_stage_vectors``), so
   a warp has its whole tile's reads in flight; the vector params (the query) sit in registers for
   the whole row (``_lane_params``);
2. the partial dot products, then the lane sums (``split_partial_dots`` orders them so);
3. the tile's state by the non-incremental form, merged into the running state; at the end the warps'
   states meet in shared memory and every warp merges them in order.

A mixin of the kernel generator (``kernels._Gen``); ``multikernel`` builds ``split_lanes`` from
``_lanes_fold``.
"""

from __future__ import annotations

import functools
import re

import sympy as sp

from ..errors import RedalgebraError

from ..ir.functions import Dot, VSum


def lanes_refusal(fused) -> str | None:
    """Why ``lanes`` and ``split_lanes`` cannot run ``fused`` (None: they can): a per-element output of elements
    with dot products (a lane holds only part of each product until the lane sum, and the outputs are not written
    from there)."""
    if fused.per_element_outputs and any(isinstance(a, (Dot, VSum)) for _, e in fused.prologue.steps
                                         for a in sp.preorder_traversal(e)):
        return ("the lanes strategies do not write per-element outputs of elements with dot products; use the tile "
                "strategy")
    return None


class LaneSkeletons:
    """Lane-mode pieces of the generator (``self`` is a ``kernels._Gen``)."""

    def _lane_registers(self, acc) -> None:
        """Lane mode: vector inputs read from the slot's staged registers, vector params from the row's."""
        if self.lay.lanes:
            for s in self._staged_vectors():
                acc.vector[s.name] = f"xv_{s.name}_@I@[{{t}}]"
            for p in self.c.params:
                if p.size is not None:
                    acc.vector[p.name] = f"pv_{p.name}[{{t}}]"

    def _staged_vectors(self) -> list:
        """Lane mode: the vector inputs of an element (attention's keys and values), fetched together."""
        exprs = list(self.f.bodies.values()) + [e for _, e in self.f.prologue.steps]
        used = {sym.name for e in exprs for sym in e.free_symbols}
        return [s for s in self.c.inputs if s.size is not None and s.name in used]

    def _lane_component(self, size: str) -> str:
        """Slot ``t``'s component of this lane, kept inside the vector when the last slot is partial
        (a valid address to read; what it holds there is never written out)."""
        return "lane + 32 * t" if self.lay.whole_slots(size) else f"min(lane + 32 * t, {size} - 1)"

    def _lane_params(self) -> list[str]:
        """Lane mode: this lane's components of every vector param (constant along the axis), once per row."""
        lines = []
        for p in self.c.params:
            if p.size is not None:
                size = self.lay.size_const(p.size)
                j = self._lane_component(size)
                lines += [f"pv_{p.name} = {self.local(self.lay.slots(size))}", f"for t in range({self.lay.slots(size)}):",
                          f"    pv_{p.name}[t] = {p.name}[row, {j}]"]
        return lines

    def _stage_vectors(self) -> list[str]:
        """Lane mode: this lane's components of the staged vectors of slot ``@I@``, into registers."""
        lines = []
        for s in self._staged_vectors():
            size = self.lay.size_const(s.size)
            j = self._lane_component(size)
            lines += [f"for t in range({self.lay.slots(size)}):",
                      f"    xv_{s.name}_@I@[t] = {self.lay.load(s.name)}({s.name}[rr_{s.name}, l, {j}])"]
        return lines

    def _body_lanes(self) -> list[str]:
        """A block per row; each warp takes ``TILE`` elements at a time, its lanes splitting every vector.

        The warp's lanes share each element's vector reads (coalesced), complete its dot products
        with a lane sum (shuffles, or shared memory in ``lanes_shared``), fold the tile with the
        non-incremental form and merge it into the running state; at the end the warps' states meet
        in shared memory and every warp merges them in order.  Scalars are computed by every lane
        alike; a vector state is spread over the lanes (``lane + 32 t``), so a 128-wide output
        needs 4 registers per lane instead of 128.
        """
        nt = self.spec.threads
        if nt % 32:
            raise RedalgebraError(f"the lanes strategy needs whole warps, got {nt} threads")
        refused = lanes_refusal(self.f)
        if refused:
            raise RedalgebraError(refused)
        lines = self._lanes_head() + ["row = cuda.blockIdx.x"] + self.alloc_state(("s", "o"))
        lines += self.row_setup() + self.init_state() + self._lanes_fold("0", "length")
        return lines + self.outputs("tid == 0", "tid", str(nt))

    def _body_lanes_shared(self) -> list[str]:
        return self._body_lanes()

    def _lanes_head(self, states: bool = True) -> list[str]:
        """The block's shared arrays (the warps' states where ``states``; the lane sums' through shared memory under
        ``*_shared``) and its thread indices."""
        nt = self.spec.threads
        lines = self.shared_decls(str(nt // 32)) if states else []
        if self.strategy.endswith("_shared"):
            lines.append(f"lane_red = cuda.shared.array({nt}, float32)")
        return lines + ["tid = cuda.threadIdx.x", "lane = tid % 32", "warp = tid // 32"]

    def _lanes_fold(self, lo: str, hi: str) -> list[str]:
        """Elements ``lo`` to ``hi`` folded by the warps, then the warps' states merged: every warp has the result."""
        nt, nw = self.spec.threads, self.spec.threads // 32
        chunk = self._tile_load(nt, hi) + self._tile_state(nt) + self.merge()
        lines = self._lane_params()
        lines += self._unroll([f"xv_{s.name}_@I@ = {self.local(self.lay.slots(self.lay.size_const(s.size)))}"
                               for s in self._staged_vectors()])
        lines += [f"for base in range({lo}, {hi}, {nw * self.spec.tile}):"] + ["    " + ln for ln in chunk]
        lines += self.copy_state("s", "sh", dst_index="warp") + ["cuda.syncthreads()"]
        lines += self.copy_state("sh", "s", src_index="0")
        step = self.copy_state("sh", "o", src_index="wsrc") + self.merge()
        return lines + [f"for wsrc in range(1, {nw}):"] + ["    " + ln for ln in step]


def split_partial_dots(lines: list[str]) -> tuple[list[str], list[str]]:
    """Lane mode: the per-lane partial dot products of one element (their loads), and the rest.

    Every slot's loads are issued before any slot waits on a lane sum, so a warp has all of its
    tile's reads in flight at once; each slot's accumulators get their own names (``_acc0_@I@``).
    """
    partial, rest, i = [], [], 0
    while i < len(lines):
        ln = lines[i]
        if re.match(r"_acc\d+ = ", ln) and i + 1 < len(lines) and lines[i + 1].startswith("for _t"):
            block = [ln, lines[i + 1]]
            i += 2
            while i < len(lines) and lines[i].startswith("    "):
                block.append(lines[i])
                i += 1
            partial += block
        else:
            rest.append(ln)
            i += 1
    rename = functools.partial(re.sub, r"\b(_acc\d+)\b", r"\1_@I@")
    return [rename(ln) for ln in partial], [rename(ln) for ln in rest]
