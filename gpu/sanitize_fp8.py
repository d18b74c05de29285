"""The FP8 kernels under compute-sanitizer, at small hostile shapes: the FP8 product reading K-major weights as they
lie (the producer's copies straight from the user's memory), a block a tile and walking the tiles (``persistent``:
the ring of stages running on across tiles), in blocks of 128, 160 and 192 columns (``group=20``, ``24``: setmaxnreg); the
exact product reading K-major weights along their rows (e4m3 widened row by row, bfloat16 as they lie); ``columns_mma``
(a few rows) reading K-major e4m3 and bfloat16 weights as they lie, with empty segments (their L2 prefetch skipped); and the ``rows`` quantiser's two quotient forms (the
reciprocal tested once a row, for e4m3 bytes; an element at a time, ``rt_q8c``, for float32), with a row whose scale
is above the fast range (divided; the cascade's clamp keeps scales from going below it); 16-bit outputs stored four a
lane (``paired_outputs``: bit for bit the float32 outputs rounded). Each call is checked against the float32 division or float64.

    compute-sanitizer --tool memcheck python3 gpu/sanitize_fp8.py
    compute-sanitizer --tool racecheck python3 gpu/sanitize_fp8.py
    compute-sanitizer --tool memcheck python3 gpu/sanitize_fp8.py columns_mma     # the cases of named checks alone

Prints a line per case; exits 1 on a wrong value (the sanitizer's own report says the rest).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

import redalgebra as ra
from redalgebra import workloads
from redalgebra.runtime.formats import e4m3_to_float

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cases import fp8_gemm_reference  # noqa: E402
from quotient_check import QUANT, float32_quantised  # noqa: E402


def _linear(m: int, k: int, n: int, kind: str = "e4m3"):
    """Activations (m, k) in bfloat16, a Linear layer's (n, k) weight, and the float64 reference quantising at each
    row's absmax."""
    torch.manual_seed(m + k + n)
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w = torch.randn(n, k, device="cuda") * 0.05
    w = w.to(torch.float8_e4m3fn if kind == "e4m3" else torch.bfloat16)
    return x, w, fp8_gemm_reference(x, w.t())


def fp8_products(m: int, k: int, n: int, seg, persistent=None, group=None) -> bool:
    x, w, want = _linear(m, k, n)
    kern = ra.compile(ra.derive(workloads.get("fp8_quant_gemm").cascade), "cuda", "columns_wgmma", fp8_products=True,
                      persistent=persistent, group=group, **({"segments": seg} if seg else {}))
    got = kern({"x": x, "w": w.t()[None]}, {})["y"].double()
    err = float((got - want).abs().max()) / float(want.abs().max())
    print(f"FP8 products{' walking' if persistent else ''}{f' of {8 * group} columns' if group else ''}, K-major "
          f"weights, M{m} K{k} N{n} segments {seg or 'auto'}: {err:.2e}", flush=True)
    return err <= 4e-4


def columns_mma(m: int, k: int, n: int, kind: str, seg) -> bool:
    x, w, want = _linear(m, k, n, kind)
    kern = ra.compile(ra.derive(workloads.get("fp8_quant_gemm").cascade), "cuda", "columns_mma",
                      **({"segments": seg} if seg else {}))
    got = kern({"x": x, "w": w.t()[None]}, {})["y"].double()
    err = float((got - want).abs().max()) / float(want.abs().max())
    print(f"columns_mma, K-major {kind} weights, M{m} K{k} N{n} segments {seg or 'auto'}: {err:.2e}", flush=True)
    return err <= 1e-5


def exact_k_major(m: int, k: int, n: int, kind: str, seg, persistent=None) -> bool:
    """``columns_wgmma``'s exact product reading a Linear layer's weight along its rows (e4m3 widened row by row into
    padded float16 rows, 16-bit ones as they lie): the call must not copy it (its prepared call is a ``_Call``, not
    a ``_Copied``)."""
    x, w, want = _linear(m, k, n, kind)
    kern = ra.compile(ra.derive(workloads.get("fp8_quant_gemm").cascade), "cuda", "columns_wgmma",
                      persistent=persistent, **({"segments": seg} if seg else {}))
    got = kern({"x": x, "w": w.t()[None]}, {})["y"].double()
    read = [type(c).__name__ for c in kern._calls.values()] == ["_Call"]
    err = float((got - want).abs().max()) / float(want.abs().max())
    print(f"exact product{' walking' if persistent else ''}, K-major {kind} weights "
          f"{'read along their rows' if read else 'COPIED'}, M{m} K{k} N{n} segments {seg or 'auto'}: {err:.2e}",
          flush=True)
    return err <= 1e-5 and read


