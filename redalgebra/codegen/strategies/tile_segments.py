"""A tile kernel's row split into segments across blocks (``mma``, ``wgmma``): few rows (a decode step's heads over
a long context) would leave most multiprocessors idle, so each block folds one segment of the axis (``blockIdx.y``)
for its tile of rows, and the segments' states are merged by the derived merge, in order:

- by a second kernel (the default): each block writes its rows' states to global memory (``part_*``, float32,
  :meth:`TileSegments.parts`) and ``vrows``' combine kernel merges them, a warp a row; on Hopper the combine is
  launched while the partial kernel runs (``Spec.dependent``) and waits for all of it before it reads the states;
- or in a thread-block cluster (``Spec.cluster``, :mod:`.cluster_merge`): the row tile's segments are one cluster,
  whose blocks park their states in shared memory and merge each other's (:meth:`TileSegments.cluster_merge`).

:class:`TileSegments` is a mixin of :class:`~.mma.MmaKernel`, whose rows, accumulators and names it reads.
"""

from __future__ import annotations

from dataclasses import replace

from ..tree import Assign, Barrier, Call, For, If, Store
from .cluster_merge import park_plan

#: With a dependent combine (``Spec.dependent``), whether the partial kernel lets it launch at its start
#: (``griddepcontrol.launch_dependents``) rather than as its blocks end (each block's end lets it launch). A setting
#: for ``gpu/sweep.py``: at its start, MLA B4 ran 8 µs slower on an H100, where as the blocks end it ran 1.6 µs faster
#: (:data:`~.wgmma_policy.DEPENDENT_COMBINE`).
EARLY_COMBINE = 0


class TileSegments:
    """The segments of a tile kernel's rows: the segment's states out of the block, and the kernels that merge them."""

    def parts(self) -> list:
        """A segment's states, as they stand after its last tile, into ``part_{r}[row, seg(, component)]``: what the
        combine kernel merges by the derived merge."""
        out = []
        for h in self.rows:
            m, hh = divmod(h, 2)
            lead = [Assign(f"part_{r.name}[row_{h}, seg]", f"s_{r.name}_{h}") for r in self.scal]
            writes = [If(self.lead, tuple(lead))] if lead else []
            for r in self.vred:
                writes += [Store(f"part_{r.name}", (f"row_{h}", "seg"), self.column(self.size[r.name], j, 0),
                                 tuple(f"o_{r.name}_{m}_{j}_{2 * hh + b}" for b in range(2)))
                           for j in range(self.size[r.name] // self.ncol // 8)]  # (the row's own columns)
            out.append(If(f"ok_{h}", tuple(writes)))
        return out

    def park_plan(self) -> tuple[dict, int]:
        """Where the block parks its states for the cluster's merge, and the bytes it takes
        (:func:`.cluster_merge.park_plan`)."""
        return park_plan([r.name for r in self.scal], {r.name: self.size[r.name] for r in self.vred}, self.bm)

    def cluster_merge(self) -> list:
        """The segments of the row tile merged in the cluster (:mod:`.cluster_merge`): the states parked in the block's
        shared memory (once every warp is done with it), the cluster met, the block's share of the tile's rows merged
        from every block's (segment ``s``: block ``s``), a warp a row, and the cluster met again before any leaves."""
        from .cluster_merge import ClusterMerge

        plan, _ = self.park_plan()
        out = [Barrier(), Assign("smc", "cuda.shared.array(0, float32)")]
        for h in self.rows:
            m, hh = divmod(h, 2)
            lr = f"{16 * self.mt} * {self.rw} + lg + {8 * h}"
            lead = [Assign(f"smc[{plan[r.name][0]} + {lr}]", f"s_{r.name}_{h}") for r in self.scal]
            out += [If(self.lead, tuple(lead))] if lead else []
            for r in self.vred:
                base, pitch = plan[r.name]
                # (one 32-bit address a row, each pair a constant past it: one 8-byte store a pair)
                out.append(Assign("pa", f"uint32({base} + ({lr}) * {pitch} + {self.column(self.size[r.name], 0, 0)})"))
                out += [Call("sts_f32x2", ("smc", f"pa + {8 * j}", *(f"o_{r.name}_{m}_{j}_{2 * hh + b}" for b in range(2))))
                        for j in range(self.size[r.name] // self.ncol // 8)]  # (the row's own columns)
        merge = ClusterMerge(self.f, replace(self.spec, threads=32, group=32, vec=4, tile=1),
                             (self.consts, self.counter), plan)
        row = [Assign("lr", "seg + nseg * mk"), Assign("mrow", f"grp * grows + rt * {self.bm} + lr"),
               If("mrow < gend", tuple(merge.row_setup("mrow") + merge.merged_row("sg")))]
        warps = self.threads // 32
        # (the block's rows of the tile by a 32-bit division: a 64-bit one is a subroutine call, which serializes every
        # wgmma of the kernel)
        return out + [Call("cluster_sync", ()), Assign("gl", "lane"),
                      Assign("nmr", f"int32(uint32({self.bm} - 1 - seg + nseg) // uint32(nseg))"),
                      For("mk", "warp", "nmr", tuple(row), str(warps)), Call("cluster_sync", ())]

    @property
    def segmented(self) -> bool:
        """Whether the row's tiles are split into segments across blocks (``cuda.blockIdx.y``), merged by a second
        kernel: few rows (a decode step's heads) would leave most multiprocessors idle."""
        return self.spec.segments > 1

    @property
    def first(self) -> str:
        """What a tile's index within the block's range is offset by (its segment's first tile)."""
        return "tfirst + " if self.segmented else ""

    def segment_kernels(self, args: tuple) -> list:
        """``(name, arguments, grid, body)`` of a segmented module's kernels (``args``: the one-kernel module's): the
        partial kernel and ``vrows``' combine (a warp a row, the segments merged in order by the derived merge), which
        shares the tile kernel's table of constants — or, in a cluster, the one kernel that merges them itself."""
        common = [a for a in args if not a.startswith("out_") and a not in ("rows", "length")]
        part = [f"part_{r.name}" for r in self.c.reductions]
        outs = [a for a in args if a.startswith("out_")]
        if self.spec.cluster:  # (one kernel: the segments merged in their cluster, :meth:`cluster_merge`)
            return [("kernel", tuple(common + outs + ["rows", "length", "nseg"]), "rows", self.kernel())]
        from .vrows import VRowsKernel

        merge = VRowsKernel(self.f, replace(self.spec, threads=32, group=32, vec=4, tile=1), (self.consts, self.counter))
        partial, combine = self.kernel(), merge.combine()
        if self.spec.dependent:  # (the combine launched while the partial kernel runs: it waits for all of it)
            partial = [Call("grid_launch", ())] * EARLY_COMBINE + partial
            combine = [Call("grid_wait", ())] + combine
        return [("partial", tuple(common + part + ["rows", "length", "nseg"]), "rows", partial),
                ("combine", tuple(common + part + outs + ["rows", "length", "nseg"]), "combine", combine)]

    def scratch(self) -> tuple:
        """The segments' states: ``part_{r}`` of shape (rows, segments(, size)), float32."""
        return tuple((f"part_{r.name}", "float32", "segments",
                      None if self.c.sizes[r.name] is None else self.lay.size_const(self.c.sizes[r.name]))
                     for r in self.c.reductions)
