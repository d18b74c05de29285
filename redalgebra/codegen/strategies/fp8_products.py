"""``columns_wgmma``'s product on the FP8 instruction, when asked (``compile(..., fp8_products=True)``,
:attr:`Spec.fp8_products`).

Where it applies (:func:`fp8_applies`: e4m3 weights, ``fp8()`` factors, one weight matrix, no mask; the exact
product elsewhere) the factors are stored as e4m3 bytes, the weights transposed to e4m3 rows ``wt[n, k]`` by a first
kernel (:meth:`Fp8Products.transpose`: the instruction reads both operands K-major), tiles are of 128 elements (one
128-byte row either way), the products ``m64n128k32.e4m3.e4m3``, 128 columns a block. Each tile's products are summed
in fresh accumulators and added to float32 ones once their group completes, as cuBLAS's FP8 GEMM does: measured
against float64 on the H200, 0.9e-4 … 1.9e-4 of the largest output, the same as ``torch._scaled_mm``'s 1.1e-4 at
M4096 K = N = 7168 (``gpu/fp8_products_check.py``) — not exact, so not the default.

The product's block is warp-specialized (:mod:`.producer`): a producer warpgroup makes the copies
(:meth:`Fp8Products.producer_copies`: both tiles K-major, whole), the consumer warpgroups multiply.

:class:`Fp8Products` is the kernel's part (a mixin of :class:`~.columns_wgmma.ColumnsWgmmaKernel`, which calls these
pieces from its product kernel and its module's kernels).
"""

from __future__ import annotations

from ...derive import FusedCascade
from ..tree import Assign, Barrier, Call, If
from . import Problem
from . import columns_mma
from .columns_mma import exact_factors
from .producer import PRODUCER
from .wgmma import ROW, WgmmaKernel

