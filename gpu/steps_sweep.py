"""``columns_mma``'s steps in flight (``UNROLL``) and launch bounds (blocks a multiprocessor), swept on one case:
each variant checked against float64 and timed as ``bench.py`` times a configuration (input copies larger than L2,
rotated, back to back), in one process.

    python3 gpu/steps_sweep.py fp8gemm 4 4:3 4:2 6:2 8:2 [--baselines]  # GROUP INDEX as bench's; UNROLL:BLOCKS
    python3 gpu/steps_sweep.py fp8gemm 4 4:3 4:4:8:4                     # ...[:COLUMNS A LANE LOADS[:SEGMENTS]]

Prints a line per variant: the time, the error against the reference, and the products kernel's registers and
local memory (spills) as the driver reports them.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import Runner  # noqa: E402
from cases import all_cases  # noqa: E402

from redalgebra.codegen.strategies import columns_mma  # noqa: E402


def main(argv) -> int:
    group, index, variants = argv[0], int(argv[1]), [a for a in argv[2:] if not a.startswith("--")]
    case = all_cases(False)[group][index]()
    print(f"{case.name} {case.shape} {case.dtype}", flush=True)
    if "--baselines" in argv:
        for row in Runner(1.0, Path("/nonexistent/autotune.json"), True).baselines(case):
            print(f"  {row.system}: {row.ms:.4f} ms", flush=True)
    for variant in variants:
        steps, blocks, *rest = map(int, variant.split(":"))
        columns_mma.UNROLL = steps  # read when the products kernel is built
        runner = Runner(1.0, Path("/nonexistent/autotune.json"), True)  # a fresh kernel per variant
        # optional: the columns of a lane's load (group; half a 16-byte load's: 8-byte loads) and the segments
        group, segments = (rest + [None, None])[:2]
        config = f"columns_mma@128{f's{segments}' if segments else ''}{f'g{group}' if group else ''}m{blocks}"
        row = runner.ours(case, config, "candidate", case.reps)
        launch = runner.kernel(case, config).prepare(*case.copies[0][:2])
        regs = []
        for kernel, _, args in launch.steps:
            overload = kernel.dispatcher.overloads[tuple(kernel.dispatcher.typeof_pyval(a) for a in args)]
            regs.append(f"{overload.regs_per_thread} regs/{overload.local_mem_per_thread} B local")
        print(f"  {config} UNROLL {steps}: {row.ms:.4f} ms, {row.valid} (err {row.max_err:.2e}); "
              f"kernels {', '.join(regs)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
