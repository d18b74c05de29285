"""A call's params as the kernels take them: params checked and broadcast to a row per row (device arrays as they
are, within the contract the kernels read them by), and what a call refuses before a launch (the outputs: :mod:`.outputs`). Used by :class:`~.compile.Kernel` and the torch front end
(:mod:`.tensors`)."""

from __future__ import annotations

import numpy as np

from ..errors import EvaluationError
from ..ir.lexer import INT_LIMIT
from ..ir.reference import _integers, real_values
from .call_layout import _c_contiguous
from .formats import Encoded, dtype_of as _dtype, is_device as _is_device, to_float

#: Strategies that multiply a float32 param (a query) on the tensor cores as its 16-bit value plus a residual: with
#: float16 vectors, a component of 65520 or more has no float16 value (it rounds to inf) and the scores would be NaN.
SPLIT_QUERY = ("mma", "wgmma")


def param_values(p, value) -> np.ndarray:
    """A host param's values as an array of real numbers (exact ones — fractions, SymPy numbers — as float64), an
    ``int`` param's checked: whole numbers of magnitude at most :data:`INT_LIMIT`; else a named error."""
    given = real_values(p, value)
    if p.integer:
        given = _integers(p, given, np.float64)
        if given.size and np.abs(given).max() > INT_LIMIT:
            worst = given.flat[int(np.argmax(np.abs(given)))]  # (with its sign)
            raise EvaluationError(f"param {p.name} (declared int) is computed in float32 by the kernels, where "
                                  f"integers are exact up to {INT_LIMIT} in magnitude; got {worst:.0f}")
    return given


def query_fits_float16(strategy: str, c, named: dict) -> None:
    """Refuse, before a launch, a vector param given on the host that ``strategy``'s float16 products cannot hold (the
    kernels would return NaN scores where the reference has numbers). A param on the device is not read back for
    this (a synchronisation on every call): the strategy's documentation says so."""
    for p in c.params:
        a = named.get(p.name)
        if p.size is None or a is None or _is_device(a) or np.asarray(a).dtype.itemsize == 2:
            continue  # (a param staged in 16 bits holds its own values)
        big = np.isfinite(a) & (np.abs(a) >= 65520)
        if big.any():
            raise EvaluationError(
                f"param {p.name} has components of magnitude up to {float(np.abs(a[big]).max()):.6g}, beyond float16's "
                f"range (65504): {strategy} multiplies it on the tensor cores as a float16 value plus a residual, "
                f"which would make the scores NaN. Pass the vectors in bfloat16 (float32's range), scale {p.name} "
                f"down and the score's scale up by the same power of two, or use strategy='vrows'")


def bound_param(p, value, rows: int, kind: str = "float32"):
    """A param as the kernels take it: a device array as it is (float32, or the 16-bit ``kind`` the call's strategy
    stages as it is: ``Strategy.params16``; a row per row; a vector one C-contiguous and 16-byte aligned), else its host
    values checked (:func:`param_values`) and broadcast to a row per row."""
    if isinstance(value, Encoded) and kind == "bfloat16":  # (bfloat16 bit patterns on the device)
        value = value.bits
    if _is_device(value):  # used as it is: it must already have one row per row
        want = (rows,) if p.size is None else (rows, None)
        shape = tuple(value.shape)
        stored = {"float32": (np.float32,), "float16": (np.float16,), "bfloat16": (np.uint16, np.int16)}[kind]
        if _dtype(value) not in [np.dtype(t) for t in stored] or len(shape) != len(want) or shape[0] != rows:
            raise EvaluationError(f"param {p.name}: a device array must be {kind} of shape "
                                  f"{'(rows,)' if p.size is None else '(rows, size)'} with rows = {rows}, got "
                                  f"{_dtype(value)} {shape} (or pass a host value, broadcast on the host)")
        face = value.__cuda_array_interface__
        if p.size is not None and (not _c_contiguous(value, _dtype(value).itemsize) or face["data"][0] % 16):
            # (the tensor-core kernels read a vector param's rows in 16-byte loads)
            raise EvaluationError(f"param {p.name}: a device array must be C-contiguous and start 16-byte aligned "
                                  f"(strides {face.get('strides')}, address {face['data'][0]:#x}): pass a "
                                  f"contiguous copy (.contiguous(), cupy.ascontiguousarray)")
        return value
    if kind != "float32":  # a vector given on the host in the 16-bit type the strategy stages as it is (its bits)
        given = np.asarray(value.bits if isinstance(value, Encoded) else value)
        a = given[None] if given.ndim == 1 else given
        if a.ndim != 2 or a.shape[0] not in (1, rows):
            raise EvaluationError(f"param {p.name}: expected (size,) or (rows, size) with rows = {rows}, got shape "
                                  f"{given.shape}")
        return np.ascontiguousarray(np.broadcast_to(a, (rows, a.shape[-1])))
    given = param_values(p, to_float(value) if isinstance(value, Encoded) else value)
    with np.errstate(over="ignore"):
        a = given.astype(np.float32)
    past = np.isinf(a) & np.isfinite(given)
    if past.any():  # (a call in float32 would read inf where the float64 reference reads the number)
        raise EvaluationError(f"param {p.name}: {given[past].flat[0]:g} is past float32's range (about 3.4e38), in "
                              f"which the kernels compute; scale it (an inf given as inf is taken)")
    below = (a == 0) & (given != 0)
    if below.any():  # (read as 0: a division by it inf or NaN where the float64 reference reads the number)
        raise EvaluationError(f"param {p.name}: {given[below].flat[0]:g} is below float32's range (about 1.4e-45), "
                              f"in which the kernels compute, and would be read as 0; scale it (a 0 given as 0 is "
                              f"taken)")
    if p.size is None:  # (a number, (rows,) or a column (rows, 1), as the reference takes it)
        column = a.ndim <= 1 or (a.ndim == 2 and a.shape[1] == 1)
        a = np.broadcast_to(a.reshape(-1), (rows,)) if column and a.size in (1, rows) else None
    else:
        a = a[None] if a.ndim == 1 else a
        a = np.broadcast_to(a, (rows, a.shape[-1])) if a.ndim == 2 and a.shape[0] in (1, rows) else None
    if a is None:
        raise EvaluationError(f"param {p.name}: expected {'a number, (rows,) or (rows, 1)' if p.size is None else '(size,) or (rows, size)'}"
                              f" with rows = {rows}, got shape {given.shape}")
    return np.ascontiguousarray(a)
