"""Stored number formats on the host: the wrappers that mark input data of a type NumPy lacks (bfloat16, FP8 e4m3),
their rounding and decoding, in NumPy alone: nothing here imports numba, so wrapping data (``as_bfloat16``,
``as_e4m3``) fixes nothing about the CUDA simulator switch, which :mod:`.intrinsics` reads when imported."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import RedalgebraError


def _e4m3_decoded(c: np.ndarray) -> np.ndarray:
    """The float32 values of the e4m3 bytes in the low 8 bits of the integers ``c``, from the format's fields."""
    e, m = (c >> 3) & 0xF, (c & 7).astype(np.float64)
    mag = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e - 7))
    return np.where((c & 0x7F) == 0x7F, np.nan, np.where(c & 0x80, -mag, mag)).astype(np.float32)


#: Every e4m3 byte's value, by its code: :func:`e4m3_values` looks codes up here (the CUDA simulator's stand-ins
#: decode a tensor-core operand a call, on every simulated thread).
_E4M3_VALUES = _e4m3_decoded(np.arange(256, dtype=np.int32))
_E4M3_VALUES.flags.writeable = False


def e4m3_values(codes) -> np.ndarray:
    """The float32 values of FP8 e4m3 bytes ``s eeee mmm`` (bias 7, no infinities, ``0x7F``/``0xFF`` NaN): exact."""
    return np.asarray(_E4M3_VALUES[np.asarray(codes).astype(np.int32) & 0xFF])


e4m3_to_float = e4m3_values


def is_device(a) -> bool:
    return hasattr(a, "__cuda_array_interface__") and not isinstance(a, np.ndarray)


def dtype_of(a) -> np.dtype:
    """The element type of a NumPy array or of a device array (numba, CuPy, PyTorch)."""
    if is_device(a):
        return np.dtype(a.__cuda_array_interface__["typestr"])
    if not hasattr(a, "dtype"):
        raise RedalgebraError(f"expected an array (NumPy, or a device array such as a torch tensor), got "
                              f"{type(a).__name__}")
    try:
        return np.dtype(a.dtype)
    except TypeError:  # a host tensor's dtype NumPy does not know (torch.bfloat16, torch.float8_e4m3fn)
        raise RedalgebraError(f"{type(a).__name__} of {a.dtype}: give host data as a NumPy array; kernels take torch "
                              f"tensors of any supported dtype as they are") from None


@dataclass(frozen=True)
class Encoded:
    """Input data of a type NumPy lacks, as its bit patterns in an integer array: :class:`BFloat16`, :class:`E4M3`."""

    bits: object  # a NumPy array or a device array of the type's patterns
    dtype = "float32"  # the stored type's name, as kernels and ``dtypes`` say it

    @property
    def shape(self):
        return tuple(self.bits.shape)

    def __array__(self, dtype=None, copy=None):
        """The float32 values (host bits only): what NumPy, and so the float64 reference ``evaluate``, reads."""
        if not isinstance(self.bits, np.ndarray):
            raise TypeError(f"{type(self).__name__} on the device: copy its bits to the host for their values")
        values = to_float(self)
        return values if dtype is None else values.astype(dtype)


@dataclass(frozen=True)
class BFloat16(Encoded):
    """bfloat16 data as its 16-bit patterns (NumPy has no bfloat16): ``as_bfloat16(x)`` makes one."""

    dtype = "bfloat16"


@dataclass(frozen=True)
class E4M3(Encoded):
    """FP8 e4m3 data as its bytes (``s eeee mmm``, bias 7, NaN ``0x7F``/``0xFF``, no infinities): ``as_e4m3(x)``
    makes one. Read exactly as float32 (every e4m3 value is one); a GEMM's weights, for instance."""

    dtype = "e4m3"


