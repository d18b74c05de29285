"""Validate every generated CUDA kernel on the GPU against the float64 reference, at realistic sizes.

Run on the GPU machine (numba-cuda needs numpy 2.4 there; gpu/README.md says how):
    python3 gpu/validate.py --out gpu/results/h200/validate.csv
Writes one CSV row per workload × strategy × shape with the error of every output.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from redalgebra import RedalgebraError, workloads  # noqa: E402
from redalgebra.codegen.strategies import names as strategy_names  # noqa: E402
from redalgebra.derive import derive  # noqa: E402
from redalgebra.runtime.check import check  # noqa: E402

SIZES = {"d": 128, "e": 64, "r": 512, "n": 256}
SHAPES = {  # (rows, L): long enough to exercise every lane and warp, small enough for a float64 reference
    "default": ((256, 4097), (64, 1), (33, 300), (16, 50000), (8, 50257), (40, 257), (4, 131072), (64, 8192)),
    "attention": ((128, 2049), (16, 1), (33, 300)),
    "decode_attention": ((32, 8191), (8, 1)),
    "mla_decode": ((64, 4096), (8, 3)),
    "fp8_quant_gemm": ((16, 7168), (4, 1)),
    "rmsnorm_gemm": ((16, 4096), (4, 1)),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="gpu/results/h200/validate.csv")
    ap.add_argument("--strategies", default=",".join(strategy_names("cuda", real=True)))
    ap.add_argument("--dtypes", default="float32,float16", help="input dtypes (bfloat16 too)")
    ap.add_argument("--workloads", default="", help="comma-separated catalogue names (default: every fusable one)")
    args = ap.parse_args()
    rows_out, failures = [], 0
    names = [n for n in args.workloads.split(",") if n] or workloads.names(fusable=True)
    for i, name in enumerate(names, 1):
        fused = derive(workloads.get(name).cascade)
        for strategy in args.strategies.split(","):
            t0 = time.time()
            for dtype in args.dtypes.split(","):
                try:
                    results = check(fused, "cuda", strategy, shapes=SHAPES.get(name, SHAPES["default"]),
                                    dtypes=(dtype,), sizes=SIZES)
                except RedalgebraError as err:  # a strategy that does not apply (state too large for it)
                    print(f"n/a  {name:<18} cuda/{strategy:<12} {err}", flush=True)
                    rows_out.append(dict(workload=name, strategy=strategy, rows=0, L=0, dtype=dtype, passed="n/a",
                                         tolerance="", errors=str(err)))
                    continue
                for r in results:
                    failures += not r.passed
                    rows_out.append(dict(workload=name, strategy=strategy, rows=r.rows, L=r.length, dtype=dtype,
                                         passed=r.passed, tolerance=r.tolerance,
                                         errors=";".join(f"{k}={v:.3e}" if isinstance(v, float) else f"{k}={v}"
                                                         for k, v in r.errors.items())))
                    print(r.line(), flush=True)
            print(f"[{i}/{len(names)}] {name}/{strategy}: {time.time() - t0:.1f}s", flush=True)
    return finish(rows_out, failures, Path(args.out))


def finish(rows: list[dict], failures: int, out: Path) -> int:
    """Write the result rows as CSV, say how many passed; the exit status (1 on any failure)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows) - failures}/{len(rows)} passed; wrote {out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
