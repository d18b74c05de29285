"""The simulator's warp collectives (``tensor_cores._warp_collective``, ``_LaneBarrier``): the meeting a warp's
lanes make for ``mma``'s and ``wgmma``'s stand-ins, each round's combine, and what a lane left waiting does."""

from redalgebra.runtime import tensor_cores as tc


def test_the_simulators_warp_collectives_combine_each_round_and_fail_on_every_lane():
    # a warp's 32 lanes meet once a collective: each gets its entry of lane 0's combine of the round's values, rounds
    # run back to back without mixing; a combine that raises raises on every lane (none left waiting for a partner)
    import threading
    from types import SimpleNamespace

    got, errors = {}, []

    class Lane(threading.Thread):
        def __init__(self, lane):
            super().__init__()
            self.thread_id, self.blockIdx = lane, SimpleNamespace(x=7, y=0, z=0)

        def run(self):
            lane = self.thread_id
            for r in range(5):
                got[lane, r] = tc._warp_collective(lane * 10 + r, lambda v: [sum(v) + i for i in range(32)])
            try:
                tc._warp_collective(lane, lambda v: [][1])
            except IndexError as err:
                errors.append(err)
    lanes = [Lane(k) for k in range(32)]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join(30)
    assert not any(t.is_alive() for t in lanes)
    assert all(got[lane, r] == sum(k * 10 + r for k in range(32)) + lane for lane in range(32) for r in range(5))
    assert len(errors) == 32


def test_a_warp_barrier_left_waiting_breaks_and_every_lane_raises():
    # the lanes' barrier (each waiting on a lock of its own): a round whose last lane never comes breaks at its timeout,
    # every waiting lane raising, and so does a lane arriving after; a complete round runs the action once, before
    # any lane leaves
    import threading

    ran = []
    barrier = tc._LaneBarrier(3, lambda: ran.append(len(ran)), 0.2)
    left = []
    lanes = [threading.Thread(target=lambda: (barrier.wait(), left.append(list(ran)))) for _ in range(3)]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join(10)
    assert ran == [0] and left == [[0]] * 3 and not barrier.broken
    raised = []

    def lane():
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            raised.append(1)
    waiting = [threading.Thread(target=lane) for _ in range(2)]
    for t in waiting:
        t.start()
    for t in waiting:
        t.join(10)
    assert raised == [1, 1] and barrier.broken and ran == [0]
    lane()
    assert raised == [1, 1, 1]
