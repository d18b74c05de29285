"""PyTorch's SDPA on one backend, launched a few times: for ``ncu`` on the library kernels our attention is measured
against (their SASS, instruction counts and stall samples, beside ours from ``kernel_profile.py``).

    python3 gpu/sdpa_profile.py cudnn --heads 64 --length 2048 --dim 128 [--causal] [--dtype float16] [--runs 3]
    ncu --clock-control none -k regex:'cudnn|flash|fmha' --launch-skip 1 -c 1 --section SourceCounters \
        --section WarpStateStats -o /tmp/sdpa python3 gpu/sdpa_profile.py cudnn
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("backend", choices=sorted(BACKENDS))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=64)
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    shape = (args.batch, args.heads, args.length, args.dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=getattr(torch, args.dtype)) for _ in range(3))
    with sdpa_kernel([BACKENDS[args.backend]]):
        for _ in range(args.runs):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with sdpa_kernel([BACKENDS[args.backend]]):
        start.record()
        for _ in range(20):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
        end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / 20
    flops = 4.0 * args.batch * args.heads * args.length ** 2 * args.dim / (2 if args.causal else 1)
    print(f"sdpa {args.backend} {shape} {args.dtype}{' causal' if args.causal else ''}: {ms:.4f} ms, "
          f"{flops / ms / 1e9:.0f} TFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
