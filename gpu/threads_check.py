"""The CUDA-core strategies at thread counts that are not powers of two (their merge trees) and below a warp, on the
GPU against the float64 reference.

    python3 gpu/threads_check.py

One line a strategy and count: the largest error over the largest output; exits 1 if any is off.
"""

from __future__ import annotations

import sys

import numpy as np

import redalgebra as ra

TEXT = "input x\nreduce m = max(x)\nreduce s = sum(exp(x - m))\nreduce t = topk(3, x)\nout y = exp(x - m) / s\nout u = s\nout v = t"
CASES = [("nonincremental", 48), ("nonincremental", 96), ("nonincremental", 100), ("unfused", 96),
         ("block_shared", 33), ("block_shared", 96), ("block", 96), ("tile", 96), ("split", 96), ("thread", 7),
         ("thread", 33)]


def main() -> int:
    c = ra.parse(TEXT)
    f = ra.derive(c)
    x = np.random.default_rng(0).normal(size=(64, 1001)).astype(np.float32)
    want = ra.evaluate(c, {"x": x.astype(np.float64)})
    bad = 0
    for strategy, threads in CASES:
        got = ra.compile(f, "cuda", strategy, threads=threads)({"x": x})
        err = max(float(np.abs(np.asarray(got[k], np.float64) - want[k]).max() / np.abs(want[k]).max())
                  for k in ("y", "u", "v"))
        ok = err <= 1e-5
        bad += not ok
        print(f"{strategy:16s} threads {threads:4d}  err {err:.2e}  {'ok' if ok else 'OFF'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
