"""A call's outputs on the host and the caller's arrays for them: the shapes and dtypes the kernels write, the
``out`` arrays checked against them, what the simulator's allocations hold, and outputs in the 16-bit type an
``out_dtype`` asks for where a strategy stores float32 (rounded on return, into the caller's array where ``out`` gives
one). Used by :class:`~.compile.Kernel`."""

from __future__ import annotations

import math

import numpy as np

from ..codegen import KernelSource
from ..errors import EvaluationError
from .call_layout import OUT_ARRAYS
from .driver import c_strides
from .formats import BFloat16, E4M3, Encoded, as_bfloat16, dtype_of as _dtype, is_device as _is_device

#: The host dtype of an ``out_dtype`` asked for (bfloat16 as its bit patterns, in a :class:`BFloat16`).
ASKED = {"bfloat16": np.dtype(np.uint16), "float16": np.dtype(np.float16)}


def output_shapes(src: KernelSource, rows: int, length: int) -> dict:
    """``{output: (shape, NumPy dtype)}`` of what the kernels write (bfloat16 as uint16, e4m3 as uint8)."""
    shapes = {}
    for name, kind, size in src.outputs:
        width = () if size is None else (src.constants[size],)
        if kind == "index":
            shapes[name] = ((rows, size if isinstance(size, int) else src.constants[size]), np.int32)
        else:
            dtype = OUT_ARRAYS[dict(src.out_dtypes).get(name, "float32")]
            shapes[name] = ((rows, length, *width) if kind == "element" else (rows, *width), dtype)
    return shapes


def given_outputs(out, shapes: dict, on_device: bool) -> dict:
    """The caller's output arrays, each checked against what the kernel writes."""
    if not out:
        return {}
    unknown = sorted(set(out) - set(shapes))
    if unknown:
        raise EvaluationError(f"out: no output named {unknown}; the outputs are {sorted(shapes)}")
    given = {}
    for name, array in out.items():
        array = array.bits if isinstance(array, Encoded) else array
        shape, dtype = shapes[name][0], np.dtype(shapes[name][1])
        where = "a device array" if on_device else "a NumPy array"
        if on_device != _is_device(array) or (not on_device and not isinstance(array, np.ndarray)):
            raise EvaluationError(f"out[{name!r}] must be {where} (like the inputs), got {type(array).__name__}")
        got = _dtype(array)
        same_kind = got == dtype or (got.itemsize == dtype.itemsize and got.kind in "iu" and dtype.kind in "iu")
        strides = (array.__cuda_array_interface__.get("strides") if on_device else
                   (None if array.flags.c_contiguous else array.strides))
        if tuple(array.shape) != shape or not same_kind or strides not in (None, c_strides(shape, got.itemsize)):
            stored = {np.dtype(np.uint16): "bfloat16 bit patterns", np.dtype(np.uint8): "e4m3 bytes"}.get(dtype, dtype)
            raise EvaluationError(f"out[{name!r}] must be a contiguous {shape} array of {stored}, got "
                                  f"{got} {tuple(array.shape)}" + ("" if strides is None else " (strided)"))
        if not on_device and not array.flags.writeable:
            raise EvaluationError(f"out[{name!r}] is read-only (a view of bytes, or an array with writeable=False): "
                                  f"the kernel writes into it")
        if on_device and array.__cuda_array_interface__["data"][0] % 16:
            raise EvaluationError(f"out[{name!r}] must start on a 16-byte boundary (the kernels store 16 bytes at "
                                  f"a time); this one starts {array.__cuda_array_interface__['data'][0] % 16} "
                                  f"bytes past one, as a slice of a larger array may")
        given[name] = array
    shared_outputs({name: (_address(a, on_device), _dtype(a).itemsize, a.shape, None) for name, a in given.items()})
    return given


def _address(array, on_device: bool) -> int:
    return array.__cuda_array_interface__["data"][0] if on_device else array.__array_interface__["data"][0]


