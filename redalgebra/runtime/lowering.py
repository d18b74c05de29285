"""The machinery of the generated kernels' intrinsics (:mod:`.memory`, :mod:`.arithmetic`, :mod:`.tensor_cores`):
:func:`_device`, which makes a typer a ``numba.cuda`` intrinsic on the GPU and its plain-Python stand-in under the
simulator; the typing checks; the llvmlite helpers that address an element and emit inline PTX; and the stand-ins'
checked view of an array (:func:`_span`). No intrinsic is defined here."""

from __future__ import annotations

import math
import weakref
from types import SimpleNamespace

import numpy as np
from llvmlite import ir
from numba import config, types

from .formats import _f32

SIMULATOR = bool(config.ENABLE_CUDASIM)


def _sim_exp(x):
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


_F32_LIMIT = float(np.finfo(np.float32).max) + 2.0 ** 103  # where rounding to nearest float32 gives inf


def _in_float32(f):
    """``f`` whose result is rounded to float32 where an argument is a float32 (and none a float64), as the GPU's
    float32 function gives it: Python's ``math`` returns float64, which a simulated register would then hold (a
    float32 softmax's tiny ``exp`` kept apart from the 0 it is on the GPU, and ranked otherwise by a top-k)."""
    def to_f32(y):  # (formats._f32 for a value past float32's range: inf, silently; its errstate costs a microsecond)
        return np.float32(y) if abs(y) < _F32_LIMIT or y != y or abs(y) == math.inf else _f32(y)[()]

    def unary(x):  # (the common case, called per element per simulated thread: kept short)
        return to_f32(f(x)) if type(x) is np.float32 else f(x)

    def rounded(*args):
        kinds = set(map(type, args))
        return to_f32(f(*args)) if np.float32 in kinds and np.float64 not in kinds else f(*args)

    out = rounded if f.__name__ in _BINARY else unary
    out.__name__ = f.__name__
    return out


#: ``math`` for the simulator's kernels (a generated CUDA module binds it in place of ``math`` there): Python's ``exp``
#: raises ``OverflowError`` past float64's range (``exp(1000)``) where the GPU's float32 gives inf; this one gives inf
#: too. The functions of a real argument round to float32 for float32 arguments (:func:`_in_float32`); everything
#: else is ``math``'s own function, bound once (not looked up through ``__getattr__`` at every call of a simulated
#: thread).
_BINARY = ("pow", "atan2", "fmod", "hypot", "copysign")
_FLOAT32_MATH = ("exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "pow", "tanh", "sinh", "cosh", "sin", "cos",
                 "tan", "asin", "acos", "atan", "atan2", "erf", "erfc", "fmod", "hypot", "copysign")
SIM_MATH = SimpleNamespace(**{**{n: getattr(math, n) for n in dir(math) if not n.startswith("_")},
                              **{n: _in_float32(getattr(math, n)) for n in _FLOAT32_MATH if hasattr(math, n)},
                              "exp": _in_float32(_sim_exp)})

_B16_TYPES = (types.uint16, types.int16)  # bfloat16 patterns

if not SIMULATOR:
    try:  # numba-cuda's own extension API (its typing is separate from numba's)
        from numba.cuda.core.errors import TypingError
        from numba.cuda.extending import intrinsic
    except ImportError:  # pragma: no cover - older numba-cuda
        from numba.core.errors import TypingError
        from numba.core.extending import intrinsic


