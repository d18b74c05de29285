"""Thread-block clusters (Hopper, sm_90) for generated kernels, and the simulator's model of them.

A cluster is a group of blocks launched together on one GPC (:class:`~.driver.DriverStep`'s cluster attribute), each
able to read the others' shared memory (*distributed shared memory*) and to meet them at a barrier. The generated
kernels use them where a row's segments would otherwise write partial states to global memory for a second kernel to
merge: the blocks of a row tile's segments are one cluster, each parks its states in its own shared memory, and after
one barrier each merges a share of the rows from every block's (``codegen.strategies.mma``).

- ``cluster_sync()``: every thread of every block of the cluster arrives and waits (``barrier.cluster.arrive.release``
  then ``barrier.cluster.wait.acquire``, ``.aligned``: every thread of a warp executes it): the shared-memory writes
  before it are visible to every block's reads after it.
- ``ld_cluster_f32x4(s, idx, rank)``: the four float32 at ``s[idx]`` (a 1-D float32 shared array; ``idx`` a multiple
  of 4) of block ``rank`` of the cluster (``mapa.shared::cluster`` then ``ld.shared::cluster.v4.f32``).
- ``ld_cluster_f32(s, idx, rank)``: one float32, likewise.
- ``sts_f32x2(s, idx, a, b)``: two float32 into this block's shared memory at ``s[idx]`` (``idx`` even), one
  ``st.shared.v2.f32``: how a block parks its states for the others to read.
- ``cluster_check(size)``: the kernel stops (``trap``) unless launched in clusters of ``size`` blocks.

A block's rank in a cluster of shape ``(1, n, 1)`` launched on a grid ``(x, n)`` is its ``blockIdx.y``: the kernels
that use them are launched so and name the rank so.

Under the simulator the blocks of a cluster run together, each with shared memory of its own (numba's simulator runs a
launch's blocks one after the other on one buffer, where a block waiting for the others at ``cluster_sync`` would wait
forever): :func:`clustered` wraps a launch, deferring each block until its cluster's last one comes, then running the
cluster's blocks in threads of their own. ``ld_cluster_*`` read the other block's own buffer at the same offset, and
refuse a block that has ended (its shared memory gone). What the model does not see: plain reads of shared memory by
the block's other warps (a park without the block barrier before it passes here; the generated kernels' structure is
tested instead), and time — a cluster of many blocks runs all their threads at once, slowly (minutes for 12 blocks of
128 threads).
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np
from llvmlite import ir
from numba import types

from ..errors import RedalgebraError
from .lowering import SIMULATOR, _device, _side_effect
from .sim_async import _sim_check_write

if not SIMULATOR:
    from .lowering import TypingError

__all__ = ["cluster_check", "cluster_sync", "ld_cluster_f32", "ld_cluster_f32x4", "sts_f32x2", "clustered"]


#: Seconds a simulated block waits for the rest of its cluster at ``cluster_sync`` before the launch is failed (a
#: kernel whose threads do not all reach it: on the GPU, a hang).
SIM_CLUSTER_TIMEOUT = 120.0


# --------------------------------------------------------------------------------------------------
# Simulator
# --------------------------------------------------------------------------------------------------
class _OwnShared:
    """A simulated cluster block's shared memory: its dynamic buffer and static arrays, as numba's ``FakeCUDAShared``
    holds a launch's (read by :func:`~.sim_async.shared_array`), every byte ``0xFF`` to begin with (as
    :func:`~.sim_async.poison_shared_memory` makes a block's)."""

    def __init__(self, size: int):
        from .sim_async import Poisoned

        self._dynshared_size = size
        self._dynshared = np.full(max(size, 1), 0xFF, np.uint8)
        self._allocations = Poisoned()
        self.gone = False  # (the block has ended: :func:`clustered`)


class _Cluster:
    """The blocks of one cluster of a simulated launch: each block's manager by its rank, and the barrier every thread
    of every block meets at ``cluster_sync``."""

    def __init__(self, size: int, threads: int):
        self.members: dict = {}
        self.pending: list = []
        self.barrier = threading.Barrier(size * threads, timeout=SIM_CLUSTER_TIMEOUT)


