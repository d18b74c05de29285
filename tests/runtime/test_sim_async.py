"""The simulator's model of the tensor-core instructions' asynchrony (:mod:`redalgebra.runtime.sim_async`): copies
landing at their group's wait, ``wgmma`` reads tracked until their wait, named barriers counted per block and round."""

import numpy as np
import pytest
from numba import cuda

from redalgebra.runtime import tensor_cores as tc


def test_copies_land_at_the_wait_that_covers_their_group():
    # cp_wait<n>: all but the newest n committed groups land; copies not yet committed wait for a commit
    a = np.arange(32, dtype=np.uint16)
    sm = np.zeros(32, np.uint16)
    for g in range(3):  # three groups, a chunk each
        tc.cp_async16_at(sm, 8 * g, a, 8 * g, 16)
        tc.cp_commit()
    tc.cp_async16_at(sm, 24, a, 24, 16)  # issued, not committed
    tc.cp_wait2()
    assert (sm[:8] == a[:8]).all() and (sm[8:] == 0).all()
    tc.cp_wait0()
    assert (sm[:24] == a[:24]).all() and (sm[24:] == 0).all()
    tc.cp_commit()
    tc.cp_wait0()
    assert (sm == a).all()


def test_the_simulator_tracks_wgmma_reads_until_their_wait():
    # a group's shared-memory chunks (absolute addresses) stay read from its issue to the wait that covers it: a
    # write into them meanwhile is a race; a thread that ended without waiting (a kernel stopped by an error) is
    # forgotten, its shared memory gone
    import threading

    from redalgebra.runtime import sim_async

    buf = np.zeros(64, np.uint8)
    chunk = buf.ctypes.data >> 4

    def issue():
        sim_async._sim_wgmma_read({chunk})
        sim_async._sim_wgmma_commit()
    ended = threading.Thread(target=issue)
    ended.start()
    ended.join()
    sim_async._sim_check_write("test", buf, 0)
    try:
        sim_async._sim_wgmma_read({chunk})
        sim_async._sim_wgmma_commit()
        sim_async._sim_wgmma_read({chunk + 100})  # a second group, open
        sim_async._sim_wgmma_commit()
        with pytest.raises(RuntimeError, match="a wgmma group still in flight reads"):
            sim_async._sim_check_write("test", buf, 0)
        sim_async._sim_wgmma_wait(1)()  # the older group completes: its chunk may be written
        sim_async._sim_check_write("test", buf, 0)
    finally:
        sim_async._sim_wgmma_wait(0)()  # (nothing left in flight for the tests after this one)
    assert not sim_async._sim_reads().groups


def test_a_wgmma_group_left_in_flight_by_a_stopped_block_does_not_race_a_later_blocks_writes():
    # a kernel stopped by an error leaves threads behind (blocked at a named barrier until its timeout) with groups
    # in flight; a later launch that reuses the addresses is another block: its writes are not that group's race,
    # while a write by a thread of the group's own block still is
    import threading

    from redalgebra.runtime import sim_async

    buf = np.zeros(64, np.uint8)
    chunk = buf.ctypes.data >> 4
    stopped, later = object(), object()  # two blocks' managers
    issued, release, verdicts = threading.Event(), threading.Event(), {}

    def left_behind():
        sim_async._sim_wgmma_read({chunk})
        sim_async._sim_wgmma_commit()
        issued.set()
        release.wait(30)  # alive, its group in flight, as a thread blocked at a barrier

    def write(manager):
        threading.current_thread()._manager = manager
        try:
            sim_async._sim_check_write("test", buf, 0)
            verdicts[manager] = "written"
        except RuntimeError as error:
            verdicts[manager] = str(error)

    behind = threading.Thread(target=left_behind)
    behind._manager = stopped
    behind.start()
    try:
        assert issued.wait(30)
        for manager in (later, stopped):
            writer = threading.Thread(target=write, args=(manager,))
            writer.start()
            writer.join()
        assert verdicts[later] == "written"
        assert "a wgmma group still in flight reads" in verdicts[stopped]
    finally:
        release.set()
        behind.join()
    sim_async._sim_check_write("test", buf, 0)  # (the ended thread's group is dropped for the tests after this one)


