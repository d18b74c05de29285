"""``columns_wgmma``'s first kernel (a block a row: its scalar reductions, then its factors) at other block sizes,
swept on one case: each variant checked against float64 and timed as ``bench.py`` times a configuration, and each
kernel timed alone (CUDA events, back to back), in one process.

    python3 gpu/rowfactors_sweep.py normgemm 2 256 128 512     # GROUP INDEX as bench's; threads of the row's block

Prints a line per variant: the module's time, the error against the reference, each kernel's time alone, registers and local
memory.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import Runner, all_cases  # noqa: E402
from kernel_steps import time_launches  # noqa: E402

from redalgebra.codegen.strategies import columns_wgmma  # noqa: E402


def main(argv) -> int:
    group, index, variants = argv[0], int(argv[1]), [int(a) for a in argv[2:]]
    case = all_cases(False)[group][index]()
    print(f"{case.name} {case.shape} {case.dtype}", flush=True)
    for threads in variants:
        columns_wgmma.ROW_THREADS = threads  # read when the module is built and launched
        runner = Runner(1.0, Path("/nonexistent/autotune.json"), True)  # a fresh kernel per variant
        row = runner.ours(case, "columns_wgmma", "candidate", case.reps)
        launch = runner.kernel(case, "columns_wgmma").prepare(*case.copies[0][:2])
        steps = []
        for (kernel, _, args), step in zip(launch.steps, launch.driver):
            overload = kernel.dispatcher.overloads[tuple(kernel.dispatcher.typeof_pyval(a) for a in args)]
            steps.append(f"{time_launches(lambda: step.launch(0)):.1f} us ({overload.regs_per_thread} regs, "
                         f"{overload.local_mem_per_thread} B local)")
        print(f"  {threads} threads a row: {row.ms:.4f} ms, {row.valid} (err {row.max_err:.2e}); kernels alone "
              f"{', '.join(steps)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
