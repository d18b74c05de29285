"""The call a user makes, on the GPU: torch tensors in and out through the prepared (driver-launch) path.

Checks, then times:
1. the prepared path gives bit for bit what ``Kernel.run`` gives (numba's own launch) over cascades,
   dtypes, odd lengths, params given as numbers / device tensors / host tensors, a mask, a strided view,
   a second call with other tensors (pointers rebound), a side stream, CUDA-graph capture and replay,
   and the custom op inside ``torch.compile(fullgraph=True)``;
2. host time per call (wall clock of back-to-back calls) against ``torch.softmax``, ``torch.compile``
   and the prepared launch, and the device time of a call against the prepared launch on large rows.

    python3 gpu/calls.py --out gpu/results/h200/calls.csv
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import csv
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redalgebra as ra  # noqa: E402
from redalgebra.runtime.tensors import _slow_call  # noqa: E402

from cases import FP8_QUANT  # noqa: E402
from harness import median_ms  # noqa: E402

FAILURES = []


def kernel(name, **kw):
    return ra.compile(ra.derive(ra.workloads.get(name).cascade), "cuda", **kw)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns (NaN equal to itself, -0 unequal to 0)."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def same(label, got: dict, want: dict):
    """Bit-for-bit equality of two calls' outputs (same kernel, same data: the launches must agree)."""
    bad = []
    for name, w in want.items():
        g = got[name]
        if g.dtype != w.dtype or g.shape != w.shape or not torch.equal(bits(g.contiguous()), bits(w.contiguous())):
            diff = (g.float() - w.float()).abs().max().item() if g.shape == w.shape else "shape"
            bad.append(f"{name}: {g.dtype}{tuple(g.shape)} vs {w.dtype}{tuple(w.shape)}, max diff {diff}")
    print(f"{'ok  ' if not bad else 'FAIL'} {label}" + (f": {'; '.join(bad)}" if bad else ""), flush=True)
    if bad:
        FAILURES.append(label)


