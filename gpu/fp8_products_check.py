"""FP8 quantisation + GEMM with the product on the FP8 instruction (``compile(..., fp8_products=True)``) against
float64, beside the exact default (the float16 product) and ``torch._scaled_mm`` on the same quantised values.

    python3 gpu/fp8_products_check.py [--quick]

The reference quantises as the kernels do (``x * 448 / a`` in float32, rounded to e4m3) and multiplies in float64,
so each error is the product's alone (relative to the largest output). Prints a line per shape; exits 1 where the
FP8 product is off by more than ``LIMIT`` or the default by more than float32's tolerance.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

import redalgebra as ra
from redalgebra import workloads
from redalgebra.runtime import as_bfloat16, as_e4m3
from redalgebra.runtime.compile import KMajorUnread

#: The FP8 products' bound: twice the largest error measured for ``torch._scaled_mm`` (1.9e-4, gpu/fp8_accuracy.py).
LIMIT = 4e-4
#: (rows, K, N, segments): M4096 at DeepSeek's width, an odd K with N not a multiple of 16 (8-byte rows), segments
#: with few rows, a token.
CASES = [(4096, 7168, 7168, None), (700, 1001, 4104, None), (130, 7168, 512, 3), (1, 4096, 1024, None),
         (300, 16384, 2048, None)]


def main() -> int:
    quick = "--quick" in sys.argv
    fused = ra.derive(workloads.get("fp8_quant_gemm").cascade)
    bad = 0
    for m, k, n, seg in CASES[1:4] if quick else CASES:
        torch.manual_seed(0)
        x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        w = (torch.randn(k, n, device="cuda") * 0.05).to(torch.float8_e4m3fn)
        a = x.float().abs().amax(-1, keepdim=True).clamp(min=1e-12)
        q = (x.float() * 448 / a).to(torch.float8_e4m3fn)
        want = (q.double() @ w.double()) * (a.double() / 448)
        scale = float(want.abs().max())
        inputs = {"x": as_bfloat16(x.view(torch.int16)), "w": as_e4m3(w.view(torch.uint8).view(1, k, n))}
        opts = {} if seg is None else {"segments": seg}
        errs, same = [], True
        wk = w.t().contiguous()  # the (N, K) matrix a Linear layer holds, given K-major: wk.t()[None]
        for fp8 in (True, False):
            kern = ra.compile(fused, "cuda", "columns_wgmma", fp8_products=fp8, **opts)
            got = torch.as_tensor(kern(inputs, {})["y"], device="cuda").double()
            errs.append(float((got - want).abs().max()) / scale)
            # K-major weights, as torch tensors (read as they lie, or copied by the call) and as a raw device array
            # (read as it lies, or refused by name): the same sums as from the contiguous weights
            lying = kern({"x": x, "w": wk.t()[None]}, {})["y"].double()
            same &= bool(torch.equal(lying, got))
            try:
                raw = kern({"x": inputs["x"], "w": as_e4m3(wk.view(torch.uint8).t()[None])}, {})["y"]
                same &= bool(torch.equal(torch.as_tensor(raw, device="cuda").double(), got))
                read = True
            except KMajorUnread:
                read = False
            print(f"    {'FP8' if fp8 else 'float16'} products, K-major weights: "
                  f"{'read as they lie' if read else 'copied (torch), refused (raw)'}; same sums: {same}", flush=True)
        sw = torch.ones(1, n, device="cuda")
        ref = torch._scaled_mm(q, w.t().contiguous().t(), scale_a=a / 448, scale_b=sw, out_dtype=torch.float32) \
            if m % 16 == 0 and k % 16 == 0 and n % 16 == 0 else None
        cublas = "n/a" if ref is None else f"{float((ref.double() - want).abs().max()) / scale:.2e}"
        ok = errs[0] <= LIMIT and errs[1] <= 1e-5 and same
        bad += not ok
        print(f"M{m} K{k} N{n} segments {seg or 'auto'}: FP8 products {errs[0]:.2e}, float16 products {errs[1]:.2e}, "
              f"_scaled_mm {cublas} {'ok' if ok else 'FAIL'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
