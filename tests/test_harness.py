"""gpu/harness.py's timing without a GPU: CUDA events replaced by a clock that a call advances, with the latency
of a window's first call (the host's, which nothing overlaps) added once a window."""

import sys
import types

import pytest

from tests.gpu_scripts import loaded


@pytest.fixture
def H(monkeypatch):
    # the harness imports torch, which the test environment need not have: a stand-in with the CUDA namespace the
    # tests replace, for this test only (redalgebra asks sys.modules whether torch is there)
    try:
        import torch  # noqa: F401
    except ImportError:
        monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
        sys.modules["torch"].cuda = types.SimpleNamespace(Event=None, synchronize=None)
    yield from loaded("harness")


class Device:
    """The device's clock (ms): a call takes ``kernel``; the first call after an event waits ``latency`` more."""

    def __init__(self, kernel: float, latency: float):
        self.kernel, self.latency, self.now, self.fresh, self.calls = kernel, latency, 0.0, True, 0

    def call(self):
        self.now += self.kernel + (self.latency if self.fresh else 0.0)
        self.fresh, self.calls = False, self.calls + 1

    def event(self, **_):
        device = self

        class Event:
            def record(self):
                self.t, device.fresh = device.now, True

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return end.t - self.t
        return Event()


@pytest.fixture
def device(H, monkeypatch):
    d = Device(kernel=0.02, latency=0.04)
    monkeypatch.setattr(H.torch.cuda, "Event", d.event)
    monkeypatch.setattr(H.torch.cuda, "synchronize", lambda *a: None)
    return d


def test_a_short_call_is_timed_in_windows_long_enough_that_the_first_calls_latency_does_not_count(H, device):
    # two calls of 20 us a window would read 40 us a call (the first call's 40 us of latency in it); widened to at
    # least MIN_WINDOW_MS, the latency is under 5 % of the time
    ms = H.median_ms(device.call, reps=3, batch=2)
    assert ms == pytest.approx(0.02, rel=0.05)
    assert device.calls >= 3 * H.MIN_WINDOW_MS / 0.02


def test_a_window_asked_for_unwidened_times_what_it_was_given(H, device):
    assert H.median_ms(device.call, reps=3, batch=2, min_window_ms=0) == pytest.approx(0.04)
    assert device.calls == 3 + 3 * 2  # the warm-up, then three windows of two


def test_a_long_call_keeps_its_batch(H, monkeypatch):
    d = Device(kernel=0.6, latency=0.04)
    monkeypatch.setattr(H.torch.cuda, "Event", d.event)
    monkeypatch.setattr(H.torch.cuda, "synchronize", lambda *a: None)
    assert H.median_ms(d.call, reps=3, batch=2) == pytest.approx(0.62)
    assert d.calls == 3 + 3 * 2
