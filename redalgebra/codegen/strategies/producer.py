"""``columns_wgmma``'s product block, warp-specialized: a producer warpgroup and the consumer warpgroups, meeting at
named barriers (``bar_sync``/``bar_arrive``), never at a block barrier.

Every thread of the block used to copy its share of each tile and the two warpgroups met at a block barrier every
tile, so both drained their products at the same moment. Here a producer warpgroup makes every ``cp.async`` copy into
a ring of :data:`PRODUCER_STAGES` stages; each consumer warpgroup waits for its tile at a "full" barrier (a stage and
warpgroup), releases a stage at an "empty" one (a stage) once its products are complete, and issues its products in
turn with the other warpgroup (a turn barrier each), so one's sums are added while the other's products run.

The FP8 product (:attr:`Spec.fp8_products`, :mod:`.fp8_products`) always takes this block; the 16-bit one
(:attr:`Spec.producer`) where :data:`SIXTEEN_BIT` is set. Measured on the H200 (FP8 M4096 K = N = 7168,
``gpu/kernel_steps.py``, interleaved processes): the FP8 product 410–431 µs against 434–443 µs with every thread
copying between block barriers (398–427 µs over later runs: those kernels also emitted a register hand-over,
``setmaxnreg``, which ptxas ignores — see :meth:`Producer.specialized` — since removed: 408.9–435.1 µs without it); a
producer of two warps 454–457 µs, one warp 911 µs (its 64 copies a tile spilled); one "full" barrier a stage for both
warpgroups (the turns couple them anyway) 410–411 µs at four stages, the same, and 508–524 µs at six.

:class:`Producer` is the kernel's part (a mixin of :class:`~.columns_wgmma.ColumnsWgmmaKernel`, whose ``products``,
``promote``, ``issue``/``offsets`` and ``producer_offsets``/``producer_copies`` it calls).
"""

from __future__ import annotations

from ..tree import Assign, Call, For, If, While
from .tile_producer import ring_barriers, ring_producer
from .wgmma import WgmmaKernel

#: Threads of the product's producer (a warpgroup: 16 copies a thread a tile of the FP8 product; two warps, 32 copies
#: each, measured slower) beside its two consumer warpgroups (one warp in the simulator), and stages of its ring (named
#: barriers are 15 a block, and the ring takes three a stage — a "full" one for each consumer warpgroup, an "empty"
#: one — and two more, the warpgroups' turns).
PRODUCER, PRODUCER_STAGES = 128, 4
#: The FP8 product's widest block without a register hand-over (columns): wider blocks (``group=24``: 192 columns,
#: two warpgroups' 96 + 96 accumulators a thread) take the producer's registers (``regs_give``, ``regs_take``).
HAND_OVER_COLUMNS = 128


#: Whether ``columns_wgmma``'s 16-bit product (bfloat16 or float16 products: RMSNorm + GEMM, the exact FP8 product)
#: takes the producer warpgroup too (:attr:`Spec.producer`). Off: on the H200 it was no faster (RMSNorm + GEMM M4096's
#: product 202.1 and 202.0 µs against 197.5 and 194.9 with the block barriers; the exact FP8 product M4096 595.0 and
#: 603.3 against 600.3 and 599.5; interleaved processes), and right (``fp8_products_check.py``'s five shapes with it).
SIXTEEN_BIT = False


def producer_threads(spec) -> int:
    """Threads of the product's producer: :data:`PRODUCER` with :attr:`Spec.fp8_products` or :attr:`Spec.producer`,
    else 0 (every thread of the block copies and multiplies)."""
    return PRODUCER if spec.fp8_products or spec.producer else 0


