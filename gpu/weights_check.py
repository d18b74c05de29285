"""The FP8 product's weights as a ``Linear`` layer holds them, on the GPU against float64, and timed.

    python3 gpu/weights_check.py [--quick]

1. ``columns_mma`` (FP8 quantisation + GEMM, a few rows over one weight matrix) with weights given contiguous
   ((L, n) rows), K-major (``W.T[None]`` of the (n, L) weight, read as it lies) and K-major copied contiguous in the
   call (what a call paid before K-major weights were read as they lie): the error from float64 for each, and at
   K = N = 7168 the public call timed back to back (CUDA events, 50 calls after 20) and the prepared launch alone.
2. ``columns_wgmma``'s FP8 product (``fp8_products``) with a block a multiprocessor walking the tiles
   (``persistent``): bit for bit a block a tile's outputs, K-major and contiguous weights.

Prints one line per case; exits 1 if any case is off. ``--quick``: part 2 at its smaller shape only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import redalgebra as ra  # noqa: E402
from redalgebra import workloads  # noqa: E402
from redalgebra.runtime import as_bfloat16, as_e4m3  # noqa: E402

from cases import fp8_gemm_reference as reference, ours_input  # noqa: E402
from kernel_steps import time_launches  # noqa: E402

FUSED = ra.derive(workloads.get("fp8_quant_gemm").cascade)


def columns_mma(rows: int, kind: str, length: int, n: int) -> int:
    torch.manual_seed(0)
    x = torch.randn(rows, length, device="cuda").to(torch.bfloat16)
    w = torch.randn(n, length, device="cuda") * 0.05  # (n, L): a Linear layer's weight
    w = w.to(torch.float8_e4m3fn) if kind == "e4m3" else w.to(torch.bfloat16)
    want = reference(x, w.t())
    scale = float(want.abs().max())
    timed = length == 7168
    contiguous = w.t().contiguous()[None]
    forms = [("contiguous", lambda: contiguous), ("K-major", lambda: w.t()[None]),
             ("K-major copied in the call", lambda: w.t().contiguous()[None])]
    bad, first = 0, None
    for label, given in forms:
        kernel = ra.compile(FUSED, "cuda", "columns_mma")
        y = kernel({"x": x, "w": given()}, {})["y"].double()
        err = float((y - want).abs().max()) / scale
        first = y if first is None else first
        ok = err <= 1e-5
        bad += not ok
        line = f"columns_mma M{rows} K{length} N{n} {kind} weights {label}: err {err:.2e} {'ok' if ok else 'FAIL'}"
        if timed:
            call = time_launches(lambda: kernel({"x": x, "w": given()}, {}), 50)
            launch = kernel.prepare({"x": ours_input(x), "w": ours_input(w.t()[None] if "K-major" in label
                                                                         else contiguous)}, {})
            line += f"; per call {call:.1f} us, prepared launch {time_launches(launch.run, 50):.1f} us"
        print(line + f"; from the first form {float((y - first).abs().max()) / scale:.1e}", flush=True)
    return bad


def persistent(rows: int, length: int, n: int) -> int:
    torch.manual_seed(0)
    x = torch.randn(rows, length, device="cuda").to(torch.bfloat16)
    w = (torch.randn(length, n, device="cuda") * 0.05).to(torch.float8_e4m3fn)
    want = reference(x, w)
    scale = float(want.abs().max())
    outs = []
    for walking in (None, True):
        kernel = ra.compile(FUSED, "cuda", "columns_wgmma", fp8_products=True, persistent=walking)
        outs.append(kernel({"x": x, "w": w.t().contiguous().t()[None]}, {})["y"].double())  # K-major
        outs.append(torch.as_tensor(kernel({"x": as_bfloat16(x.view(torch.int16)),
                                            "w": as_e4m3(w.view(torch.uint8).view(1, length, n))}, {})["y"],
                                    device="cuda"))
    err = float((outs[2] - want).abs().max()) / scale
    same = all(bool(torch.equal(outs[i], outs[i + 2])) for i in (0, 1))
    ok = same and err <= 4e-4  # (FP8 products' sums promoted every 128 elements: _scaled_mm's error, 1.1e-4 at 7168)
    print(f"persistent M{rows} K{length} N{n}: err {err:.2e}, a block a tile's outputs bit for bit (K-major and "
          f"contiguous): {same} {'ok' if ok else 'FAIL'}", flush=True)
    return not ok


def main(argv) -> int:
    bad = 0
    for rows, kind, length, n in [(16, "bf16", 7168, 7168), (16, "e4m3", 7168, 7168), (1, "e4m3", 7168, 7168),
                                  (5, "e4m3", 320, 144), (9, "bf16", 192, 72), (1, "bf16", 7168, 7168)]:
        bad += columns_mma(rows, kind, length, n)
    for shape in [(700, 1024, 4104)] + ([] if "--quick" in argv else [(4096, 7168, 7168)]):
        bad += persistent(*shape)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