def _span(a, row, col, n, kinds):
    """The ``n`` elements ``a[row, col:col+n]`` as a NumPy view (``row`` an integer or a tuple indexing the
    leading dimensions), checking what the GPU does not. (Every vector load and store of a simulated thread comes
    here: the flat index is computed, not asked of NumPy, and an array's address is read once, :func:`_address`.)"""
    ary = getattr(a, "_ary", a)  # a simulator device array wraps a NumPy array
    lead = tuple(int(r) for r in row) if isinstance(row, tuple) else (int(row),)
    col, shape = int(col), ary.shape  # (a NumPy int32 would overflow when added to an address)
    if ary.ndim != len(lead) + 1 or not ary.flags.c_contiguous or ary.dtype.name not in kinds:
        raise TypeError(f"need a {len(lead) + 1}-D C-contiguous array of {'/'.join(kinds)}, got {ary.dtype} {ary.shape}")
    if not (all(0 <= r < d for r, d in zip(lead, shape)) and 0 <= col and col + n <= shape[-1]):
        raise IndexError(f"[{', '.join(map(str, lead))}, {col}:{col + n}] is outside an array of shape {ary.shape}")
    size = n * ary.itemsize
    flat = 0
    for r, d in zip(lead, shape[1:]):  # (C order: each leading index, then the next dimension's extent)
        flat = (flat + r) * d
    if (_address(ary) + (flat + col) * ary.itemsize) % size:
        raise ValueError(f"misaligned {8 * size}-bit access at [{', '.join(map(str, lead))}, {col}]")
    return ary[lead + (slice(col, col + n),)]


_ADDRESSES: dict = {}  # id(array) -> (a weak reference to it, its data's address)


def _address(ary) -> int:
    """The address of ``ary``'s first element, read once an array (``ary.ctypes.data`` costs a microsecond)."""
    held = _ADDRESSES.get(id(ary))
    if held is not None and held[0]() is ary:
        return held[1]
    if len(_ADDRESSES) > 4096:  # (arrays gone leave their entries: dropped now and then)
        _ADDRESSES.clear()
    address = ary.ctypes.data
    _ADDRESSES[id(ary)] = (weakref.ref(ary), address)
    return address


_F32, _B16, _F16, _U8 = ("float32",), ("uint16", "int16"), ("float16",), ("uint8", "int8")  # for the stand-ins


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


def _side_effect(builder, text, constraints, operands, result=None):
    """An inline PTX instruction that touches memory (never moved across others that do)."""
    fnty = ir.FunctionType(result or ir.VoidType(), [o.type for o in operands])
    constraints = ",".join(c for c in (constraints, "~{memory}") if c)
    return builder.call(ir.InlineAsm(fnty, text, constraints, side_effect=True), operands)


def _vector(builder, values):
    """An LLVM vector of ``values`` (all of one type)."""
    v = ir.Constant(ir.VectorType(values[0].type, len(values)), ir.Undefined)
    for k, x in enumerate(values):
        v = builder.insert_element(v, x, ir.IntType(32)(k))
    return v


def _elements(builder, vector):
    return [builder.extract_element(vector, ir.IntType(32)(k)) for k in range(vector.type.count)]


def _bf16_pair(builder, word):
    """The two bfloat16 of a 32-bit word as float32: the low half (lower address) first."""
    f32, i32 = ir.FloatType(), ir.IntType(32)
    return [builder.bitcast(builder.shl(word, i32(16)), f32), builder.bitcast(builder.and_(word, i32(0xFFFF0000)), f32)]


def _h16_pair(builder, word):
    """The two float16 of a 32-bit word as float32, exactly: the low half (lower address) first."""
    halves = _elements(builder, builder.bitcast(word, ir.VectorType(ir.HalfType(), 2)))
    return [builder.fpext(h, ir.FloatType()) for h in halves]


def _e4m3_quad(builder, word):
    """The four e4m3 bytes of a 32-bit word as float32, exactly: the lower address first."""
    i16, i32 = ir.IntType(16), ir.IntType(32)
    return (_e4m3_halves(builder, builder.trunc(word, i16))
            + _e4m3_halves(builder, builder.trunc(builder.lshr(word, i32(16)), i16)))


#: A 16-byte chunk, as four 32-bit words (the lower address first), decoded to float32 values by its stored type
#: (the 16-byte loads ``ld_b16x8``, ``ld_h16x8``, ``ld_e4m3x16``; a word: ``ld_b16x2``, ``ld_h16x2``).
CHUNK_DECODERS = {
    "bfloat16": lambda builder, words: [f for w in words for f in _bf16_pair(builder, w)],
    "float16": lambda builder, words: [f for w in words for f in _h16_pair(builder, w)],
    "e4m3": lambda builder, words: [f for w in words for f in _e4m3_quad(builder, w)],
}


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


def _number(name, x):
    if not isinstance(x, (types.Float, types.Integer)):
        raise TypingError(f"{name}: needs a number, got {x}")