class Producer:
    """The warp-specialized product block of a ``columns_wgmma`` kernel."""

    def barriers(self) -> tuple:
        """(consumer warpgroups, "full" barrier of stage ``st`` and warpgroup ``g``, "empty" barrier of stage ``st``,
        turn barrier of warpgroup ``g``) as functions of expressions, named barriers 1 … 15."""
        groups = max(self.spec.threads // 128, 1)
        return (groups, *ring_barriers(groups, self.stages))

    def specialized(self, epilogue: list, span=None) -> list:
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
        on the warpgroup: with one, LLVM made three copies of the loop).

        ``span`` (a function of a tile's expression giving its statements, :meth:`span`): the block walks the output's
        tiles (``tile``, ``tile + gridDim.x``, ...; :attr:`Spec.persistent`). The ring then runs on across them: its
        stages are counted by ``gq``, the block's tiles of the axis before this output tile's, so the producer copies
        the next output tile's first tiles while the consumers store this one's outputs. The consumers then release
        every stage (the last of an output tile once its sums are complete) and the producer, past its last tile,
        waits for the releases it did not wait for before."""
        t, pt, s = self.spec.threads, PRODUCER, self.stages
        walk = span is not None
        ahead = s - 1
        groups, full, empty, turn = self.barriers()
        per = t // groups + pt  # threads meeting at a "full" barrier
        q = "gq + it" if walk else "it"  # (the tile of the axis counted along the ring)
        prod = [Assign("ptid", f"tid - {t}")]
        if self.fp8:
            offsets = self.producer_offsets()
            copies = self.producer_copies
        else:  # (the 16-bit product's copies, partial last tile included, spread over the producer's threads)
            offsets = self.offsets(pt, "ptid")
            copies = lambda tile, stage: self.issue(tile, stage, pt, "ptid")  # noqa: E731
        arrive = [Call("bar_arrive", (full("sf", g), str(per))) for g in range(groups)]
        # (count: the tiles of the axis the ring took)
        step, last = ring_producer(q, s, ahead, lambda e: f"int32(uint32({e}) % uint32({s}))", copies("it", "st"),
                                   arrive, empty, str(t + pt), "gq" if walk else "ntile")
        if walk:  # (the releases of the ring's last stages, each waited for once)
            prod += [Assign("gq", "0"), Assign("tile", "cuda.blockIdx.x"),
                     While("tile < total", tuple(span("tile") + offsets + [For("it", "0", "ntile", tuple(step)),
                                                                           Assign("gq", "ntile", "+"),
                                                                           Assign("tile", "cuda.gridDim.x", "+")]))]
            prod += last + [For("jt", f"max(gq - {s}, 0)", "gq", (
                Call("bar_sync", (empty(f"int32(uint32(jt) % uint32({s}))"), str(t + pt))),))]
        else:
            prod += offsets + [For("it", "0", "ntile", tuple(step))] + last
        zero = self.consts.name(0.0)
        sums = [Assign(f"{a}_{j}_{i}", zero) for a in ("ac", "tf")[:1 + self.fp8] for j in range(self.bc // 8)
                for i in range(4)]
        cons = [Assign("wgi", "uniform(int32(warp // 4))")] if groups > 1 else []
        free = lambda tile: (Call("bar_arrive", (empty(f"int32(uint32({tile}) % uint32({s}))"), str(t + pt))),)  # noqa: E731
        release = If("it > 0" if walk else f"it > 0 and it + {s - 1} < ntile", free(f"{q} - 1"))
        mine = full("st", "wgi" if groups > 1 else 0)
        if self.fp8:  # tile it - 1's group completed and its sums promoted before tile it's products (fresh sums)
            settle = [Call("wgmma_wait0", ())] + self.promote("tf")
            before, products, after = settle + [release], self.products(wait=False, acc="tf", at=q), []
        else:  # tile it's products issued, then tile it - 1's group completed (one group left in flight)
            settle = [Call("wgmma_wait0", ())]
            before, products, after = [], self.products(wait=False, at=q), [Call("wgmma_wait1", ()), release]
        body = [Assign("st", f"int32(uint32({q}) % uint32({s}))"), Call("bar_sync", (mine, str(per)))] + before
        if groups > 1:  # (warpgroup 0's first turn handed by warpgroup 1 before the loop, its last taken after)
            body += [Call("bar_sync", (turn("wgi"), str(t)))] + products + [Call("bar_arrive", (turn("1 - wgi"), str(t)))]
            first, final = [If("wgi == 1", (Call("bar_arrive", (turn(0), str(t))),))], \
                [If("wgi == 0", (Call("bar_sync", (turn(0), str(t))),))]
        else:
            body += products
            first, final = [], []
        loop = For("it", "0", "ntile", tuple(body + after))
        # (every sum held live past the loop, as the default loop's: the epilogue of a partial column block stores
        # only some, and with the others dead LLVM copied the loop three times and ptxas serialized the wgmmas)
        acc = WgmmaKernel.tiles("ac", self.bc // 8)
        hold = [Assign(acc, f"wgmma_hold({acc})")]
        if walk:  # each output tile's sums afresh; its last stage released once they are complete
            done = [If("ntile > 0", free("gq + ntile - 1")), Assign("gq", "ntile", "+")]
            cons += first + [Assign("gq", "0"), Assign("tile", "cuda.blockIdx.x"), While("tile < total", tuple(
                span("tile") + sums + [loop] + settle + done + hold + epilogue + [Assign("tile", "cuda.gridDim.x", "+")]))]
            cons += final
        else:
            cons += sums + first + [loop] + final + settle + hold + epilogue
        # A block of twelve warps keeps one register count, at most 168 a thread: the FP8 product of 128 columns takes
        # 144 (146 walking its tiles). Wider FP8 blocks (HAND_OVER_COLUMNS: two sets of accumulators, 96 + 96 a
        # thread at 192 columns) need more: the producer hands its registers to the two consumer warpgroups
        # (setmaxnreg), which ptxas honours only compiling the whole program — the call's driver launch loads such a
        # kernel from its PTX (runtime.driver); numba's own launch links it, the hand-over ignored (C7504), and spills
        if self.fp8 and groups > 1 and self.bc > HAND_OVER_COLUMNS:
            prod, cons = [Call("regs_give", ())] + prod, [Call("regs_take", ())] + cons
        return [If(f"warp >= {t // 32}", tuple(prod), tuple(cons))]