def paired_outputs(m: int, k: int, n: int, out: str, **options) -> bool:
    """``columns_wgmma``'s 16-bit outputs, stored four a lane after the neighbouring lanes' exchange: bit for bit the
    float32 outputs of the same kernel rounded to that type (a whole column block paired, a partial last one not)."""
    x, w, _ = _linear(m, k, n)
    kw = dict(options, fp8_products=True)
    args = ({"x": x, "w": w.t()[None]}, {})
    f = ra.derive(workloads.get("fp8_quant_gemm").cascade)
    got = ra.compile(f, "cuda", "columns_wgmma", out_dtype=out, **kw)(*args)["y"]
    wide = ra.compile(f, "cuda", "columns_wgmma", **kw)(*args)["y"]
    dtype = torch.bfloat16 if out == "bfloat16" else torch.float16
    same = torch.equal(got.view(torch.int16), wide.to(dtype).view(torch.int16))
    print(f"{out} outputs four a lane, M{m} K{k} N{n} {options}: "
          f"{'the float32 outputs rounded' if same else 'DIFFER from the float32 outputs rounded'}", flush=True)
    return same


def quantiser(rows: int, length: int, out_dtype) -> bool:
    rng = np.random.default_rng(rows + length)
    x = rng.normal(size=(rows, length)).astype(np.float32)
    x[0] *= np.float32(1e-38)  # a tiny row (its scale clamped to 1e-12 by the cascade: inside the fast range)
    x[-1, 0] = np.float32(3e38)  # a scale above the fast range: the row divided
    kern = ra.compile(ra.derive(ra.parse(QUANT)), "cuda", "rows", out_dtype=out_dtype)
    got = np.asarray(kern({"x": x})["q"])
    want = float32_quantised(x)
    if got.dtype == np.uint8:
        bad = int((got != want).sum())
    else:  # the rounded values (a zero's sign aside)
        w = e4m3_to_float(want)
        bad = int((~((got == w) | (np.isnan(got) & np.isnan(w)))).sum())
    print(f"quantiser {rows} x {length} stored as {out_dtype or 'e4m3'}: {bad} differ", flush=True)
    return bad == 0


def main(argv) -> int:
    cases = [lambda: fp8_products(130, 256, 72, None), lambda: fp8_products(5, 384, 80, 3),
             lambda: fp8_products(130, 256, 72, None, True), lambda: fp8_products(5, 384, 80, 3, True),
             # blocks of 192 columns, the producer's registers handed to the consumers (a partial last block)
             lambda: fp8_products(130, 256, 200, None, None, 24), lambda: fp8_products(5, 384, 264, 3, True, 24),
             lambda: fp8_products(130, 256, 200, None, None, 20),  # 160 columns (a partial last block of 40)
             # 640 elements in 7 segments of 128: the last two empty
             lambda: columns_mma(1, 640, 64, "e4m3", 7), lambda: columns_mma(16, 320, 144, "e4m3", 3),
             lambda: columns_mma(9, 192, 72, "bf16", None), lambda: columns_mma(33, 256, 40, "bf16", 2),
             lambda: columns_mma(20, 448, 208, "e4m3", None),  # two blocks of rows, the second of four
             # the exact product's K-major weights: e4m3 widened (L = 200: a load an element, the padding read; two
             # row blocks; then 16-byte chunks, segments, a partial last block of 8 columns), bfloat16 as they lie
             lambda: exact_k_major(130, 200, 72, "e4m3", None), lambda: exact_k_major(5, 384, 264, "e4m3", 3),
             lambda: exact_k_major(130, 256, 72, "bf16", None), lambda: exact_k_major(5, 384, 80, "bf16", None, True),
             # 16-bit outputs stored four a lane: a block a tile (a partial last column block of 8), walking
             lambda: paired_outputs(130, 256, 136, "bfloat16"), lambda: paired_outputs(70, 384, 256, "float16",
                                                                                     persistent=True),
             lambda: quantiser(5, 1001, None), lambda: quantiser(5, 1001, "float32"),
             lambda: quantiser(3, 7168, None)]
    if argv:  # e.g. `columns_mma`: the cases of those checks alone
        cases = [case for case in cases if any(name in case.__code__.co_names for name in argv)]
    ok = bool(cases)
    for case in cases:  # every case runs, whatever an earlier one raised
        try:
            ok = case() and ok
        except Exception as exc:  # noqa: BLE001 - reported, and the exit status says so
            print(f"raised {type(exc).__name__}: {exc}", flush=True)
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
