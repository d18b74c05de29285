"""Timing on the GPU machine: CUDA-event medians, the copy bandwidth of the same run, CSV rows.

Rules: warm up, time many launches, take the median; rotate
among input copies whose total exceeds the L2 cache; measure the copy bandwidth
in the same process and report every kernel as GB/s and as a fraction of it.
"""

from __future__ import annotations

import csv
import statistics
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

L2_BYTES = 60 * 2**20


#: The shortest timed window (ms): a window of a few short calls would time the first call's host latency, which
#: nothing overlaps, as the device's (a 20 us kernel timed two calls a window read 60 us a call).
MIN_WINDOW_MS = 1.0
#: The most calls a window is widened to.
MAX_BATCH = 500


def profiled(fn, calls: int, warmup: int = 1):
    """The CUDA profiler (CUPTI, through ``torch.profiler``) over ``calls`` back-to-back calls of ``fn``, after
    ``warmup`` untraced ones: the finished ``profile``, its trace and averages to read."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return prof


def median_ms(fn, reps: int = 10, warmup: int = 3, batch: int = 10, min_window_ms: float = MIN_WINDOW_MS) -> float:
    """Median over ``reps`` of the CUDA-event time of ``batch`` calls of ``fn()`` back to back, per call.

    Back to back, the host's launch work (0.1-0.2 ms for a numba launch, similar for a compiled
    PyTorch graph; ``overhead.py`` measures it) overlaps the previous kernel, so the time is the
    device's, as the CUDA profiler reports it; events around a single call would add the host's
    launch latency to every system and hide the kernels' differences. A window shorter than
    ``min_window_ms`` (:data:`MIN_WINDOW_MS`) is widened (more calls, up to :data:`MAX_BATCH`) until it is not: with
    few short calls the first one's host latency would count as the device's (0: one call's latency, as asked).
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()

    def window(n: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    first = window(batch)
    while first < min_window_ms and batch < MAX_BATCH:
        batch = min(MAX_BATCH, max(2 * batch, int(batch * 1.5 * min_window_ms / max(first, 1e-3))))
        first = window(batch)
    times = [first / batch] + [window(batch) / batch for _ in range(reps - 1)]
    return statistics.median(times)


def copies_for(nbytes: int) -> int:
    """How many input copies to rotate among so that they do not fit in L2 together."""
    return max(1, -(-4 * L2_BYTES // max(nbytes, 1)))


def rotating(fns):
    """One callable cycling through ``fns`` (each bound to its own input copy)."""
    state = {"i": 0}

    def call():
        fns[state["i"] % len(fns)]()
        state["i"] += 1
    return call


def copy_bandwidth(nbytes: int = 2**32) -> float:
    """Device-to-device copy of ``nbytes`` (4 GiB) in GB/s, counting bytes read and written."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), reps=10, batch=2)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / ms / 1e6


@dataclass
class Row:
    """One timed system on one case; ``kind`` is ``baseline``, ``candidate`` (autotuner) or ``tuned``."""

    case: str
    system: str
    shape: str
    dtype: str
    ms: float
    bytes: int
    flops: float = 0.0
    kind: str = "baseline"
    config: str = ""
    valid: str = ""          # "ok", "FAIL", or "" where not checked
    max_err: float = float("nan")
    gbps: float = 0.0
    frac_copy: float = 0.0
    tflops: float = 0.0
    note: str = ""

    def finish(self, copy_gbps: float) -> "Row":
        ok = self.ms == self.ms and self.ms > 0
        self.gbps = self.bytes / self.ms / 1e6 if ok else float("nan")
        self.frac_copy = self.gbps / copy_gbps if ok else float("nan")
        self.tflops = self.flops / self.ms / 1e9 if ok and self.flops else 0.0
        return self


def write_csv(rows: list[Row], path: Path, meta: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(meta) + [f.name for f in fields(Row)])
        w.writeheader()
        for r in rows:
            w.writerow({**meta, **asdict(r)})


def environment() -> dict:
    import numba
    try:
        import numba_cuda
        ncuda = numba_cuda.__version__
    except Exception:  # noqa: BLE001 - the version is informative only
        ncuda = "?"
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "numba": numba.__version__,
            "numba_cuda": ncuda}


class Progress:
    """A progress bar on stderr (tqdm when installed, else one line per step with elapsed time and ETA)."""

    def __init__(self, total: int, what: str = "cases"):
        self.total, self.done, self.t0, self.what = total, 0, time.time(), what
        try:
            from tqdm import tqdm
            self.bar = tqdm(total=total, unit=what[:-1], file=sys.stderr, mininterval=0)
        except ImportError:
            self.bar = None

    def step(self, label: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_description(label[:40])
            self.bar.update(1)
            return
        spent = time.time() - self.t0
        eta = spent / self.done * (self.total - self.done)
        filled = int(30 * self.done / self.total)
        print(f"[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} {self.what}  {spent:5.0f}s, "
              f"about {eta:4.0f}s left  {label}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
