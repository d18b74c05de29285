"""The simulator's model of the tensor-core instructions' asynchrony (stand-ins only: nothing here runs on a GPU).

A ``cp.async`` copy lands in shared memory at the ``cp_wait<n>`` that covers its group, not when issued, and a
``wgmma`` group's shared-memory reads last until the wait that covers it: a kernel that waits too little, or reuses a
stage too early, fails its simulator tests instead of passing by the simulator's luck. Used by the stand-ins of
:mod:`.tensor_cores` and :mod:`.warpgroup`.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, NamedTuple

import numpy as np


def _poison(array) -> None:
    if isinstance(array, np.ndarray):
        array.view(np.uint8).fill(0xFF)


class Poisoned(dict):
    """A simulated block's static shared arrays by the line that allocates them, each filled with ``0xFF`` bytes as it
    is first stored; the first array stored for a line is the line's (:func:`shared_array`)."""

    def __setitem__(self, key, array):
        self.setdefault(key, array)

    def setdefault(self, key, array):  # (atomic: two threads allocating one line get the same array)
        _poison(array)
        return super().setdefault(key, array)


#: numba-cuda's ``FakeCUDAShared.array``, as :func:`shared_array` was written from (sha256 of its source, first 16 hex
#: digits): numba-cuda 0.30's.
FAKE_SHARED_ARRAY = "46c69699220dd500"


def shared_array(self, shape, dtype, alignment=None):
    """The simulator's ``cuda.shared.array`` (numba-cuda 0.30's ``FakeCUDAShared.array``) but for two things. Its
    static array is the one the line's first allocation stored: numba's looks the line up, then stores and returns an
    array of its own, so two threads racing on a line's first allocation each kept one — the loser a private array,
    poisoned, where its block's other threads wrote theirs (rows of NaN now and then from ``mma`` and ``wgmma``). And
    the line is read from the calling frame (``co_filename``, ``f_lineno``), which is what numba's key holds, rather
    than from ``traceback.extract_stack``, which summarises every frame of the stack and reads its source line, on every
    simulated thread at every allocation. A block of a simulated cluster (:func:`~.cluster.clustered`) reads its own
    shared memory, not the launch's."""
    from numba.cuda.simulator.kernelapi import numpy_support, types

    if alignment is not None:
        raise RuntimeError("Array alignment is not supported in cudasim")
    # (a block of a simulated cluster holds shared memory of its own: its cluster's blocks run together, :mod:`.cluster`)
    own = getattr(getattr(threading.current_thread(), "_manager", None), "own_shared", None)
    if own is not None:
        self = own
    if isinstance(dtype, types.Type):
        dtype = numpy_support.as_dtype(dtype)
    if shape == 0:  # the dynamic shared memory, one buffer
        count = self._dynshared_size // dtype.itemsize
        return np.frombuffer(self._dynshared.data, dtype=dtype, count=count)
    frame = sys._getframe(1)
    caller = (frame.f_code.co_filename, frame.f_lineno)
    del frame
    res = self._allocations.get(caller)
    if res is None:
        res = self._allocations.setdefault(caller, np.empty(shape, dtype))
    return res


def poison_shared_memory() -> None:
    """Make every simulated block's shared memory start as ``0xFF`` bytes (a NaN in every 16- and 32-bit float type):
    its dynamic shared memory, not numba's zeros nor what the launch's previous block left there (the simulator runs a
    launch's blocks one after the other on one buffer), and its static arrays, as each is allocated and again at every
    later block (the simulator keeps them for the launch). Hooked where the simulator builds a block's manager, in the
    launch's thread just before the block runs (``tests/conftest.py`` replaces its ``run``); its ``cuda.shared.array``
    is :func:`shared_array` (threads racing on a static array's first allocation share one) where numba's is the method
    that was written from.
    On the GPU a block's shared memory holds whatever was there before, so a kernel that reads what it never wrote (a
    row's padding to 16 components left unwritten, :func:`~..codegen.strategies.products.staged`) would pass in the
    simulator by its luck. Installed by :func:`~.backends.cuda_module`, once a process; a simulator without the
    internals it reads is left as it is (``tests/runtime/test_sim_async.py`` checks that it took)."""
    from numba.cuda.simulator import kernel, kernelapi

    manager = getattr(kernel, "BlockManager", None)
    context = getattr(kernel, "_get_kernel_context", None)
    fake = getattr(kernelapi, "FakeCUDAShared", None)
    if manager is None or context is None or fake is None or getattr(manager, "poisoned", False):
        return
    init = manager.__init__

    def poisoned_init(self, *args, **kwargs):  # (built in the launch's thread, just before the block's run)
        init(self, *args, **kwargs)
        shared = getattr(context(), "_shared", None)
        _poison(getattr(shared, "_dynshared", None))
        allocations = getattr(shared, "_allocations", None)
        if isinstance(allocations, dict):
            if not isinstance(allocations, Poisoned):
                shared._allocations = allocations = Poisoned(allocations)
            for array in allocations.values():
                _poison(array)
    manager.__init__, manager.poisoned = poisoned_init, True
    from .front_end import written_from

    if written_from(fake.array, FAKE_SHARED_ARRAY):
        fake.array = shared_array


