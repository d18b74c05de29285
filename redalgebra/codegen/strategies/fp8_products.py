"""``columns_wgmma``'s product on the FP8 instruction, when asked (``compile(..., fp8_products=True)``,
:attr:`Spec.fp8_products`).

Where it applies (:func:`fp8_applies`: e4m3 weights, ``fp8()`` factors, one weight matrix, no mask; the exact
product elsewhere) the factors are stored as e4m3 bytes, the weights transposed to e4m3 rows ``wt[n, k]`` by a first
kernel (:meth:`Fp8Products.transpose`: the instruction reads both operands K-major), tiles are of 128 elements (one
128-byte row either way), the products ``m64n128k32.e4m3.e4m3``, 128 columns a block. Each tile's products are summed
in fresh accumulators and added to float32 ones once their group completes, as cuBLAS's FP8 GEMM does: measured
against float64 on the H200, 0.9e-4 … 1.9e-4 of the largest output, the same as ``torch._scaled_mm``'s 1.1e-4 at
M4096 K = N = 7168 (``gpu/fp8_products_check.py``) — not exact, so not the default.

The product's block is warp-specialized (:meth:`Fp8Products.specialized`): a producer warpgroup makes the copies, the
two consumer warpgroups multiply, and they meet only at named barriers (``bar_sync``/``bar_arrive``), never at a
block barrier. Each consumer waits for the whole of its products' group before promoting the sums (a group in
flight there makes ptxas serialize the ``wgmma``s, C7514), so a warpgroup's products drain every tile; with the
warpgroups taking turns, one's sums are added while the other's products run. Measured on the H200 (FP8 M4096 K = N
= 7168, ``gpu/kernel_steps.py``, interleaved processes): the product 410–431 µs against 434–443 µs with every thread
copying between block barriers (398–427 µs over later runs, 422 µs as committed); a producer of two warps 454–457 µs,
one warp 911 µs (its 64 copies a tile spilled); one "full"
barrier a stage for both warpgroups (the turns couple them anyway) 410–411 µs at four stages, the same, and 508–524 µs
at six.

:class:`Fp8Products` is the kernel's part (a mixin of :class:`~.columns_wgmma.ColumnsWgmmaKernel`, which calls these
pieces from its product kernel and its module's kernels).
"""

from __future__ import annotations

from ...derive import FusedCascade
from ..tree import Assign, Barrier, Call, For, If
from . import Problem
from . import columns_mma
from .columns_mma import exact_factors
from .wgmma import ROW, WgmmaKernel

#: Columns of the weights a block of the FP8 products' transposing kernel takes (64 rows of them; four 16-byte loads a
#: thread in flight).
TRANSPOSE_COLUMNS = 256
#: Threads of the product's producer (a warpgroup: 16 copies a thread a tile of the FP8 product; two warps, 32 copies
#: each, measured slower) beside its two consumer warpgroups (one warp in the simulator), and stages of its ring (named
#: barriers are 15 a block, and the ring takes three a stage — a "full" one for each consumer warpgroup, an "empty"
#: one — and two more, the warpgroups' turns).
PRODUCER, PRODUCER_STAGES = 128, 4


#: Whether ``columns_wgmma``'s 16-bit product (bfloat16 or float16 products: RMSNorm + GEMM, the exact FP8 product)
#: takes the producer warpgroup too (:attr:`Spec.producer`). Built and tested on the simulator, not yet timed on a
#: GPU: off until it is.
SIXTEEN_BIT = False


