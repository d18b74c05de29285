"""PyTorch interop: tensors in and out of a compiled kernel, and the kernel as a ``torch.library`` op.

The one module of the package that imports torch (optional: only here, and only when used):

* :func:`call` runs a :class:`~redalgebra.runtime.Kernel` on torch tensors — any supported dtype as
  it is (bfloat16 included), params as tensors or numbers — and returns torch tensors on the
  input's device. CUDA tensors go to the kernel without a copy; CPU tensors are viewed as NumPy.
* :func:`torch_op` registers a cascade as the custom op ``redalgebra::<name>`` with a fake (meta)
  implementation, so it runs inside ``torch.compile(fullgraph=True)`` graphs without graph breaks.
  The op takes the cascade's inputs, then its params, each in declaration order, as tensors; it
  returns its outputs in declaration order (then the indices of each top-k), one tensor when there
  is one. CPU tensors run on the CPU back end, CUDA tensors on the CUDA one.

Output dtypes: per-element outputs in the first input's dtype (as PyTorch does; ``fp8(…)`` outputs as
``float8_e4m3fn``), row outputs in float32, top-k indices as int32.
"""

from __future__ import annotations

import re

import numpy as np

from ..derive import FusedCascade
from ..errors import RedalgebraError
from .compile import BFloat16, Kernel, as_bfloat16, compile

_OPS: dict = {}  # op name -> (cascade text, op)


def _torch():
    try:
        import torch
    except ImportError as err:  # pragma: no cover - exercised where torch is missing
        raise RedalgebraError("PyTorch is not installed: `pip install torch` (an optional dependency)") from err
    return torch


def is_tensor(value) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "dtype") and hasattr(value, "device")


def _input(t):
    """A tensor as a kernel input: CUDA tensors as they are (bfloat16 as its bit patterns), CPU ones as NumPy."""
    torch = _torch()
    if t.dtype == torch.bfloat16:
        bits = t.view(torch.int16)
        return as_bfloat16(bits if t.is_cuda else bits.numpy())
    if t.dtype not in (torch.float32, torch.float16):
        raise RedalgebraError(f"the kernels read float32, float16 or bfloat16 tensors, got {t.dtype}")
    return t if t.is_cuda else t.detach().numpy()


def _param(t, rows: int, vector: bool):
    """A param tensor: on the GPU as it is when it has one row per row (float32), else via the host."""
    if not is_tensor(t):
        return t
    t = t.detach()
    if t.is_cuda and t.dim() == (2 if vector else 1) and t.shape[0] == rows:
        return t.float().contiguous()
    return t.float().cpu().numpy()


def out_dtypes(fused: FusedCascade, first):
    """``{output name: torch dtype}`` of the per-element outputs for a first input of dtype ``first``."""
    torch = _torch()
    from ..codegen.strategies.rows import out_dtypes as stored

    names = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
             "e4m3": torch.float8_e4m3fn}
    first = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(first, "float32")
    dtypes = {fused.cascade.inputs[0].name: first}
    return {name: names[d] for name, d in stored(fused, dtypes, None)}


def _output(value, want, device):
    """A kernel output as a tensor of dtype ``want`` on ``device``."""
    torch = _torch()
    if isinstance(value, BFloat16):
        value = value.bits
    if isinstance(value, np.ndarray):
        t = torch.from_numpy(value)
    else:  # a device array (numba): the tensor shares its memory
        t = torch.as_tensor(value, device=device)
    if t.dtype in (torch.uint16, torch.int16) and want == torch.bfloat16:
        return t.view(torch.bfloat16)
    if t.dtype == torch.uint8 and want == torch.float8_e4m3fn:
        return t.view(torch.float8_e4m3fn)
    return t.to(want) if t.dtype != want else t


def call(kernel: Kernel, inputs: dict, params: dict | None = None, keep=None) -> dict:
    """Run ``kernel`` on torch tensors; the outputs as tensors on the first input's device."""
    torch = _torch()
    c = kernel.fused.cascade
    params = params or {}
    first = inputs[c.inputs[0].name]
    rows = max(int(t.shape[0]) for t in inputs.values() if is_tensor(t) and t.dim() >= 1)
    got = kernel.run({k: _input(v) if is_tensor(v) else v for k, v in inputs.items()},
                 {p.name: _param(params[p.name], rows, p.size is not None) for p in c.params if p.name in params},
                 keep.cpu().numpy() if is_tensor(keep) else keep)
    per_element = out_dtypes(kernel.fused, first.dtype)
    out = {}
    for name, value in got.items():
        want = torch.int32 if name.endswith(".index") else per_element.get(name, torch.float32)
        out[name] = _output(value, want, first.device)
    return out


