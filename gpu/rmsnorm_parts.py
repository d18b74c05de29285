"""RMSNorm + GEMM at 4096 tokens taken apart: the baseline's two kernels and ours, each timed alone, against a copy.

    python3 gpu/rmsnorm_parts.py [--rows 4096] [--copies 1]

Times (CUDA events, 200 launches back to back after 20, as ``kernel_steps.py``): ``torch.compile`` of the
normalisation alone (its bfloat16 output, as the full baseline feeds the GEMM), the bfloat16 GEMM alone (cuBLAS), the
whole ``torch.compile`` baseline, a copy of the activations (32 MB read and written: the row kernel's traffic), and
each kernel of our module. ``--copies N`` rotates the baseline's and the copy's activations over N inputs, so that
with N = 4 (128 MB) the L2 cache (50 MB) cannot hold the one being read, as it can when bench times one input again
and again; our module is timed on one input either way (a prepared launch is bound to its arrays).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import prepared_case  # noqa: E402
from cases import compiled_fn, rmsnorm_gemm_eager  # noqa: E402
from kernel_steps import time_launches  # noqa: E402


def norm_only(x, g, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * g


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=1)
    args = ap.parse_args(argv)
    case, runner, kernel, launch = prepared_case("normgemm", 2, "columns_wgmma")
    m, k = 4096, 4096
    gen = torch.Generator(device="cuda").manual_seed(0)
    xs = [torch.randn((m, k), device="cuda", generator=gen).bfloat16() for _ in range(args.copies)]
    g = torch.randn((k,), device="cuda", generator=gen).bfloat16()
    w = (0.02 * torch.randn((k, k), device="cuda", generator=gen)).bfloat16()
    eps = 1e-5
    normed = norm_only(xs[0], g, eps)
    out = torch.empty_like(xs[0])
    norm_c = torch.compile(norm_only)
    full_c = compiled_fn("rmsnorm_gemm", rmsnorm_gemm_eager)
    turn = [0]

    def x():
        turn[0] = (turn[0] + 1) % len(xs)
        return xs[turn[0]]
    rows = [("copy of x (32 MB read, 32 MB written)", lambda: out.copy_(x())),
            ("torch.compile: the normalisation alone", lambda: norm_c(x(), g, eps)),
            ("cuBLAS: the GEMM alone (bfloat16 out)", lambda: torch.mm(normed, w)),
            ("torch.compile: both", lambda: full_c(x(), g, w, eps))]
    print(f"{case.name} {case.shape}, {args.copies} input cop{'y' if args.copies == 1 else 'ies'}", flush=True)
    print("err", runner.validate(case, launch), flush=True)
    for label, fn in rows:
        print(f"  {label}: {time_launches(fn):.1f} us", flush=True)
    for i, step in enumerate(launch.driver):
        print(f"  ours, step {i}: {time_launches(lambda: step.launch(0)):.1f} us", flush=True)
    print(f"  ours, all steps: {time_launches(lambda: launch.run(0)):.1f} us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