#: Columns of the weights a block of the FP8 products' transposing kernel takes (64 rows of them; four 16-byte loads a
#: thread in flight).
TRANSPOSE_COLUMNS = 256
class Fp8Products:
    """The FP8 product's pieces of a ``columns_wgmma`` kernel (``self.fp8``: :attr:`Spec.fp8_products`)."""

    def transpose(self) -> list:
        """:attr:`Spec.fp8_products`: the e4m3 weights ``w[k, n]`` as rows ``wt[n, k]`` (the FP8 instruction reads
        both operands K-major), ``k`` padded with zeros to whole tiles. A block of 256 threads a tile of 64 rows ``k``
        × :data:`TRANSPOSE_COLUMNS`: each thread loads 16-byte chunks of rows ``k`` (all its loads in flight; two
        8-byte loads a chunk where a row is not a multiple of 16 bytes), the words go through shared memory (a row's
        words rotated by its quarter, so that a warp's reads fall in different banks: by the layout, not profiled), and each thread gathers 16 bytes of rows
        ``n`` and stores each with one 16-byte store."""
        n, per = self.n, TRANSPOSE_COLUMNS // 64  # (chunks a thread loads and stores)
        wpr = TRANSPOSE_COLUMNS // 4  # words of a row of the tile
        out = [Assign("tid", "cuda.threadIdx.x"), Assign("tl", f"cuda.shared.array((64, {wpr + 1}), uint32)"),
               Assign("k0", "cuda.blockIdx.x * 64"), Assign("n0", f"cuda.blockIdx.y * {TRANSPOSE_COLUMNS}")]
        for u in range(per):
            words = [f"tw_{u}_{q}" for q in range(4)]
            out += [Assign(f"lk_{u}", f"(tid + {256 * u}) // {4 * per}"), Assign(f"lc_{u}", f"(tid + {256 * u}) % {4 * per}"),
                    Assign(f"kk_{u}", f"k0 + lk_{u}"), Assign(f"nn_{u}", f"n0 + 16 * lc_{u}")]
            out += [Assign(w, "uint32(0)") for w in words]
            at = f"kk_{u} * {n} + nn_{u}"
            if n % 16 == 0:
                out.append(If(f"kk_{u} < length and nn_{u} < {n}", (
                    Assign(", ".join(words), f"ld_w4_stream_at({self.x}, {at})"),)))
            else:  # rows of a multiple of 8 bytes (columns_wgmma's rule): two 8-byte loads
                out += [If(f"kk_{u} < length and nn_{u} + {8 * h + 8} <= {n}", (
                    Assign(", ".join(words[2 * h:2 * h + 2]), f"ld_w2_stream_at({self.x}, {at} + {8 * h})"),))
                    for h in (0, 1)]
        for u in range(per):
            out += [Assign(f"tl[lk_{u}, (4 * lc_{u} + {q}) ^ (lk_{u} >> 4)]", f"tw_{u}_{q}") for q in range(4)]
        out.append(Barrier())
        # row n0 + on of wt, its bytes k0 + 16 oc .. + 15: byte (on % 4) of word on // 4 of 16 rows
        out += [Assign("oc", "tid % 4"), Assign("sh", "8 * (tid // 4 % 4)")]
        for u in range(per):
            on = f"(tid // 4 + {64 * u})"
            gather = [Assign("wc", f"({on} >> 2) ^ oc")]
            for q in range(4):
                parts = [f"(((tl[16 * oc + {4 * q + b}, wc] >> sh) & 255) << {8 * b})" for b in range(4)]
                gather.append(Assign(f"ow_{q}", "uint32(" + " | ".join(parts) + ")"))
            store = Call("st_w4_at", ("wt", f"(n0 + {on}) * wt.shape[1] + k0 + 16 * oc", *[f"ow_{q}" for q in range(4)]))
            out.append(If(f"n0 + {on} < {n}", tuple(gather + [store])))
        return out

    def producer_offsets(self) -> list:
        """The producer thread ``ptid``'s place in :meth:`producer_copies`: its row in a pass, its chunk's byte, the
        swizzled place of its chunk."""
        return [Assign("pr", "ptid // 8"), Assign("pco", "16 * (ptid % 8)"),
                Assign("pdo", f"pr * {ROW} + (((ptid % 8) ^ (pr & 7)) << 3)")]

    def producer_copies(self, tile: str, stage: str) -> list:
        """The producer's copies of tile ``tile`` into ``stage``: the factor rows and the weights' rows (output
        columns) of the tile, 128 bytes each, in 16-byte chunks (thread ``ptid`` of the producer takes chunk ``ptid %
        8`` of rows ``ptid // 8``, ``+ 16``, …: the same swizzle for all, ``pdo``), rows clamped to the last row or
        column (both operands are padded with zeros to whole tiles along the axis, so every copy is whole)."""
        pt, ppass = PRODUCER, PRODUCER // 8  # (every producer thread's rows share one swizzle: ppass % 8 == 0)
        out = [Assign("kt0", f"lo + ({tile}) * {self.bk}"), Assign("sd", f"sb + ({stage}) * {self.stage}")]
        for src, rows, first, last, base in (("fac", self.bm, "r0", "rows - 1", 0),
                                             (self.source, self.bc, "cb", f"{self.n - 1}", self.b_base)):
            for v in range(-(-rows * 8 // pt)):
                copy = Call("cp_async16_at", ("sm", f"sd + {base + ppass * v * ROW} + pdo", src,
                                              f"min({first} + pr + {ppass * v}, {last}) * {src}.shape[1] + pco + kt0",
                                              "16"))
                out += [copy] if (v + 1) * pt <= rows * 8 else [If(f"ptid + {v * pt} < {rows * 8}", (copy,))]
        return out

    def promote(self, temp: str) -> list:
        """``ac += temp`` once ``temp``'s group is complete (FP8 sums promoted to float32)."""
        acc = WgmmaKernel.tiles(temp, self.bc // 8)
        return [Assign(acc, f"wgmma_hold({acc})")] + [
            Assign(f"ac_{j}_{i}", f"{temp}_{j}_{i}", "+") for j in range(self.bc // 8) for i in range(4)]


def fp8_applies(fused: FusedCascade, p: Problem) -> bool:
    """Whether the product runs on the FP8 instruction: asked for (``fp8_products``), e4m3 weights, each factor an
    ``fp8()`` value, one weight matrix shared by every row (transposed once a call), no mask. Elsewhere the exact
    product runs, as in every other strategy."""
    if not (p.option("fp8_products") and columns_mma._e4m3(fused, p) and exact_factors(fused)) or p.has_keep:
        return False
    reps = dict(p.reps)
    return min(reps.get(s.name, 1) for s in fused.cascade.inputs if s.size is not None) >= p.rows
