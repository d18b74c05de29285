"""Persistent rows kernels under compute-sanitizer: small odd shapes, checked against the per-row launch.

    compute-sanitizer --tool memcheck --show-backtrace no python3 gpu/sanitize_persistent.py
    compute-sanitizer --tool racecheck --show-backtrace no python3 gpu/sanitize_persistent.py
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import redalgebra as ra  # noqa: E402
bad = 0
for text in ("safe_softmax", "input x\nreduce s = sum(x * x)\nout y = x / sqrt(s + 1e-6)\n"):
    f = ra.derive(ra.parse(text) if "\n" in text else ra.workloads.get(text).cascade)
    ref_k = ra.compile(f, "cuda", "rows", persistent=False)
    for g, t in ((64, 128), (512, 512)):
        k = ra.compile(f, "cuda", "rows", group=g, threads=t, persistent=True, min_blocks=max(1, 1024 // t))
        for rows, L in ((7, 100), (1000, 4099)):
            x = torch.randn(rows, L, device="cuda")
            out, ref = k({"x": x}), ref_k({"x": x})
            for n in out:
                d = (out[n].float() - ref[n].float()).abs().max().item()
                bad += d > 1e-5
                print("case", f.cascade.name, g, t, rows, L, n, "diff", d, flush=True)
torch.cuda.synchronize()
print("persistent sanitizer cases done, mismatches:", bad)
