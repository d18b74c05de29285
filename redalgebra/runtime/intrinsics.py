"""Hardware intrinsics for generated CUDA kernels: this module's names (defined in :mod:`.memory` and
:mod:`.arithmetic`) and :mod:`.tensor_cores`'s, with :mod:`.lowering` under both, are the only code holding llvmlite
IR and inline PTX.

Owns the memory and conversion instructions that Numba CUDA does not expose: 128-bit global loads
and stores (``ld.global[.nc].v4``, ``st.global.v4``), bfloat16 and float16 packing with
round-to-nearest-even (``cvt.rn.bf16x2.f32``, ``cvt.rn.f16x2.f32``), FP8 e4m3 rounding
(``cvt.rn.satfinite.e4m3x2.f32``, sm_89 and later) and ``ex2.approx.ftz.f32``. Each is a
``numba.cuda`` intrinsic: its IR is emitted into the calling kernel, so it is always inlined and
never a ``call``. Generated kernels import them by name.

Arrays are C-contiguous and in global memory (kernel arguments); an access names an element by
``(row, col)``, where ``row`` indexes the leading dimensions: an integer for a 2-D array, a tuple of
``ndim - 1`` integers for more (``ld_b16x8(k, (r, l), c)`` reads ``k[r, l, c:c+8]`` of a 3-D array, as
attention's keys are laid out). **Alignment contract** (the caller's job; nothing is checked on the GPU, where a
misaligned vector access faults): a vector of ``n`` bytes (16 for ``*x4``/``*x8``, 4 for
``st_e4m3x4``, 2 for the 16-bit scalars) starts at an address that is a multiple of ``n``, i.e. the
base pointer is ``n``-aligned (device allocations are 256-byte aligned), the row pitch is a multiple
of ``n`` bytes and ``col`` is a multiple of ``n / itemsize``. A row's tail too short for a vector
takes the scalar accesses (``ld_b16``, ``st_b16``, ``st_h16``, ``e4m3``, plain indexing).

Bit conventions: bfloat16 is stored as its 16-bit pattern in ``uint16`` (or ``int16``) arrays; a
float32 rounds to bfloat16/float16/e4m3 to nearest, ties to even; every NaN becomes the canonical
NaN of the format (``0x7FFF`` for bfloat16 and float16, ``0x7F`` for e4m3); e4m3 saturates to
±448. ``cvt.rn.*x2.f32 d, a, b`` puts ``a`` in the upper half, so the pairs are passed high first.

The names are defined by responsibility and re-exported here, where generated kernels import them: the memory
accesses in :mod:`.memory`, the arithmetic (``ex2``, the approximate division and square root, NaN-propagating
min and max, ``pick``, ``fresh``, ``uniform``, FP8 rounding, ``fma32``) in :mod:`.arithmetic`, both built on
:mod:`.lowering` (``_device``, the typing checks, the llvmlite and inline-PTX helpers). The tensor cores' intrinsics
(``cp.async``, ``ldmatrix``, ``mma.sync``, ``wgmma``) are in :mod:`.tensor_cores`, built on the same.

Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` when numba is imported) the same names are
plain Python functions with the same semantics, bit for bit for loads, stores and roundings (but for
the payload of a widened float16 NaN; ``ex2`` is NumPy's float32 ``exp2`` with subnormal results
flushed, as ``.ftz`` does). They also check the alignment contract and the bounds, which the GPU
does not. The host functions ``bf16_bits``, ``f16_bits`` and ``e4m3_bits`` (NumPy, vectorized) do
the stand-ins' rounding.
"""

from __future__ import annotations

from .arithmetic import (LOG2E, div_full, e4m3, e4m3_round, ex2, fast_exp, fma32, fp8_in_hardware, fresh, max_nan,
                         min_nan, pick, sqrt_full, uniform)
from .formats import bf16_bits, e4m3_bits, e4m3_values, f16_bits  # host rounding (NumPy), re-exported
from .lowering import SIMULATOR
from .memory import (ld_b16, ld_b16x2, ld_b16x8, ld_e4m3, ld_e4m3x16, ld_f32x4, ld_f32x4_nc, ld_h16x2, ld_h16x8, st_b16, st_b16x2,
                     st_b16x4, st_b16x8, st_e4m3x4, st_f32x2, st_f32x4, st_h16, st_h16x2, st_h16x4, st_h16x8)

__all__ = ["LOG2E", "bf16_bits", "div_full", "sqrt_full", "fresh", "uniform", "pick", "e4m3", "e4m3_round", "fma32", "fp8_in_hardware", "e4m3_bits", "ex2", "e4m3_values", "f16_bits", "fast_exp", "ld_b16", "ld_b16x2", "ld_b16x8",
           "ld_e4m3", "ld_e4m3x16", "ld_f32x4",
           "ld_f32x4_nc", "ld_h16x2", "ld_h16x8", "max_nan", "min_nan", "st_b16", "st_b16x2", "st_b16x4", "st_b16x8", "st_h16x2", "st_h16x4", "st_e4m3x4", "st_f32x2", "st_f32x4", "st_h16",
           "st_h16x8"]