class _Launch:
    def __init__(self, dims: tuple, shared: int):
        self.dims, self.shared, self.clusters = dims, shared, {}
        self.size = int(np.prod(dims))

    def place(self, point: tuple) -> tuple:
        """The cluster (its index) and the rank of the block at ``point`` (x, y, z): x fastest within the cluster."""
        dx, dy, dz = self.dims
        x, y, z = (tuple(point) + (0, 0))[:3]
        return (x // dx, y // dy, z // dz), (x % dx) + dx * ((y % dy) + dy * (z % dz))


_LAUNCH: list = [None]  # the launch running under clustered() (the simulator runs one launch at a time)


def _manager():
    manager = getattr(threading.current_thread(), "_manager", None)
    if manager is None or getattr(manager, "cluster", None) is None:
        raise RedalgebraError("a cluster intrinsic ran outside a clustered launch (a kernel that meets or reads its "
                              "cluster must be launched with its cluster shape)")
    return manager


def _sim_cluster_sync():
    try:
        _manager().cluster.barrier.wait()
    except threading.BrokenBarrierError:
        raise RedalgebraError("cluster_sync: the cluster's other blocks did not all arrive (one failed, or its "
                              f"threads did not all reach the barrier within {SIM_CLUSTER_TIMEOUT:.0f} s)") from None


def _sim_cluster_check(size):
    manager = _manager()
    if len(manager.cluster.members) != int(size):
        raise RedalgebraError(f"a kernel that merges {size} segments in a cluster was launched in clusters of "
                              f"{len(manager.cluster.members)} blocks")


def _remote(s, idx: int, count: int, rank: int) -> np.ndarray:
    manager = _manager()
    members = manager.cluster.members
    if int(rank) not in members:
        raise IndexError(f"ld_cluster: rank {rank} outside the cluster's {len(members)} blocks")
    ary = np.asarray(getattr(s, "_ary", s))
    own = manager.own_shared._dynshared
    start = ary.__array_interface__["data"][0] - own.__array_interface__["data"][0]
    if ary.dtype != np.float32 or ary.ndim != 1 or not 0 <= start < own.size:
        raise IndexError("ld_cluster: needs a 1-D float32 view of the block's dynamic shared memory")
    at = start + 4 * int(idx)
    if int(idx) % count or at < 0 or at + 4 * count > own.size:
        raise IndexError(f"ld_cluster: index {idx} misaligned or outside the dynamic shared memory")
    remote = members[int(rank)].own_shared
    if remote.gone:
        raise RedalgebraError(f"ld_cluster: block {rank} of the cluster has ended, and its shared memory with it (a "
                              f"block must not leave while the others read it: a cluster_sync before it ends)")
    return remote._dynshared[at:at + 4 * count].view(np.float32)


def _sim_sts_f32x2(s, idx, a, b):
    flat = np.asarray(getattr(s, "_ary", s)).reshape(-1)
    if flat.dtype != np.float32 or int(idx) % 2 or not 0 <= int(idx) <= flat.size - 2:
        raise IndexError(f"sts_f32x2: index {idx} misaligned or outside {flat.size} float32 (a float32 shared array)")
    _sim_check_write("sts_f32x2", flat, 4 * int(idx), 8)  # (refused where a wgmma in flight still reads the bytes)
    flat[int(idx)] = np.float32(a)
    flat[int(idx) + 1] = np.float32(b)


def _sim_ld_cluster_f32x4(s, idx, rank):
    return tuple(np.float32(v) for v in _remote(s, idx, 4, rank))


def _sim_ld_cluster_f32(s, idx, rank):
    return np.float32(_remote(s, idx, 1, rank)[0])


@contextlib.contextmanager
def clustered(dims: tuple, shared: int):
    """Run the simulated launch inside as clusters of ``dims`` blocks (each block ``shared`` bytes of dynamic shared
    memory of its own): numba's per-block ``run`` is deferred until the cluster's last block comes, then the cluster's
    blocks run in threads together and are joined, the first error raised. Simulator only."""
    from numba.cuda.simulator import kernel, kernelapi

    from .front_end import written_from
    from .sim_async import FAKE_SHARED_ARRAY, shared_array

    fake = kernelapi.FakeCUDAShared
    if fake.array is not shared_array and not written_from(fake.array, FAKE_SHARED_ARRAY):
        raise RedalgebraError("this numba-cuda's simulator cannot run thread-block clusters (its shared arrays are not "
                              "the ones redalgebra's stand-in was written from): compile with cluster=False")
    fake.array = shared_array
    manager = kernel.BlockManager
    inner = manager.run
    launch = _Launch(tuple(dims) + (1,) * (3 - len(dims)), shared)

    def run(self, grid_point, *args):
        cid, rank = launch.place(grid_point)
        cluster = launch.clusters.get(cid)
        if cluster is None:
            cluster = launch.clusters[cid] = _Cluster(launch.size, int(np.prod(self._block_dim)))
        self.cluster, self.own_shared = cluster, _OwnShared(launch.shared)
        cluster.members[rank] = self
        cluster.pending.append((self, grid_point, args))
        if len(cluster.pending) < launch.size:
            return
        errors = []

        def member(block, point, margs):
            try:
                inner(block, point, *margs)
            except BaseException as err:  # noqa: BLE001 - raised in the launch's thread below
                errors.append(err)
                cluster.barrier.abort()  # (the other blocks' threads waiting for this one stop waiting)
            finally:  # (on the GPU a block's shared memory goes with it: a later read of it is refused)
                block.own_shared.gone = True

        threads = [threading.Thread(target=member, args=job, daemon=True) for job in cluster.pending]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        del launch.clusters[cid]
        if errors:
            first = next((e for e in errors if not isinstance(e, RedalgebraError) or "did not all arrive" not in str(e)),
                         errors[0])
            raise first

    manager.run = run
    try:
        yield
    finally:
        manager.run = inner
    if launch.clusters:
        raise RedalgebraError(f"a clustered launch left {len(launch.clusters)} cluster(s) incomplete: its grid is "
                              f"not a whole number of clusters of {dims}")


# --------------------------------------------------------------------------------------------------
# CUDA
# --------------------------------------------------------------------------------------------------
@_device(_sim_cluster_sync)
def cluster_sync(typingctx):
    """Every thread of every block of the cluster meets here; shared-memory writes before it are seen by every
    block's ``ld_cluster_*`` after it."""
    def codegen(context, builder, sig, args):
        _side_effect(builder, "barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;", "",
                     [])
        return context.get_dummy_value()
    return types.void(), codegen


@_device(_sim_cluster_check)
def cluster_check(typingctx, size):
    """Stop the kernel (``trap``: the launch fails with an error) unless its blocks were launched in clusters of
    ``size`` blocks (``%cluster_nctarank``): a kernel that reads its cluster's shared memory, launched without the
    cluster's shape (as numba's own launch does), would read another rank's address in a cluster of one."""
    if not isinstance(size, types.Integer):
        raise TypingError(f"cluster_check: needs an integer size, got {size}")

    def codegen(context, builder, sig, args):
        size = context.cast(builder, args[0], sig.args[0], types.uint32)
        _side_effect(builder, "{\n\t.reg .u32 n;\n\t.reg .pred p;\n\tmov.u32 n, %cluster_nctarank;\n\t"
                              "setp.ne.u32 p, n, $0;\n\t@p trap;\n\t}", "r", [size])
        return context.get_dummy_value()
    return types.void(size), codegen


def _check_f32_shared(name, s, idx, rank):
    if not (isinstance(s, types.Array) and s.ndim == 1 and s.dtype == types.float32 and isinstance(idx, types.Integer)
            and isinstance(rank, types.Integer)):
        raise TypingError(f"{name}: needs a 1-D float32 shared array, an integer index and an integer rank, got "
                          f"{s}, {idx}, {rank}")


def _mapped(context, builder, sig, args):
    """The 32-bit shared::cluster address of ``s[idx]`` in block ``rank``'s shared memory."""
    from .tensor_cores import _shared_address

    address = _shared_address(context, builder, sig.args[0], args[0], sig.args[1], args[1])
    rank = context.cast(builder, args[2], sig.args[2], types.uint32)
    fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32), ir.IntType(32)])
    return builder.call(ir.InlineAsm(fnty, "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r"), [address, rank])


