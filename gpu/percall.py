"""Per-call host cost of the public call against a prepared launch and torch.softmax (softmax fp32), and a CUDA
tensor as a param (decode attention). Wall clock of back-to-back calls after warm-up:

    python3 gpu/percall.py
"""
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redalgebra as ra  # noqa: E402

f = ra.derive(ra.workloads.get("safe_softmax").cascade)
k = ra.compile(f, "cuda")
for rows, L in ((64, 1024), (4096, 50257)):
    x = torch.randn(rows, L, device="cuda")
    y = k({"x": x})["y"]
    yt = torch.as_tensor(y, device="cuda")
    err = (yt - torch.softmax(x, -1)).abs().max().item()
    torch.cuda.synchronize()
    n = 200 if rows == 64 else 20
    t = time.perf_counter()
    for _ in range(n):
        k({"x": x})
    torch.cuda.synchronize()
    call = (time.perf_counter() - t) / n * 1e6
    launch = k.prepare({"x": x})
    t = time.perf_counter()
    for _ in range(n):
        launch.run()
    torch.cuda.synchronize()
    prep = (time.perf_counter() - t) / n * 1e6
    t = time.perf_counter()
    for _ in range(n):
        torch.softmax(x, -1)
    torch.cuda.synchronize()
    ts = (time.perf_counter() - t) / n * 1e6
    print(f"{rows}x{L}: max err {err:.2e}; per call {call:.0f} us, prepared launch {prep:.0f} us, torch.softmax {ts:.0f} us; plans {len(k._plans)}")
# a CUDA tensor as a param
fa = ra.derive(ra.workloads.get("decode_attention").cascade)
ka = ra.compile(fa, "cuda")
kk, vv = torch.randn(8, 300, 64, device="cuda", dtype=torch.float16), torch.randn(8, 300, 64, device="cuda", dtype=torch.float16)
q = torch.randn(8, 64, device="cuda")
out = ka({"k": kk, "v": vv}, {"q": q, "scale": 0.125})
print("attention with a device param:", {n: tuple(v.shape) for n, v in out.items()})
