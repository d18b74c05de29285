"""``fp8(n / d)`` by a row constant on the GPU: the product where ``e4m3_sure`` says so, the division elsewhere.

    python3 gpu/quotient_check.py

1. ``e4m3_sure`` (the intrinsic: two bracket conversions and a comparison) against its definition, NumPy's rounding
   of both ends of ``q * (1 ∓ 2^-21)``, over every float32 bit pattern with a stride of 61 (70 M patterns, both
   signs), in pairs.
2. The ``rows`` kernel of a per-token quantiser (``fp8(x * 448 / max(a, 1e-12))``) against the float32 division, bit
   for bit, its outputs stored as float32 (``out_dtype``: the product and ``e4m3_sure``'s test, ``rt_q8x2``) and as
   e4m3 bytes (divided): bfloat16 rows of 7168 at 4096 tokens, and float32 rows whose values put ``448 x / a`` within
   a few steps of every e4m3 rounding boundary (where the reciprocal's product alone rounds otherwise: counted).
Prints a line per check and exits 1 on a mismatch.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import cuda

import redalgebra as ra
from redalgebra.runtime import as_bfloat16
from redalgebra.runtime.formats import bf16_bits, bfloat16_to_float, e4m3_bits, e4m3_to_float
from redalgebra.runtime.intrinsics import e4m3_sure

QUANT = "input x\nreduce a = max(abs(x))\nout q = fp8(x * 448 / max(a, 1e-12))\n"
STRIDE = 61


@cuda.jit
def _sure(q, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = e4m3_sure(q[2 * i], q[2 * i + 1])


def sure_model(q: np.ndarray) -> np.ndarray:
    """The definition, vectorized over pairs: both ends of each bracket round to one e4m3 byte."""
    with np.errstate(all="ignore"):
        lo = e4m3_bits((q * np.float32(1 - 2.0 ** -21)).astype(np.float32))
        hi = e4m3_bits((q * np.float32(1 + 2.0 ** -21)).astype(np.float32))
    same = lo == hi
    return same[0::2] & same[1::2]


def check_sure() -> bool:
    q = np.arange(0, 2**32, STRIDE, dtype=np.uint64).astype(np.uint32).view(np.float32)
    q = q[: q.size // 2 * 2]
    out = cuda.device_array(q.size // 2, np.bool_)
    _sure[(out.size + 255) // 256, 256](cuda.to_device(q), out)
    got, want = out.copy_to_host(), sure_model(q)
    bad = int((got != want).sum())
    print(f"e4m3_sure over {q.size} float32 patterns in pairs: {int(want.sum())} sure, {bad} mismatches", flush=True)
    return bad == 0


def float32_quantised(x: np.ndarray) -> np.ndarray:
    a = np.maximum(np.abs(x).max(axis=1, keepdims=True), np.float32(1e-12)).astype(np.float32)
    with np.errstate(all="ignore"):
        return e4m3_bits(((x * np.float32(448)).astype(np.float32) / a).astype(np.float32))


def boundary_rows(rows: int, length: int, rng) -> np.ndarray:
    codes = e4m3_to_float(np.arange(256, dtype=np.uint8))
    values = np.unique(np.abs(codes[np.isfinite(codes)]))
    mids = ((values[1:] + values[:-1]) / 2)[:-1]  # (the last, 432, stays below the scale's 448)
    x = np.empty((rows, length), np.float32)
    for r in range(rows):
        a = np.float32(rng.uniform(1, 2) * 2.0 ** rng.integers(-30, 30))
        target = (rng.choice(mids, length - 1) * np.float64(a) / 448).astype(np.float32)
        x[r, :-1] = (target.view(np.int32) + rng.integers(-4, 5, length - 1, dtype=np.int32)).view(np.float32)
        x[r, :-1] *= rng.choice(np.array([-1, 1], np.float32), length - 1)
        x[r, -1] = a
    return x


def check_rows() -> bool:
    rng = np.random.default_rng(5)
    x16 = (rng.normal(size=(4096, 7168)) * np.exp2(rng.integers(-8, 8, (4096, 1)))).astype(np.float32)
    bits = bf16_bits(x16)
    x = boundary_rows(512, 7168, rng)
    a = np.maximum(np.abs(x).max(axis=1, keepdims=True), np.float32(1e-12)).astype(np.float32)
    product = e4m3_bits((x * np.float32(448) * (np.float32(1) / a)).astype(np.float32))
    ok = True
    for out_dtype in ("float32", None):
        kernel = ra.compile(ra.derive(ra.parse(QUANT)), "cuda", "rows", out_dtype=out_dtype)
        for label, given, values in (("bfloat16 4096 x 7168", as_bfloat16(bits), bfloat16_to_float(bits)),
                                     ("float32 next to every e4m3 boundary 512 x 7168", x, x)):
            got = np.asarray(kernel({"x": given})["q"])
            want = float32_quantised(values)
            if got.dtype == np.uint8:
                bad = int((got != want).sum())
            else:  # the rounded values (a zero's sign aside)
                w = e4m3_to_float(want)
                bad = int((~((got == w) | (np.isnan(got) & np.isnan(w)))).sum())
            extra = f" (the reciprocal's product alone: {int((product != want).sum())})" if given is x else ""
            print(f"rows quantiser, {label}, stored as {out_dtype or 'e4m3'}: {bad} of {want.size} differ from "
                  f"the float32 division{extra}", flush=True)
            ok &= bad == 0
    return ok


def main() -> int:
    ok = check_sure()
    ok &= check_rows()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