def check_calls():
    dev = "cuda"
    soft = kernel("safe_softmax")
    shapes = {torch.float32: ((64, 1024), (7, 50257), (5, 1)), torch.bfloat16: ((33, 257), (3, 131075)),
              torch.float16: ((9, 4097),)}
    for dtype, sizes in shapes.items():
        for rows, L in sizes:
            x = torch.randn(rows, L, device=dev).to(dtype) * 3
            same(f"softmax {dtype} {rows}x{L}", soft({"x": x}), _slow_call(soft, {"x": x}, {}, None))
            x2 = torch.randn(rows, L, device=dev).to(dtype)  # the same signature, other pointers
            same(f"softmax {dtype} {rows}x{L} second tensor", soft({"x": x2}), _slow_call(soft, {"x": x2}, {}, None))
    x = torch.randn(64, 1024, device=dev)
    y = torch.empty(64, 1024, device=dev)
    got = soft({"x": x}, out={"y": y})
    same("softmax into out= (in place)", {"y": y}, _slow_call(soft, {"x": x}, {}, None))
    if got["y"] is not y:
        FAILURES.append("out= not returned as given")
    yb = torch.empty(64, 2048, device=dev)[:, ::2]  # strided: written through a copy
    soft({"x": x}, out={"y": yb})
    same("softmax into a strided out=", {"y": yb.contiguous()}, _slow_call(soft, {"x": x}, {}, None))
    base = torch.randn(64, 3000, device=dev)
    # views against the same values made contiguous (the reference path takes contiguous device arrays only)
    view = base[::2, 7:7 + 2048]  # a strided view: pitch 6000 floats, start not 16-byte aligned
    same("softmax strided view", soft({"x": view}), _slow_call(soft, {"x": view.clone()}, {}, None))
    aligned = base[:, :2048].to(torch.bfloat16)[:, :1024]  # 16-byte aligned rows of a wider bf16 tensor
    same("softmax bf16 aligned strided view", soft({"x": aligned}), _slow_call(soft, {"x": aligned.clone()}, {}, None))
    wide = torch.randn(1, 1024, device=dev).expand(8, 1024)  # a broadcast: row stride 0
    same("softmax broadcast view", soft({"x": wide}), _slow_call(soft, {"x": wide.clone()}, {}, None))
    keep = torch.rand(40, 999, device=dev) > 0.3
    keep[3] = False
    x = torch.randn(40, 999, device=dev)
    same("softmax with a device mask", soft({"x": x}, keep=keep), _slow_call(soft, {"x": x}, {}, keep))
    same("softmax with a host mask", soft({"x": x}, keep=keep.cpu()), _slow_call(soft, {"x": x}, {}, keep.cpu()))
    lse = kernel("logsumexp")
    x = torch.randn(300, 5000, device=dev, dtype=torch.bfloat16)
    same("logsumexp bf16", lse({"x": x}), _slow_call(lse, {"x": x}, {}, None))
    ce = kernel("cross_entropy")
    x = torch.randn(128, 32000, device=dev, dtype=torch.bfloat16)
    label = torch.randint(0, 32000, (128,), device=dev)
    for how, value in (("device float", label.float()), ("device int64", label), ("host", label.cpu()),
                       ("number", 17)):
        same(f"cross_entropy label as {how}", ce({"x": x}, {"label": value}), _slow_call(ce, {"x": x}, {"label": value}, None))
    moe = ra.compile(ra.derive(ra.workloads.get("moe_routing").cascade), "cuda")
    g = torch.randn(4096, 128, device=dev, dtype=torch.bfloat16)
    same("moe_routing bf16 (weights, indices)", moe({"g": g}), _slow_call(moe, {"g": g}, {}, None))
    att = kernel("decode_attention")
    k, v = (torch.randn(8, 4097, 128, device=dev, dtype=torch.float16) for _ in range(2))
    for how, q in (("device", torch.randn(8, 128, device=dev)), ("host", torch.randn(128))):
        p = {"q": q, "scale": 128 ** -0.5}
        same(f"decode_attention q on {how}", att({"k": k, "v": v}, p), _slow_call(att, {"k": k, "v": v}, p, None))
    p = {"q": torch.randn(8, 128, device=dev), "scale": 0.1}
    same("decode_attention other scale (a cached number)", att({"k": k, "v": v}, p), _slow_call(att, {"k": k, "v": v}, p, None))
    # params a prepared call converts on every call (its signature says so): another dtype, a strided view; twice,
    # the second call taking the prepared path with other values
    for how, make in (("a float16 device tensor", lambda: torch.randn(8, 128, device=dev).half()),
                      ("a strided device view", lambda: torch.randn(128, 8, device=dev).t()),
                      ("a numpy float32 number", lambda: None)):
        for n in range(2):
            q = make()
            p = {"q": torch.randn(8, 128, device=dev), "scale": np.float32(0.05 * (n + 1))} if q is None else \
                {"q": q, "scale": 128 ** -0.5}
            same(f"decode_attention q as {how}, call {n + 1}", att({"k": k, "v": v}, p),
                 _slow_call(att, {"k": k, "v": v}, p, None))
    fp8 = ra.compile(ra.derive(ra.parse(FP8_QUANT)), "cuda")
    x = torch.randn(77, 7168, device=dev, dtype=torch.bfloat16)
    same("fp8 quant (e4m3 + scale)", fp8({"x": x}), _slow_call(fp8, {"x": x}, {}, None))
    # a module of three kernels whose scratch (the factors, the segments' sums) the call keeps per stream: two calls
    # with other data, the second reusing it, then on a side stream (its own), each against the reference path
    gemm = kernel("fp8_quant_gemm", strategy="columns_mma")
    w = (torch.randn(1, 7168, 1024, device=dev) * 0.05).to(torch.float8_e4m3fn)
    for label in ("first", "second (the scratch reused)"):
        x = torch.randn(16, 7168, device=dev, dtype=torch.bfloat16)
        same(f"fp8 quant + GEMM e4m3 weights, {label} call", gemm({"x": x, "w": w}), _slow_call(gemm, {"x": x, "w": w}, {}, None))
    side = torch.cuda.Stream()
    x = torch.randn(16, 7168, device=dev, dtype=torch.bfloat16)
    want = _slow_call(gemm, {"x": x, "w": w}, {}, None)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        got = gemm({"x": x, "w": w})
    side.synchronize()
    same("fp8 quant + GEMM on a side stream", got, want)
    # a side stream: the launch follows torch's current stream
    s = torch.cuda.Stream()
    x = torch.randn(512, 8192, device=dev)
    want = _slow_call(soft, {"x": x}, {}, None)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        y = torch.empty(0)
        for _ in range(5):
            y = soft({"x": x})
    s.synchronize()
    same("softmax on a side stream", y, want)
    # CUDA-graph capture and replay with new data in the captured input
    static = torch.randn(256, 4096, device=dev)
    soft({"x": static})  # warm-up (the first call of a signature prepares it)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = soft({"x": static})
    fresh = torch.randn(256, 4096, device=dev)
    static.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    same("softmax in a CUDA graph, replayed on new data", captured, _slow_call(soft, {"x": fresh}, {}, None))
    # the custom op inside a compiled model
    op = ra.torch_op(ra.derive(ra.workloads.get("safe_softmax").cascade))
    lin = torch.nn.Linear(512, 4096, device=dev)

    def model(h):
        return op(lin(h)) @ lin.weight

    compiled = torch.compile(model, fullgraph=True)
    h = torch.randn(64, 512, device=dev)
    with torch.no_grad():
        got, want = compiled(h), torch.softmax(lin(h), -1) @ lin.weight
    err = ((got - want).abs().max() / want.abs().max()).item()
    ok = err < 1e-5
    print(f"{'ok  ' if ok else 'FAIL'} torch_op in torch.compile(fullgraph=True) model: rel err {err:.2e}", flush=True)
    if not ok:
        FAILURES.append("torch_op compiled")