def _shared_flat(s):
    return np.asarray(getattr(s, "_ary", s)).reshape(-1)


#: Each simulated thread's ``cp.async`` copies not yet landed: ``open`` (issued since its last commit) and ``groups``
#: (committed, oldest first). A copy lands in shared memory only at the ``cp_wait<n>`` that covers its group, as on
#: the GPU, where reading it before then is a race: the simulator then reads what was there before, so a kernel
#: that waits too little fails its tests instead of passing by the simulator's luck.
_COPIES = threading.local()


class _Copies:
    """One simulated thread's copies not yet landed (:data:`_COPIES`), and the 16-byte chunks of shared memory they
    write (absolute addresses, counted), which a ``wgmma`` of the thread's block must not read before they land
    (:func:`_sim_wgmma_read`)."""

    def __init__(self):
        self.open, self.groups, self.chunks = [], [], {}
        self.thread = threading.current_thread()
        self.block = _block_of(self.thread)


#: Every simulated thread's :class:`_Copies` with a copy not yet landed, by its ``id``.
_LANDING: dict = {}
#: The chunks :data:`_LANDING`'s copies write, each with its count of copies not yet landed over every thread (dropped
#: at zero): a check whose chunks are none of these meets no copy, without a look at each thread (:func:`_met_in_block`).
_LANDING_CHUNKS: dict = {}


def _copies_held(copies) -> tuple:
    """The chunks a thread's copies not yet landed write, as :data:`_LANDING_CHUNKS` counts them."""
    return tuple(copies.chunks.items())


def _sim_pending() -> _Copies:
    if not hasattr(_COPIES, "state"):
        _COPIES.state = _Copies()
    return _COPIES.state


class _Reads:
    """One simulated thread's ``wgmma`` groups not yet waited for: the sets of 16-byte chunks of shared memory (by
    absolute address, a set an operand) each reads, ``open`` since the thread's last commit, ``groups`` committed,
    oldest first. The simulator's
    ``wgmma`` computes when issued; the GPU's reads its operands until the wait that covers its group, so a copy or a
    store into those chunks before then is a race the simulator reports (:func:`_sim_check_write`) instead of
    computing on luck. Writes through ``cp.async`` and ``sts_w4`` are checked; a kernel's plain stores into shared
    arrays are not (the simulator does not see them as instructions)."""

    def __init__(self):
        self.open, self.groups = [], []
        self.thread = threading.current_thread()
        self.block = _block_of(self.thread)


def _block_of(thread):
    """The simulated block a thread runs in: numba-cuda's block manager, one a block (None outside a launch)."""
    return getattr(thread, "_manager", None)


_READS = threading.local()
#: Every simulated thread's :class:`_Reads` with a group in flight. A write by a thread is checked against those of its
#: own block only: a block's shared memory is its own, and a kernel stopped by an error leaves threads behind that
#: may still run a while (blocked at a named barrier until its deadlock timeout) while a later launch reuses the
#: same addresses. A thread that ended without waiting is dropped: its shared memory is gone.
_IN_FLIGHT: dict = {}
#: The sets of chunks :data:`_IN_FLIGHT`'s groups read, each with the number of times a group (open or committed, over
#: every thread) holds it, as :data:`_LANDING_CHUNKS` counts the copies' chunks. By set, not by chunk: a warpgroup's
#: 128 threads read the same operands (one set each, :func:`~.warpgroup._read_chunks`), which would be 128 counts of
#: every chunk.
_IN_FLIGHT_SETS: dict = {}


def _reads_held(state) -> tuple:
    """The sets of chunks a thread's groups in flight read, as :data:`_IN_FLIGHT_SETS` counts them."""
    return tuple((chunks, 1) for group in (*state.groups, state.open) for chunks in group)


