"""The hardware intrinsics: their simulator stand-ins against exact references, their sm_90 PTX.

This process runs the CUDA simulator (see conftest), so kernels here call the Python stand-ins; the
real intrinsics are compiled to PTX in a subprocess. The references below are written independently
of the module: rounding is done by search over the decoded values of the target format, in exact
(float64) arithmetic, ties going to the even code.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda, uint16

from redalgebra.runtime import intrinsics as rt
from redalgebra.runtime import tensor_cores as tc
from redalgebra.runtime.intrinsics import (
    bf16_bits, e4m3, e4m3_bits, e4m3_values, ex2, f16_bits, fast_exp, ld_b16, ld_b16x8, ld_e4m3, ld_e4m3x16, ld_f32x4,
    ld_f32x4_nc, ld_h16x8, max_nan,
    min_nan, st_b16,
    st_b16x8, st_e4m3x4, st_f32x2, st_f32x4, st_h16, st_h16x8,
)

THREADS = 8  # simulator threads are Python threads: few of them, each looping over its vectors


# ---------------------------------------------------------------------------------------------- references
def _format_values(mant_bits, emin, codes):
    """Magnitude of every non-negative code of a binary format with ``mant_bits`` stored bits and minimum
    normal exponent ``emin`` (exponent field 0 = subnormal); the top exponent is decoded like any other."""
    values = []
    for c in codes:
        e, m = c >> mant_bits, c & ((1 << mant_bits) - 1)
        frac = m / (1 << mant_bits)
        values.append(math.ldexp(frac, emin) if e == 0 else math.ldexp(1 + frac, emin + e - 1))
    return np.array(values)


def _nearest_code(mag, values):
    """The code of ``values`` (ascending, exact) nearest to ``mag``; a tie goes to the even code."""
    i = int(np.searchsorted(values, mag))
    if i == 0:
        return 0
    if i == len(values):
        return len(values) - 1
    lo, hi = values[i - 1], values[i]
    if mag - lo != hi - mag:
        return i - 1 if mag - lo < hi - mag else i
    return i - 1 if (i - 1) % 2 == 0 else i


_BF16 = _format_values(7, -126, range(0x7F81))  # up to 2^128: the rounding target just past the largest finite
_F16 = _format_values(10, -14, range(0x7C01))  # up to 2^16
_E4M3 = _format_values(3, -6, range(0x7F))  # 0 .. 448; 0x7F is NaN


def _reference_code(x, table, nan, inf, sign, largest=None):
    """The code of float32 ``x`` in a format whose finite values are ``table``: nearest, ties to even,
    NaN -> ``nan``; infinities -> ``inf`` (or, with ``largest``, magnitudes clamped to it first)."""
    x = np.float32(x)
    if np.isnan(x):
        return nan
    if largest is not None:
        code = _nearest_code(min(abs(float(x)), largest), table)
    else:
        code = inf if np.isinf(x) else _nearest_code(abs(float(x)), table)
    return code | (sign if np.signbit(x) else 0)


def ref_bf16(x):
    """bfloat16 pattern of float32 ``x``: past the largest finite -> inf, NaN -> 0x7FFF."""
    return _reference_code(x, _BF16, 0x7FFF, 0x7F80, 0x8000)


def ref_f16(x):
    """float16 pattern of float32 ``x``, the same way (0x7C00 is inf)."""
    return _reference_code(x, _F16, 0x7FFF, 0x7C00, 0x8000)


def ref_e4m3(x):
    """e4m3 byte of float32 ``x``: magnitudes clamped to 448 first (saturation)."""
    return _reference_code(x, _E4M3, 0x7F, None, 0x80, largest=448.0)


def e4m3_value(code):
    """The value of an e4m3 byte (NaN for 0x7F and 0xFF)."""
    sign, mag = (-1.0 if code & 0x80 else 1.0), code & 0x7F
    return math.nan if mag == 0x7F else sign * _E4M3[mag]


def f32(bits):
    return np.array(bits, np.uint32).view(np.float32)


def tricky_bf16():
    """float32 values at every kind of bfloat16 rounding decision."""
    tops = np.array([0x0000, 0x0001, 0x0002, 0x007F, 0x3F80, 0x3F81, 0x4049, 0x7F7E, 0x7F7F], np.uint32)
    lows = np.array([0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)  # below, at, above the tie
    grid = (tops[:, None] << 16 | lows[None, :]).ravel()
    nan_inf = np.array([0x7F800000, 0x7F800001, 0x7F808000, 0x7FC00000, 0x7FFFFFFF, 0x7FBFFFFF], np.uint32)
    bits = np.concatenate([grid, nan_inf])
    bits = np.concatenate([bits, bits | 0x80000000])  # and their negatives (-0, -inf, -nan)
    return np.concatenate([f32(bits), np.random.default_rng(1).standard_normal(200).astype(np.float32) * 50])


def tricky_f16():
    """float32 values at float16 ties, its subnormals, its overflow edge (65504 / 65520) and specials."""
    ties = (_F16[1:] + _F16[:-1]) / 2
    picks = np.concatenate([ties[:40], ties[1000:1040], ties[-40:], _F16[:20], _F16[-20:]])
    edges = [65504, 65519.996, 65520, 65536, 1e30, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26, 2.0 ** -26, 1e-30, 0.0,
             np.inf, np.nan, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 2049.0, 2051.0]
    values = np.concatenate([np.concatenate([picks, edges]).astype(np.float32), f32([0x7F800001, 0x7FBFFFFF])])
    values = np.concatenate([values, -values, np.random.default_rng(2).standard_normal(100).astype(np.float32)])
    return values[: len(values) // 8 * 8]


def tricky_e4m3():
    """Every e4m3 value, every midpoint (ties), the saturation edge, tiny values and specials."""
    mids = (_E4M3[1:] + _E4M3[:-1]) / 2
    edges = [448, 449, 463.99, 464, 465, 480, 1e30, np.inf, np.nan, 2.0 ** -10, 3 * 2.0 ** -10, 2.0 ** -11, 1e-30,
             2.0 ** -6 * 1.0625, 0.0]
    values = np.concatenate([_E4M3, mids, edges, np.nextafter(mids, 0), np.nextafter(mids, 1000)]).astype(np.float32)
    values = np.concatenate([values, f32([0x7F800001, 0x7FBFFFFF, 0x00000001, 0x007FFFFF])])  # sNaN, subnormals
    values = np.concatenate([values, -values, np.random.default_rng(3).standard_normal(100).astype(np.float32) * 40])
    return values[: len(values) // 4 * 4]


# ---------------------------------------------------------------------------------------------- kernels
@cuda.jit
def copy_f32x4(a, nc, out, pairs):
    for r in range(a.shape[0]):
        for c in range(4 * cuda.threadIdx.x, a.shape[1], 4 * cuda.blockDim.x):
            x0, x1, x2, x3 = ld_f32x4_nc(a, r, c) if nc else ld_f32x4(a, r, c)
            if pairs:
                st_f32x2(out, r, c, x0, x1)
                st_f32x2(out, r, c + 2, x2, x3)
            else:
                st_f32x4(out, r, c, x0, x1, x2, x3)


@cuda.jit
def widen16(a, bf16, out):
    for r in range(a.shape[0]):
        for c in range(8 * cuda.threadIdx.x, a.shape[1] - 7, 8 * cuda.blockDim.x):  # whole octets only
            v = ld_b16x8(a, r, c) if bf16 else ld_h16x8(a, r, c)
            for k in range(8):
                out[r, c + k] = v[k]


@cuda.jit
def narrow16(x, bf16, out):
    for c in range(8 * cuda.threadIdx.x, x.shape[1], 8 * cuda.blockDim.x):
        v0, v1, v2, v3, v4, v5, v6, v7 = ld_f32x4(x, 0, c) + ld_f32x4(x, 0, c + 4)
        if bf16:
            st_b16x8(out, 0, c, v0, v1, v2, v3, v4, v5, v6, v7)
        else:
            st_h16x8(out, 0, c, v0, v1, v2, v3, v4, v5, v6, v7)


@cuda.jit
def scalars16(x, bits, ob, oh, back):
    for c in range(cuda.threadIdx.x, x.shape[1], cuda.blockDim.x):
        st_b16(ob, 0, c, x[0, c])
        st_h16(oh, 0, c, x[0, c])
        back[0, c] = ld_b16(bits, 0, c)


@cuda.jit
def to_e4m3(x, scalar, packed):
    for c in range(4 * cuda.threadIdx.x, x.shape[1], 4 * cuda.blockDim.x):
        for k in range(4):
            scalar[0, c + k] = e4m3(x[0, c + k])
        st_e4m3x4(packed, 0, c, x[0, c], x[0, c + 1], x[0, c + 2], x[0, c + 3])


@cuda.jit
def exponentials(x, two, e):
    for i in range(cuda.threadIdx.x, x.shape[0], cuda.blockDim.x):
        two[i] = ex2(x[i])
        e[i] = fast_exp(x[i])


def row(values):
    return np.ascontiguousarray(np.asarray(values, np.float32)[None, :])


# ---------------------------------------------------------------------------------------------- loads
@pytest.mark.parametrize("nc,pairs", [(False, False), (True, False), (False, True)])
def test_f32x4_loads_and_stores_copy_every_bit(rng, nc, pairs):
    a = rng.standard_normal((3, 32)).astype(np.float32)
    a[0, :6] = [np.nan, -np.inf, np.inf, -0.0, 1e-45, f32(0x7FA00001)]  # payloads and signs travel untouched
    out = np.zeros_like(a)
    copy_f32x4[1, THREADS](a, nc, out, pairs)  # pairs: two 64-bit stores
    np.testing.assert_array_equal(out.view(np.uint32), a.view(np.uint32))


@pytest.mark.parametrize("dtype", [np.uint16, np.int16])
def test_bf16_octets_decode_as_a_shift_of_the_pattern(rng, dtype):
    bits = rng.integers(0, 1 << 16, (2, 64), dtype=np.uint32).astype(np.uint16)
    bits[0, :8] = [0x7F80, 0xFF80, 0x7FC1, 0x0001, 0x8000, 0x3F80, 0x7F7F, 0x0080]  # inf, nan, subnormal, ...
    out = np.zeros(bits.shape, np.float32)
    widen16[1, THREADS](bits.view(dtype), True, out)
    np.testing.assert_array_equal(out.view(np.uint32), bits.astype(np.uint32) << 16)
    assert out[0, 0] == np.inf and out[0, 5] == 1.0 and np.isnan(out[0, 2])


def test_f16_octets_widen_exactly(rng):
    h = np.concatenate([rng.standard_normal(48), [6e-8, -6e-8, 65504, np.inf, -np.inf, np.nan, 0.0, -0.0]])
    h = h.astype(np.float16).reshape(2, 28)
    out = np.zeros(h.shape, np.float32)
    with pytest.raises(ValueError, match="misaligned 128-bit access at \\[1, "):  # rows of 56 bytes
        widen16[1, THREADS](h, False, out)
    h = np.concatenate([h, np.ones((2, 4), np.float16)], axis=1)
    out = np.zeros(h.shape, np.float32)
    widen16[1, THREADS](h, False, out)
    want = h.astype(np.float32)
    assert ((out == want) | (np.isnan(out) & np.isnan(want))).all()
    np.testing.assert_array_equal(np.signbit(out), np.signbit(want))


# ---------------------------------------------------------------------------------------------- rounding
def test_bf16_stores_round_to_nearest_even_bit_exactly():
    x = tricky_bf16()
    want = np.array([ref_bf16(v) for v in x], np.uint16)
    packed, single = np.zeros((1, len(x)), np.uint16), np.zeros((1, len(x)), np.uint16)
    narrow16[1, THREADS](row(x), True, packed)
    scalars16[1, THREADS](row(x), np.zeros((1, len(x)), np.uint16), single, np.zeros((1, len(x)), np.float16),
                          np.zeros((1, len(x)), np.float32))
    for got in (packed[0], single[0], bf16_bits(x)):
        bad = got != want
        assert not bad.any(), f"{x.view(np.uint32)[bad][:4]} -> {got[bad][:4]}, want {want[bad][:4]}"
    truncated = (x.view(np.uint32) >> 16).astype(np.uint16)
    assert (want == truncated + 1).sum() > 30 and (want == truncated).sum() > 30  # ties went both ways
    assert (want == 0x7F80).sum() >= 4 and (want == 0x7FFF).sum() == np.isnan(x).sum() == 10  # up to inf; NaN canonical


def test_f16_stores_round_to_nearest_even_bit_exactly():
    x = tricky_f16()
    want = np.array([ref_f16(v) for v in x], np.uint16)
    packed, single = np.zeros((1, len(x)), np.float16), np.zeros((1, len(x)), np.float16)
    narrow16[1, THREADS](row(x), False, packed)
    scalars16[1, THREADS](row(x), np.zeros((1, len(x)), np.uint16), np.zeros((1, len(x)), np.uint16), single,
                          np.zeros((1, len(x)), np.float32))
    for got in (packed[0].view(np.uint16), single[0].view(np.uint16), f16_bits(x)):
        bad = got != want
        assert not bad.any(), f"{x[bad][:4]} -> {got[bad][:4]}, want {want[bad][:4]}"
    assert {0x7BFF, 0x7C00, 0x0001, 0x8001, 0x7FFF} <= set(want.tolist())  # max finite, inf, subnormals, NaN


def test_scalar_bf16_load_decodes_the_pattern(rng):
    bits = rng.integers(0, 1 << 16, (1, 40), dtype=np.uint32).astype(np.uint16)
    back = np.zeros(bits.shape, np.float32)
    scalars16[1, THREADS](np.zeros(bits.shape, np.float32), bits, np.zeros_like(bits),
                          np.zeros(bits.shape, np.float16), back)
    np.testing.assert_array_equal(back.view(np.uint32), bits.astype(np.uint32) << 16)


def test_e4m3_every_code_round_trips():
    codes = np.arange(256)
    values = np.array([e4m3_value(c) for c in codes], np.float32)
    got = np.zeros((1, 256), np.uint8)
    to_e4m3[1, THREADS](row(values), got, np.zeros((1, 256), np.uint8))
    nan = np.isnan(values)
    assert nan.sum() == 2 and (got[0, nan] == 0x7F).all()
    np.testing.assert_array_equal(got[0, ~nan], codes[~nan])
    assert values[0x7E] == 448 and values[0x01] == 2.0 ** -9 and values[0x08] == 2.0 ** -6


@cuda.jit
def from_e4m3(codes, wide, one):
    r = cuda.blockIdx.x
    c = 16 * cuda.threadIdx.x
    v = ld_e4m3x16(codes, r, c)
    for k in range(16):
        wide[r, c + k] = v[k]
        one[r, c + k] = ld_e4m3(codes, r, c + k)


def test_e4m3_loads_decode_every_code_exactly():
    codes = np.arange(256, dtype=np.uint8).reshape(2, 128)
    want = np.array([e4m3_value(c) for c in range(256)], np.float32).reshape(2, 128)
    wide, one = np.zeros((2, 128), np.float32), np.zeros((2, 128), np.float32)
    from_e4m3[2, 8](codes, wide, one)
    for got in (wide, one, e4m3_values(codes)):
        np.testing.assert_array_equal(got, want)  # NaN where NaN
        assert np.array_equal(np.signbit(got), np.signbit(want))  # -0 is 0x80


def test_fragment_pairs_interleave_two_rows_columns_and_loads_read_words():
    data = np.arange(256, dtype=np.uint8).reshape(1, 16, 16)  # 16 rows (k) of 16 e4m3 bytes (columns)
    value = np.array([e4m3_value(c) for c in range(256)], np.float32).reshape(16, 16)
    for k, c in ((0, 0), (2, 4), (6, 12)):
        lo, hi = tc.ld_w4_at(data, 16 * k)[c // 4], tc.ld_w4_at(data, 16 * (k + 1))[c // 4]
        for j, word in enumerate(tc.e4m3_pairs(lo, hi)):  # column c + j: rows k (low half) and k + 1
            halves = np.array([int(word) & 0xFFFF, int(word) >> 16], np.uint16).view(np.float16)
            np.testing.assert_array_equal(halves.astype(np.float32), value[[k, k + 1], c + j])
    b16 = np.arange(64, dtype=np.uint16).reshape(4, 16)
    w0, w1 = tc.ld_w4_at(b16, 0), tc.ld_w4_at(b16, 16)  # rows 0 and 1, columns 0-7
    assert [int(v) for v in tc.b16_pairs(w0[2], w1[2])] == [4 | 20 << 16, 5 | 21 << 16]
    assert [int(v) for v in tc.b16_pairs(w0[3], w1[3])] == [6 | 22 << 16, 7 | 23 << 16]
    with pytest.raises(IndexError, match="misaligned or outside"):
        tc.ld_w4_at(data, 8)  # 16 bytes from byte 8: not 16-byte aligned
    with pytest.raises(IndexError, match="misaligned or outside"):
        tc.ld_w4_at(b16, 60)  # 16 bytes from the last 8
    with pytest.raises(TypeError, match="C-contiguous"):
        tc.ld_w4_at(np.zeros(8, np.float32), 0)
    # bytes 32 … 47 (row 2) as little-endian words; on the GPU the same load, not kept in L1
    assert [int(w) for w in tc.ld_w4_stream_at(data, 32)] == [int.from_bytes(bytes(range(32 + 4 * q, 36 + 4 * q)),
                                                                               "little") for q in range(4)]
    # bytes 40 … 47 as two words (an 8-byte load); 8 bytes from byte 36 are not 8-byte aligned
    assert [int(w) for w in tc.ld_w2_stream_at(data, 40)] == [int.from_bytes(bytes(range(40 + 4 * q, 44 + 4 * q)),
                                                                               "little") for q in range(2)]
    with pytest.raises(IndexError, match="misaligned or outside"):
        tc.ld_w2_stream_at(data, 36)
    out = np.zeros((2, 8), np.uint16)
    tc.st_w2_at(out, 12, np.uint32(1 | 2 << 16), np.uint32(3 | 4 << 16))  # row 1, columns 4-7
    assert out[1].tolist() == [0, 0, 0, 0, 1, 2, 3, 4] and not out[0].any()
    with pytest.raises(IndexError, match="misaligned or outside"):
        tc.st_w2_at(out, 2, 0, 0)
    with pytest.raises(IndexError, match="misaligned or outside"):
        tc.st_w2_at(out, 16, 0, 0)
    # four words into 16 bytes (bytes, e4m3 rows): row 1 of a 2 x 32 byte array from byte 16; 16-byte aligned only
    rows = np.zeros((2, 32), np.uint8)
    tc.st_w4_at(rows, 48, *(np.uint32(int.from_bytes(bytes(range(4 * q, 4 * q + 4)), "little")) for q in range(4)))
    assert rows[1, 16:].tolist() == list(range(16)) and not rows[0].any() and not rows[1, :16].any()
    with pytest.raises(IndexError, match="misaligned or outside"):
        tc.st_w4_at(rows, 8, 0, 0, 0, 0)


def test_e4m3_rounds_ties_to_even_and_saturates():
    x = tricky_e4m3()
    want = np.array([ref_e4m3(v) for v in x], np.uint8)
    scalar, packed = np.zeros((1, len(x)), np.uint8), np.zeros((1, len(x)), np.uint8)
    to_e4m3[1, THREADS](row(x), scalar, packed)
    for got in (scalar[0], packed[0], e4m3_bits(x)):
        bad = got != want
        assert not bad.any(), f"{x[bad][:4]} -> {got[bad][:4]}, want {want[bad][:4]}"
    mids = (_E4M3[1:] + _E4M3[:-1]) / 2
    assert {e4m3_bits(m)[()] % 2 for m in mids} == {0}  # every tie went to the even code
    assert ref_e4m3(464.0) == ref_e4m3(1e30) == 0x7E and ref_e4m3(-np.inf) == 0xFE and ref_e4m3(-1e-30) == 0x80


# ---------------------------------------------------------------------------------------------- exponentials
def test_ex2_and_fast_exp():
    x = np.array([0.0, -0.0, -np.inf, np.inf, np.nan, 1.0, -1.0, 0.5, 10.25, -20.5, 127.5, 128.0, -126.0, -127.0,
                  -149.0, 1e-40, -87.0, 88.0], np.float32)
    x = np.concatenate([x, np.linspace(-30, 30, 62, dtype=np.float32)])
    two, e = np.zeros_like(x), np.zeros_like(x)
    exponentials[1, THREADS](x, two, e)
    assert two[0] == two[1] == e[0] == e[1] == two[15] == 1.0  # exactly one at 0 (and at a subnormal, ftz)
    assert two[2] == e[2] == 0.0 and two[3] == e[3] == np.inf and np.isnan(two[4]) and np.isnan(e[4])
    assert two[13] == two[14] == 0.0 and two[12] == np.float32(2.0 ** -126)  # .ftz: subnormal results flush
    finite = np.isfinite(x) & (two > 0) & np.isfinite(two)
    np.testing.assert_allclose(two[finite], np.exp2(x[finite].astype(np.float64)), rtol=2e-7)
    ok = np.isfinite(x) & (np.abs(x) < 80)
    np.testing.assert_allclose(e[ok], np.exp(x[ok].astype(np.float64)), rtol=2e-6)


def test_max_nan_and_min_nan_propagate_nan_from_either_side():
    nan, inf = np.float32(np.nan), np.float32(np.inf)
    for a, b in ((nan, 1.0), (1.0, nan), (-inf, nan), (nan, nan)):
        assert np.isnan(max_nan(a, b)) and np.isnan(min_nan(a, b))
    assert max_nan(np.float32(-inf), np.float32(2.0)) == 2.0 and min_nan(np.float32(inf), np.float32(-3.0)) == -3.0
    assert max_nan(np.float32(1.5), np.float32(-2.0)) == 1.5 and min_nan(np.float32(1.5), np.float32(-2.0)) == -2.0


# ---------------------------------------------------------------------------------------------- the contract
def test_stand_ins_enforce_the_alignment_and_bounds_contract():
    a = np.zeros((2, 12), np.float32)
    assert ld_f32x4(a, 1, 8) == (0.0, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="misaligned 128-bit"):
        ld_f32x4(a, 0, 2)
    with pytest.raises(IndexError):
        ld_f32x4(a, 0, 12)
    with pytest.raises(IndexError):
        st_f32x4(a, 2, 0, 1, 2, 3, 4)
    with pytest.raises(ValueError, match="misaligned 64-bit"):
        st_f32x2(a, 0, 1, 1, 2)
    with pytest.raises(IndexError):
        st_f32x2(a, 0, 11, 1, 2)
    with pytest.raises(TypeError, match="float32"):
        ld_f32x4(a.astype(np.float64), 0, 0)
    with pytest.raises(ValueError, match="misaligned 32-bit"):
        st_e4m3x4(np.zeros((1, 8), np.uint8), 0, 2, 1, 2, 3, 4)
    with pytest.raises(TypeError):
        ld_f32x4(a[:, ::2], 0, 0)  # not contiguous: the GPU's vector load would read the wrong elements


def test_a_3d_array_is_indexed_by_a_tuple_of_its_leading_dimensions():
    k = np.arange(2 * 3 * 8, dtype=np.float32).reshape(2, 3, 8)
    assert ld_f32x4(k, (1, 2), 4) == tuple(k[1, 2, 4:8])
    st_f32x4(k, (0, 1), 0, 9, 9, 9, 9)
    assert (k[0, 1, :4] == 9).all() and k[0, 1, 4] == 12 and k[0, 0, 3] == 3
    with pytest.raises(IndexError):
        ld_f32x4(k, (2, 0), 0)
    with pytest.raises(TypeError, match="need a 2-D .* got float32 \\(2, 3, 8\\)"):
        ld_f32x4(k, 1, 0)  # one integer names a row of a 2-D array only
    with pytest.raises(ValueError, match="misaligned 128-bit access at \\[1, 2, 2\\]"):
        ld_f32x4(k, (1, 2), 2)


@cuda.jit
def _tensor_core_tile(a, b, out, outt, words):
    """A 16x16 by 16x16 product two ways: K-major B (``ldsm_x4``) and row-major B (``ldsm_x4_t``), staged by cp.async."""
    sm = cuda.shared.array(0, uint16)
    lane = cuda.threadIdx.x
    if lane < 16:
        for half in range(2):
            tc.cp_async16(sm, lane * 24 + 8 * half, a, lane, 8 * half, 16)
            tc.cp_async16_at(sm, 384 + lane * 24 + 8 * half, b, 16 * lane + 8 * half, 16)  # by flat offset
    tc.cp_commit()
    tc.cp_wait0()
    cuda.syncthreads()
    a0, a1, a2, a3 = tc.ldsm_x4(sm, (lane & 15) * 24 + (lane >> 4) * 8)
    k0, k1, k2, k3 = tc.ldsm_x4(sm, 384 + ((lane & 7) + 8 * (lane >> 4)) * 24 + ((lane >> 3) & 1) * 8)
    v0, v1, v2, v3 = tc.ldsm_x4_t(sm, 384 + ((lane & 7) + 8 * ((lane >> 3) & 1)) * 24 + 8 * (lane >> 4))
    z = np.float32(0)
    g, t = lane >> 2, lane & 3
    for n, (b0, b1, dst) in enumerate(((k0, k1, out), (k2, k3, out), (v0, v1, outt), (v2, v3, outt))):
        d = tc.mma_bf16(a0, a1, a2, a3, b0, b1, z, z, z, z)
        col = 8 * (n & 1) + 2 * t
        dst[g, col], dst[g, col + 1], dst[g + 8, col], dst[g + 8, col + 1] = d[0], d[1], d[2], d[3]
    w = tc.pack_bf16x2(np.float32(1.5), np.float32(-2.25))
    lo, hi = tc.unpack_bf16x2(w)
    words[lane, 0], words[lane, 1] = lo, hi


def test_tensor_core_stand_ins_follow_the_ptx_fragment_layouts():
    # integers are exact in bfloat16 and in the float32 accumulators: A·Bᵀ from the K-major fragments, A·B from
    # the transposed ones; cp.async fills shared memory, pack/unpack round-trip
    rng = np.random.default_rng(3)
    a, b = (rng.integers(-4, 5, (16, 16)).astype(np.float32) for _ in range(2))
    out, outt, words = np.zeros((16, 16), np.float32), np.zeros((16, 16), np.float32), np.zeros((32, 2), np.float32)
    _tensor_core_tile[1, 32, 0, 2 * 2 * 16 * 24](bf16_bits(a), bf16_bits(b), out, outt, words)
    np.testing.assert_array_equal(out, a @ b.T)
    np.testing.assert_array_equal(outt, a @ b)
    assert (words == [1.5, -2.25]).all()


def test_cp_async16_at_reads_by_flat_offset_and_fills_zeros():
    a = np.arange(2 * 3 * 16, dtype=np.uint16).reshape(2, 3, 16)
    sm = np.full(32, 7, np.uint16)
    tc.cp_async16_at(sm, 8, a, 40, 16)  # element 40 in row-major order is a[0, 2, 8]
    tc.cp_async16_at(sm, 16, a, 40, 0)  # a source size of 0 reads nothing and writes zeros
    tc.cp_commit()
    assert (sm[8:24] == 7).all()  # (landed only at the wait that covers their group)
    tc.cp_wait0()
    assert (sm[8:16] == a[0, 2, 8:16]).all() and (sm[16:24] == 0).all() and (sm[:8] == 7).all()
    with pytest.raises(IndexError, match="misaligned or outside"):
        tc.cp_async16_at(sm, 0, a, 92, 16)  # 96 elements: 92 + 8 is past the end
    with pytest.raises(IndexError, match="misaligned or outside"):
        tc.cp_async16_at(sm, 0, a, 4, 16)


def test_cp_async16_at_copies_a_partial_source_and_zeros_the_rest():
    # a source size of 6 bytes: three 16-bit values, then zeros (the activations' last chunk of a row off the 8-value
    # grid); only those bytes need be inside the array
    a = np.arange(1, 21, dtype=np.uint16)
    sm = np.full(16, 7, np.uint16)
    tc.cp_async16_at(sm, 8, a, 16, 6)
    tc.cp_commit()
    tc.cp_wait0()
    assert (sm[8:11] == a[16:19]).all() and (sm[11:16] == 0).all() and (sm[:8] == 7).all()
    with pytest.raises(IndexError, match="misaligned"):
        tc.cp_async16_at(sm, 0, a, 16, 10)  # 10 bytes from element 16 leave an array of 20
    with pytest.raises(ValueError, match="whole 16-bit values"):
        tc.cp_async16_at(sm, 0, a, 0, 5)


def test_shared_chunks_load_and_store_as_four_words():
    sm = np.arange(24, dtype=np.uint16)
    w = tc.lds_w4(sm, 8)
    assert [int(x) for x in w] == [int(sm[8 + 2 * k]) | int(sm[9 + 2 * k]) << 16 for k in range(4)]
    tc.sts_w4(sm, 16, *w)
    assert (sm[16:24] == sm[8:16]).all()
    with pytest.raises(IndexError, match="misaligned or outside"):
        tc.lds_w4(sm, 4)


def test_the_module_is_the_simulator_version_here():
    assert rt.SIMULATOR and ld_f32x4.__name__ == "ld_f32x4" and "128-bit" in ld_f32x4.__doc__
    assert set(rt.__all__) >= {"ld_f32x4", "ld_f32x4_nc", "ld_b16x8", "ld_h16x8", "st_f32x4", "st_b16x8",
                               "st_h16x8", "ld_b16", "st_b16", "st_h16", "ex2", "fast_exp", "e4m3", "st_e4m3x4"}
    # the tensor-core intrinsics are exactly those a generated module imports (the generator's list)
    from redalgebra.codegen.tree import INTRINSICS, TENSOR_CORES

    assert tc.SIMULATOR and set(tc.__all__) == set(TENSOR_CORES) and set(INTRINSICS) <= set(rt.__all__)
    assert {"wgmma_sst_bf16", "wgmma_wait1", "e4m3_round"} <= set(TENSOR_CORES) | set(INTRINSICS)
    assert "div_full" in rt.__all__ and rt.div_full(1.0, 3.0) == np.float32(1.0) / np.float32(3.0)
    assert "sqrt_full" in rt.__all__ and rt.sqrt_full(2.0) == np.sqrt(np.float32(2.0)) and np.isnan(rt.sqrt_full(-1.0))
    assert rt.pick(True, 1.5, 2.5) == 1.5 and rt.pick(False, 1.5, 2.5) == 2.5


# ---------------------------------------------------------------------------------------------- PTX
PTX_SCRIPT = r"""
import json, re
from numba import cuda, types
from redalgebra.runtime.intrinsics import *