def _text(fused: FusedCascade) -> str:
    """The cascade's text: what makes two registrations the same op."""
    return str(fused.cascade)  # the cascade in the text format


def _op_name(fused: FusedCascade) -> str:
    base = re.sub(r"\W", "_", fused.cascade.name or "cascade")
    base = base if base[:1].isalpha() else f"c_{base}"
    text = _text(fused)
    name, n = base, 1
    while name in _OPS and _OPS[name][0] != text:
        n += 1
        name = f"{base}_{n}"
    return name


def torch_op(fused: FusedCascade, name: str | None = None, strategy: str | None = None):
    """The cascade's kernels as the custom op ``torch.ops.redalgebra.<name>`` (registered once per
    cascade). Arguments: inputs, then params, as tensors in declaration order."""
    torch = _torch()
    if not isinstance(fused, FusedCascade):
        raise RedalgebraError(f"torch_op takes a FusedCascade (from redalgebra.derive), got {type(fused).__name__}")
    c = fused.cascade
    text = _text(fused)
    name = name or _op_name(fused)
    if name in _OPS:
        if _OPS[name][0] != text:
            raise RedalgebraError(f"an op redalgebra::{name} is registered for another cascade; choose another name")
        return _OPS[name][1]
    args = [s.name for s in c.inputs] + [p.name for p in c.params]
    outputs = [o.name for o in c.outputs] + [f"{r.name}_index" for r in c.reductions if r.monoid.k is not None]
    returns = "Tensor" if len(outputs) == 1 else "(" + ", ".join(["Tensor"] * len(outputs)) + ")"
    schema = "(" + ", ".join(f"Tensor {a}" for a in args) + f") -> {returns}"
    kernels: dict = {}

    def run(*tensors):
        inputs = dict(zip(args[:len(c.inputs)], tensors[:len(c.inputs)]))
        params = dict(zip(args[len(c.inputs):], tensors[len(c.inputs):]))
        backend = "cuda" if tensors[0].is_cuda else "cpu"
        if backend not in kernels:
            kernels[backend] = compile(fused, backend, strategy if backend == "cuda" else None)
        got = call(kernels[backend], inputs, params)
        result = tuple(got[o.name] for o in c.outputs) + tuple(
            got[f"{r.name}.index"] for r in c.reductions if r.monoid.k is not None)
        result = tuple(t.contiguous() for t in result)
        return result[0] if len(result) == 1 else result

    def fake(*tensors):
        shapes = _output_shapes(fused, tensors)
        first = tensors[0]
        per_element = out_dtypes(fused, first.dtype)
        result = []
        for o in c.outputs:
            result.append(first.new_empty(shapes[o.name], dtype=per_element.get(o.name, torch.float32)))
        for r in c.reductions:
            if r.monoid.k is not None:
                result.append(first.new_empty(shapes[f"{r.name}.index"], dtype=torch.int32))
        return result[0] if len(result) == 1 else tuple(result)

    op = torch.library.custom_op(f"redalgebra::{name}", run, mutates_args=(), schema=schema)
    op.register_fake(fake)
    _OPS[name] = (text, op)
    return op


def _output_shapes(fused: FusedCascade, tensors) -> dict:
    """The shapes the kernel's outputs take for input and param tensors of the given shapes."""
    c = fused.cascade
    inputs, params = tensors[:len(c.inputs)], tensors[len(c.inputs):]
    length = int(inputs[0].shape[1])
    rows = max([int(t.shape[0]) for t in inputs] +
               [int(t.shape[0]) for p, t in zip(c.params, params) if t.dim() == (1 if p.size is None else 2)])
    sizes = {}
    for s, t in zip(c.inputs, inputs):
        if s.size is not None:
            sizes[s.size] = int(t.shape[2])
    for p, t in zip(c.params, params):
        if p.size is not None:
            sizes[p.size] = int(t.shape[-1])

    def width(size):
        return () if size is None else (size if isinstance(size, int) else sizes[size],)

    out = {}
    varying = set(fused.per_element_outputs)
    for o in c.outputs:
        out[o.name] = ((rows, length) if o.name in varying else (rows,)) + width(c.sizes[o.name])
    for r in c.reductions:
        if r.monoid.k is not None:
            out[f"{r.name}.index"] = (rows, r.monoid.k)
    return out


__all__ = ["call", "is_tensor", "torch_op"]
