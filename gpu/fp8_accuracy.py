"""How far FP8 tensor-core products land from float64: ``torch._scaled_mm`` (cuBLAS, e4m3 × e4m3) with and without
``use_fast_accum``, and a bfloat16/float16 ``torch.matmul`` of the same exact values, each against the float64 product
of the quantised activations and the e4m3 weights (errors relative to the largest output).

    python3 gpu/fp8_accuracy.py

The bar a kernel on the FP8 instruction would be held to: whether the baseline itself is within float32's tolerance.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import fp8_quant_eager  # noqa: E402


def rel(got, ref) -> float:
    return float((got.double() - ref).abs().max() / ref.abs().max())


def main() -> int:
    torch.manual_seed(0)
    for m, k, n in [(4096, 7168, 7168), (16, 7168, 7168), (4096, 1024, 4096), (256, 16384, 2048)]:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = (torch.randn(k, n, device="cuda") * 0.05).to(torch.float8_e4m3fn)
        wq = w.t().contiguous()
        xq, sx = fp8_quant_eager(x)
        sw = torch.ones(1, n, device="cuda", dtype=torch.float32)
        ref = (xq.double() @ w.double()) * sx.double()
        out = [f"M{m} K{k} N{n}:"]
        for fast in (False, True):
            y = torch._scaled_mm(xq, wq.t(), scale_a=sx, scale_b=sw, out_dtype=torch.float32, use_fast_accum=fast)
            out.append(f"_scaled_mm fast_accum={fast} {rel(y, ref):.2e}")
        y16 = (xq.to(torch.float16) @ w.to(torch.float16)).float() * sx
        out.append(f"float16 matmul (float16 out) {rel(y16, ref):.2e}")
        y32 = (xq.float() @ w.float()) * sx
        out.append(f"float32 matmul {rel(y32, ref):.2e}")
        print("  ".join(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
