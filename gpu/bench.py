"""Validate, then time, the generated fused kernels against PyTorch on the GPU machine.

    python3 gpu/bench.py [--quick] [--out gpu/results/h200/bench.csv]

Every case: our kernels (one row per strategy) and the baselines (PyTorch eager, the unfused
sequence of ops; torch.compile of the same function; the library kernel where one exists),
all timed in this one process, with the copy bandwidth measured first.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import Row, copies_for, copy_bandwidth, environment, median_ms, rotating, write_csv  # noqa: E402

from redalgebra import workloads  # noqa: E402
from redalgebra.derive import derive  # noqa: E402
from redalgebra.runtime import compile  # noqa: E402


def ours(name, strategies, make_inputs, nbytes, check=None):
    """Rows for our kernels: ``make_inputs()`` gives (inputs, params) as torch CUDA tensors.

    A strategy may carry its block size: ``tile@1024``.
    """
    fused = derive(workloads.get(name).cascade)
    out = []
    for spec in strategies:
        strategy, _, threads = spec.partition("@")
        kernel = compile(fused, "cuda", strategy, threads=int(threads) if threads else None)
        launches = []
        for _ in range(copies_for(nbytes)):
            inputs, params = make_inputs()
            launches.append(kernel.prepare(inputs, params))
        if check is not None:
            launches[0].run()
            err = check(launches[0].outputs, inputs, params)
        else:
            err = float("nan")
        ms = median_ms(rotating([l.run for l in launches]))
        out.append((f"redalgebra/{spec}", ms, f"max rel err vs torch {err:.2e}"))
        del launches
        torch.cuda.empty_cache()
    return out


def case_softmax(rows, length, dtype, strategies):
    tdt = getattr(torch, dtype)
    nbytes = rows * length * torch.finfo(tdt).bits // 8
    xs = [torch.randn(rows, length, device="cuda", dtype=tdt) for _ in range(copies_for(nbytes))]

    def eager(x):
        m = x.amax(dim=1, keepdim=True)
        e = torch.exp(x - m)
        return e / e.sum(dim=1, keepdim=True)

    compiled = torch.compile(eager)
    results = [("torch.softmax", median_ms(rotating([lambda x=x: torch.softmax(x, dim=1) for x in xs])), ""),
               ("eager", median_ms(rotating([lambda x=x: eager(x) for x in xs])), ""),
               ("torch.compile", median_ms(rotating([lambda x=x: compiled(x) for x in xs])), "")]
    it = iter(range(10**9))

    def make():
        return {"x": xs[next(it) % len(xs)]}, {}

    def check(outs, inputs, params):
        ref = torch.softmax(inputs["x"].float(), dim=1)
        got = torch.as_tensor(outs["y"], device="cuda")
        return float(((got - ref).abs().max() / ref.abs().max()).item())

    if dtype == "float32" or dtype == "float16":
        results += ours("safe_softmax", strategies, make, nbytes, check)
    moved = rows * length * (torch.finfo(tdt).bits // 8 + 4)  # read input, write float32 output
    return "safe_softmax", f"{rows}x{length}", dtype, moved, 0.0, results


def case_decode(batch, heads, length, dim, strategies):
    rows = batch * heads
    nbytes = 2 * rows * length * dim * 2
    kv = [(torch.randn(rows, length, dim, device="cuda", dtype=torch.float16),
           torch.randn(rows, length, dim, device="cuda", dtype=torch.float16)) for _ in range(copies_for(nbytes))]
    q = torch.randn(rows, dim, device="cuda", dtype=torch.float16)
    scale = dim ** -0.5

    def sdpa(k, v):
        return F.scaled_dot_product_attention(q.view(batch, heads, 1, dim), k.view(batch, heads, length, dim),
                                              v.view(batch, heads, length, dim), scale=scale)

    def eager(k, v):
        s = torch.einsum("rd,rld->rl", q.float(), k.float()) * scale
        p = torch.softmax(s, dim=1)
        return torch.einsum("rl,rld->rd", p, v.float())

    compiled = torch.compile(eager)
    results = []
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for label, backend in (("sdpa flash", SDPBackend.FLASH_ATTENTION), ("sdpa cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                results.append((label, median_ms(rotating([lambda k=k, v=v: sdpa(k, v) for k, v in kv])), ""))
        except Exception as err:  # noqa: BLE001 - a backend that refuses the shape is reported, not fatal
            results.append((label, float("nan"), f"unavailable: {type(err).__name__}"))
    results += [("eager", median_ms(rotating([lambda k=k, v=v: eager(k, v) for k, v in kv])), ""),
                ("torch.compile", median_ms(rotating([lambda k=k, v=v: compiled(k, v) for k, v in kv])), "")]
    it = iter(range(10**9))

    def make():
        k, v = kv[next(it) % len(kv)]
        return {"k": k, "v": v}, {"q": q.float().cpu().numpy(), "scale": scale}

    def check(outs, inputs, params):
        ref = eager(inputs["k"], inputs["v"])
        got = torch.as_tensor(outs["y"], device="cuda")
        return float(((got - ref).abs().max() / ref.abs().max()).item())

    results += ours("decode_attention", strategies, make, nbytes, check)
    flops = 4.0 * rows * length * dim
    return "decode_attention", f"B{batch} H{heads} L{length} D{dim}", "float16", nbytes, flops, results


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="gpu/results/h200/bench.csv")
    ap.add_argument("--strategies", default="tile@1024,tile@256,tile,warp,block")
    ap.add_argument("--cases", default="softmax,softmax16,decode")
    args = ap.parse_args()
    strategies = args.strategies.split(",")
    t0 = time.time()
    copy = copy_bandwidth()
    print(f"copy bandwidth {copy:.0f} GB/s", flush=True)
    rows = []
    known = {"softmax": lambda: case_softmax(8192, 32768, "float32", strategies),
             "softmax16": lambda: case_softmax(32768, 8192, "float16", strategies),
             "decode": lambda: case_decode(16, 32, 4096, 128, strategies)}
    cases = [known[c] for c in args.cases.split(",")]
    for i, make in enumerate(cases, 1):
        case, shape, dtype, nbytes, flops, results = make()
        for system, ms, note in results:
            row = Row(case, system, shape, dtype, ms, nbytes, flops, note=note).finish(copy)
            rows.append(row)
            print(f"[{i}/{len(cases)}] {case:<18} {shape:<22} {dtype:<8} {system:<24} {ms:8.3f} ms "
                  f"{row.gbps:7.0f} GB/s {100 * row.frac_copy:5.1f}% of copy  {note}", flush=True)
    meta = {**environment(), "copy_gbps": round(copy, 1)}
    write_csv(rows, Path(args.out), meta)
    print(f"wrote {args.out} in {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
