"""Arithmetic intrinsics of the generated CUDA kernels (re-exported by :mod:`.intrinsics`): ``ex2.approx`` and the
exponential on it, the approximate division and square root without slow paths, NaN-propagating min and max, a
branch-free select, the compiler barriers ``fresh`` and ``uniform``, FP8 e4m3 rounding, and a once-rounded FMA. Each
is a ``numba.cuda`` intrinsic on the GPU and a plain-Python stand-in of the same semantics under the simulator."""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
from llvmlite import ir
from numba import types

from .formats import _f32, e4m3_bits, e4m3_values
from .lowering import SIMULATOR, _asm, _device, _e4m3_halves, _e4m3_pair, _number

if not SIMULATOR:
    from .lowering import TypingError


LOG2E = np.float32(1.4426950408889634)


_FLT_MIN = np.float32(2.0 ** -126)


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


#: :data:`_F32_OVERFLOW` as a float (exact: 2**128 - 2**103 has 25 significant bits).
_F32_OVERFLOW_FLOAT = float(_F32_OVERFLOW)
#: A float64's bytes, little-endian: the first one's last bit is the significand's.
_FLOAT64 = struct.Struct("<d")


def _sim_fma32(a, b, c):
    """``a * b + c`` of float32 values rounded once to float32, to nearest even, as ``fma.rn.f32`` computes it.

    In float64 without fractions: the product of two float32 is exact (48 significant bits, its exponent far inside
    float64's range), and the sum ``s`` with its error ``e`` (Knuth's TwoSum: ``s + e`` is ``a * b + c`` exactly).
    The sum rounded to odd (``s`` when exact or odd, else its neighbour towards ``e``: the value keeps, in its last bit,
    whether anything was dropped) has 53 bits, at least twice float32's 24 plus two, so rounding it to float32 to
    nearest even rounds the exact sum once (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums: proved
    algorithms using rounding to odd", 2008). The float64 value is compared with :data:`_F32_OVERFLOW` before the cast
    (the odd rounding never crosses it: it is a float64 with its last bit even). ``_round_f32`` of the exact
    fraction is the reference it is tested against."""
    a, b, c = float(np.float32(a)), float(np.float32(b)), float(np.float32(c))
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        with np.errstate(all="ignore"):  # infinities and NaN by IEEE's rules (the product of finite values exact)
            return np.float32(np.float64(a) * np.float64(b) + np.float64(c))
    p = a * b
    s = p + c
    z = s - p
    e = (p - (s - z)) + (c - z)
    if s == 0 and e == 0:  # an exact zero: -0 only where both terms are zeros of that sign
        negative = (a == 0 or b == 0) and c == 0 and math.copysign(1, a) != math.copysign(1, b) \
            and math.copysign(1, c) < 0
        return np.float32(-0.0 if negative else 0.0)
    if e != 0 and not _FLOAT64.pack(s)[0] & 1:  # inexact and even (its lowest byte's last bit): the odd neighbour
        s = math.nextafter(s, math.inf if e > 0 else -math.inf)
    if abs(s) >= _F32_OVERFLOW_FLOAT:
        return np.float32(math.copysign(math.inf, s))
    return np.float32(s)


def _ex2(builder, x):
    return _asm(builder, ir.FloatType(), "ex2.approx.ftz.f32 $0, $1;", "=f,f", [x])


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
