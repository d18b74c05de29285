"""``columns_mma``'s products with their weights brought into L2 ahead of the loads (``Spec.prefetch``: rounds of the
loop ahead, 0 none), swept on bench's cases in one process: each distance checked against float64 and timed as
``bench.py`` times a configuration (the module), its products kernel timed alone, in rounds that alternate the
distances (the GPU's clock drifts between rounds), beside the case's baselines.

    python3 gpu/prefetch_sweep.py fp8gemm:7,normgemm:3 0,1,2,4 --rounds 2     # GROUP:INDEX,... as bench's

Prints a line per case, distance and round: the module's time, its error, the products kernel alone, registers and
local memory; then the baselines' times.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import Runner  # noqa: E402
from cases import all_cases  # noqa: E402
from kernel_steps import variant_line  # noqa: E402

from redalgebra.codegen.strategies import columns_mma  # noqa: E402


def main(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", help="GROUP:INDEX,... (bench's groups and indices)")
    ap.add_argument("distances", help="rounds ahead, e.g. 0,1,2,4")
    ap.add_argument("--config", default="columns_mma")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    distances = [int(d) for d in args.distances.split(",")]
    every = all_cases(False)
    for text in args.cases.split(","):
        group, index = text.split(":")
        case = every[group][int(index)]()
        print(f"{case.name} {case.shape} {case.dtype}", flush=True)
        for r in range(args.rounds):
            for d in distances:
                columns_mma.PREFETCH = d  # read when the module is configured
                print(f"  round {r} prefetch {d}: {variant_line(case, args.config)}", flush=True)
        for b in Runner(1.0, Path("/nonexistent/autotune.json"), True).baselines(case):
            print(f"  {b.system}: {b.ms:.4f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
