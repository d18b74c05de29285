#!/usr/bin/env python3
"""The Hopper ``wgmma`` intrinsics on exact integers: the layouts the ``wgmma`` strategy stages its tiles in.

One warpgroup stores three 16-bit tiles in shared memory in the 128-byte-swizzled layout (rows of 64 values,
the 16-byte chunk ``c`` of row ``r`` at ``c ^ (r & 7)``; a tile wider than 64 values is blocks of 64 columns one
after the other) and computes, with float32 accumulators:

- ``S = A · Bᵀ`` (64 × 64, K = 128: eight k16 steps crossing a 64-column block) by ``wgmma_ss`` — both operands
  K-major, as the scores ``Q · Kᵀ`` are;
- ``O = A[:, :64] · V`` (64 × 128, K = 64) by ``wgmma_rs`` — A from registers in ``mma.sync``'s fragment layout,
  ``V`` MN-major (a row-major value tile, two blocks of 64 columns ``LBO`` apart), as ``P · V`` is.

Integers in [-4, 4] are exact in bfloat16, float16 and the float32 sums, so the check is equality. Run on an
sm_90 GPU (``python3 gpu/wgmma_check.py``) or in the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), where the
intrinsics' stand-ins compute the same products from the descriptors; the test suite runs the latter.
Prints one line per kind and exits 1 on a mismatch.
"""

from __future__ import annotations

import sys

import numpy as np

ROWS, DEPTH, KEYS, WIDTH = 64, 128, 64, 128

SOURCE = '''
def check(a, b, v, out_s, out_o):
    sm = cuda.shared.array(0, uint16)
    tid = cuda.threadIdx.x
    lane = tid % 32
    warp = tid // 32
    g = lane >> 2
    t = lane & 3
    z = float32(0)
    base = swizzle_pad(sm)
    ab, bb, vb = base, base + 8192, base + 16384
    e = tid
    while e < 8192:
        r = e // 128
        c = e % 128
        at = (c // 64) * 4096 + r * 64 + ((c & 63) ^ ((r & 7) << 3))
        sm[ab + at] = a[r, c]
        sm[bb + at] = b[r, c]
        sm[vb + at] = v[r, c]
        e += 128
    fence_async()
    cuda.syncthreads()
    s = ({zeros32})
    wgmma_fence()
    for ks in range(8):
        off = (ks // 4) * 4096 + (ks % 4) * 16
        s = wgmma_ss_{kind}(s, wgmma_desc(sm, ab + off, 16, 1024), wgmma_desc(sm, bb + off, 16, 1024), 1 if ks else 0)
    wgmma_commit()
    wgmma_wait0()
    s = wgmma_hold(s)
    for j in range(8):
        for i in range(4):
            out_s[16 * warp + g + 8 * (i >> 1), 8 * j + 2 * t + (i & 1)] = s[j][i]
    o = ({zeros64})
    r0 = 16 * warp + g
    for kk in range(4):
        c0 = 16 * kk + 2 * t
        w0 = uint32(a[r0, c0]) | (uint32(a[r0, c0 + 1]) << 16)
        w1 = uint32(a[r0 + 8, c0]) | (uint32(a[r0 + 8, c0 + 1]) << 16)
        w2 = uint32(a[r0, c0 + 8]) | (uint32(a[r0, c0 + 9]) << 16)
        w3 = uint32(a[r0 + 8, c0 + 8]) | (uint32(a[r0 + 8, c0 + 9]) << 16)
        wgmma_fence()
        o = wgmma_rs_{kind}(o, w0, w1, w2, w3, wgmma_desc(sm, vb + kk * 1024, 8192, 1024))
        wgmma_commit()
        wgmma_wait0()
        o = wgmma_hold(o)
    for j in range(16):
        for i in range(4):
            out_o[16 * warp + g + 8 * (i >> 1), 8 * j + 2 * t + (i & 1)] = o[j][i]
'''


SIGNATURE = "void(uint16[:, ::1], uint16[:, ::1], uint16[:, ::1], float32[:, ::1], float32[:, ::1])"


def function(kind: str):
    """The check's Python function for ``bf16`` or ``f16`` (``cuda.jit`` it, or ``cuda.compile_ptx`` it)."""
    from numba import cuda, uint16, uint32

    from redalgebra.runtime import tensor_cores as tc

    text = SOURCE.replace("{kind}", kind).replace("{zeros32}", "(z, z, z, z), " * 8).replace("{zeros64}", "(z, z, z, z), " * 16)
    scope = {"cuda": cuda, "uint16": uint16, "uint32": uint32, "float32": np.float32,
             **{name: getattr(tc, name) for name in tc.__all__}}
    exec(compile(text, f"<wgmma_check {kind}>", "exec"), scope)
    return scope["check"]


def kernel(kind: str):
    from numba import cuda

    return cuda.jit(SIGNATURE)(function(kind))


def run(kind: str, seed: int = 0) -> tuple[bool, str]:
    """Run the check for ``bf16`` or ``f16``: (exact, a line saying what was compared)."""
    from redalgebra.runtime.intrinsics import bf16_bits, f16_bits

    rng = np.random.default_rng(seed)
    a, b, v = (rng.integers(-4, 5, shape).astype(np.float32) for shape in ((ROWS, DEPTH), (KEYS, DEPTH), (KEYS, WIDTH)))
    bits = bf16_bits if kind == "bf16" else (lambda x: np.asarray(f16_bits(x)).view(np.uint16))
    out_s = np.full((ROWS, KEYS), np.nan, np.float32)
    out_o = np.full((ROWS, WIDTH), np.nan, np.float32)
    k = kernel(kind)
    shared = 3 * 8192 * 2 + 1024
    _opt_in(k, shared)
    k[1, 128, 0, shared](*(np.ascontiguousarray(np.asarray(bits(x)).view(np.uint16)) for x in (a, b, v)), out_s, out_o)
    want_s, want_o = a @ b.T, a[:, :KEYS] @ v
    bad_s, bad_o = int((out_s != want_s).sum()), int((out_o != want_o).sum())
    return bad_s == bad_o == 0, (f"wgmma {kind}: S = A·Bᵀ 64x64x128 (K-major, swizzled) {bad_s} wrong of {out_s.size}; "
                                 f"O = A·V 64x128x64 (A in registers, V MN-major) {bad_o} wrong of {out_o.size}")


def _opt_in(k, shared):
    """Above 48 KB of dynamic shared memory a kernel must opt in."""
    from numba import config

    if config.ENABLE_CUDASIM or shared <= 48 * 1024:
        return
    from numba import cuda
    from numba.cuda.cudadrv.driver import binding, driver

    overload = next(iter(k.overloads.values()))
    attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    driver.cuKernelSetAttribute(attr, shared, overload._codelibrary.get_cufunc().handle, cuda.get_current_device().id)


def main() -> int:
    ok = True
    for kind in ("bf16", "f16"):
        good, line = run(kind)
        print(("PASS " if good else "FAIL ") + line)
        ok &= good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