def everything(f, b, h, e, of, ob, oh, k):
    r = cuda.blockIdx.x
    c = 8 * cuda.threadIdx.x
    k0, k1, k2, k3, k4, k5, k6, k7 = ld_h16x8(k, (r, 2), c)  # a 3-D array: the leading dimensions as a tuple
    of[r, c + 9] = k0 + k7
    x0, x1, x2, x3 = ld_f32x4(f, r, c)
    y0, y1, y2, y3 = ld_f32x4_nc(f, r, c + 4)
    b0, b1, b2, b3, b4, b5, b6, b7 = ld_b16x8(b, r, c)
    h0, h1, h2, h3, h4, h5, h6, h7 = ld_h16x8(h, r, c)
    st_f32x4(of, r, c, ex2(b0), fast_exp(b1), b2 + h0, b3 + h1)
    st_b16x8(ob, r, c, y0, y1, y2, y3, b4, b5, b6, b7)
    st_h16x8(oh, r, c, x0, x1, x2, x3, h2, h3, h4, h5)
    st_e4m3x4(e, r, c, x2, x3, h6, h7)
    e[r, c + 4] = e4m3(b4)
    st_b16(ob, r, c + 8, ld_b16(b, r, c + 8))
    st_h16(oh, r, c + 8, y3)
    of[r, c + 8] = max_nan(x0, y0) + min_nan(x1, y1)
    st_f32x2(of, r, c + 10, y1, y2)

