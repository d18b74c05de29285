"""``fp8(n / d)`` by a row constant on the GPU: ``rt_q8``, the product by the correctly rounded reciprocal corrected
twice by its remainder (FMAs), against the division.

    python3 gpu/quotient_check.py

1. ``rt_q8`` and ``rt_recip8`` as a generated module defines them, against the GPU's IEEE division (``div.rn.f32``),
   over 96 M pairs: divisors over [2^-110, 2^115] (past the fast range [2^-92, 2^100] too) with significands near 2
   or anywhere, numerators whose quotients lie next to float32's rounding ties or next to e4m3's, from 2^-14 to 2^11;
   float32 bits equal where the quotient is in [2^-11, 2^10) and the divisor in the fast range, e4m3 bytes equal
   everywhere; the reciprocal's product alone counted.
2. The ``rows`` kernel of a per-token quantiser (``fp8(x * 448 / max(a, 1e-12))``) against the float32 division, bit
   for bit, its outputs stored as float32 (``out_dtype``) and as e4m3 bytes: bfloat16 rows of 7168 at 4096 tokens,
   and float32 rows whose values put ``448 x / a`` within a few steps of every e4m3 rounding boundary (where the
   reciprocal's product alone rounds otherwise: counted).
Prints a line per check and exits 1 on a mismatch.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import cuda

import redalgebra as ra
from redalgebra.runtime import as_bfloat16
from redalgebra.runtime.cache import load
from redalgebra.runtime.formats import bf16_bits, bfloat16_to_float, e4m3_bits, e4m3_to_float

QUANT = "input x\nreduce a = max(abs(x))\nout q = fp8(x * 448 / max(a, 1e-12))\n"


def e4m3_midpoints() -> np.ndarray:
    codes = e4m3_to_float(np.arange(256, dtype=np.uint8))
    values = np.unique(np.abs(codes[np.isfinite(codes)]))
    return (values[1:] + values[:-1]) / 2


def pairs(rng, count: int):
    d = np.where(rng.random(count) < 0.5, 2 - rng.integers(1, 2 ** 14, count) * 2.0 ** -23, rng.uniform(1, 2, count))
    d = (d * np.exp2(rng.integers(-110, 116, count)) * rng.choice([-1.0, 1.0], count)).astype(np.float32)
    quotient = np.where(rng.random(count) < 0.5, rng.choice(e4m3_midpoints(), count),
                        rng.uniform(1, 2, count) * np.exp2(rng.integers(-14, 11, count)) * (1 + 2.0 ** -24))
    with np.errstate(all="ignore"):
        n = (quotient * d.astype(np.float64)).astype(np.float32)
    return (n.view(np.int32) + rng.integers(-3, 4, count).astype(np.int32)).view(np.float32), d


def check_quotients() -> bool:
    kernel = ra.compile(ra.derive(ra.parse(QUANT)), "cuda", "rows")
    module = load(kernel.source(kernel.spec_for(4, 64, {"x": "float32"})[1], "rows").source)
    rt_q8, rt_recip8 = module.rt_q8, module.rt_recip8

    @cuda.jit
    def both(n, d, fast, divided, product):
        i = cuda.grid(1)
        if i < n.size:
            r = rt_recip8(d[i])  # (as the kernels do once a row: divided where the reciprocal is NaN)
            fast[i] = rt_q8(n[i], d[i], r) if r == r else n[i] / d[i]
            divided[i] = n[i] / d[i]
            product[i] = n[i] * (np.float32(1) / d[i])

    rng = np.random.default_rng(13)
    bad_bits = bad_bytes = alone = span_total = 0
    for _ in range(12):
        n, d = pairs(rng, 8_000_000)
        outs = [cuda.device_array(n.size, np.float32) for _ in range(3)]
        both[(n.size + 255) // 256, 256](cuda.to_device(n), cuda.to_device(d), *outs)
        fast, divided, product = (o.copy_to_host() for o in outs)
        span = (np.abs(d) >= 2.0 ** -92) & (np.abs(d) <= 2.0 ** 100) & (np.abs(divided) >= 2.0 ** -11) & \
            (np.abs(divided) < 1024)
        bad_bits += int((fast[span].view(np.int32) != divided[span].view(np.int32)).sum())
        bad_bytes += int((e4m3_bits(fast) != e4m3_bits(divided)).sum())
        alone += int((e4m3_bits(product) != e4m3_bits(divided)).sum())
        span_total += int(span.sum())
    print(f"rt_q8 over 96000000 pairs: {bad_bits} of {span_total} float32 quotients in [2^-11, 2^10) differ from the "
          f"division, {bad_bytes} e4m3 bytes differ (the reciprocal's product alone: {alone})", flush=True)
    return bad_bits == 0 and bad_bytes == 0


def float32_quantised(x: np.ndarray) -> np.ndarray:
    a = np.maximum(np.abs(x).max(axis=1, keepdims=True), np.float32(1e-12)).astype(np.float32)
    with np.errstate(all="ignore"):
        return e4m3_bits(((x * np.float32(448)).astype(np.float32) / a).astype(np.float32))


def boundary_rows(rows: int, length: int, rng) -> np.ndarray:
    mids = e4m3_midpoints()[:-1]  # (the last, 432, stays below the scale's 448)
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
    ok = check_quotients()
    ok &= check_rows()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
