"""The rows strategy's launch policy over shapes: the automatic choice against fixed launch shapes
(persistent or not, block size, blocks per multiprocessor), softmax and an FP8 quantiser, each checked
against the first variant's output.

    python3 gpu/rows_policy.py | tee gpu/results/h200/rows_policy.log
"""
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]
import redalgebra as ra
from harness import median_ms, rotating, copies_for

sm = ra.derive(ra.workloads.get("safe_softmax").cascade)
FP8 = ra.derive(ra.parse("input x\nreduce a = max(abs(x))\nout q = fp8(x * 448 / max(a, 1e-12))\nout s = max(a, 1e-12) / 448\n"))

def run(fused, shape, dtype, variants, base=None):
    rows, L = shape
    nbytes = rows * L * dtype.itemsize
    xs = [torch.randn(rows, L, device="cuda").to(dtype) for _ in range(min(4, copies_for(nbytes)))]
    if base is not None:
        t = median_ms(rotating([lambda x=x: base(x) for x in xs]), 10)
        print(f"{fused.cascade.name} {shape} {dtype}: baseline {t*1e3:.1f} us", flush=True)
    ref = None
    for label, kw in variants:
        try:
            kern = ra.compile(fused, "cuda", **kw)
            _, spec, _ = kern.spec_for(rows, L, {"x": str(dtype).split(".")[1]})
            out = kern({"x": xs[0]})
            y = out[sorted(out)[0]].float()
            err = 0.0 if ref is None else (y - ref).abs().max().item()
            ref = y if ref is None else ref
            ms = median_ms(rotating([lambda x=x: kern({"x": x}) for x in xs]), 10)
            cfg = f"{spec.threads}x{spec.tile}g{spec.group}m{spec.min_blocks}{'p' if spec.persistent else ''}"
            print(f"  {label:18s} {cfg:16s} {ms*1e3:8.1f} us {2*nbytes/ms/1e6:6.0f} GB/s  x{t/ms if base else 0:.2f}  diff {err:.1e}", flush=True)
        except Exception as e:
            print(f"  {label:18s} FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)

soft = lambda x: torch.softmax(x, -1)
V = lambda *extra: [("auto", {})] + list(extra)
run(sm, (32768, 8192), torch.bfloat16, V(("np 512", dict(threads=512, group=512, min_blocks=4, persistent=False)),
    ("p m3", dict(threads=512, group=512, min_blocks=3, persistent=True)), ("p m2", dict(threads=512, group=512, min_blocks=2, persistent=True)),
    ("p 1024 m2", dict(threads=1024, group=1024, min_blocks=2, persistent=True)), ("p 256 m8", dict(threads=256, group=256, min_blocks=8, persistent=True))), soft)
run(sm, (32768, 8192), torch.float16, V(("old", dict(persistent=False))), soft)
run(sm, (65536, 4096), torch.bfloat16, V(("p 256 m8", dict(threads=256, group=256, min_blocks=8, persistent=True)),
    ("p 512 m4", dict(threads=512, group=512, min_blocks=4, persistent=True))), soft)
run(sm, (8192, 16384), torch.bfloat16, V(("old", dict(persistent=False)), ("p 1024 m1", dict(threads=1024, group=1024, min_blocks=1, persistent=True))), soft)
run(sm, (16384, 8192), torch.float32, V(("old", dict(persistent=False)), ("p 1024 m1", dict(threads=1024, group=1024, min_blocks=1, persistent=True))), soft)
run(sm, (65536, 2048), torch.float32, V(("p 512 m4", dict(threads=512, group=512, min_blocks=4, persistent=True))), soft)
run(sm, (4096, 8192), torch.bfloat16, V(("old", dict(persistent=False))), soft)
run(FP8, (16384, 7168), torch.bfloat16, V(("old", dict(persistent=False)), ("p m3", dict(threads=512, group=512, min_blocks=3, persistent=True))), torch.compile(lambda x: (x.float() * (448 / x.float().abs().amax(-1, keepdim=True).clamp(min=1e-12))).to(torch.float8_e4m3fn)))
for L in (257, 1000, 3000, 50257):
    run(sm, (2**24 // L, L), torch.float32, V(), soft)
    run(sm, (2**24 // L, L), torch.bfloat16, V(), soft)