A = lambda t: types.Array(t, 2, "C")
ptx, _ = cuda.compile_ptx(everything, (A(types.float32), A(types.int16), A(types.float16), A(types.uint8),
                                       A(types.float32), A(types.uint16), A(types.float16),
                                       types.Array(types.float16, 3, "C")), cc=(9, 0))
lines = [ln.strip() for ln in ptx.splitlines() if not ln.strip().startswith("//")]

def count(pattern):
    return sum(bool(re.search(pattern, ln)) for ln in lines)

facts = {name: count(p) for name, p in {
    "target": r"^\.target sm_90\b", "ld_v4_f32": r"^ld\.global\.v4\.f32", "ld_nc_v4_f32": r"^ld\.global\.nc\.v4\.f32",
    "ld_v4_b32": r"^ld\.global(\.nc)?\.v4\.(u32|b32)", "st_v4_f32": r"^st\.global\.v4\.f32", "st_v2_f32": r"^st\.global\.v2\.f32",
    "st_v4_b32": r"^st\.global\.v4\.(u32|b32)", "st_b32": r"^st\.global\.(u32|b32)\b",
    "cvt_bf16x2": r"^cvt\.rn\.bf16x2\.f32", "cvt_f16x2": r"^cvt\.rn\.f16x2\.f32", "cvt_bf16": r"^cvt\.rn\.bf16\.f32",
    "cvt_f16": r"^cvt\.rn\.f16\.f32", "ex2": r"^ex2\.approx\.ftz\.f32", "e4m3x2": r"^cvt\.rn\.satfinite\.e4m3x2\.f32",
    "scalar_f32": r"^(ld|st)\.global\.f32\b", "local": r"\.local\b", "call": r"^(@%p\d+\s+)?call\b",
    "max_nan": r"^max\.NaN\.f32 %f\d+, %f\d+, %f\d+;", "min_nan": r"^min\.NaN\.f32 %f\d+, %f\d+, %f\d+;",
}.items()}

