"""The public torch call of prefill attention with the query in 16 bits (as SDPA takes it) and in float32, against the
prepared launch: how each param is passed (``direct``: its own memory; ``converted``: a copy or a conversion on every
call) and what a call costs. Run on the GPU machine:

    python3 gpu/percall_q16.py [GROUP:INDEX ...] [--profile]

One line per case and query type; each case's prepared launch last (by default LLaMA-65B's causal L2048, L2048 and
bfloat16 L2048). ``--profile``: the host's Python profile of 200 calls with the 16-bit query, its 25 costliest
functions by their own time.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from bench import Runner, prepare  # noqa: E402
from cases import all_cases, as_tensors  # noqa: E402
from harness import median_ms, rotating  # noqa: E402


def main(argv: list[str]) -> int:
    profile = "--profile" in argv
    picked = [tuple(a.split(":")) for a in argv if a != "--profile"]
    for group, index in picked or (("prefill_causal", 0), ("prefill", 2), ("prefill_bf16", 0)):
        case = all_cases(False)[group][int(index)]()
        runner = Runner(1.0, Path("/nonexistent/autotune.json"), True)
        kernel = runner.kernel(case, "wgmma")
        err = runner.validate(case, prepare(kernel, *case.copies[0][:2]))
        inputs, params, _ = case.copies[0]
        tensors, given = as_tensors(inputs), as_tensors(params)
        for label, p in (("q16", given), ("q32", {**given, "q": given["q"].float()})):
            kernel(tensors, p)
            torch.cuda.synchronize()
            ms = median_ms(rotating([lambda p=p: kernel(tensors, p)]), 5, batch=4)
            ways = [[(q.name, way) for q, way in call.params] for call in kernel._calls.values() if hasattr(call, "params")]
            print(case.name, case.shape, case.dtype, label, f"per call {ms:.4f} ms", "err", f"{err:.2e}", ways, flush=True)
        if profile:
            import cProfile
            import pstats

            with cProfile.Profile() as prof:
                for _ in range(200):
                    kernel(tensors, given)
                torch.cuda.synchronize()
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        launch = prepare(kernel, inputs, params)
        print("  prepared launch", f"{median_ms(rotating([launch.run]), 5, batch=4):.4f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