#: Held for every change and copy of :data:`_IN_FLIGHT`, :data:`_LANDING` and their counts (a copy of the dict in one
#: thread met another thread's change: a collection started inside the copy can run Python code, and so switch
#: threads).
_IN_FLIGHT_LOCK = threading.Lock()


def _sim_reads() -> _Reads:
    if not hasattr(_READS, "state"):
        _READS.state = _Reads()
    return _READS.state


def _sim_wgmma_read(chunks) -> None:
    """Record the absolute 16-byte chunks a ``wgmma`` issued by this thread reads (its open group); refuse the read
    where a ``cp.async`` copy of the block not yet waited for writes one of them (on the GPU the product would read
    the chunk before or after the copy lands, by luck)."""
    chunks = chunks if isinstance(chunks, frozenset) else frozenset(chunks)
    if _met_in_block(_COPY_REGISTRY, chunks):
        raise RuntimeError("wgmma: reads shared memory that a cp.async copy not yet waited for writes: wait for "
                           "the copy's group (and meet the copying threads) before the product")
    state = _sim_reads()
    with _IN_FLIGHT_LOCK:
        _count(_IN_FLIGHT_SETS, ((chunks, 1),), 1)
        state.open.append(chunks)
        _IN_FLIGHT[id(state)] = state


def _sim_wgmma_commit() -> None:
    state = _sim_reads()
    state.groups.append(state.open)
    state.open = []


def _sim_wgmma_wait(n: int):
    def wait():
        state = _sim_reads()
        with _IN_FLIGHT_LOCK:
            done = max(len(state.groups) - n, 0)
            for group in state.groups[:done]:
                _count(_IN_FLIGHT_SETS, ((chunks, 1) for chunks in group), -1)
            del state.groups[:done]
            if not any(state.groups) and not state.open:  # (empty groups left hold nothing a check could meet)
                _IN_FLIGHT.pop(id(state), None)
    return wait


def _sim_check_write(name: str, array, byte_offset: int, nbytes: int = 16) -> None:
    """Refuse a write of shared memory (``nbytes`` from ``byte_offset`` of ``array``) into a chunk that a ``wgmma``
    group still in flight reads."""
    start = np.asarray(array).ctypes.data + int(byte_offset)
    chunks = frozenset(range(start >> 4, (start + nbytes - 1 >> 4) + 1))
    if _met_in_block(_READ_REGISTRY, chunks):
        raise RuntimeError(f"{name}: writes shared memory (byte {int(byte_offset)}) that a wgmma group still in "
                           f"flight reads: wait for its group before the stage is reused")


class _Registry(NamedTuple):
    """The threads' states of one kind (:data:`_LANDING`'s copies, :data:`_IN_FLIGHT`'s reads), by ``id``; what they
    hold counted together (``counts``: the ``(key, n)`` pairs ``held(state)`` gives, summed over the states); and
    ``may_meet(chunks)``, whether those counts hold any of ``chunks``."""
    states: dict
    counts: dict
    held: Callable
    may_meet: Callable


def _met_in_block(registry: _Registry, chunks: frozenset) -> bool:
    """Whether a running thread of this thread's block holds, in ``registry``, a chunk of ``chunks``. A thread that
    ended without waiting is dropped, whatever its chunks: its block's shared memory is gone (and before each simulated
    kernel, :func:`_sim_sweep_ended`).

    ``registry.may_meet`` answers first: where no thread holds any of ``chunks``, nothing is met and the threads are
    not looked at. That is every check of a kernel that does not race, which had cost a fifth of the tensor-core tests'
    time as a look at every thread of the block. Otherwise each thread is looked at."""
    with _IN_FLIGHT_LOCK:
        if not registry.may_meet(chunks):
            return False
        states = list(registry.states.items())
    block = _block_of(threading.current_thread())
    met = False
    for key, state in states:
        if not state.thread.is_alive():
            with _IN_FLIGHT_LOCK:
                _drop(registry, key)
        elif state.block is block and any(_meets(chunks, k) for k, _ in registry.held(state)):
            met = True
    return met


def _drop(registry: _Registry, key) -> None:
    """Forget a state and count out what it held (once, if two threads drop it); under :data:`_IN_FLIGHT_LOCK`."""
    state = registry.states.pop(key, None)
    if state is not None:
        _count(registry.counts, registry.held(state), -1)


def _meets(chunks: frozenset, key) -> bool:
    """Whether ``key`` (a chunk, or a set of chunks) is or meets one of ``chunks``."""
    return not chunks.isdisjoint(key) if isinstance(key, frozenset) else key in chunks


