"""Each kernel of a prepared launch timed alone (CUDA events, 200 back-to-back launches after 20), then all.

    python3 gpu/kernel_steps.py fp8gemm 1 columns_mma

GROUP INDEX CONFIG as for ``kernel_profile.py``. A kernel shorter than a launch's host cost (about 6 µs through the
driver from Python) is timed at the launch rate, not its own duration.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import Runner, prepared_case  # noqa: E402


def time_launches(launch, count: int = 200) -> float:
    """Microseconds per call of ``launch()``, back to back, after 20 calls."""
    for _ in range(20):
        launch()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(count):
        launch()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / count * 1000


def variant_line(case, config: str) -> str:
    """``config`` on ``case`` with a fresh kernel (the module-level choices a sweep sets are read when it is
    configured): the module checked against float64 and timed as ``bench.py`` times a configuration, then each kernel
    alone with its registers and local memory — the line a sweep prints per variant."""
    runner = Runner(1.0, Path("/nonexistent/autotune.json"), True)
    row = runner.ours(case, config, "candidate", case.reps)
    launch = runner.kernel(case, config).prepare(*case.copies[0][:2])
    steps = []
    for (kernel, _, args), step in zip(launch.steps, launch.driver):
        overload = kernel.dispatcher.overloads[tuple(kernel.dispatcher.typeof_pyval(a) for a in args)]
        steps.append(f"{time_launches(lambda: step.launch(0)):.1f} us ({overload.regs_per_thread} regs, "
                     f"{overload.local_mem_per_thread} B local)")
    return f"{row.ms:.4f} ms, {row.valid} (err {row.max_err:.2e}); kernels alone {', '.join(steps)}"


def main(argv) -> int:
    group, index, config = argv[0], int(argv[1]), argv[2]
    case, runner, kernel, launch = prepared_case(group, index, config)
    print("err", runner.validate(case, launch))
    for i, step in enumerate(launch.driver):
        print(f"{case.name} {case.shape} {config} step {i}: {time_launches(lambda: step.launch(0)):.1f} us")
    print(f"all steps: {time_launches(lambda: launch.run(0)):.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