def producer_threads(spec) -> int:
    """Threads of the product's producer: :data:`PRODUCER` with :attr:`Spec.fp8_products` or :attr:`Spec.producer`,
    else 0 (every thread of the block copies and multiplies)."""
    return PRODUCER if spec.fp8_products or spec.producer else 0


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

    # -- the producer warp ------------------------------------------------------------------------------------------
    def barriers(self) -> tuple:
        """(consumer warpgroups, "full" barrier of stage ``st`` and warpgroup ``g``, "empty" barrier of stage ``st``,
        turn barrier of warpgroup ``g``) as functions of expressions, named barriers 1 … 15."""
        groups, s = max(self.spec.threads // 128, 1), self.stages
        assert (groups + 1) * s + groups <= 15, "named barriers are 1 … 15"
        return (groups, lambda st, g: f"1 + {g} + {groups} * ({st})",
                lambda st: f"{1 + groups * s} + ({st})", lambda g: f"{1 + (groups + 1) * s} + ({g})")

    def producer_copies(self, tile: str, stage: str) -> list:
        """The producer's copies of tile ``tile`` into ``stage``: the factor rows and the weights' rows (output
        columns) of the tile, 128 bytes each, in 16-byte chunks (thread ``ptid`` of the producer takes chunk ``ptid %
        8`` of rows ``ptid // 8``, ``+ 16``, …: the same swizzle for all, ``pdo``), rows clamped to the last row or
        column (both operands are padded with zeros to whole tiles along the axis, so every copy is whole)."""
        pt, ppass = PRODUCER, PRODUCER // 8
        out = [Assign("kt0", f"lo + ({tile}) * {self.bk}"), Assign("sd", f"sb + ({stage}) * {self.b_units}")]
        for src, rows, first, last, base in (("fac", self.bm, "r0", "rows - 1", 0),
                                             ("wt", self.bc, "cb", f"{self.n - 1}", self.b_base)):
            for v in range(-(-rows * 8 // pt)):
                copy = Call("cp_async16_at", ("sm", f"sd + {base + ppass * v * ROW} + pdo", src,
                                              f"min({first} + pr + {ppass * v}, {last}) * {src}.shape[1] + pco + kt0",
                                              "16"))
                out += [copy] if (v + 1) * pt <= rows * 8 else [If(f"ptid + {v * pt} < {rows * 8}", (copy,))]
        return out

    def specialized(self, epilogue: list) -> list:
        """The product's block, warp-specialized. The producer warpgroup copies tile ``t`` into stage ``t % S`` once
        both consumer warpgroups have released it (an "empty" barrier: their products of tile ``t - S`` complete),
        keeps ``S - 1`` tiles in flight, and signals each tile's arrival to each consumer warpgroup (its "full"
        barrier of the stage: ``cp_wait``, the proxy fence, ``bar_arrive``). Each consumer warpgroup waits for its
        tile, completes and promotes the previous tile's sums, releases that tile's stage, issues this tile's products
        in turn with the other warpgroup (a turn barrier each: warpgroup 0 first), and stores its outputs at the end.
        The 16-bit product (:attr:`Spec.producer`, :data:`SIXTEEN_BIT`) sums in its float32 accumulators directly: a
        consumer issues a tile's products, then waits until one group is left in flight and releases the stage of the
        tile before; its producer makes the block's copies as :meth:`~.columns_wgmma.ColumnsWgmmaKernel.issue` does
        (the partial last tile's zero fill included).
        Every barrier's arrivals match its waits exactly (an "empty" arrival only where the producer will wait for
        it; warpgroup 0's first turn handed before the loop, its last taken after it, so that the loop has no branch
        on the warpgroup: with one, LLVM made three copies of the loop)."""
        t, pt, s = self.spec.threads, PRODUCER, self.stages
        assert (pt // 8) % 8 == 0  # (every producer thread's rows share one swizzle)
        ahead = s - 1
        groups, full, empty, turn = self.barriers()
        per = t // groups + pt  # threads meeting at a "full" barrier
        prod = [Assign("ptid", f"tid - {t}")]
        if self.fp8:
            prod += [Assign("pr", "ptid // 8"), Assign("pco", "16 * (ptid % 8)"),
                     Assign("pdo", f"pr * {ROW} + (((ptid % 8) ^ (pr & 7)) << 3)")]
            copies = self.producer_copies
        else:  # (the 16-bit product's copies, partial last tile included, spread over the producer's threads)
            prod += self.offsets(pt, "ptid")
            copies = lambda tile, stage: self.issue(tile, stage, pt, "ptid")  # noqa: E731
        arrive = [Call("bar_arrive", (full("sf", g), str(per))) for g in range(groups)]
        step = [Assign("st", f"int32(uint32(it) % uint32({s}))"),
                If(f"it >= {s}", (Call("bar_sync", (empty("st"), str(t + pt))),))] + copies("it", "st") + [
            Call("cp_commit", ()),
            If(f"it >= {ahead - 1}", (Call(f"cp_wait{ahead - 1}", ()), Call("fence_async", ()),
                                      Assign("sf", f"int32(uint32(it - {ahead - 1}) % uint32({s}))"), *arrive))]
        prod += [For("it", "0", "ntile", tuple(step)), Call("cp_wait0", ()), Call("fence_async", ()),
                 For("jt", f"max(ntile - {ahead - 1}, 0)", "ntile",
                     (Assign("sf", f"int32(uint32(jt) % uint32({s}))"), *arrive))]
        zero = self.consts.name(0.0)
        cons = [Assign("wgi", "uniform(int32(warp // 4))")] if groups > 1 else []
        cons += [Assign(f"{a}_{j}_{i}", zero) for a in ("ac", "tf")[:1 + self.fp8] for j in range(self.bc // 8)
                 for i in range(4)]
        release = If(f"it > 0 and it + {s - 1} < ntile",
                     (Call("bar_arrive", (empty(f"int32(uint32(it - 1) % uint32({s}))"), str(t + pt))),))
        mine = full("st", "wgi" if groups > 1 else 0)
        if self.fp8:  # tile it - 1's group completed and its sums promoted before tile it's products (fresh sums)
            settle = [Call("wgmma_wait0", ())] + self.promote("tf")
            before, products, after = settle + [release], self.products(wait=False, acc="tf"), []
        else:  # tile it's products issued, then tile it - 1's group completed (one group left in flight)
            settle = [Call("wgmma_wait0", ())]
            before, products, after = [], self.products(wait=False), [Call("wgmma_wait1", ()), release]
        body = [Assign("st", f"int32(uint32(it) % uint32({s}))"), Call("bar_sync", (mine, str(per)))] + before
        if groups > 1:  # (warpgroup 0's first turn handed by warpgroup 1 before the loop, its last taken after)
            body += [Call("bar_sync", (turn("wgi"), str(t)))] + products + [Call("bar_arrive", (turn("1 - wgi"), str(t)))]
            loop = [If("wgi == 1", (Call("bar_arrive", (turn(0), str(t))),)), For("it", "0", "ntile", tuple(body + after)),
                    If("wgi == 0", (Call("bar_sync", (turn(0), str(t))),))]
        else:
            loop = [For("it", "0", "ntile", tuple(body + products + after))]
        # (every sum held live past the loop, as the default loop's: the epilogue of a partial column block stores
        # only some, and with the others dead LLVM copied the loop three times and ptxas serialized the wgmmas)
        acc = WgmmaKernel.tiles("ac", self.bc // 8)
        cons += loop + settle + [Assign(acc, f"wgmma_hold({acc})")] + epilogue
        # (no register hand-over between the warpgroups: ptxas ignores setmaxnreg in code compiled for linking, as
        # numba-cuda's is — "C7504 'setmaxnreg' ignored to maintain compatibility across compilation units" — so a
        # block of twelve warps keeps one count, at most 168 a thread; the FP8 product takes 144)
        return [If(f"warp >= {t // 32}", tuple(prod), tuple(cons))]

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