def test_the_simulators_named_barriers_hold_a_bar_sync_until_the_count_arrives():
    # bar_sync returns once `count` threads have arrived (bar_arrive's included) and bar_arrive never waits; each
    # completion starts the barrier afresh, so the next round counts anew; a thread arriving twice in a round, a
    # barrier id outside 1 … 15 and a count of part of a warp are errors
    import threading
    import time

    from redalgebra.runtime import sim_async

    sync, arrive = sim_async._sim_named_barrier(True), sim_async._sim_named_barrier(False)
    lock, arrived, passed = threading.Lock(), [0, 0, 0], []

    def consumer():  # a warp of two waits each round
        for r in range(3):
            sync(7, 96)
            passed.append((r, arrived[r]))  # (the producers' arrivals of round r when this one passed it)

    def producer():  # a warp that arrives, in round r once every consumer has passed round r - 1 (on the GPU the
        # kernel's barriers order that; here the threads' start under load may not, and an arrival early for round r
        # would count in round r - 1: a thread arriving twice)
        for r in range(3):
            deadline = time.monotonic() + 20
            while r and sum(q == r - 1 for q, _ in list(passed)) < 64 and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(0.05)
            with lock:
                arrived[r] += 1
            arrive(7, 96)
    threads = [threading.Thread(target=consumer) for _ in range(64)] + [threading.Thread(target=producer)
                                                                        for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads)
    # every consumer passed round r only once all 32 producers had arrived in it
    assert sorted(r for r, _ in passed) == [0] * 64 + [1] * 64 + [2] * 64
    assert all(seen == 32 for _, seen in passed), passed
    arrive(9, 64)
    with pytest.raises(RuntimeError, match="arrived twice in one round"):
        arrive(9, 64)
    with pytest.raises(RuntimeError, match="barriers 1 … 15, whole warps"):
        arrive(16, 64)
    with pytest.raises(RuntimeError, match="barriers 1 … 15, whole warps"):
        arrive(3, 48)
    # barrier 9's round is still open (one arrival of 64): reported once after a kernel, then forgotten
    with pytest.raises(RuntimeError, match="named barrier 9 .* ended with 1 threads arrived"):
        sim_async._sim_barriers_done("k")
    sim_async._sim_barriers_done("k")


def test_a_simulated_named_barrier_reports_a_deadlock_after_a_wait_that_grows_with_the_threads_alive(monkeypatch):
    # the simulated threads share one interpreter, so a block of a big cluster can take minutes for a tile: the wait
    # before a deadlock is reported grows with the threads alive (a cluster of four blocks of 256 threads had its
    # second group's wait at the hand-over reported as a deadlock after 60 s). A wait nobody completes is reported.
    import threading

    from redalgebra.runtime import sim_async

    monkeypatch.setattr(sim_async, "DEADLOCK_SECONDS", 0.2)
    base = sim_async.deadlock_seconds()
    stop = threading.Event()
    idle = [threading.Thread(target=stop.wait) for _ in range(2 * sim_async.DEADLOCK_THREADS)]
    for t in idle:
        t.start()
    try:
        assert sim_async.deadlock_seconds() >= base + 2 * 0.2
    finally:
        stop.set()
        for t in idle:
            t.join()
    with pytest.raises(RuntimeError, match=r"named barrier 11: 1 of 64 threads arrived in 0.2 s \(a deadlock"):
        sim_async._sim_named_barrier(True)(11, 64)
    with pytest.raises(RuntimeError, match="named barrier 11"):  # (its round is reported once, then forgotten)
        sim_async._sim_barriers_done("k")
    sim_async._sim_barriers_done("k")


def test_every_simulated_block_starts_with_nan_bytes_in_its_shared_memory():
    # not numba's zeros, nor what the launch's previous block wrote (the simulator runs its blocks one after the
    # other on one buffer, and keeps a static array for the next block): a kernel reading shared memory it never
    # wrote reads 0xFFFF, a NaN in 16 bits, as the GPU's leftovers would give it nothing it can count on
    from numba import uint16

    from redalgebra.runtime.backends import cuda_module

    # (the simulator swaps the module a kernel's globals name ``cuda``: defined with such a global)
    space = {"cuda": cuda_module("cudasim"), "uint16": uint16}
    exec("def first_reads(out):\n"
         "    sm = cuda.shared.array(0, uint16)\n"
         "    st = cuda.shared.array(8, uint16)\n"
         "    out[cuda.blockIdx.x, 0] = sm[5]\n"
         "    out[cuda.blockIdx.x, 1] = st[5]\n"
         "    cuda.syncthreads()\n"
         "    sm[5] = 7\n"
         "    st[5] = 7\n", space)  # (7 left for the next block)
    first_reads = space["cuda"].jit(space["first_reads"])
    out = np.zeros((3, 2), np.uint16)
    first_reads[3, 1, 0, 64](out)
    assert (out == 0xFFFF).all()


def test_outputs_allocated_for_a_simulated_call_start_as_nan_not_zeros():
    # as a call on device arrays gets them on the GPU (not zero-filled): an entry a kernel leaves unwritten shows
    # as NaN (floats) or the type's largest value, where numba's zeros would pass for a zero result; the CPU back
    # end's arrays are left as allocated
    from redalgebra.runtime.outputs import poisoned as _poisoned

    for dtype, want in (("float32", np.nan), ("uint16", 0xFFFF), ("int32", 2 ** 31 - 1)):
        got = _poisoned(np.zeros((2, 3), dtype), "cudasim")
        assert np.array_equal(got, np.full((2, 3), want, dtype), equal_nan=True), dtype
        assert not _poisoned(np.zeros(4, dtype), "cpu").any()