def shared_outputs(layouts: dict) -> None:
    """Refuse two outputs that share memory: one would be written over by the other, silently. ``layouts``: name →
    (address, bytes an item, shape, strides in items or None where C-contiguous). Exact for strided views too (a
    buffer's interleaved columns are apart though their spans overlap): NumPy's bounded solver decides it from the
    addresses, shapes and strides alone, over stand-in arrays that are never read (an address may be a device's)."""
    layouts = {name: layout for name, layout in layouts.items() if 0 not in tuple(layout[2])}
    if len(layouts) < 2:
        return
    if all(strides is None for *_, strides in layouts.values()):  # contiguous: their byte spans, exactly (and fast)
        held = sorted((at, at + size * math.prod(shape), name) for name, (at, size, shape, _) in layouts.items())
        for (_, end, a), (start, _, b) in zip(held, held[1:]):
            if start < end:
                raise outputs_shared(a, b)
        return
    views = {name: np.asarray(_Layout(*layout)) for name, layout in layouts.items()}
    names = sorted(views)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            try:
                shared = np.shares_memory(views[a], views[b], max_work=_MAX_WORK)
            except np.exceptions.TooHardError:  # (strides no bounded search settles: refused, as unproven apart)
                raise outputs_shared(a, b, certain=False) from None
            if shared:
                raise outputs_shared(a, b)


#: How many candidate solutions NumPy's overlap solver may try before giving up: 18 ms at worst over 3000 random
#: strided layouts of 2 to 4 dimensions on the development machine; a buffer's columns take microseconds.
_MAX_WORK = 10 ** 6


class _Layout:
    """An array's place in memory as NumPy's array interface, for :func:`shared_outputs` (no data is touched)."""

    def __init__(self, address: int, itemsize: int, shape, strides):
        self.__array_interface__ = {
            "version": 3, "data": (address, True), "typestr": f"|V{itemsize}", "shape": tuple(shape),
            "strides": None if strides is None else tuple(s * itemsize for s in strides)}


def outputs_shared(a: str, b: str, certain: bool = True) -> EvaluationError:
    share = "share memory" if certain else "may share memory (their strides are too intricate to tell)"
    return EvaluationError(f"out[{a!r}] and out[{b!r}] {share}: each output needs its own array (one would be "
                           f"written over by the other)")


def host_output(array: np.ndarray, stored: str | None):
    """An output copied to the host, as the user receives it: bfloat16 and e4m3 wrapped (their patterns in ``.bits``;
    ``np.asarray`` gives the float32 values, what the CPU and the float32-writing strategies return)."""
    return BFloat16(array) if stored == "bfloat16" else E4M3(array) if stored == "e4m3" else array


def poisoned(array: np.ndarray, backend: str) -> np.ndarray:
    """``array`` filled with NaN (floats) or the type's largest value (integers) on the simulator: an allocation on the
    GPU is not zero-filled (a call on device arrays gets its outputs so), so a kernel that leaves an entry unwritten
    shows it there instead of passing on numba's zeros. Elsewhere ``array`` as it is."""
    kind = array.dtype.kind
    if backend == "cudasim" and kind in "fiu":
        array[...] = np.nan if kind == "f" else np.iinfo(array.dtype).max
    return array


def asked_outputs(out_dtype: str | None, out, shapes: dict, on_device: bool) -> dict:
    """The host arrays of ``out`` for outputs the strategy stores in float32 where ``out_dtype`` asks for a 16-bit
    type: the call returns them in that type, so ``out`` must hold it (checked against it; the call writes them
    rounded, :func:`returned`)."""
    if not out or on_device or out_dtype not in ASKED:
        return {}
    return {name: array for name, array in out.items()
            if name in shapes and not name.endswith(".index") and np.dtype(shapes[name][1]) == np.float32}


def returned(out_dtype: str | None, value, name: str, stored: str | None, mine):
    """Output ``name`` as the call returns it: ``value`` in the type asked (:func:`as_asked`), or the caller's
    ``mine`` (from ``out``), which the kernels wrote in place or which receives ``value`` rounded to its type."""
    if mine is None:
        return as_asked(out_dtype, value, name, stored)
    bits = mine.bits if isinstance(mine, Encoded) else mine
    if value is bits or value is mine:
        return value
    rounded = as_asked(out_dtype, value, name, stored)
    np.copyto(bits, rounded.bits if isinstance(rounded, Encoded) else rounded)
    return mine


def as_asked(out_dtype: str | None, value, name: str, stored: str | None):
    """A host output in the 16-bit type ``out_dtype`` asks for where the strategy stored it in float32 (rounded to
    nearest here, once: what storing it so would have given); as it is otherwise (top-k indices too)."""
    if out_dtype not in ("bfloat16", "float16") or name.endswith(".index") or (stored or "float32") != "float32":
        return value
    return as_bfloat16(value) if out_dtype == "bfloat16" else np.asarray(value).astype(np.float16)