def bad(a):
    try:
        cuda.compile_ptx(lambda x, o: ld_b16x8(x, 0, 0), (a, A(types.float32)), cc=(9, 0))
    except Exception as err:
        return str(err)
    return ""

x = re.search(r"^ld\.global\.v4\.f32\s+\{(%f\d+), (%f\d+), (%f\d+), (%f\d+)\}", "\n".join(lines), re.M).groups()
y = re.search(r"^ld\.global\.nc\.v4\.f32\s+\{(%f\d+), (%f\d+), (%f\d+), (%f\d+)\}", "\n".join(lines), re.M).groups()
# cvt.rn.*x2.f32 d, a, b puts a in the upper half: the element of the higher address comes first
facts["high_first"] = [count(rf"^cvt\.rn\.{op} %\w+, {hi}, {lo};") for op, hi, lo in (
    ("bf16x2.f32", y[1], y[0]), ("bf16x2.f32", y[3], y[2]), ("f16x2.f32", x[1], x[0]), ("f16x2.f32", x[3], x[2]),
    ("satfinite.e4m3x2.f32", x[3], x[2]))]
# e4m3: sixteen bytes by one 128-bit load, a byte, and mma fragments from words of bytes (prmt to pair rows k and
# k + 1); every pair by cvt.rn.f16x2.e4m3x2; words by ld.global.nc.v4 (or past L1), stored by st.global.v2
from redalgebra.runtime.tensor_cores import b16_pairs, e4m3_pairs, ld_w2_stream_at, ld_w4_at, ld_w4_stream_at, st_w2_at

