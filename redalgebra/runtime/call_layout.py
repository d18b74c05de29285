"""What a call's arrays allow, read once per call signature: the signature itself (:func:`_signature`, the key of a
kernel's plans), and the inputs' alignment and contiguity (16-byte loads where every row allows them). Used by
:class:`~.compile.Kernel`."""

from __future__ import annotations

import math

import numpy as np

from .driver import c_strides
from .formats import Encoded, dtype_of as _dtype, is_device as _is_device

#: Stored dtypes of outputs and the NumPy arrays that hold them (bfloat16 as bit patterns, e4m3 as bytes).
OUT_ARRAYS = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16, "e4m3": np.uint8}


def _signature(c, inputs: dict, params: dict, keep):
    """What ``Kernel._layout`` reads of a call, as a hashable key (None where it would refuse the call)."""
    if len(inputs) != len(c.inputs) or len(params) != len(c.params):
        return None  # (a name the cascade lacks: refused)
    parts = []
    try:
        for s in c.inputs:
            a = inputs[s.name]
            enc = a.dtype if isinstance(a, Encoded) else None
            a = a.bits if enc else a
            if _is_device(a):
                face = a.__cuda_array_interface__
                parts.append((enc, True, tuple(a.shape), face["typestr"], face.get("strides"), face["data"][0] % 16))
            else:
                a = np.asarray(a)  # copied to a fresh device array (as the (n, L) rows where K-major)
                parts.append((enc, False, a.shape, a.dtype.str, a.ndim == 3 and k_major(a)))
        for p in c.params:
            v = params[p.name]
            kind = param_kind(v) if p.size is not None else None
            v = v.bits if isinstance(v, Encoded) else v
            parts.append((kind, _is_device(v), tuple(v.shape) if _is_device(v) else np.shape(v)))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return tuple(parts), None if keep is None else tuple(np.shape(keep))


def param_kind(value) -> str | None:
    """``"float16"`` or ``"bfloat16"`` for a vector param given in a 16-bit type (float16, or bfloat16 bit patterns
    wrapped with ``as_bfloat16``; on the device or the host), which a strategy reading such params stages as it is
    (``Strategy.params16``; host values are widened to float32 for the others); None otherwise."""
    if isinstance(value, Encoded):
        return value.dtype if value.dtype == "bfloat16" else None
    if (_is_device(value) or isinstance(value, np.ndarray)) and _dtype(value) == np.float16:
        return "float16"
    return None


def k_major(a) -> bool:
    """Whether the 3-D array ``a`` (on the device or the host) is laid out K-major: shape (1, L, n) with the axis
    innermost, the transpose of a C-contiguous (n, L) matrix (``W.T[None]``: how PyTorch's ``Linear`` holds its
    weight)."""
    shape = tuple(a.shape)
    if len(shape) != 3 or shape[0] != 1 or shape[1] < 2 or shape[2] < 2:
        return False
    if _is_device(a):
        strides = a.__cuda_array_interface__.get("strides")
    else:
        strides = getattr(a, "strides", None)
    item = _dtype(a).itemsize
    return strides is not None and tuple(strides[1:]) == (item, shape[1] * item)


def _alignment(inputs: dict, c, length: int, reps: dict, per_element: bool = True,
               major: tuple = ()) -> tuple[bool, bool, bool]:
    """(every per-element array starts 16-byte aligned and is contiguous along the axis, every row
    pitch is a multiple of 16 bytes, every array has one contiguous row of ``length`` per row); ``per_element``:
    the call writes per-element outputs (arrays of its own, rows of ``length``); ``major``: inputs given K-major
    (:func:`k_major`), judged as the (n, L) rows they are read as."""
    arrays = {}
    for s in c.inputs:
        a = inputs[s.name]
        a = a.bits if isinstance(a, Encoded) else a
        item = _dtype(a).itemsize
        if s.name in major:
            ptr = a.__cuda_array_interface__["data"][0] if _is_device(a) else 0
            arrays[s.name] = (ptr, (length * item, item), item, reps[s.name])
        elif _is_device(a):
            face = a.__cuda_array_interface__
            strides = face.get("strides") or (a.shape[1] * item * (1 if s.size is None else a.shape[2]), item)
            arrays[s.name] = (face["data"][0], strides, item, reps[s.name])
        else:  # copied to a fresh (aligned, contiguous) device array
            arrays[s.name] = (0, (length * item * (1 if s.size is None else a.shape[2]), item), item, reps[s.name])
    return _aligned(arrays, length, per_element)


