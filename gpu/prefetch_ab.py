"""The ``rows`` kernels' next row copied ahead into shared memory (``Spec.prefetch``), against the same kernels
without, in one process: each variant checked against bench's float64 reference, then the variants' launches timed
in turn, three rounds (CUDA events, 200 launches back to back after 20 — ``kernel_steps.time_launches``).

    python3 gpu/prefetch_ab.py [--rounds 3]

Cases: bench's bfloat16 softmax 32768 × 8192 and FP8 quantiser 16384 × 7168 (``rows``: blocks walking the rows,
without and with the copies ahead), RMSNorm + GEMM M4096 and FP8 quant + GEMM M4096 with e4m3 weights K-major
(``columns_wgmma``: the factors' ``rows`` kernel a block a row group as committed, walking the rows without the
copies, walking with them; the module's first kernel and all its kernels timed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import prepared_case  # noqa: E402
from kernel_steps import time_launches  # noqa: E402

from redalgebra.codegen.strategies import columns_wgmma, rows_policy  # noqa: E402

#: (name, configuration, ``rows_policy.PREFETCH_BYTES``, ``columns_wgmma.ROW_WALKING``) of each variant.
AHEAD = rows_policy.PREFETCH_BYTES
ROWS = [("walking", "rows", None, False), ("walking + ahead", "rows", AHEAD, False),
        # fewer blocks a multiprocessor, more registers a thread (ptxas spills at 2048 threads' 32)
        ("walking + ahead, 3 blocks", "rows@512x2g512m3p", AHEAD, False)]
MODULE = [("a block a row", "", None, False), ("walking", "", None, True), ("walking + ahead", "", AHEAD, True)]
CASES = [("softmax", 1, "", ROWS), ("fp8", 0, "", ROWS),
         ("normgemm", 2, "columns_wgmma", MODULE), ("fp8gemm", 5, "columns_wgmma+fp8", MODULE)]


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", help="comma-separated case groups (softmax, fp8, normgemm, fp8gemm)")
    args = ap.parse_args(argv)
    default = (rows_policy.PREFETCH_BYTES, columns_wgmma.ROW_WALKING)
    failed = False
    for group, index, module, variants in CASES:
        if args.only and group not in args.only.split(","):
            continue
        launches = []
        for name, own, prefetch, walking in variants:
            rows_policy.PREFETCH_BYTES, columns_wgmma.ROW_WALKING = prefetch, walking
            config = own or module
            try:
                case, runner, kernel, launch = prepared_case(group, index, config)
            finally:
                rows_policy.PREFETCH_BYTES, columns_wgmma.ROW_WALKING = default
            err = runner.validate(case, launch)
            ok = err <= case.tol
            failed |= not ok
            print(f"{case.name} {case.shape} {config} [{name}]: error {err:.3g} (tol {case.tol:g}) "
                  f"{'ok' if ok else 'FAIL'}", flush=True)
            launches.append((name, launch))
        for r in range(args.rounds):
            for name, launch in launches:
                first = time_launches(lambda launch=launch: launch.driver[0].launch(0))
                whole = time_launches(lambda launch=launch: launch.run(0))
                print(f"  round {r} [{name}]: first kernel {first:.1f} us, all {whole:.1f} us", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
