"""Hardware intrinsics for generated CUDA kernels: with :mod:`.tensor_cores`, the only code holding llvmlite IR
and inline PTX.

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

The tensor cores' intrinsics (``cp.async``, ``ldmatrix``, ``mma.sync``) are in :mod:`.tensor_cores`,
built on this module's helpers.

Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` when numba is imported) the same names are
plain Python functions with the same semantics, bit for bit for loads, stores and roundings (but for
the payload of a widened float16 NaN; ``ex2`` is NumPy's float32 ``exp2`` with subnormal results
flushed, as ``.ftz`` does). They also check the alignment contract and the bounds, which the GPU
does not. The host functions ``bf16_bits``, ``f16_bits`` and ``e4m3_bits`` (NumPy, vectorized) do
the stand-ins' rounding.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from llvmlite import ir
from numba import config, types

from .formats import _f32, bf16_bits, e4m3_bits, e4m3_values, f16_bits  # host rounding (NumPy), re-exported

__all__ = ["LOG2E", "bf16_bits", "div_full", "sqrt_full", "fresh", "uniform", "pick", "e4m3", "e4m3_round", "fma32", "fp8_in_hardware", "e4m3_bits", "ex2", "e4m3_values", "f16_bits", "fast_exp", "ld_b16", "ld_b16x8",
           "ld_e4m3", "ld_e4m3x16", "ld_f32x4",
           "ld_f32x4_nc", "ld_h16x8", "max_nan", "min_nan", "st_b16", "st_b16x2", "st_b16x8", "st_h16x2", "st_e4m3x4", "st_f32x2", "st_f32x4", "st_h16",
           "st_h16x8"]

SIMULATOR = bool(config.ENABLE_CUDASIM)
LOG2E = np.float32(1.4426950408889634)
_FLT_MIN = np.float32(2.0 ** -126)
_B16_TYPES = (types.uint16, types.int16)  # bfloat16 patterns


# --------------------------------------------------------------------------------------------------
# Simulator stand-ins (plain Python, same semantics)
# --------------------------------------------------------------------------------------------------
def _span(a, row, col, n, kinds):
    """The ``n`` elements ``a[row, col:col+n]`` as a NumPy view (``row`` an integer or a tuple indexing the
    leading dimensions), checking what the GPU does not."""
    ary = getattr(a, "_ary", a)  # a simulator device array wraps a NumPy array
    lead = tuple(int(r) for r in row) if isinstance(row, tuple) else (int(row),)
    if ary.ndim != len(lead) + 1 or not ary.flags.c_contiguous or ary.dtype.name not in kinds:
        raise TypeError(f"need a {len(lead) + 1}-D C-contiguous array of {'/'.join(kinds)}, got {ary.dtype} {ary.shape}")
    if not (all(0 <= r < d for r, d in zip(lead, ary.shape)) and 0 <= col and col + n <= ary.shape[-1]):
        raise IndexError(f"[{', '.join(map(str, lead))}, {col}:{col + n}] is outside an array of shape {ary.shape}")
    size = n * ary.itemsize
    flat = int(np.ravel_multi_index(lead + (col,), ary.shape))
    if (ary.ctypes.data + flat * ary.itemsize) % size:
        raise ValueError(f"misaligned {8 * size}-bit access at [{', '.join(map(str, lead))}, {col}]")
    return ary[lead + (slice(col, col + n),)]


_F32, _B16, _F16, _U8 = ("float32",), ("uint16", "int16"), ("float16",), ("uint8", "int8")  # for the stand-ins



def _sim_ld_f32x4(a, row, col):
    return tuple(_span(a, row, col, 4, _F32))


def _sim_ld_b16x8(a, row, col):
    return tuple((_span(a, row, col, 8, _B16).view(np.uint16).astype(np.uint32) << 16).view(np.float32))


def _sim_ld_h16x8(a, row, col):
    return tuple(_span(a, row, col, 8, _F16).astype(np.float32))


def _sim_st_f32x4(a, row, col, v0, v1, v2, v3):
    _span(a, row, col, 4, _F32)[:] = _f32([v0, v1, v2, v3])


def _sim_st_f32x2(a, row, col, v0, v1):
    _span(a, row, col, 2, _F32)[:] = _f32([v0, v1])


def _sim_b16_store(n):
    """The stand-in of an ``n``-value store rounded to bfloat16 patterns (``st_b16x2``, ``st_b16x8``)."""
    def store(a, row, col, *values):
        out = _span(a, row, col, n, _B16)
        out[:] = bf16_bits(_f32(list(values))).view(out.dtype)
    return store


def _sim_h16_store(n):
    """The stand-in of an ``n``-value store rounded to float16 (``st_h16x2``, ``st_h16x8``)."""
    def store(a, row, col, *values):
        _span(a, row, col, n, _F16)[:] = f16_bits(_f32(list(values))).view(np.float16)
    return store


_sim_st_b16x2, _sim_st_b16x8, _sim_st_h16x2, _sim_st_h16x8 = (_sim_b16_store(2), _sim_b16_store(8), _sim_h16_store(2),
                                                              _sim_h16_store(8))


def _sim_ld_b16(a, row, col):
    return (_span(a, row, col, 1, _B16).view(np.uint16).astype(np.uint32) << 16).view(np.float32)[0]


def _sim_st_b16(a, row, col, v):
    out = _span(a, row, col, 1, _B16)
    out[:] = bf16_bits(_f32(v)).view(out.dtype)


def _sim_st_h16(a, row, col, v):
    _span(a, row, col, 1, _F16)[:] = f16_bits(_f32(v)).view(np.float16)


def _sim_ex2(x):
    with np.errstate(all="ignore"):  # overflow to inf, NaN in and out: IEEE results, no warnings
        x = _f32(x)[()]
        if abs(x) < _FLT_MIN:  # .ftz: a subnormal argument is zero, a subnormal result is zero
            x = np.float32(0)
        r = np.exp2(x)
        return np.float32(0) if r < _FLT_MIN else r


def _sim_fast_exp(x):
    with np.errstate(all="ignore"):
        return _sim_ex2(_f32(x)[()] * LOG2E)


def _sim_div_full(a, b):
    with np.errstate(all="ignore"):
        return _f32(_f32(a)[()] / _f32(b)[()])[()]


def _sim_fresh(x):
    return x


def _sim_pick(c, a, b):
    return a if c else b


def _sim_max_nan(a, b):
    a, b = _f32(a)[()], _f32(b)[()]
    return a if a > b or a != a else b


def _sim_min_nan(a, b):
    a, b = _f32(a)[()], _f32(b)[()]
    return a if a < b or a != a else b


def _sim_e4m3(x):
    return e4m3_bits(_f32(x))[()]


def _sim_e4m3_round(x):
    return np.float32(e4m3_values(e4m3_bits(_f32(x)))[()])


#: The least magnitude float32 rounds to infinity (to nearest): the largest finite value and half its step.
_F32_OVERFLOW = Fraction(2 ** 128 - 2 ** 103)


def _round_f32(x: Fraction) -> np.float32:
    """``x`` (not zero) rounded to float32: to nearest, ties to even, ±inf from :data:`_F32_OVERFLOW` on."""
    if abs(x) >= _F32_OVERFLOW:
        return np.float32(np.inf if x > 0 else -np.inf)
    with np.errstate(all="ignore"):
        f = np.float32(float(x))  # (within a step: float() rounds to float64 first)
    best = None
    with np.errstate(all="ignore"):  # (a neighbour past float32's range is inf: skipped)
        around = (np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf)))
    for c in around:
        if not np.isfinite(c):
            continue
        key = (abs(Fraction(float(c)) - x), int(np.array(c).view(np.uint32)) & 1)  # nearer, then even
        if best is None or key < best[0]:
            best = (key, c)
    return np.float32(best[1])


def _sim_fma32(a, b, c):
    a, b, c = np.float32(a), np.float32(b), np.float32(c)
    if not (np.isfinite(a) and np.isfinite(b) and np.isfinite(c)):
        with np.errstate(all="ignore"):  # infinities and NaN by IEEE's rules (the product of finite values exact)
            return np.float32(np.float64(a) * np.float64(b) + np.float64(c))
    x = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    if x == 0:  # an exact zero: -0 only where both terms are zeros of that sign
        negative = (a == 0 or b == 0) and c == 0 and np.signbit(a) != np.signbit(b) and np.signbit(c)
        return np.float32(-0.0 if negative else 0.0)
    return _round_f32(x)

def _sim_st_e4m3x4(a, row, col, v0, v1, v2, v3):
    out = _span(a, row, col, 4, _U8)
    out[:] = e4m3_bits(_f32([v0, v1, v2, v3])).view(out.dtype)


def _sim_ld_e4m3(a, row, col):
    return e4m3_values(_span(a, row, col, 1, _U8).view(np.uint8))[0]


def _sim_ld_e4m3x16(a, row, col):
    return tuple(e4m3_values(_span(a, row, col, 16, _U8).view(np.uint8)))


def _sim_ld_f32x4_nc(a, row, col):
    return _sim_ld_f32x4(a, row, col)


# --------------------------------------------------------------------------------------------------
# CUDA: llvmlite IR and inline PTX
# --------------------------------------------------------------------------------------------------
if not SIMULATOR:
    try:  # numba-cuda's own extension API (its typing is separate from numba's)
        from numba.cuda.core.errors import TypingError
        from numba.cuda.extending import intrinsic
    except ImportError:  # pragma: no cover - older numba-cuda
        from numba.core.errors import TypingError
        from numba.core.extending import intrinsic


def _device(stand_in):
    """Decorator: the typer becomes an intrinsic named like it; under the simulator, ``stand_in``."""
    def decorate(typer):
        if SIMULATOR:
            stand_in.__name__, stand_in.__qualname__, stand_in.__doc__ = typer.__name__, typer.__name__, typer.__doc__
            return stand_in
        return intrinsic(typer)
    return decorate


def _lead(row) -> int:
    """How many leading dimensions ``row`` indexes: 1 for an integer, ``n`` for a tuple of ``n`` integers."""
    if isinstance(row, types.Integer):
        return 1
    if isinstance(row, types.BaseTuple) and all(isinstance(t, types.Integer) for t in row.types):
        return len(row.types)
    return 0


def _check(name, array, dtypes, row, col):
    """Reject a call whose array is not C-contiguous of ``dtypes`` with ``row`` indexing all but its last
    dimension, or whose indices are not integers."""
    if not (isinstance(array, types.Array) and array.layout == "C" and array.dtype in dtypes):
        raise TypingError(f"{name}: needs a C-contiguous array of {'/'.join(map(str, dtypes))}, got {array}")
    if _lead(row) != array.ndim - 1 or not isinstance(col, types.Integer):
        raise TypingError(f"{name}: a {array.ndim}-D array takes a row of {array.ndim - 1} integer(s) and an integer "
                          f"column, got {row}, {col}")


def _pointer(context, builder, sig, args, element):
    """``&a[row, col]`` in the global address space, as a pointer to ``element`` (a vector or a scalar)."""
    aty, rty, cty = sig.args[:3]
    ary = context.make_array(aty)(context, builder, args[0])
    if isinstance(rty, types.BaseTuple):  # (r0, r1, …): the leading dimensions, row-major
        lead = [context.cast(builder, builder.extract_value(args[1], k), t, types.intp) for k, t in enumerate(rty.types)]
    else:
        lead = [context.cast(builder, args[1], rty, types.intp)]
    flat = lead[0]
    for k, r in enumerate(lead[1:] + [context.cast(builder, args[2], cty, types.intp)], start=1):
        flat = builder.add(builder.mul(flat, builder.extract_value(ary.shape, k)), r)
    p = builder.gep(ary.data, [flat], inbounds=True)
    return builder.addrspacecast(builder.bitcast(p, element.as_pointer()), element.as_pointer(1))


def _asm(builder, result, text, constraints, operands):
    """One inline PTX instruction whose only effect is its result (``readnone``: LLVM may move or merge it)."""
    fnty = ir.FunctionType(result, [o.type for o in operands])
    return builder.call(ir.InlineAsm(fnty, text, constraints), operands, attrs=("nounwind", "readnone"))


def _vector(builder, values):
    """An LLVM vector of ``values`` (all of one type)."""
    v = ir.Constant(ir.VectorType(values[0].type, len(values)), ir.Undefined)
    for k, x in enumerate(values):
        v = builder.insert_element(v, x, ir.IntType(32)(k))
    return v


def _elements(builder, vector):
    return [builder.extract_element(vector, ir.IntType(32)(k)) for k in range(vector.type.count)]


def _load128(context, builder, sig, args, element, invariant=False):
    """The 16 bytes at ``&a[row, col]`` as one ``<4 x element>`` load; ``invariant`` makes it ``ld.global.nc``."""
    v = builder.load(_pointer(context, builder, sig, args, ir.VectorType(element, 4)), align=16)
    if invariant:  # NVPTX selects the non-coherent path for invariant loads from the global space
        v.set_metadata("invariant.load", builder.module.add_metadata([]))
    return v


def _bf16_pair(builder, word):
    """The two bfloat16 of a 32-bit word as float32: the low half (lower address) first."""
    f32, i32 = ir.FloatType(), ir.IntType(32)
    return [builder.bitcast(builder.shl(word, i32(16)), f32), builder.bitcast(builder.and_(word, i32(0xFFFF0000)), f32)]


def _pack(builder, kind, lo, hi):
    """Two float32 rounded to nearest even into one 32-bit word of ``kind`` (``bf16`` or ``f16``), ``lo`` low."""
    return _asm(builder, ir.IntType(32), f"cvt.rn.{kind}x2.f32 $0, $1, $2;", "=r,f,f", [hi, lo])


def _e4m3_pair(builder, lo, hi):
    """Two float32 as e4m3 bytes of a 16-bit word, ``lo`` in the low byte (saturating, sm_89+)."""
    return _asm(builder, ir.IntType(16), "cvt.rn.satfinite.e4m3x2.f32 $0, $1, $2;", "=h,f,f", [hi, lo])


def _e4m3_halves(builder, bits):
    """Two e4m3 bytes (a 16-bit word, the lower address low) as two float16, exactly (``cvt.rn.f16x2.e4m3x2``,
    sm_89 and later), widened to float32."""
    word = _asm(builder, ir.IntType(32), "cvt.rn.f16x2.e4m3x2 $0, $1;", "=r,h", [bits])
    halves = _elements(builder, builder.bitcast(word, ir.VectorType(ir.HalfType(), 2)))
    return [builder.fpext(h, ir.FloatType()) for h in halves]


def _ex2(builder, x):
    return _asm(builder, ir.FloatType(), "ex2.approx.ftz.f32 $0, $1;", "=f,f", [x])


def _store_sig(name, a, dtypes, row, col, count):
    _check(name, a, dtypes, row, col)
    return types.void(a, row, col, *([types.float32] * count))


def _number(name, x):
    if not isinstance(x, (types.Float, types.Integer)):
        raise TypingError(f"{name}: needs a number, got {x}")


def _f32x4_load(name, invariant, a, row, col):
    """Signature and code of a four-float32 load (plain or non-coherent)."""
    _check(name, a, (types.float32,), row, col)

    def codegen(context, builder, sig, args):
        v = _load128(context, builder, sig, args, ir.FloatType(), invariant)
        return context.make_tuple(builder, sig.return_type, _elements(builder, v))
    return types.UniTuple(types.float32, 4)(a, row, col), codegen


def _packed_store(name, kind, dtypes, a, row, col, count=8):
    """Signature and code of a ``count``-value store (8: 16 bytes; 2: 4 bytes) rounded pairwise to ``kind`` (``bf16``
    or ``f16``)."""
    def codegen(context, builder, sig, args):
        v = args[3:]
        packed = [_pack(builder, kind, v[k], v[k + 1]) for k in range(0, count, 2)]
        if count == 2:
            builder.store(packed[0], _pointer(context, builder, sig, args, ir.IntType(32)), align=4)
        else:
            words = _vector(builder, packed)
            builder.store(words, _pointer(context, builder, sig, args, ir.VectorType(ir.IntType(32), 4)), align=16)
        return context.get_dummy_value()
    return _store_sig(name, a, dtypes, row, col, count), codegen


def _scalar_store(name, kind, dtypes, a, row, col):
    """Signature and code of a one-value store rounded to ``kind`` (``bf16`` or ``f16``) with ``cvt.rn``."""
    def codegen(context, builder, sig, args):
        bits = _asm(builder, ir.IntType(16), f"cvt.rn.{kind}.f32 $0, $1;", "=h,f", [args[3]])
        builder.store(bits, _pointer(context, builder, sig, args, ir.IntType(16)), align=2)
        return context.get_dummy_value()
    return _store_sig(name, a, dtypes, row, col, 1), codegen


# --------------------------------------------------------------------------------------------------
# The API: each name is an intrinsic on CUDA and its stand-in under the simulator
# --------------------------------------------------------------------------------------------------
@_device(_sim_ld_f32x4)
def ld_f32x4(typingctx, a, row, col):
    """``a[row, col:col+4]`` of a float32 array as a 4-tuple, one 128-bit load (``ld.global.v4.f32``)."""
    return _f32x4_load("ld_f32x4", False, a, row, col)


@_device(_sim_ld_f32x4_nc)
def ld_f32x4_nc(typingctx, a, row, col):
    """``ld_f32x4`` through the read-only, non-coherent cache (``ld.global.nc.v4.f32``, from an LLVM invariant
    load): ``a`` must not be written while the kernel runs."""
    return _f32x4_load("ld_f32x4_nc", True, a, row, col)


@_device(_sim_ld_b16x8)
def ld_b16x8(typingctx, a, row, col):
    """The eight bfloat16 patterns ``a[row, col:col+8]`` (uint16/int16) as a float32 8-tuple, one 128-bit load
    (``ld.global.v4.u32``); decoding is exact: the pattern shifted into the upper half."""
    _check("ld_b16x8", a, _B16_TYPES, row, col)

    def codegen(context, builder, sig, args):
        words = _elements(builder, _load128(context, builder, sig, args, ir.IntType(32)))
        return context.make_tuple(builder, sig.return_type, [f for w in words for f in _bf16_pair(builder, w)])
    return types.UniTuple(types.float32, 8)(a, row, col), codegen


@_device(_sim_ld_h16x8)
def ld_h16x8(typingctx, a, row, col):
    """The eight float16 ``a[row, col:col+8]`` as a float32 8-tuple (exact), one 128-bit load."""
    _check("ld_h16x8", a, (types.float16,), row, col)

    def codegen(context, builder, sig, args):
        words = _load128(context, builder, sig, args, ir.IntType(32))
        halves = _elements(builder, builder.bitcast(words, ir.VectorType(ir.HalfType(), 8)))
        return context.make_tuple(builder, sig.return_type, [builder.fpext(h, ir.FloatType()) for h in halves])
    return types.UniTuple(types.float32, 8)(a, row, col), codegen


@_device(_sim_st_f32x4)
def st_f32x4(typingctx, a, row, col, v0, v1, v2, v3):
    """Store four float32 at ``a[row, col:col+4]``, one 128-bit store (``st.global.v4.f32``)."""
    def codegen(context, builder, sig, args):
        p = _pointer(context, builder, sig, args, ir.VectorType(ir.FloatType(), 4))
        builder.store(_vector(builder, list(args[3:])), p, align=16)
        return context.get_dummy_value()
    return _store_sig("st_f32x4", a, (types.float32,), row, col, 4), codegen


@_device(_sim_st_f32x2)
def st_f32x2(typingctx, a, row, col, v0, v1):
    """Store two float32 at ``a[row, col:col+2]``, one 64-bit store (``st.global.v2.f32``; ``col`` even on a row of
    an even pitch)."""
    def codegen(context, builder, sig, args):
        p = _pointer(context, builder, sig, args, ir.VectorType(ir.FloatType(), 2))
        builder.store(_vector(builder, list(args[3:])), p, align=8)
        return context.get_dummy_value()
    return _store_sig("st_f32x2", a, (types.float32,), row, col, 2), codegen


@_device(_sim_st_b16x2)
def st_b16x2(typingctx, a, row, col, v0, v1):
    """Round two float32 to bfloat16 (``cvt.rn.bf16x2.f32``) and store their patterns at ``a[row, col:col+2]``
    (uint16/int16), one 32-bit store (``col`` even on a row of an even pitch)."""
    return _packed_store("st_b16x2", "bf16", _B16_TYPES, a, row, col, 2)


@_device(_sim_st_h16x2)
def st_h16x2(typingctx, a, row, col, v0, v1):
    """Round two float32 to float16 and store them at ``a[row, col:col+2]``, one 32-bit store (``col`` even on a row
    of an even pitch)."""
    return _packed_store("st_h16x2", "f16", (types.float16,), a, row, col, 2)


@_device(_sim_st_b16x8)
def st_b16x8(typingctx, a, row, col, v0, v1, v2, v3, v4, v5, v6, v7):
    """Round eight float32 to bfloat16 (``cvt.rn.bf16x2.f32``) and store their patterns at ``a[row, col:col+8]``
    (uint16/int16), one 128-bit store."""
    return _packed_store("st_b16x8", "bf16", _B16_TYPES, a, row, col)


@_device(_sim_st_h16x8)
def st_h16x8(typingctx, a, row, col, v0, v1, v2, v3, v4, v5, v6, v7):
    """Round eight float32 to float16 (``cvt.rn.f16x2.f32``) and store them at ``a[row, col:col+8]``, one
    128-bit store."""
    return _packed_store("st_h16x8", "f16", (types.float16,), a, row, col)


@_device(_sim_ld_b16)
def ld_b16(typingctx, a, row, col):
    """The bfloat16 pattern ``a[row, col]`` (uint16/int16) as float32, exactly."""
    _check("ld_b16", a, _B16_TYPES, row, col)

    def codegen(context, builder, sig, args):
        bits = builder.load(_pointer(context, builder, sig, args, ir.IntType(16)), align=2)
        return _bf16_pair(builder, builder.zext(bits, ir.IntType(32)))[0]
    return types.float32(a, row, col), codegen


@_device(_sim_st_b16)
def st_b16(typingctx, a, row, col, v):
    """Round ``v`` to bfloat16 (``cvt.rn.bf16.f32``) and store its pattern at ``a[row, col]`` (uint16/int16)."""
    return _scalar_store("st_b16", "bf16", _B16_TYPES, a, row, col)


@_device(_sim_st_h16)
def st_h16(typingctx, a, row, col, v):
    """Round ``v`` to float16 (``cvt.rn.f16.f32``) and store it at ``a[row, col]``."""
    return _scalar_store("st_h16", "f16", (types.float16,), a, row, col)


@_device(_sim_ex2)
def ex2(typingctx, x):
    """``2**x`` as float32 with ``ex2.approx.ftz.f32`` (relative error about 2**-22; subnormals flush to
    zero; ``ex2(0) == 1``, ``ex2(-inf) == 0``)."""
    _number("ex2", x)
    return types.float32(types.float32), lambda context, builder, sig, args: _ex2(builder, args[0])


@_device(_sim_fast_exp)
def fast_exp(typingctx, x):
    """``e**x`` as ``ex2(x * log2(e))``, the product rounded once to float32, so that ``fast_exp(0) == 1`` and
    ``fast_exp(-inf) == 0`` exactly."""
    _number("fast_exp", x)

    def codegen(context, builder, sig, args):
        return _ex2(builder, builder.fmul(args[0], ir.FloatType()(float(LOG2E))))
    return types.float32(types.float32), codegen


@_device(_sim_fresh)
def fresh(typingctx, x):
    """``x`` (an integer) through an empty instruction the compiler can neither move nor see through: what a loop
    computes from ``fresh(tid)`` is computed in the loop. Without it LLVM hoists every per-thread address that does
    not change from tile to tile out of the loop, and keeps it in a register across it: MLA's kernel, 128
    accumulators a thread, then spilled 220 bytes; the same kernel with its thread indices taken afresh in the loop
    holds everything in 255 registers, unspilled."""
    if not isinstance(x, types.Integer) or x.bitwidth not in (32, 64):
        raise TypingError(f"fresh: a 32- or 64-bit integer, got {x}")
    reg = "l" if x.bitwidth == 64 else "r"

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(args[0].type, [args[0].type])
        return builder.call(ir.InlineAsm(fnty, f"mov.b{x.bitwidth} $0, $1;", f"={reg},{reg}", side_effect=True),
                            [args[0]])
    return x(x), codegen


@_device(_sim_fresh)
def uniform(typingctx, x):
    """``x`` (a 32-bit integer the same in every lane of the warp, such as the warp's index) as lane 0 has it
    (``shfl.sync.idx``): ptxas then knows it is the warp's and keeps what is computed from it in uniform registers.
    Warpgroup instructions read their descriptors from uniform registers: a descriptor computed from a warp's index
    in ordinary registers costs two moves to uniform ones per instruction (MLA's scores: 36 a tile)."""
    if not isinstance(x, types.Integer) or x.bitwidth != 32:
        raise TypingError(f"uniform: a 32-bit integer, got {x}")

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(args[0].type, [args[0].type])
        return builder.call(ir.InlineAsm(fnty, "shfl.sync.idx.b32 $0, $1, 0, 31, -1;", "=r,r", side_effect=True),
                            [args[0]])
    return x(x), codegen


@_device(_sim_div_full)
def div_full(typingctx, a, b):
    """``a / b`` in float32 by ``div.full.f32``: within 2 ulp over the full range, no slow path (an IEEE division's
    slow path is a subroutine call, and a call anywhere in a kernel serializes Hopper's wgmma); ``x / 0`` is ±inf,
    ``0 / 0`` NaN."""
    _number("div_full", a)
    _number("div_full", b)

    def codegen(context, builder, sig, args):
        x, y = (context.cast(builder, v, t, types.float32) for v, t in zip(args, sig.args))
        return _asm(builder, ir.FloatType(), "div.full.f32 $0, $1, $2;", "=f,f,f", [x, y])
    return types.float32(a, b), codegen


def _sim_sqrt_full(x):
    with np.errstate(all="ignore"):
        return _f32(np.sqrt(_f32(x)[()]))[()]


@_device(_sim_sqrt_full)
def sqrt_full(typingctx, x):
    """``sqrt(x)`` in float32 by ``sqrt.approx.f32``, no slow path (the IEEE square root's slow path is a subroutine
    call, which serializes Hopper's wgmma, as ``div_full`` says): not correctly rounded — within 1 ulp of it on an
    H200 over 16.8 M random normal and 1 M subnormal inputs, 17 % of them off by that ulp (``gpu/approx_check.py``);
    NaN below 0, ``sqrt(±0) = ±0``, ``sqrt(inf) = inf``."""
    _number("sqrt_full", x)

    def codegen(context, builder, sig, args):
        v = context.cast(builder, args[0], sig.args[0], types.float32)
        return _asm(builder, ir.FloatType(), "sqrt.approx.f32 $0, $1;", "=f,f", [v])
    return types.float32(x), codegen


def _nan_minmax(name, op, a, b):
    _number(name, a)
    _number(name, b)

    def codegen(context, builder, sig, args):
        return _asm(builder, ir.FloatType(), f"{op}.NaN.f32 $0, $1, $2;", "=f,f,f", list(args))
    return types.float32(types.float32, types.float32), codegen


@_device(_sim_max_nan)
def max_nan(typingctx, a, b):
    """The larger of two float32, NaN when either is NaN (``max.NaN.f32``, sm_80 and later), as NumPy's
    ``maximum`` and the reference's ``max`` reductions; Python's ``max`` (and numba's) drops a NaN."""
    return _nan_minmax("max_nan", "max", a, b)


@_device(_sim_pick)
def pick(typingctx, c, a, b):
    """``a if c else b`` without a branch (an LLVM ``select``): both are evaluated, so both must be safe to compute.
    A Python conditional expression is three blocks of numba's IR, and numba's passes grow with blocks × names."""
    if not isinstance(c, types.Boolean) and not isinstance(c, types.Integer):
        raise TypingError(f"pick: the condition must be a boolean, got {c}")
    if not (isinstance(a, (types.Integer, types.Float)) and isinstance(b, (types.Integer, types.Float))):
        raise TypingError(f"pick: two numbers, got {a}, {b}")

    rt = typingctx.unify_pairs(a, b)

    def codegen(context, builder, sig, args):
        cond = context.cast(builder, args[0], sig.args[0], types.boolean)
        x, y = (context.cast(builder, v, t, sig.return_type) for v, t in zip(args[1:], sig.args[1:]))
        return builder.select(cond, x, y)
    return rt(c, a, b), codegen


@_device(_sim_min_nan)
def min_nan(typingctx, a, b):
    """The smaller of two float32, NaN when either is NaN (``min.NaN.f32``, sm_80 and later)."""
    return _nan_minmax("min_nan", "min", a, b)


@_device(_sim_e4m3)
def e4m3(typingctx, x):
    """The FP8 e4m3 byte (uint8) of ``x``: nearest, ties to even, saturating at ±448, NaN gives ``0x7F``
    (``cvt.rn.satfinite.e4m3x2.f32``, sm_89 and later)."""
    _number("e4m3", x)

    def codegen(context, builder, sig, args):
        return builder.trunc(_e4m3_pair(builder, args[0], args[0]), ir.IntType(8))
    return types.uint8(types.float32), codegen


def fp8_in_hardware() -> bool:
    """Whether generated modules round ``fp8()`` with :func:`e4m3_round` (the hardware's conversion, sm_89 and
    later): on such a GPU, or where no GPU is present (PTX built offline, for sm_90); an older GPU keeps the
    portable helper."""
    try:
        from numba import cuda

        return not cuda.is_available() or cuda.get_current_device().compute_capability >= (8, 9)
    except Exception:  # noqa: BLE001 - no driver to ask: PTX built offline
        return True


@_device(_sim_e4m3_round)
def e4m3_round(typingctx, x):
    """``x`` rounded to the nearest e4m3 value as a float32: ties to even, saturating at ±448, NaN stays NaN — the
    generated ``rt_fp8`` in two instructions (``cvt.rn.satfinite.e4m3x2.f32``, then ``cvt.rn.f16x2.e4m3x2``, which
    is exact; sm_89 and later). Only the sign of a zero may differ: a negative value that rounds to zero gives -0."""
    _number("e4m3_round", x)

    def codegen(context, builder, sig, args):
        x = context.cast(builder, args[0], sig.args[0], types.float32)
        return _e4m3_halves(builder, _e4m3_pair(builder, x, x))[0]
    return types.float32(x), codegen


@_device(_sim_fma32)
def fma32(typingctx, a, b, c):
    """``a * b + c`` in float32 rounded once (``fma.rn.f32``; the simulator's stand-in computes it exactly, then rounds
    to nearest even), whatever NVVM's contraction settings. The quotients of ``fp8(n / d)`` by a row constant (the
    generated ``rt_q8``) correct a product by the reciprocal with it."""
    for v in (a, b, c):
        _number("fma32", v)

    def codegen(context, builder, sig, args):
        values = [context.cast(builder, v, t, types.float32) for v, t in zip(args, sig.args)]
        return builder.fma(*values)
    return types.float32(a, b, c), codegen


@_device(_sim_ld_e4m3)
def ld_e4m3(typingctx, a, row, col):
    """The FP8 e4m3 byte ``a[row, col]`` (uint8/int8) as float32, exactly (NaN for ``0x7F``/``0xFF``)."""
    _check("ld_e4m3", a, (types.uint8, types.int8), row, col)

    def codegen(context, builder, sig, args):
        byte = builder.load(_pointer(context, builder, sig, args, ir.IntType(8)), align=1)
        return _e4m3_halves(builder, builder.zext(byte, ir.IntType(16)))[0]
    return types.float32(a, row, col), codegen


@_device(_sim_ld_e4m3x16)
def ld_e4m3x16(typingctx, a, row, col):
    """The sixteen e4m3 bytes ``a[row, col:col+16]`` (uint8/int8) as a float32 16-tuple, one 128-bit load
    (``col`` and the row's start 16-byte aligned), decoded pairwise by ``cvt.rn.f16x2.e4m3x2``."""
    _check("ld_e4m3x16", a, (types.uint8, types.int8), row, col)

    def codegen(context, builder, sig, args):
        i16, i32 = ir.IntType(16), ir.IntType(32)
        values = []
        for w in _elements(builder, _load128(context, builder, sig, args, i32)):
            values += _e4m3_halves(builder, builder.trunc(w, i16))
            values += _e4m3_halves(builder, builder.trunc(builder.lshr(w, i32(16)), i16))
        return context.make_tuple(builder, sig.return_type, values)
    return types.UniTuple(types.float32, 16)(a, row, col), codegen


@_device(_sim_st_e4m3x4)
def st_e4m3x4(typingctx, a, row, col, v0, v1, v2, v3):
    """Round four float32 as ``e4m3`` does and store the bytes at ``a[row, col:col+4]`` (uint8/int8), one
    32-bit store (``col % 4 == 0``)."""
    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        lo = builder.zext(_e4m3_pair(builder, args[3], args[4]), i32)
        hi = builder.zext(_e4m3_pair(builder, args[5], args[6]), i32)
        builder.store(builder.or_(lo, builder.shl(hi, i32(16))), _pointer(context, builder, sig, args, i32), align=4)
        return context.get_dummy_value()
    return _store_sig("st_e4m3x4", a, (types.uint8, types.int8), row, col, 4), codegen
