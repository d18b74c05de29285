"""Strategies of several kernels: ``split`` (FlashDecoding's structure) and ``unfused`` (the baseline).

``split_shared`` is ``split`` with the shuffle-free block merge, for the CUDA simulator.

* ``split`` — a grid over rows × segments: each block folds its segment with the
  incremental update and the block merge, and writes the segment's float32
  state; a second kernel merges the segment states of a row with the derived
  merge (the paper's Eq. 11), finalizes, and writes the outputs.  Any
  cascade, not only attention, gets this structure.
* ``unfused`` — what a compiler without cascade fusion produces: one kernel per
  reduction, each reading its inputs again and the earlier results from
  global memory, then an epilogue kernel.
"""

from __future__ import annotations

import sympy as sp

from ..errors import RedalgebraError
from .emit import element_loads, final_access
from .kernels import _Gen
from .lanes import lanes_refusal


class MultiGen(_Gen):
    """Generates the kernels of ``split`` and ``unfused``."""

    def kernels(self) -> list:
        return getattr(self, "_kernels_" + self.strategy)()

    def _common_args(self) -> list[str]:
        c = self.c
        return [s.name for s in c.inputs] + [f"rep_{s.name}" for s in c.inputs] + [p.name for p in c.params] + ["keep"]

    def _out_args(self) -> list[str]:
        return [f"out_{o.name}" for o in self.c.outputs] + [f"out_{r}_index" for r in self.lay.topk_state]

    def _state_arrays(self, prefix: str) -> list[str]:
        names = []
        for r in self.c.reductions:
            names.append(f"{prefix}_{r.name}")
            if r.name in self.lay.topk_state:
                names.append(f"{prefix}i_{r.name}")
        return names

    def scratch(self) -> tuple:
        layout, prefix = ("segments", "part") if self.strategy.startswith("split") else ("rows", "red")
        out = []
        for r in self.c.reductions:
            width = self.lay.vector_state.get(r.name) or self.lay.topk_state.get(r.name)
            out.append((f"{prefix}_{r.name}", "float32", layout, width))
            if r.name in self.lay.topk_state:
                out.append((f"{prefix}i_{r.name}", "int32", layout, width))
        return tuple(out)

    # -- split -----------------------------------------------------------------------------------
    def _kernels_split_shared(self) -> list:
        return self._kernels_split()

    def _kernels_split(self) -> list:
        nt = self.spec.threads
        part = self._common_args() + self._state_arrays("part") + ["rows", "length", "seglen"]
        body = self.shared_decls(str(nt // 32 if self.strategy == "split" else nt))
        body += ["tid = cuda.threadIdx.x", "lane = tid % 32", "warp = tid // 32", "row = cuda.blockIdx.x",
                 "seg = cuda.blockIdx.y", "lo = seg * seglen", "hi = min(lo + seglen, length)"]
        body += self.alloc_state(("s", "o")) + self.row_setup() + self.init_state()
        loop = self.incremental("lo + tid", str(nt))
        loop[0] = f"for l in range(lo + tid, hi, {nt}):"
        body += loop + (self._shuffle_tree() if self.strategy == "split" else self._shared_tree())
        body += self._write_segment_state(nt)
        combine = self._common_args() + self._state_arrays("part") + self._out_args() + ["rows", "length", "nseg"]
        cbody = self.shared_decls("1")
        cbody += ["tid = cuda.threadIdx.x", "row = cuda.blockIdx.x"] + self.alloc_state(("s", "o")) + self.row_setup()
        merge_all = self.init_state() + ["for seg in range(nseg):"]
        merge_all += ["    " + ln for ln in self.copy_state("part", "o", src_index="row, seg") + self.merge()]
        merge_all += self.copy_state("s", "sh", dst_index="0")
        cbody += ["if tid == 0:"] + ["    " + ln for ln in merge_all]
        cbody += ["cuda.syncthreads()"] + self.copy_state("sh", "s", src_index="0")
        cbody += self.outputs("tid == 0", "tid", str(nt))
        return [("partial", tuple(part), "rows_segments", body), ("combine", tuple(combine), "rows", cbody)]

    def _kernels_split_lanes(self) -> list:
        """``split`` whose blocks fold their segment as ``lanes`` does (a warp per element, lanes splitting vectors)."""
        refused = lanes_refusal(self.f)
        if refused:
            raise RedalgebraError(refused)
        nt = self.spec.threads
        part = self._common_args() + self._state_arrays("part") + ["rows", "length", "seglen"]
        body = self._lanes_head() + ["row = cuda.blockIdx.x", "seg = cuda.blockIdx.y", "lo = seg * seglen",
                                     "hi = min(lo + seglen, length)"]
        body += self.alloc_state(("s", "o")) + self.row_setup() + self.init_state() + self._lanes_fold("lo", "hi")
        body += self._write_segment_state(nt)
        combine = self._common_args() + self._state_arrays("part") + self._out_args() + ["rows", "length", "nseg"]
        cbody = self._lanes_head(states=False) + ["row = cuda.blockIdx.x"]  # (an output's lane sums need the rest)
        cbody += self.alloc_state(("s", "o")) + self.row_setup() + self.init_state()
        step = self.copy_state("part", "o", src_index="row, seg") + self.merge()  # every thread, its lane's slots
        cbody += ["for seg in range(nseg):"] + ["    " + ln for ln in step]
        cbody += self.outputs("tid == 0", "tid", str(nt))
        return [("partial", tuple(part), "rows_segments", body), ("combine", tuple(combine), "rows", cbody)]

    def _kernels_split_lanes_shared(self) -> list:
        return self._kernels_split_lanes()

    def _write_segment_state(self, nt: int) -> list[str]:
        first = [f"part_{r}[row, seg] = s_{r}" for r in self.lay.scalar_state]
        for r, size in self.lay.topk_state.items():
            first += [f"for j in range({size}):", f"    part_{r}[row, seg, j] = s_{r}[j]",
                      f"    parti_{r}[row, seg, j] = si_{r}[j]"]
        lines = ["if tid == 0:"] + ["    " + ln for ln in first] if first else []  # (none: vector states alone)
        for r, size in self.lay.vector_state.items():
            if self.lay.lanes:  # the first warp's lanes hold the components
                lines += ["if warp == 0:"] + ["    " + ln for ln in
                                               self.lay.vector_loop(size, [f"part_{r}[row, seg, j] = {self.lay.state_ref('s', r)}"])]
            else:
                lines += [f"for j in range(tid, {size}, {nt}):", f"    part_{r}[row, seg, j] = s_{r}[j]"]
        return lines

    # -- unfused ---------------------------------------------------------------------------------
    def _finals_access(self):
        """Earlier results read back from global memory: scalars loaded, vectors indexed in place."""
        acc = self.lay.base_access()
        for r in self.c.reductions:
            if r.name in self.lay.vector_state:
                acc.vector[r.name], acc.size[r.name] = f"red_{r.name}[row, {{j}}]", self.lay.vector_state[r.name]
            elif r.name in self.lay.topk_state:
                acc.vector[r.name], acc.size[r.name] = f"s_{r.name}[{{j}}]", self.lay.topk_state[r.name]
            else:
                acc.scalar[r.name] = f"s_{r.name}"
        return acc

    def _load_finals(self, names) -> list[str]:
        lines = []
        for r in names:
            if r in self.lay.topk_state:
                size = self.lay.topk_state[r]
                lines += [f"for j in range({size}):", f"    s_{r}[j] = red_{r}[row, j]", f"    si_{r}[j] = redi_{r}[row, j]"]
            elif r not in self.lay.vector_state:
                lines.append(f"s_{r} = red_{r}[row]")
        return lines

    def _kernels_unfused(self) -> list:
        nt = self.spec.threads
        args = tuple(self._common_args() + self._state_arrays("red") + ["rows", "length"])
        a, b = sp.Symbol("__a", extended_real=True), sp.Symbol("__b", extended_real=True)
        guard = "keep[row, l] != 0" if self.spec.has_keep else "True"
        kernels, done = [], []
        for r in self.c.reductions:
            body = [f"red = cuda.shared.array({nt}, float32)"]
            body += self.shared_decls(str(nt), "tk") if r.name in self.lay.topk_state else []
            body += ["tid = cuda.threadIdx.x", "row = cuda.blockIdx.x"] + self.alloc_state(("s", "o"))
            body += self.row_setup() + self._load_finals(done)
            loads = element_loads(self.lay, self.consts, self.counter)
            body += self._staged_reduction(r, self._finals_access(), a, b, nt, guard, loads,
                                           vector_out=f"red_{r.name}[row, j]")
            body += self._store_final(r.name, nt)
            kernels.append((f"reduce_{r.name}", args, "rows", body))
            done.append(r.name)
        epi = ["tid = cuda.threadIdx.x", "row = cuda.blockIdx.x"] + self.alloc_state(("s", "o")) + self.row_setup()
        epi += self._load_finals(done)
        final = final_access(self.lay)
        final.vector.update({k: v for k, v in self._finals_access().vector.items() if k in self.lay.vector_state})
        epi += self._outputs_with(final, element_loads(self.lay, self.consts, self.counter), nt)
        kernels.append(("epilogue", tuple(self._common_args() + self._state_arrays("red") + self._out_args()
                                          + ["rows", "length"]), "rows", epi))
        return kernels

    def _store_final(self, r: str, nt: int) -> list[str]:
        if r in self.lay.vector_state:
            return []  # written component by component by the reduction itself
        if r in self.lay.topk_state:
            size = self.lay.topk_state[r]
            return [f"for j in range(tid, {size}, {nt}):", f"    red_{r}[row, j] = s_{r}[j]", f"    redi_{r}[row, j] = si_{r}[j]"]
        return ["if tid == 0:", f"    red_{r}[row] = s_{r}"]
