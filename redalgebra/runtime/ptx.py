"""Compile generated CUDA kernels to PTX without a GPU (numba-cuda's NVVM), for CI and inspection."""

from __future__ import annotations

import contextlib
import re
from types import SimpleNamespace

from ..codegen import Spec, generate
from ..derive import FusedCascade
from .backends import cuda_module
from .cache import load


def signature(fused: FusedCascade, spec: Spec, args: tuple, scratch: tuple = (), out_dtypes: tuple = ()):
    """numba types of a generated kernel's arguments, from the cascade, the spec and the scratch arrays."""
    from numba import types

    c = fused.cascade
    dtypes = dict(spec.dtypes)
    by_name = {}
    for s in c.inputs:
        base = {"float16": types.float16, "bfloat16": types.uint16}.get(dtypes.get(s.name), types.float32)
        by_name[s.name] = types.Array(base, 2 if s.size is None else 3, "C")
        by_name[f"rep_{s.name}"] = types.int64
    for p in c.params:
        by_name[p.name] = types.Array(types.float32, 1 if p.size is None else 2, "C")
    by_name["keep"] = types.Array(types.uint8, 2, "C")
    varying, sizes = set(fused.per_element_outputs), c.sizes
    stored = {"float16": types.float16, "bfloat16": types.uint16, "e4m3": types.uint8}
    for o in c.outputs:
        ndim = 1 + (o.name in varying) + (sizes[o.name] is not None)
        by_name[f"out_{o.name}"] = types.Array(stored.get(dict(out_dtypes).get(o.name), types.float32), ndim, "C")
    for r in c.reductions:
        if r.monoid.k is not None:
            by_name[f"out_{r.name}_index"] = types.Array(types.int32, 2, "C")
    for name, dtype, layout, width in scratch:
        ndim = (2 if layout == "segments" else 1) + (width is not None)
        by_name[name] = types.Array(types.int32 if dtype == "int32" else types.float32, ndim, "C")
    for n in ("rows", "length", "nseg", "seglen"):
        by_name[n] = types.int64
    return tuple(by_name[a] for a in args)


def compile_ptx(fused: FusedCascade, strategy: str, spec: Spec, cc=(9, 0)) -> str:
    """PTX of a generated CUDA strategy (every kernel of it) for compute capability ``cc``."""
    cuda = cuda_module("ptx")
    src = generate(fused, "cuda", strategy, spec)
    module = load(src.source)
    entries = src.entries or (("kernel", src.args, "rows"),)
    out = []
    with _target_device(cc):
        for name, args, _ in entries:
            sig = signature(fused, spec, args, src.scratch, src.out_dtypes)
            ptx, _ = cuda.compile_ptx(getattr(module, name).py_func, sig, cc=cc)
            out.append(ptx)
    return "\n".join(out)


@contextlib.contextmanager
def _target_device(cc):
    """numba-cuda asks the driver for the current device's compute capability when it compiles a
    device function, even inside ``compile_ptx``; on a machine without a driver, answer with the
    target's ``cc`` (only the capability is read)."""
    from numba.cuda import dispatcher

    try:
        dispatcher.get_current_device().compute_capability
        yield  # a real device is there: leave numba alone
        return
    except Exception:  # noqa: BLE001 - no driver or no device: any failure means "no device"
        pass
    original = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=cc)
    try:
        yield
    finally:
        dispatcher.get_current_device = original


def f64_instructions(ptx: str) -> list[str]:
    """PTX lines doing float64 arithmetic (conversions to print are allowed; math is not)."""
    return [ln.strip() for ln in ptx.splitlines()
            if re.search(r"\.f64\b", ln) and not ln.strip().startswith(("//", ".param", "ld.param"))]