def e4m3_reads(e, o, q):
    r = cuda.blockIdx.x
    c = 16 * cuda.threadIdx.x
    v = ld_e4m3x16(e, r, c)
    o[r, c] = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7] + ld_e4m3(e, r, c + 1)
    o[r, c + 1] = v[8] + v[9] + v[10] + v[11] + v[12] + v[13] + v[14] + v[15]
    w = ld_w4_at(e, 16 * cuda.threadIdx.x)
    h = ld_w4_at(q, 8 * cuda.threadIdx.x)
    b = e4m3_pairs(w[0], w[1])
    p = b16_pairs(h[0], h[1])
    q[cuda.threadIdx.x] = b[0] + b[1] + b[2] + b[3] + p[0] + p[1]
    s = ld_w4_stream_at(e, 16 * cuda.threadIdx.x + 512)
    t = ld_w2_stream_at(e, 8 * cuda.threadIdx.x + 1024)
    st_w2_at(q, 4 * cuda.threadIdx.x + 64, s[0] + t[1], s[3] + t[0])

e4, _ = cuda.compile_ptx(e4m3_reads, (A(types.uint8), A(types.float32), types.Array(types.uint16, 1, "C")), cc=(9, 0))
e4 = [ln.strip() for ln in e4.splitlines() if not ln.strip().startswith("//")]
# (occurrences, not lines: the widening is one inline PTX block on one line)
facts["e4m3"] = [len(re.findall(p, "\n".join(e4))) for p in (
    r"\bcvt\.rn\.f16x2\.e4m3x2", r"\bld\.global(\.nc)?\.v4\.(u32|b32)",
    r"\bld\.global(\.nc)?\.u8", r"\bprmt\.b32", r"\.local\b", r"\bld\.global\.nc\.L1::no_allocate\.v4\.u32",
    r"\bst\.global\.v2\.(u32|b32)", r"\bld\.global\.nc\.L1::no_allocate\.v2\.u32")]
