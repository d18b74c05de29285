"""CPU benchmark: the generated fused CPU kernel against the unfused NumPy reference.

    python benchmarks/cpu.py [--out benchmarks/results/cpu.csv]

Same inputs, same process; the reference runs in float32 (same dtype as the kernel) and in
float64 (the oracle). Times are the median of a few runs after one warm-up (which compiles).
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from redalgebra import evaluate, workloads  # noqa: E402
from redalgebra.derive import derive  # noqa: E402
from redalgebra.runtime import compile  # noqa: E402


def median_s(fn, reps=3):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def cases(rng):
    x = rng.normal(size=(8192, 32768)).astype(np.float32)
    yield "safe_softmax", "8192x32768", {"x": x}, {}
    rows, length, dim = 16 * 32, 4096, 128
    k = rng.normal(size=(rows, length, dim)).astype(np.float32)
    v = rng.normal(size=(rows, length, dim)).astype(np.float32)
    yield "decode_attention", "B16 H32 L4096 D128", {"k": k, "v": v}, {"q": rng.normal(size=(rows, dim)).astype(np.float32),
                                                                     "scale": dim ** -0.5}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/cpu.csv")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for name, shape, inputs, params in cases(rng):
        fused = derive(workloads.get(name).cascade)
        kernel = compile(fused, "cpu")
        out_name = fused.cascade.outputs[0].name
        fused_s = median_s(lambda: kernel(inputs, params))
        ref32_s = median_s(lambda: evaluate(fused.cascade, inputs, params, dtype=np.float32), reps=2)
        ref64 = evaluate(fused.cascade, inputs, params)[out_name]
        err = float(np.max(np.abs(kernel(inputs, params)[out_name] - ref64)) / np.max(np.abs(ref64)))
        row = dict(machine=platform.processor() or platform.machine(), cores=os.cpu_count(), workload=name,
                   shape=shape, fused_ms=round(1e3 * fused_s, 1), numpy_unfused_f32_ms=round(1e3 * ref32_s, 1),
                   speedup=round(ref32_s / fused_s, 2), max_rel_err_vs_f64=f"{err:.2e}")
        rows.append(row)
        print(row, flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
