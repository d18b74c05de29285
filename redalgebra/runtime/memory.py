"""Memory intrinsics of the generated CUDA kernels (re-exported by :mod:`.intrinsics`): 128-bit global loads and
stores, bfloat16 and float16 stores rounded to nearest even, the scalar accesses for a row's tail, and FP8 e4m3
loads and stores. Each is a ``numba.cuda`` intrinsic on the GPU and a plain-Python stand-in under the simulator,
which also checks the alignment contract and the bounds (:mod:`.intrinsics` states both)."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types

from .formats import _f32, bf16_bits, e4m3_bits, e4m3_values, f16_bits
from .lowering import (CHUNK_DECODERS, _B16, _B16_TYPES, _F16, _F32, _U8, _asm, _bf16_pair, _check, _device,
                       _e4m3_halves, _e4m3_pair, _elements, _pack, _pointer, _span, _vector)


def _sim_ld_f32x4(a, row, col):
    return tuple(_span(a, row, col, 4, _F32))


def _sim_b16_load(n):
    """The stand-in of an ``n``-value load of bfloat16 patterns (``ld_b16x2``, ``ld_b16x8``)."""
    def load(a, row, col):
        return tuple((_span(a, row, col, n, _B16).view(np.uint16).astype(np.uint32) << 16).view(np.float32))
    return load


def _sim_h16_load(n):
    """The stand-in of an ``n``-value float16 load (``ld_h16x2``, ``ld_h16x8``)."""
    def load(a, row, col):
        return tuple(_span(a, row, col, n, _F16).astype(np.float32))
    return load


_sim_ld_b16x2, _sim_ld_b16x8 = _sim_b16_load(2), _sim_b16_load(8)
_sim_ld_h16x2, _sim_ld_h16x8 = _sim_h16_load(2), _sim_h16_load(8)


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


_sim_st_b16x2, _sim_st_b16x4, _sim_st_b16x8 = _sim_b16_store(2), _sim_b16_store(4), _sim_b16_store(8)
_sim_st_h16x2, _sim_st_h16x4, _sim_st_h16x8 = _sim_h16_store(2), _sim_h16_store(4), _sim_h16_store(8)


def _sim_ld_b16(a, row, col):
    return (_span(a, row, col, 1, _B16).view(np.uint16).astype(np.uint32) << 16).view(np.float32)[0]


def _sim_st_b16(a, row, col, v):
    out = _span(a, row, col, 1, _B16)
    out[:] = bf16_bits(_f32(v)).view(out.dtype)


def _sim_st_h16(a, row, col, v):
    _span(a, row, col, 1, _F16)[:] = f16_bits(_f32(v)).view(np.float16)


def _sim_st_e4m3x4(a, row, col, v0, v1, v2, v3):
    out = _span(a, row, col, 4, _U8)
    out[:] = e4m3_bits(_f32([v0, v1, v2, v3])).view(out.dtype)


def _sim_ld_e4m3(a, row, col):
    return e4m3_values(_span(a, row, col, 1, _U8).view(np.uint8))[0]


def _sim_ld_e4m3x16(a, row, col):
    return tuple(e4m3_values(_span(a, row, col, 16, _U8).view(np.uint8)))


def _sim_ld_f32x4_nc(a, row, col):
    return _sim_ld_f32x4(a, row, col)


def _load128(context, builder, sig, args, element, invariant=False):
    """The 16 bytes at ``&a[row, col]`` as one ``<4 x element>`` load; ``invariant`` makes it ``ld.global.nc``."""
    v = builder.load(_pointer(context, builder, sig, args, ir.VectorType(element, 4)), align=16)
    if invariant:  # NVPTX selects the non-coherent path for invariant loads from the global space
        v.set_metadata("invariant.load", builder.module.add_metadata([]))
    return v


def _store_sig(name, a, dtypes, row, col, count):
    _check(name, a, dtypes, row, col)
    return types.void(a, row, col, *([types.float32] * count))


def _f32x4_load(name, invariant, a, row, col):
    """Signature and code of a four-float32 load (plain or non-coherent)."""
    _check(name, a, (types.float32,), row, col)

    def codegen(context, builder, sig, args):
        v = _load128(context, builder, sig, args, ir.FloatType(), invariant)
        return context.make_tuple(builder, sig.return_type, _elements(builder, v))
    return types.UniTuple(types.float32, 4)(a, row, col), codegen


def _f32_store(name, a, row, col, count):
    """Signature and code of a store of ``count`` float32 (2 or 4) as one vector, aligned to its size."""
    def codegen(context, builder, sig, args):
        p = _pointer(context, builder, sig, args, ir.VectorType(ir.FloatType(), count))
        builder.store(_vector(builder, list(args[3:])), p, align=4 * count)
        return context.get_dummy_value()
    return _store_sig(name, a, (types.float32,), row, col, count), codegen


def _packed_store(name, kind, dtypes, a, row, col, count=8):
    """Signature and code of a ``count``-value store (8: 16 bytes; 4: 8 bytes; 2: 4 bytes) rounded pairwise to
    ``kind`` (``bf16`` or ``f16``)."""
    def codegen(context, builder, sig, args):
        v = args[3:]
        packed = [_pack(builder, kind, v[k], v[k + 1]) for k in range(0, count, 2)]
        if count == 2:
            builder.store(packed[0], _pointer(context, builder, sig, args, ir.IntType(32)), align=4)
        else:
            words = _vector(builder, packed)
            builder.store(words, _pointer(context, builder, sig, args, ir.VectorType(ir.IntType(32), count // 2)),
                          align=2 * count)
        return context.get_dummy_value()
    return _store_sig(name, a, dtypes, row, col, count), codegen


def _scalar_store(name, kind, dtypes, a, row, col):
    """Signature and code of a one-value store rounded to ``kind`` (``bf16`` or ``f16``) with ``cvt.rn``."""
    def codegen(context, builder, sig, args):
        bits = _asm(builder, ir.IntType(16), f"cvt.rn.{kind}.f32 $0, $1;", "=h,f", [args[3]])
        builder.store(bits, _pointer(context, builder, sig, args, ir.IntType(16)), align=2)
        return context.get_dummy_value()
    return _store_sig(name, a, dtypes, row, col, 1), codegen


@_device(_sim_ld_f32x4)
def ld_f32x4(typingctx, a, row, col):
    """``a[row, col:col+4]`` of a float32 array as a 4-tuple, one 128-bit load (``ld.global.v4.f32``)."""
    return _f32x4_load("ld_f32x4", False, a, row, col)


@_device(_sim_ld_f32x4_nc)
def ld_f32x4_nc(typingctx, a, row, col):
    """``ld_f32x4`` through the read-only, non-coherent cache (``ld.global.nc.v4.f32``, from an LLVM invariant
    load): ``a`` must not be written while the kernel runs."""
    return _f32x4_load("ld_f32x4_nc", True, a, row, col)


def _chunk_load(name, kind, dtypes, a, row, col, words=4):
    """Signature and code of a load of ``words`` 32-bit words of ``a[row, col:…]`` (4: one 16-byte load; 1: one
    4-byte load), aligned to its size, decoded to float32 by its stored type ``kind``
    (:data:`~.lowering.CHUNK_DECODERS`)."""
    _check(name, a, dtypes, row, col)

    def codegen(context, builder, sig, args):
        if words == 4:
            loaded = _elements(builder, _load128(context, builder, sig, args, ir.IntType(32)))
        else:
            loaded = [builder.load(_pointer(context, builder, sig, args, ir.IntType(32)), align=4)]
        return context.make_tuple(builder, sig.return_type, CHUNK_DECODERS[kind](builder, loaded))
    return types.UniTuple(types.float32, (4 if kind == "e4m3" else 2) * words)(a, row, col), codegen


@_device(_sim_ld_b16x2)
def ld_b16x2(typingctx, a, row, col):
    """The two bfloat16 patterns ``a[row, col:col+2]`` as a float32 pair, one 32-bit load (4-byte aligned)."""
    return _chunk_load("ld_b16x2", "bfloat16", _B16_TYPES, a, row, col, words=1)


@_device(_sim_ld_h16x2)
def ld_h16x2(typingctx, a, row, col):
    """The two float16 ``a[row, col:col+2]`` as a float32 pair, one 32-bit load (4-byte aligned)."""
    return _chunk_load("ld_h16x2", "float16", (types.float16,), a, row, col, words=1)


@_device(_sim_ld_b16x8)
def ld_b16x8(typingctx, a, row, col):
    """The eight bfloat16 patterns ``a[row, col:col+8]`` (uint16/int16) as a float32 8-tuple, one 128-bit load
    (``ld.global.v4.u32``); decoding is exact: the pattern shifted into the upper half."""
    return _chunk_load("ld_b16x8", "bfloat16", _B16_TYPES, a, row, col)


@_device(_sim_ld_h16x8)
def ld_h16x8(typingctx, a, row, col):
    """The eight float16 ``a[row, col:col+8]`` as a float32 8-tuple (exact), one 128-bit load."""
    return _chunk_load("ld_h16x8", "float16", (types.float16,), a, row, col)


@_device(_sim_st_f32x4)
def st_f32x4(typingctx, a, row, col, v0, v1, v2, v3):
    """Store four float32 at ``a[row, col:col+4]``, one 128-bit store (``st.global.v4.f32``)."""
    return _f32_store("st_f32x4", a, row, col, 4)


@_device(_sim_st_f32x2)
def st_f32x2(typingctx, a, row, col, v0, v1):
    """Store two float32 at ``a[row, col:col+2]``, one 64-bit store (``st.global.v2.f32``; ``col`` even on a row of
    an even pitch)."""
    return _f32_store("st_f32x2", a, row, col, 2)


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


@_device(_sim_st_b16x4)
def st_b16x4(typingctx, a, row, col, v0, v1, v2, v3):
    """Round four float32 to bfloat16 (``cvt.rn.bf16x2.f32``) and store their patterns at ``a[row, col:col+4]``
    (uint16/int16), one 64-bit store (``col`` a multiple of 4 on a row of a pitch of 4)."""
    return _packed_store("st_b16x4", "bf16", _B16_TYPES, a, row, col, 4)


@_device(_sim_st_h16x4)
def st_h16x4(typingctx, a, row, col, v0, v1, v2, v3):
    """Round four float32 to float16 and store them at ``a[row, col:col+4]``, one 64-bit store (``col`` a multiple
    of 4 on a row of a pitch of 4)."""
    return _packed_store("st_h16x4", "f16", (types.float16,), a, row, col, 4)


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
    return _chunk_load("ld_e4m3x16", "e4m3", (types.uint8, types.int8), a, row, col)


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