def host_us(fn, calls=3000) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


def timings(rows_out):
    soft = kernel("safe_softmax")
    op = ra.torch_op(ra.derive(ra.workloads.get("safe_softmax").cascade))
    x = torch.randn(64, 1024, device="cuda")
    comp = torch.compile(lambda t: torch.softmax(t, -1))
    comp_op = torch.compile(lambda t: op(t), fullgraph=True)
    launch = soft.prepare({"x": x})
    for system, fn in (("redalgebra call", lambda: soft({"x": x})), ("redalgebra torch_op", lambda: op(x)),
                       ("redalgebra torch_op in torch.compile", lambda: comp_op(x)),
                       ("redalgebra prepared launch", launch.run), ("torch.softmax", lambda: torch.softmax(x, -1)),
                       ("torch.compile", lambda: comp(x))):
        us = host_us(fn)
        print(f"host per call, softmax 64x1024 fp32: {system:<40} {us:8.1f} us", flush=True)
        rows_out.append(dict(case="host per call", shape="64x1024", dtype="float32", system=system, us=round(us, 2)))
    for label, fn in (("call", lambda: soft({"x": x})), ("torch_op", lambda: op(x))):
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(2000):
            fn()
        profile.disable()
        print(f"-- host profile of 2000 calls ({label}), by own time:")
        pstats.Stats(profile).sort_stats("tottime").print_stats(14)
    moe = ra.compile(ra.derive(ra.workloads.get("moe_routing").cascade), "cuda")
    g = torch.randn(16384, 128, device="cuda", dtype=torch.bfloat16)
    moe_c = torch.compile(lambda t: torch.topk(torch.softmax(t.float(), -1), 8, -1))
    for system, fn in (("redalgebra call", lambda: moe({"g": g})), ("torch.compile", lambda: moe_c(g))):
        us = host_us(fn, 1000)
        dev_ms = median_ms(fn, 10, batch=20)
        print(f"moe_routing T16384 E128 bf16: {system:<20} host {us:7.1f} us/call, device {dev_ms * 1e3:7.1f} us/call", flush=True)
        rows_out.append(dict(case="moe_routing", shape="16384x128", dtype="bfloat16", system=system, us=round(us, 2),
                             device_us=round(dev_ms * 1e3, 2)))
    for rows, L, dtype in ((4096, 50257, torch.float32), (32768, 8192, torch.bfloat16), (65536, 257, torch.float32)):
        xs = [torch.randn(rows, L, device="cuda").to(dtype) for _ in range(2)]
        launches = [soft.prepare({"x": ra.as_bfloat16(t.view(torch.int16)) if dtype == torch.bfloat16 else t})
                    for t in xs]
        i = {"n": 0}

        def call():
            i["n"] += 1
            return soft({"x": xs[i["n"] % 2]})

        def prepared():
            i["n"] += 1
            launches[i["n"] % 2].run()
        t_call, t_prep = median_ms(call, 10), median_ms(prepared, 10)
        t_torch = median_ms(lambda: torch.softmax(xs[0], -1), 10)
        print(f"softmax {rows}x{L} {dtype}: call {t_call * 1e3:.1f} us, prepared {t_prep * 1e3:.1f} us "
              f"({t_call / t_prep:.3f}x), torch.softmax {t_torch * 1e3:.1f} us", flush=True)
        rows_out.append(dict(case="device per call", shape=f"{rows}x{L}", dtype=str(dtype).replace("torch.", ""),
                             system="redalgebra call / prepared", us=round(t_call * 1e3, 2),
                             device_us=round(t_prep * 1e3, 2)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="gpu/results/h200/calls.csv")
    ap.add_argument("--checks", action="store_true", help="the checks only, no timing")
    args = ap.parse_args()
    check_calls()
    if args.checks:
        print(f"{len(FAILURES)} failures", flush=True)
        return 1 if FAILURES else 0
    rows_out = []
    timings(rows_out)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["case", "shape", "dtype", "system", "us", "device_us"])
        w.writeheader()
        w.writerows(rows_out)
    print(f"{len(FAILURES)} failures" + (f": {FAILURES}" if FAILURES else "") + f"; wrote {out}")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