def _landing_meets(chunks: frozenset) -> bool:
    return not _LANDING_CHUNKS.keys().isdisjoint(chunks)


def _in_flight_meets(chunks: frozenset) -> bool:
    return any(not held.isdisjoint(chunks) for held in _IN_FLIGHT_SETS)


_COPY_REGISTRY = _Registry(_LANDING, _LANDING_CHUNKS, _copies_held, _landing_meets)
_READ_REGISTRY = _Registry(_IN_FLIGHT, _IN_FLIGHT_SETS, _reads_held, _in_flight_meets)


def _count(counts: dict, items, by: int) -> None:
    """Add ``by`` times each ``(key, n)`` pair's ``n`` to ``counts[key]``, dropping the keys that reach zero; under
    :data:`_IN_FLIGHT_LOCK`."""
    for key, n in items:
        left = counts.get(key, 0) + by * n
        if left:
            counts[key] = left
        else:
            del counts[key]


def _sim_stage(name, s, sidx, source, nbytes):
    """A copy's 8 16-bit values (``source()``, read when issued, only when ``nbytes`` is 16) for ``s[sidx:sidx+8]``,
    else zeros: landed at the wait that covers its group."""
    dst = _shared_flat(s).view(np.uint16)
    if int(sidx) % 8 or not 0 <= int(sidx) <= dst.size - 8:
        raise IndexError(f"{name}: shared index {sidx} is misaligned or outside {dst.size} 16-bit values")
    values = np.array(source(), np.uint16) if int(nbytes) == 16 else np.zeros(8, np.uint16)
    _sim_check_write(name, dst, 2 * int(sidx))
    pending = _sim_pending()
    pending.open.append((dst, int(sidx), values))
    chunk = (dst.ctypes.data + 2 * int(sidx)) >> 4
    with _IN_FLIGHT_LOCK:
        pending.chunks[chunk] = pending.chunks.get(chunk, 0) + 1
        _LANDING_CHUNKS[chunk] = _LANDING_CHUNKS.get(chunk, 0) + 1
        _LANDING[id(pending)] = pending


def _sim_commit():
    pending = _sim_pending()
    pending.groups.append(pending.open)
    pending.open = []


def _sim_wait(n):
    def wait():
        pending = _sim_pending()
        with _IN_FLIGHT_LOCK:
            while len(pending.groups) > n:
                for dst, at, values in pending.groups.pop(0):
                    dst[at:at + 8] = values
                    chunk = (dst.ctypes.data + 2 * at) >> 4
                    _count(pending.chunks, ((chunk, 1),), -1)
                    _count(_LANDING_CHUNKS, ((chunk, 1),), -1)
            if not pending.chunks:  # (empty groups left hold nothing a check could meet)
                _LANDING.pop(id(pending), None)
    return wait


#: Named barriers' rounds, by (block manager, block, barrier): ``[threads arrived, completed (an event), manager]``. A round is
#: forgotten when it completes; the entry holds its block's manager, so that a stopped kernel's unfinished round is
#: never taken for a later block's (the manager's ``id`` cannot be reused while the entry holds it).
_NAMED: dict = {}
_NAMED_LOCK = threading.Lock()
#: Where the rounds of a warp's meetings are numbered from (past the named barriers' 1 … 15).
WARP_ROUNDS = 100
#: How long a simulated ``bar_sync`` waits before it reports a deadlock, for every :data:`DEADLOCK_THREADS` Python
#: threads alive (the simulated threads share the interpreter: a cluster of four blocks of 256 threads took more than
#: 60 s for one tile of a column group's, and its second group's wait read as a deadlock).
DEADLOCK_SECONDS = 60
DEADLOCK_THREADS = 256


def _sim_named_barrier(blocking: bool):
    """The stand-in of ``bar.sync`` (``blocking``) or ``bar.arrive``: barrier ``bid`` (1 … 15) of this block completes
    when ``count`` threads (whole warps: a multiple of 32) have arrived; a ``bar.sync`` returns then, a ``bar.arrive``
    at once. A thread arriving twice in one round is an error (on the GPU its warp would be counted twice: a kernel's
    bug), as is a round not completed within :data:`DEADLOCK_SECONDS` (arrivals that do not match the waits)."""
    def barrier(bid, count):
        bid, count = int(bid), int(count)
        if not (1 <= bid <= 15 and count > 0 and count % 32 == 0):
            raise RuntimeError(f"named barrier {bid} of {count} threads: barriers 1 … 15, whole warps")
        _meet(bid, count, blocking, f"named barrier {bid}")
    return barrier


