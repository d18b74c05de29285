"""A row tile's segments merged inside one thread-block cluster (Hopper), not by a second kernel.

With segments (few rows: a decode step's heads over a long context), each block of the tile strategies (``mma``,
``wgmma``) folds one segment of the axis for a tile of rows. Without clusters each block writes its rows' states to
global memory (``part_*``, float32: 16.8 MB for MLA B16) and a combine kernel reads them back and merges them in order
by the derived merge (``vrows``' combine). With :attr:`~redalgebra.codegen.Spec.cluster`, a row tile's ``nseg``
segments are launched as one cluster of ``(1, nseg, 1)`` blocks (rank = ``blockIdx.y`` = the segment), and:

1. each block *parks* its states in its own shared memory, free once its loop has drained (:func:`park_plan`: the
   scalar states a float each per row, then each vector state a row of ``pitch`` floats, the pitch padded so that a
   warp's 8-byte stores of the accumulators' pairs fall in distinct banks);
2. one ``cluster_sync``: every block's states are parked and visible to the cluster;
3. block ``seg`` merges rows ``seg, seg + nseg, …`` of the tile, a warp a row, as the combine kernel merges a row
   (:meth:`~.vrows.VRowsKernel.merged_row`: the same derived merge in the same order, the same bits but for the
   finalize's division, by ``div.full`` as in the one-segment kernel: a division's IEEE slow path is a subroutine
   call, and any call serializes every ``wgmma`` of the kernel), reading
   segment ``s``'s states from block ``s``'s shared memory (``ld_cluster_f32x4``: 16 bytes a lane), then finalizes and
   stores the row's outputs;
4. a second ``cluster_sync``: no block leaves (its shared memory with it) while another still reads it.

The partial states never reach global memory, and the call is one kernel. Off by default
(:data:`~.wgmma_policy.CLUSTER`): measured on an H100, MLA's decode step took the same time as with the partial
states and the combine kernel wherever the clusters fit the GPU at once, and a second wave where they do not (the GPU
runs 30 clusters of four blocks of 231 KB at once, 15 of eight, 7 of sixteen: fewer blocks than one a multiprocessor).
"""

from __future__ import annotations

from ..tree import Assign, If
from .vrows import VRowsKernel

#: Blocks a cluster may hold on every sm_90 GPU (the portable size), and at most on a Hopper with the function's
#: non-portable attribute set (:class:`~redalgebra.runtime.driver.DriverStep` sets it past the portable size).
CLUSTER_PORTABLE, CLUSTER_MOST = 8, 16


def park_plan(scalars: list, vectors: dict, bm: int) -> tuple[dict, int]:
    """Where a block parks its states (offsets in float32 of its dynamic shared memory): ``{name: (base, pitch)}`` —
    a scalar state's rows at ``base + row`` (pitch 0), a vector state's row ``r`` at ``base + r * pitch`` — and the
    bytes it takes. ``scalars``: the scalar states' names; ``vectors``: each vector state's components."""
    plan, at = {}, 0
    for name in scalars:
        plan[name] = (at, 0)
        at += bm
    for name, n in vectors.items():
        at = -(-at // 4) * 4  # (16-byte aligned rows: one 16-byte load a lane of the merge)
        pitch = -(-n // 4) * 4
        pitch += (8 - pitch % 32) % 32  # (8 words past a multiple of 32: rows g and g + 4 of a warp's pairs apart)
        plan[name] = (at, pitch)
        at += bm * pitch
    return plan, 4 * at


class ClusterMerge(VRowsKernel):
    """The combine kernel's merge of a row (a warp a row, 4 components a lane), its segments' states read from the
    cluster's shared memory as :func:`park_plan` lays them out: row ``lr`` of the block's tile (``lr`` assigned by
    the caller), segment ``s`` in block ``s``."""

    def __init__(self, fused, spec, shared, plan: dict):
        super().__init__(fused, spec, shared)
        assert spec.vec == 4 and spec.group == 32 and spec.threads == 32, "a warp a row, 16 bytes a lane"
        self.plan = plan
        self.lead_index = "lane"  # (every warp stores the rows it merged)

    def base_access(self):
        acc = super().base_access()
        # (no subroutine call for an IEEE division's slow path: any call in the kernel serializes every wgmma of it)
        acc.div, acc.sqrt = "div_full", "sqrt_full"
        return acc

    def row_setup(self, row: str) -> list:
        # (the row and its params; not its inputs' rows, ``rr_*``, which the merge never reads and which the tile
        # kernel holds as unsigned: an int32 assigned to the same name would widen both to int64)
        return [s for s in super().row_setup(row) if not (isinstance(s, Assign) and s.target.startswith("rr_"))]

    def read_part(self, prefix: str = "o", seg: str = "seg") -> list:
        out = []
        for r, st in self.states.items():
            base, pitch = self.plan[r]
            if pitch == 0:
                out.append(Assign(st.var(prefix), f"ld_cluster_f32(smc, {base} + lr, {seg})"))
                continue
            n = self.size[r]
            for c in range(0, st.count, self.vec):
                regs = [st.comp(prefix, c + k) for k in range(self.vec)]
                at = f"{base} + lr * {pitch} + {self.component(c)}"
                load = Assign(", ".join(regs), f"ld_cluster_f32x4(smc, {at}, {seg})")
                cond = self.inside(n, c)  # (vector states of a multiple of 8 components: a chunk is in or out whole)
                out += [load] if cond is None else [If(cond, (load,), tuple(Assign(x, st.identity) for x in regs))]
        return out