facts["rejects_float32"] = "ld_b16x8: needs a C-contiguous array of uint16/int16" in bad(A(types.float32))
# a 3-D array indexed by one integer row: refused while typing, not a wrong address
facts["rejects_one_row_of_3d"] = "takes a row of 2 integer(s)" in bad(types.Array(types.uint16, 3, "C"))
print(json.dumps(facts))
"""


def test_real_intrinsics_compile_to_single_vector_instructions_in_sm90_ptx():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run([sys.executable, "-c", PTX_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    want = {"target": 1, "ld_v4_f32": 1, "ld_nc_v4_f32": 1, "ld_v4_b32": 3, "st_v4_f32": 1, "st_v2_f32": 1, "st_v4_b32": 2,
            "st_b32": 1, "cvt_bf16x2": 4, "cvt_f16x2": 4, "cvt_bf16": 1, "cvt_f16": 1, "ex2": 2, "e4m3x2": 3,
            "scalar_f32": 2, "local": 0, "call": 0, "high_first": [1, 1, 1, 1, 1], "rejects_float32": True,
            "rejects_one_row_of_3d": True, "e4m3": [13, 3, 1, 4, 0, 1, 1, 1],
            "max_nan": 1, "min_nan": 1}
    assert facts == want


def _run_e4m3_ptx(text: str, *words: int) -> tuple:
    """Execute the PTX text of ``e4m3_pairs`` (or ``e4m3_halves``) on its 32-bit input words, instruction by
    instruction, as the PTX ISA defines ``prmt.b32`` (default mode), ``mov.b32 {lo, hi}`` and ``cvt.rn.f16x2.e4m3x2``
    (the low byte to the low half): an independent check of the text the GPU runs against the simulator's stand-in.
    The outputs are ``$0 …``, the inputs the operands after them."""
    import re

    outputs = 4 if len(words) == 2 else 2
    reg, out = {f"${outputs + k}": w for k, w in enumerate(words)}, {}

    def f16_of(byte):
        return int(f16_bits(np.array([e4m3_value(byte)], np.float32))[0])
    for ins in (s.strip() for s in text.strip("{}").split(";") if s.strip()):
        if ins.startswith(".reg"):
            continue
        if m := re.fullmatch(r"prmt\.b32 (p\d), (\$\d), (\$\d), 0x([0-9a-f]{4})", ins):
            pool = [(reg[m[2]] >> (8 * i)) & 0xFF for i in range(4)] + [(reg[m[3]] >> (8 * i)) & 0xFF for i in range(4)]
            sel = int(m[4], 16)
            reg[m[1]] = sum(pool[(sel >> (4 * i)) & 7] << (8 * i) for i in range(4))
        elif m := re.fullmatch(r"mov\.b32 \{(h\d), (h\d)\}, (p\d|\$\d)", ins):
            reg[m[1]], reg[m[2]] = reg[m[3]] & 0xFFFF, reg[m[3]] >> 16
        elif m := re.fullmatch(r"cvt\.rn\.f16x2\.e4m3x2 \$(\d), (h\d)", ins):
            out[int(m[1])] = f16_of(reg[m[2]] & 0xFF) | (f16_of(reg[m[2]] >> 8) << 16)
        else:
            raise AssertionError(f"an instruction this check does not know: {ins}")
    return tuple(out[k] for k in range(outputs))


def test_e4m3_pairs_and_halves_ptx_compute_what_their_stand_ins_compute(rng):
    words = rng.integers(0, 2 ** 32, size=(16, 2), dtype=np.uint64).astype(np.uint32)
    words[:] = np.where((words.view(np.uint8) & 0x7F) == 0x7F, 0, words.view(np.uint8)).view(np.uint32)  # (no NaN:
    # its float16 pattern is the format's, compared as bits below)
    for lo, hi in words:
        want = tuple(int(w) for w in tc.e4m3_pairs(lo, hi))
        assert _run_e4m3_ptx(tc.E4M3_PAIRS_PTX, int(lo), int(hi)) == want
        assert _run_e4m3_ptx(tc.E4M3_HALVES_PTX, int(lo)) == tuple(int(w) for w in tc.e4m3_halves(lo))
