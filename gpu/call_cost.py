"""Where the host time of a user's call goes, for one benchmark case: the public call against its prepared launch.

    python3 gpu/call_cost.py GROUP INDEX CONFIG [--calls 500] [--parts]      # e.g. prefill 0 wgmma@128

GROUP and INDEX pick a case of ``bench.py``, CONFIG is bench's configuration syntax. Prints the wall clock per call of
``calls`` back-to-back calls (synchronised once at the end: the host's time when it exceeds the kernel's) for the
public call on torch tensors, the prepared launch, and the public call on one input copy; then a cProfile of the
public calls (the functions that take the host's time). ``--parts``: the host time of the call's parts apart, its
launches replaced by nothing (a profile's own cost would distort them): the call's key, the prepared call, a
``torch.empty`` of each output, the whole public call.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import prepared_case  # noqa: E402
from cases import as_tensors  # noqa: E402


def per_call_us(fn, calls: int) -> float:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def host_us(fn, calls: int = 30) -> float:
    """The host's time per call: a burst of ``calls`` calls timed without waiting for the device (the launch queue
    takes them), after the device has caught up; the median of five bursts."""
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return sorted(times)[2]


def device_us(fn, calls: int = 50) -> float:
    """The device's time per call over ``calls`` back-to-back calls (CUDA events)."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls * 1e3


class _Unlaunched:
    """A prepared call's driver step that binds as the step does and launches nothing."""

    def __init__(self, step):
        self.bind, self._config = step.bind, step._config

    def launch(self, stream=0):
        pass


def parts(kernel, tensors: dict, params: dict) -> None:
    """The host time (µs, a burst's median; no launches, so nothing waits on the device) of the public call's parts."""
    from redalgebra.runtime import tensors as calls

    device = calls._current_device(torch)
    key = calls._signature(kernel, tensors, params, None, device)
    prepared = kernel._calls[key]
    real = prepared.steps
    prepared.steps = tuple(_Unlaunched(step) for step in real)
    try:
        shapes = [(shape, stored) for _, _, shape, stored, _ in prepared.outputs]
        timed = [("the call's key (_signature)", lambda: calls._signature(kernel, tensors, params, None, device)),
                 ("the prepared call, no launch", lambda: prepared(tensors, params, None)),
                 ("torch.empty of the outputs", lambda: [torch.empty(s, dtype=d, device="cuda") for s, d in shapes]),
                 ("the public call, no launch", lambda: kernel(tensors, params))]
        for name, fn in timed:
            print(f"  part: {name:32} host {host_us(fn, 200):7.2f} us")
    finally:
        prepared.steps = real


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("group")
    ap.add_argument("index", type=int)
    ap.add_argument("config")
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--parts", action="store_true", help="the call's parts apart, without launches")
    args = ap.parse_args(argv)
    case, _, kernel, launch = prepared_case(args.group, args.index, args.config)
    inputs, params, _ = case.copies[0]
    tensors = as_tensors(inputs)
    public = lambda: kernel(tensors, params)  # noqa: E731
    print(f"{case.name} {case.shape} {case.dtype} {args.config}")
    out = {k: v.clone() for k, v in public().items()}
    given = lambda: kernel(tensors, params, out=out)  # noqa: E731
    systems = [("public call", public), ("public call, out given", given), ("prepared launch", launch.run)]
    if any(step._config is not None for step in launch.driver):  # the same kernels without the early start
        from redalgebra.runtime.driver import DriverStep

        serial = [DriverStep(kernel, args, names, cluster=step.cluster)
                  for (kernel, names, args), step in zip(launch.steps, launch.driver)]
        systems.append(("prepared, one after another", lambda: [step.launch() for step in serial]))
    for name, fn in systems:
        print(f"  {name:24} wall {per_call_us(fn, args.calls):7.1f} us per call back to back; host {host_us(fn):7.1f} us; "
              f"device {device_us(fn):7.1f} us")
    # the kernel's own time: one call, synchronised
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    launch.run()
    end.record()
    torch.cuda.synchronize()
    print(f"  one launch on the device {start.elapsed_time(end) * 1e3:8.1f} us")
    if args.parts:
        parts(kernel, tensors, params)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(200):
        public()
    profile.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(18)
    print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
