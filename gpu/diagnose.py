"""Where a generated kernel's time goes: its resources, and ablations of its source.

    python3 gpu/diagnose.py

For chosen cases and configurations: registers and local memory per thread and shared memory per
block as compiled (``ptxas``'s numbers, through numba), the device time (back to back, as
``bench.py`` times), and for the decode kernel the time with one part of the generated source removed
at a time (the value reads, the key reads, the lane sums) — which part the time goes to. The ablated
kernels compute wrong results on purpose; they are timed, never validated.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench  # noqa: E402
import cases  # noqa: E402
from harness import median_ms  # noqa: E402

from redalgebra.runtime.cache import load  # noqa: E402


def resources(kernel, launch) -> str:
    """ptxas's resource numbers of every compiled kernel behind ``launch``."""
    out = []
    for configured, _, _ in launch.steps:
        disp = configured.dispatcher
        regs = disp.get_regs_per_thread()
        local = disp.get_local_mem_per_thread()
        shared = disp.get_shared_mem_per_block()
        pick = (lambda d: list(d.values())[0] if isinstance(d, dict) else d)
        out.append(f"regs {pick(regs)}, local {pick(local)} B, shared {pick(shared)} B")
    return "; ".join(out)


def time_source(kernel, spec, source: str, inputs, params) -> float:
    """Time a (patched) module in place of the generated one."""
    src, _ = kernel._compiled[spec]
    kernel._compiled[spec] = (src, load(source))
    launch = kernel.prepare(inputs, params)
    return median_ms(launch.run, reps=5, batch=5)


def main() -> int:
    runner = bench.Runner(1.0, Path("/tmp/diagnose-autotune.json"), True)
    cases = [("decode B16", lambda: cases.case_attention(16, 32, 1, 4096, 128, (), "decode_attention", "LLaMA"),
              ("lanes@256x4", "lanes@256x8", "lanes@512x4", "lanes@512x8", "lanes@128x8", "lanes@128x16")),
             ("decode B1", lambda: cases.case_attention(1, 32, 1, 65536, 128, (), "decode_attention", "LLaMA"),
              ("split_lanes@256x4", "split_lanes@256x8", "split_lanes@512x4s16")),
             ("mla B16", lambda: cases.case_mla(16, 4096, ()), ("lanes@256x1", "lanes@256x2", "lanes@512x2")),
             ("softmax", lambda: cases.case_softmax(8192, 32768, "float32", ()), ("tile@512",))]
    for label, build, configs in cases:
        case = build()
        inputs, params, _ = case.copies[0]
        for config in configs:
            kernel = runner.kernel(case, config)
            launch = kernel.prepare(inputs, params)
            ms = median_ms(launch.run, reps=5, batch=5)
            print(f"{label:<12} {config:<14} {ms:8.3f} ms  {resources(kernel, launch)}", flush=True)
        if label == "decode B16":
            kernel = runner.kernel(case, "lanes@256x4")
            kernel.prepare(inputs, params)
            spec = next(iter(kernel._compiled))
            source = kernel._compiled[spec][0].source
            ablations = {
                "no value reads": source.replace("float32(v[rr_v, l, lane + 32 * t])", "float32(1.0)"),
                "no key reads": source.replace("float32(k[rr_k, l, lane + 32 * t])", "float32(1.0)"),
                "no lane sums": re.sub(r"(?<!def )rt_lane_sum\((\w+)\)", r"\1", source),
                "accurate exp": source.replace("fast_expf(", "math.exp("),
            }
            for name, text in ablations.items():
                ms = time_source(kernel, spec, text, inputs, params)
                print(f"{label:<12} lanes@256x4 {name:<16} {ms:8.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