def as_bfloat16(x) -> BFloat16:
    """Mark ``x`` as bfloat16 input: a float array is rounded to bfloat16 (nearest, ties to even);
    a 16-bit integer array (NumPy, or a device array such as ``tensor.view(torch.int16)``) is taken
    as the bit patterns."""
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        return BFloat16(bf16_bits(x))
    if dtype_of(x).itemsize != 2 or dtype_of(x).kind not in "iu":
        raise RedalgebraError(f"as_bfloat16 takes floats to round, or 16-bit integer bit patterns; got {dtype_of(x)}")
    return BFloat16(x)


def as_e4m3(x) -> E4M3:
    """Mark ``x`` as FP8 e4m3 input: a float array is rounded to e4m3 (nearest, ties to even, saturating at ±448);
    an 8-bit integer array (NumPy, or a device array such as ``tensor.view(torch.uint8)``) is taken as the bytes."""
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        return E4M3(e4m3_bits(x))
    if dtype_of(x).itemsize != 1 or dtype_of(x).kind not in "iu":
        raise RedalgebraError(f"as_e4m3 takes floats to round, or 8-bit integer bytes; got {dtype_of(x)}")
    return E4M3(x)


# --------------------------------------------------------------------------------------------------
# Host rounding (NumPy): what the GPU's conversions do; the reference of the simulator's stand-ins and
# of the tests
# --------------------------------------------------------------------------------------------------
_E4M3_MAX = 448.0


def _f32(values):
    """``values`` as float32, as the GPU converts arguments: overflow to inf silently."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(values, np.float32)


def bf16_bits(x) -> np.ndarray:
    """Round float32 values to bfloat16 bit patterns, to nearest, ties to even.

    Parameters
    ----------
    x : array_like
        Values, converted to float32 first.

    Returns
    -------
    numpy.ndarray
        ``uint16`` patterns; overflow gives ±inf and every NaN gives ``0x7FFF``.
    """
    u = _f32(x).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return np.where((u & 0x7FFFFFFF) > 0x7F800000, 0x7FFF, rounded).astype(np.uint16)


def f16_bits(x) -> np.ndarray:
    """Round float32 values to float16 bit patterns, to nearest, ties to even (NaN gives ``0x7FFF``)."""
    f = _f32(x)
    with np.errstate(over="ignore", invalid="ignore"):  # a signalling NaN is no error here
        bits = f.astype(np.float16).view(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FFF), bits).astype(np.uint16)


def e4m3_bits(x) -> np.ndarray:
    """Round float32 values to FP8 e4m3 bytes: to nearest, ties to even, saturating at ±448.

    Parameters
    ----------
    x : array_like
        Values, converted to float32 first.

    Returns
    -------
    numpy.ndarray
        ``uint8`` codes ``s eeee mmm``; zero keeps its sign and every NaN gives ``0x7F``.
    """
    f = _f32(x)
    nan = np.isnan(f)
    sign = ((f.view(np.uint32) >> 31) << 7).astype(np.uint8)
    mag = np.minimum(np.abs(np.where(nan, np.float32(0), f)).astype(np.float64), _E4M3_MAX)
    exponent = np.where(mag > 0, np.frexp(mag)[1] - 1, -6).clip(-6, 8)  # 2^exponent <= mag, subnormals at -6
    steps = np.rint(np.ldexp(mag, 3 - exponent))  # mag in units of the quantum 2^(exponent-3), ties to even
    code = (8 * (exponent + 6) + steps).astype(np.uint8)  # codes are monotonic: a carry moves to the exponent
    return np.where(nan, np.uint8(0x7F), sign | code).astype(np.uint8)


def bfloat16_to_float(bits: np.ndarray) -> np.ndarray:
    """The float32 values of bfloat16 bit patterns (host side, for references)."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def to_float(value) -> np.ndarray:
    """A host output or input as float32 values: bfloat16 patterns and e4m3 bytes decoded, floats widened."""
    if isinstance(value, BFloat16):
        return bfloat16_to_float(value.bits)
    if isinstance(value, E4M3):
        return e4m3_to_float(value.bits)
    value = np.asarray(value)
    return e4m3_to_float(value) if value.dtype == np.uint8 else value.astype(np.float32)