@_device(_sim_sts_f32x2)
def sts_f32x2(typingctx, s, idx, a, b):
    """``s[idx], s[idx + 1] = a, b`` (a 1-D float32 shared array, ``idx`` even), one ``st.shared.v2.f32`` at an address
    of 32 bits — no index checks and no wraparound of a negative index, as numba's indexing makes for each store: how
    a block parks its accumulators' pairs for the cluster's merge."""
    _check_f32_shared("sts_f32x2", s, idx, idx)

    def codegen(context, builder, sig, args):
        from .tensor_cores import _shared_address

        address = _shared_address(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        values = [context.cast(builder, v, t, types.float32) for v, t in zip(args[2:], sig.args[2:])]
        _side_effect(builder, "st.shared.v2.f32 [$0], {$1, $2};", "r,f,f", [address, *values])
        return context.get_dummy_value()
    return types.void(s, idx, types.float32, types.float32), codegen


@_device(_sim_ld_cluster_f32x4)
def ld_cluster_f32x4(typingctx, s, idx, rank):
    """The four float32 at ``s[idx]`` (``idx`` a multiple of 4) in the shared memory of block ``rank`` of the cluster:
    one ``ld.shared::cluster.v4.f32`` (after a ``cluster_sync`` that follows the writes)."""
    _check_f32_shared("ld_cluster_f32x4", s, idx, rank)
    rt = types.UniTuple(types.float32, 4)

    def codegen(context, builder, sig, args):
        remote = _mapped(context, builder, sig, args)
        out = _side_effect(builder, "ld.shared::cluster.v4.f32 {$0, $1, $2, $3}, [$4];", "=f,=f,=f,=f,r", [remote],
                           ir.LiteralStructType([ir.FloatType()] * 4))
        return context.make_tuple(builder, rt, [builder.extract_value(out, k) for k in range(4)])
    return rt(s, idx, rank), codegen


@_device(_sim_ld_cluster_f32)
def ld_cluster_f32(typingctx, s, idx, rank):
    """The float32 at ``s[idx]`` in the shared memory of block ``rank`` of the cluster (``ld.shared::cluster.f32``)."""
    _check_f32_shared("ld_cluster_f32", s, idx, rank)

    def codegen(context, builder, sig, args):
        remote = _mapped(context, builder, sig, args)
        return _side_effect(builder, "ld.shared::cluster.f32 $0, [$1];", "=f,r", [remote], ir.FloatType())
    return types.float32(s, idx, rank), codegen