def deadlock_seconds() -> float:
    """How long a simulated ``bar_sync`` waits before it reports a deadlock: :data:`DEADLOCK_SECONDS` for every
    :data:`DEADLOCK_THREADS` threads alive in the process (at least once), as they share one interpreter."""
    return DEADLOCK_SECONDS * max(1, -(-threading.active_count() // DEADLOCK_THREADS))


def _sim_named_vote(bid, count, pred):
    """The stand-in of ``bar_red_or``: :func:`_sim_named_barrier`'s ``bar.sync`` that returns 1 where any of the round's
    threads passed a non-zero ``pred``, else 0."""
    bid, count = int(bid), int(count)
    if not (1 <= bid <= 15 and count > 0 and count % 32 == 0):
        raise RuntimeError(f"named barrier {bid} of {count} threads: barriers 1 … 15, whole warps")
    return int(_meet(bid, count, True, f"named barrier {bid}", bool(pred)))


def _sim_warp_meet():
    """The stand-in of ``warp_sync`` (``bar.warp.sync``): the 32 threads of this thread's warp meet. The simulator's
    shuffles exchange through shared boxes between two such meetings where the kernel's warps take roles at named
    barriers (a producer's warps never reach the consumers' block barrier)."""
    t = threading.current_thread()
    _meet(WARP_ROUNDS + int(t.thread_id) // 32, 32, True, "a warp's meeting")


def _meet(bid, count: int, blocking: bool, what: str, vote: bool = False) -> bool:
    """This thread's arrival at round ``bid`` of its block (:func:`_sim_named_barrier`), waiting for the round's
    ``count`` threads if ``blocking``; returns whether any thread of the round voted (``vote``), once it completed. A
    waiting thread sleeps on its round's own event, set by the round's last arrival (a condition shared by every round
    would wake every waiting thread of the block at each completion)."""
    t = threading.current_thread()
    manager = getattr(t, "_manager", None)
    key = (id(manager), tuple(getattr(t, "blockIdx", ())), bid)
    with _NAMED_LOCK:
        state = _NAMED.get(key)
        if state is None or state[2] is not manager:
            state = _NAMED[key] = [set(), threading.Event(), manager, [False]]
        if t in state[0]:
            raise RuntimeError(f"{what}: a thread arrived twice in one round (its warp would be counted twice)")
        state[0].add(t)
        state[3][0] = state[3][0] or vote
        if len(state[0]) == count:
            del _NAMED[key]
            state[1].set()
            return state[3][0]
    if blocking:
        patience = deadlock_seconds()
        deadline = time.monotonic() + patience
        while not state[1].is_set():
            if getattr(t, "abort", False):
                raise RuntimeError(f"{what}: the kernel stopped")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: {len(state[0])} of {count} threads arrived in "
                                   f"{patience:g} s (a deadlock: arrivals that do not match the waits)")
            state[1].wait(0.5)
    return state[3][0]


def _sim_sweep_ended() -> None:
    """Drop every state of a thread that ended from :data:`_LANDING` and :data:`_IN_FLIGHT`, and count out what it
    held (before each simulated kernel: :func:`_met_in_block` drops such states only where a check meets what they
    hold, so a kernel stopped by an error would otherwise leave its copies and reads counted, and its shared arrays
    referenced, until a later race test looked at every thread)."""
    with _IN_FLIGHT_LOCK:
        for registry in (_COPY_REGISTRY, _READ_REGISTRY):
            for key, state in list(registry.states.items()):
                if not state.thread.is_alive():
                    _drop(registry, key)


def _sim_barriers_clear() -> list:
    """Forget every open named-barrier round (before a simulated kernel: a kernel stopped by an error, or a test of
    the stand-ins, may have left one); returns them as ``(block, barrier, threads arrived)``."""
    with _NAMED_LOCK:
        left = sorted((k[1], k[2], len(v[0])) for k, v in _NAMED.items())
        _NAMED.clear()
    return left


def _sim_barriers_done(kernel: str) -> None:
    """After a simulated kernel: a named barrier's round that some threads joined and no thread completed is an error
    (on the GPU an arrival no wait consumes is a kernel's bug: a later round, or the next block on the multiprocessor,
    would count it). Every open round is cleared, so that one kernel's fault is reported once."""
    left = _sim_barriers_clear()
    if left:
        block, bid, n = left[0]
        raise RuntimeError(f"{kernel}: named barrier {bid} of block {block} ended with {n} threads arrived in a round "
                           f"no one completed ({len(left)} such rounds: arrivals that do not match the waits)")
