"""Waits, barriers and the register hand-over for generated CUDA kernels: instructions without operands but a
barrier id (``cp.async`` groups, Hopper's programmatic dependent launch, named barriers, ``setmaxnreg``). Each is
inline PTX on the GPU and a stand-in under the simulator (:mod:`.sim_async`: copies landing at their group's wait,
named barriers counted per block and round). Re-exported by :mod:`.tensor_cores`, from which a generated module
imports every tensor-core intrinsic.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types

from .lowering import SIMULATOR, _device, _side_effect
from .sim_async import _sim_commit, _sim_named_barrier, _sim_named_vote, _sim_wait, _sim_warp_meet

if not SIMULATOR:
    from .lowering import TypingError

__all__ = ["cp_commit", "cp_wait0", "cp_wait1", "cp_wait2", "cp_wait3", "cp_wait4", "grid_wait", "grid_launch",
           "regs_give", "regs_take", "regs_give40", "regs_take232", "bar_sync", "bar_arrive",
           "bar_red_or", "warp_sync"]


def _sim_nothing():
    return None


def _wait(name, text, stand_in=_sim_nothing):
    @_device(stand_in)
    def waiter(typingctx):
        def codegen(context, builder, sig, args):
            _side_effect(builder, text, "", [])
            return context.get_dummy_value()
        return types.void(), codegen
    waiter.__name__ = waiter.__qualname__ = name
    return waiter


cp_commit = _wait("cp_commit", "cp.async.commit_group;", _sim_commit)
# Hopper's programmatic dependent launch (sm_90): ``grid_wait`` waits until the kernel launched before this one on
# the stream has finished and its writes are visible (``griddepcontrol.wait``) — a kernel launched with the attribute
# that lets it start early (:class:`~redalgebra.runtime.driver.DriverStep`) calls it before it reads what the one
# before wrote; launched without it, the call returns at once. ``grid_launch`` lets the kernel launched after this
# one start while this one runs (``griddepcontrol.launch_dependents``).
grid_wait = _wait("grid_wait", "griddepcontrol.wait;")
grid_launch = _wait("grid_launch", "griddepcontrol.launch_dependents;")
# Hopper's register reallocation between warpgroups (sm_90a; every warp of a warpgroup executes it): a producer
# warpgroup gives registers back (``regs_give``: down to 88 a thread) and two consumer warpgroups take them
# (``regs_take``: up to 208), a block of three warpgroups launched at 168 a thread: 128 × 88 + 256 × 208 = 384 × 168,
# what the block holds. ptxas (whole program, no GPU needed) assembles the FP8 product of 192 columns without spills
# at these counts, and spills at 72 / 208 (the producer's copies) or with the consumers at 168. ptxas honours
# setmaxnreg only compiling the whole program (C7504 otherwise: code compiled for linking, as numba-cuda's is), so a
# kernel calling them is loaded from its PTX by the driver (:class:`~redalgebra.runtime.driver.DriverStep`).
REGS_GIVE, REGS_TAKE = 88, 208
#: The threads that give (a warpgroup: the generator's producer, ``codegen.strategies.producer.PRODUCER``); the
#: block's others take.
PRODUCER_THREADS = 128
regs_give = _wait("regs_give", f"setmaxnreg.dec.sync.aligned.u32 {REGS_GIVE};")
regs_take = _wait("regs_take", f"setmaxnreg.inc.sync.aligned.u32 {REGS_TAKE};")
# The same hand-over further, as FlashAttention-3 makes it: a producer that only issues copies keeps 40 (its copies a
# loop: codegen.strategies.tile_producer), two consumer warpgroups take 232 (wgmma's attention in tiles of 128 keys:
# the scores, the factors and the sums of d = 128 at once; ptxas assembles it without spills at 40 / 232, and spills
# at 88 / 208 or 56 / 224). 128 × 40 + 256 × 232 = 384 × 168.
REGS_GIVE_MOST, REGS_TAKE_MOST = 40, 232
regs_give40 = _wait("regs_give40", f"setmaxnreg.dec.sync.aligned.u32 {REGS_GIVE_MOST};")
regs_take232 = _wait("regs_take232", f"setmaxnreg.inc.sync.aligned.u32 {REGS_TAKE_MOST};")
cp_wait0 = _wait("cp_wait0", "cp.async.wait_group 0;", _sim_wait(0))
cp_wait1 = _wait("cp_wait1", "cp.async.wait_group 1;", _sim_wait(1))
cp_wait2 = _wait("cp_wait2", "cp.async.wait_group 2;", _sim_wait(2))
cp_wait3 = _wait("cp_wait3", "cp.async.wait_group 3;", _sim_wait(3))
cp_wait4 = _wait("cp_wait4", "cp.async.wait_group 4;", _sim_wait(4))


def _named_barrier(name, op, stand_in):
    def typer(typingctx, bid, count):
        if not (isinstance(bid, types.Integer) and isinstance(count, types.Integer)):
            raise TypingError(f"{name}(barrier, threads): two integers")

        def codegen(context, builder, sig, args):
            i32 = ir.IntType(32)
            values = [context.cast(builder, v, t, types.int32) for v, t in zip(args, sig.args)]
            _side_effect(builder, f"{op} $0, $1;", "r,r", [builder.trunc(v, i32) if v.type != i32 else v
                                                         for v in values])
            return context.get_dummy_value()
        return types.void(bid, count), codegen
    typer.__name__ = typer.__qualname__ = name
    return _device(stand_in)(typer)


# Named barriers (1 … 15; 0 is the block's): ``bar_sync(b, n)`` waits until ``n`` threads (a multiple of 32, whole
# warps) have arrived at barrier ``b``, itself included; ``bar_arrive(b, n)`` counts this warp's arrival and goes on.
# A producer's copies made visible by ``bar_arrive`` after its ``cp_wait`` and ``fence_async`` are seen by the threads
# that ``bar_sync`` on that barrier (the barrier orders memory as the block's does).
bar_sync = _named_barrier("bar_sync", "barrier.sync.aligned", _sim_named_barrier(True))
bar_arrive = _named_barrier("bar_arrive", "barrier.arrive.aligned", _sim_named_barrier(False))


@_device(_sim_named_vote)
def bar_red_or(typingctx, bid, count, pred):
    """``bar_red_or(b, n, x)``: ``bar_sync(b, n)`` that also returns 1 where ``x`` is non-zero in any of the ``n``
    threads, else 0 (``bar.red.or.pred``): the block's ``syncthreads_or`` among some of its warps only (a producer
    warpgroup's consumers voting while the producer copies on)."""
    if not all(isinstance(a, types.Integer) for a in (bid, count, pred)):
        raise TypingError("bar_red_or(barrier, threads, value): three integers")

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        values = [context.cast(builder, v, t, types.int32) for v, t in zip(args, sig.args)]
        text = ("{\n.reg .pred q, p;\nsetp.ne.u32 q, $3, 0;\nbar.red.or.pred p, $1, $2, q;\n"
                "selp.u32 $0, 1, 0, p;\n}")
        return _side_effect(builder, text, "=r,r,r,r", [builder.trunc(v, i32) if v.type != i32 else v
                                                        for v in values], i32)
    return types.int32(bid, count, pred), codegen


# The threads of one warp meet (``__syncwarp``). The simulator's shuffles exchange through shared boxes between two
# such meetings in a kernel whose warps take roles at named barriers (codegen.tree.SimPrinter).
warp_sync = _wait("warp_sync", "bar.warp.sync -1;", _sim_warp_meet)