def test_threads_racing_on_a_static_arrays_first_allocation_share_the_one_kept():
    # numba's simulated cuda.shared.array looks the line up, then stores and returns an array of its own: two threads
    # between the two each kept their own (the loser's private and all NaN where the block's others wrote theirs: rows
    # of NaN now and then from mma/wgmma); the simulator's allocator is shared_array, which keeps the first stored
    import threading
    import time

    from numba.cuda.simulator import kernelapi

    from redalgebra.runtime.backends import cuda_module
    from redalgebra.runtime.front_end import written_from
    from redalgebra.runtime.sim_async import FAKE_SHARED_ARRAY, Poisoned, shared_array

    cuda_module("cudasim")
    installed = kernelapi.FakeCUDAShared.array  # ours where numba-cuda's is the method it was written from
    assert installed is shared_array or not written_from(installed, FAKE_SHARED_ARRAY)

    class Slow(Poisoned):  # the window between the lookup and the store widened
        def get(self, key, default=None):
            got = super().get(key, default)
            time.sleep(0.05)
            return got

    def numbas(self, shape, dtype):  # numba's check-then-set, as the simulator had it
        res = self._allocations.get("line")
        if res is None:
            res = np.empty(shape, dtype)
            self._allocations["line"] = res
        return res

    for method, shared in ((numbas, False), (shared_array, True)):
        block = kernelapi.FakeCUDAShared(0)
        block._allocations = Slow()
        got = [None, None]

        def allocate(i):
            got[i] = method(block, (4, 8), np.float32)
            got[i][i] = i  # each thread writes its own row, as a block's threads do

        threads = [threading.Thread(target=allocate, args=(i,)) for i in range(2)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert (got[0] is got[1]) is shared
        if shared:  # both rows written into the one array; the other rows are the poison
            assert (got[0][:2] == [[0] * 8, [1] * 8]).all() and np.isnan(got[0][2:]).all()


def test_what_ended_threads_left_in_flight_is_counted_out_before_the_next_kernel():
    # the checks look at the threads only where the counts of what every thread holds meet their chunks; a thread that
    # ends without waiting (a kernel stopped by an error), or with an empty group left committed (a pipeline's tail),
    # is dropped with what it held before each simulated kernel, so that nothing stays counted or referenced
    import threading

    from redalgebra.runtime import sim_async

    buf = np.zeros(64, np.uint16)
    base = buf.ctypes.data >> 4

    def stopped():  # a copy and a product's read, never waited for
        sim_async._sim_stage("test", buf, 8, lambda: np.arange(8), 16)
        sim_async._sim_commit()
        sim_async._sim_wgmma_read({base + 3})
        sim_async._sim_wgmma_commit()

    def tail():  # its copy landed; an empty group committed after it, never waited for
        sim_async._sim_stage("test", buf, 0, lambda: np.arange(8), 16)
        sim_async._sim_commit()
        sim_async._sim_commit()
        sim_async._sim_wait(1)()

    for target in (stopped, tail):
        t = threading.Thread(target=target)
        t.start()
        t.join()
    landing = (buf.ctypes.data + 16) >> 4
    assert sim_async._LANDING_CHUNKS.get(landing) == 1 and sim_async._IN_FLIGHT_SETS.get(frozenset({base + 3})) == 1
    sim_async._sim_sweep_ended()
    assert landing not in sim_async._LANDING_CHUNKS and frozenset({base + 3}) not in sim_async._IN_FLIGHT_SETS
    assert all(state.thread.is_alive() for registry in (sim_async._LANDING, sim_async._IN_FLIGHT)
               for state in registry.values())



@cuda.jit
def _fails_between_barriers(out):
    i = cuda.threadIdx.x
    out[i] = i
    cuda.syncthreads()
    if i == 5:
        raise ValueError("lane five fails")
    cuda.syncthreads()
    out[i] = out[(i + 1) % 32]


@cuda.jit
def _rotates_between_barriers(out):
    i = cuda.threadIdx.x
    out[i] = i
    cuda.syncthreads()
    v = out[(i + 1) % 32]
    cuda.syncthreads()
    out[i] = v


def test_a_simulated_thread_that_fails_while_the_others_wait_at_a_barrier_stops_its_block():
    # (the simulator's manager, as tests/conftest.py patches it: the waiting threads released by their locks and
    # aborted, the failing thread's error raised, nothing left hanging; a launch after it runs as before)
    import threading
    import time

    from numba.cuda.simulator.kernel import BlockThread

    def alive():  # (threads another test's failed launch may have left are not this test's)
        return {t for t in threading.enumerate() if isinstance(t, BlockThread)}

    before, out = alive(), np.zeros(32, np.int64)
    with pytest.raises(ValueError, match="lane five fails"):
        _fails_between_barriers[1, 32](out)
    deadline = time.monotonic() + 5  # the 31 others were released at their barrier, aborted, and end
    while alive() - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not alive() - before, "simulated threads left waiting at the barrier"
    _rotates_between_barriers[2, 32](out)
    assert list(out) == [(i + 1) % 32 for i in range(32)]