def _c_contiguous(a, item: int) -> bool:
    """Whether numba types a device array as C-contiguous: no stride of 0 (a broadcast), and C strides but
    for dimensions of size 1 (numba's dummyarray rules)."""
    face = a.__cuda_array_interface__
    strides = face.get("strides")
    if strides is None:
        return True
    shape = tuple(face["shape"])
    return 0 not in strides and all(n == 1 or got == want for n, got, want in zip(shape, strides, c_strides(shape, item)))


def _contiguous_alignment(c, length: int, dtypes: dict, sizes: dict,
                          per_element: bool = True) -> tuple[bool, bool, bool]:
    """``_alignment`` of fresh, aligned, contiguous device arrays with one row per row."""
    arrays = {}
    for s in c.inputs:
        item = np.dtype(OUT_ARRAYS.get(dtypes.get(s.name), np.float32)).itemsize
        width = 1 if s.size is None else (s.size if isinstance(s.size, int) else sizes[s.size])
        arrays[s.name] = (0, (length * item * width, item), item, 1)
    return _aligned(arrays, length, per_element)


def _aligned(arrays: dict, length: int, per_element: bool = True) -> tuple[bool, bool, bool]:
    """The alignment facts of inputs given as ``{name: (address, strides, itemsize, rows repeated)}``. Per-element
    outputs (``per_element``) are contiguous rows of ``length`` of up to 4 bytes, or e4m3 bytes: their pitch is on the
    16-byte grid when ``length`` is a multiple of 16; a call without them writes rows of its own widths only (a row's
    values, the tensor-core strategies' scratch padded to whole tiles), so only the inputs' pitches count."""
    vec_ok, pitch_ok, same = True, length % 16 == 0 or not per_element, True
    for ptr, strides, item, rep in arrays.values():
        vec_ok &= ptr % 16 == 0 and strides[-1] == item
        pitch_ok &= strides[0] % 16 == 0
        same &= rep == 1 and strides[0] == length * item
    return vec_ok, pitch_ok and vec_ok, same and vec_ok


def broadcast_rows(inputs: dict) -> dict:
    """``inputs`` with those broadcast along the call's rows (a leading stride of 0: ``np.broadcast_to``,
    ``w.expand(R, L, n)``) as the one row they repeat, shared by every row as a (1, L, …) input is: read once, and
    seen as shared by the strategies that need rows sharing a weight matrix (they refused it as rows of their own).
    Only where an input that is not broadcast holds the call's rows (else the broadcast ones set them), and only where
    the vector inputs stay shared alike (a broadcast key beside per-row values is left as given)."""
    flat = {name: getattr(a, "bits", a) for name, a in inputs.items()}
    lead = [name for name, a in flat.items() if _repeats_rows(a)]
    if not lead:  # (every call of host arrays comes here: the common case leaves after one look at each)
        return inputs
    rows = max(_rows(a) for a in flat.values())
    lead = [name for name in lead if _rows(flat[name]) == rows]
    if not lead or not any(_rows(a) == rows for name, a in flat.items() if name not in lead):
        return inputs
    vectors = [name for name, a in flat.items() if len(getattr(a, "shape", ())) == 3]
    if len({1 if name in lead else _rows(flat[name]) for name in vectors}) > 1:
        return inputs
    out = dict(inputs)
    for name in lead:
        one = _first_row(flat[name])
        out[name] = type(inputs[name])(one) if isinstance(inputs[name], Encoded) else one
    return out


def _first_row(a):
    """The first row of ``a`` (rows of stride 0), with a C stride for it where its rest is C-contiguous (a torch
    tensor then needs no copy to be read by its rows)."""
    one = a[:1]
    if callable(getattr(one, "stride", None)):  # a torch tensor
        inner = tuple(one.shape[1:])
        want = tuple(math.prod(inner[i + 1:]) for i in range(len(inner)))
        if tuple(one.stride()[1:]) == want:
            one = one.as_strided(tuple(one.shape), (math.prod(inner), *want))
    return one


def _rows(a) -> int:
    shape = getattr(a, "shape", ())
    return int(shape[0]) if len(shape) else 0


def _repeats_rows(a) -> bool:
    """Whether array ``a`` (NumPy, a torch tensor, a CUDA-array-interface object) has rows of stride 0, more than one."""
    shape = tuple(getattr(a, "shape", ()))
    if len(shape) < 2 or shape[0] < 2:
        return False
    if callable(getattr(a, "stride", None)):  # a torch tensor
        return a.stride(0) == 0
    face = getattr(a, "__cuda_array_interface__", None)
    if face is not None:
        strides = face.get("strides")
        return strides is not None and strides[0] == 0
    return isinstance(a, np.ndarray) and a.strides[0] == 0
