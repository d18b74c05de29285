"""How much of a timed launch is the host's launch overhead and how much the kernel itself.

    python3 gpu/overhead.py

For one generated kernel per case, and the case's compiled PyTorch function: the CUDA-event time
around one launch (what a naive timing reports), the event time of batches of 10 launches back to back,
per launch (the host's work overlaps the previous kernel; what ``bench.py`` reports), the kernels' own
duration from the CUDA profiler (CUPTI, through ``torch.profiler``), and the host time of one call.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench  # noqa: E402
import cases  # noqa: E402
from harness import median_ms, profiled  # noqa: E402


def profiled_ms(fn, n: int = 20) -> float:
    """Mean device duration of the kernels one call launches, from CUPTI."""
    prof = profiled(fn, n)
    total_us = sum(e.device_time_total for e in prof.key_averages() if e.device_time_total > 0)
    return total_us / n / 1000


def host_ms(fn, n: int = 50) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
        torch.cuda.synchronize()
    return statistics.median(times)


def main() -> int:
    runner = bench.Runner(1.0, Path("/tmp/autotune.json"), True)
    cases = [(lambda: cases.case_attention(16, 32, 1, 4096, 128, (), "decode_attention", "LLaMA"), "lanes@256x4"),
             (lambda: cases.case_softmax(8192, 32768, "float32", ()), "tile@512"),
             (lambda: cases.case_moe(16384, 128, 8, (), "Qwen3"), "warp@128"),
             (lambda: cases.case_fp8_quant(16384, 7168, ()), "tile@512")]
    for build, config in cases:
        case = build()
        launch = runner.kernel(case, config).prepare(*case.copies[0][:2])
        base_name, base_fn, _ = case.baselines[-1]
        tensors = case.copies[0][2]
        for label, fn in ((f"redalgebra {config}", launch.run), (base_name, lambda: base_fn(*tensors))):
            one = median_ms(fn, reps=30, batch=1, min_window_ms=0)  # one call's latency, not widened
            print(f"{case.name:<18} {label:<26} one launch {one:8.4f} ms   back to back "
                  f"{median_ms(fn, reps=5, batch=10):8.4f} ms   profiler {profiled_ms(fn):8.4f} ms   host {host_ms(fn):8.4f} ms",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
