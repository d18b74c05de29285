"""PyTorch interop: tensors in and out of a compiled kernel, and the kernel as a ``torch.library`` op.

The one module of the package that imports torch (optional: only here, and only when used):

* :func:`call` runs a :class:`~redalgebra.runtime.Kernel` on torch tensors — any supported dtype as
  it is (bfloat16 included), params as tensors or numbers — and returns torch tensors on the
  input's device. CUDA tensors go to the kernel without a copy; CPU tensors are viewed as NumPy.
* :func:`torch_op` registers a cascade as the custom op ``redalgebra::<name>`` with a fake (meta)
  implementation, so it runs inside ``torch.compile(fullgraph=True)`` graphs without graph breaks.
  It computes forward values only: an input that requires grad (with grad mode on) is refused with a
  message, never silently given no gradient.
  The op takes the cascade's inputs, then its params, each in declaration order, as tensors; it
  returns its outputs in declaration order (then the indices of each top-k), one tensor when there
  is one. CPU tensors run on the CPU back end, CUDA tensors on the CUDA one.

Output dtypes: per-element outputs in the first input's dtype (as PyTorch does; ``fp8(…)`` outputs as
``float8_e4m3fn``), row outputs in float32, top-k indices as int32.
"""

from __future__ import annotations

import keyword
import re
import sys
import warnings

import numpy as np

from ..derive import FusedCascade
from ..errors import EvaluationError, RedalgebraError
from ..ir.reference import unbound_names
from .arguments import SPLIT_QUERY, bound_param, param_values, query_fits_float16
from .call_layout import broadcast_rows
from .compile import Kernel, KMajorUnread, Params16Unread, compile
from .formats import Encoded, as_bfloat16, as_e4m3
from .outputs import shared_outputs

_OPS: dict = {}  # op name -> (cascade text, op)


_TORCH: list = []  # torch, once imported (calls read it on every call)


def _torch():
    if _TORCH:
        return _TORCH[0]
    try:
        import torch
    except ImportError as err:  # pragma: no cover - exercised where torch is missing
        raise RedalgebraError("PyTorch is not installed: `pip install torch` (an optional dependency)") from err
    _TORCH.append(torch)
    return torch


def is_tensor(value) -> bool:
    """Whether ``value`` is a torch tensor (a subclass too); False without importing torch where no one has."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _input(t):
    """A tensor as a kernel input: CUDA tensors as they are (bfloat16 as its bit patterns, ``float8_e4m3fn`` as its
    bytes), CPU ones as NumPy."""
    torch = _torch()
    if t.dtype == torch.bfloat16:
        bits = t.view(torch.int16)
        return as_bfloat16(bits if t.is_cuda else bits.numpy())
    if t.dtype == torch.float8_e4m3fn:
        codes = t.view(torch.uint8)
        return as_e4m3(codes if t.is_cuda else codes.numpy())
    if t.dtype not in (torch.float32, torch.float16):
        raise RedalgebraError(f"the kernels read float32, float16, bfloat16 or float8_e4m3fn tensors, got {t.dtype}")
    return t if t.is_cuda else t.detach().numpy()


def _param(t, rows: int, vector: bool, halves: bool = False):
    """A param tensor: on the GPU as it is when it has one row per row (float32; with ``halves``, a vector one in
    float16 or bfloat16 too, which a strategy may stage as it is: ``Strategy.params16``), else via the host."""
    if not is_tensor(t):
        return t
    t = t.detach()
    if t.is_cuda and t.dim() == (2 if vector else 1) and t.shape[0] == rows:
        torch = _torch()
        if halves and vector and t.dtype in (torch.float16, torch.bfloat16):
            # (read in 16-byte loads: a contiguous copy where it is not contiguous or not aligned)
            t = t.contiguous() if t.data_ptr() % 16 == 0 else t.clone(memory_format=torch.contiguous_format)
            return as_bfloat16(t.view(torch.int16)) if t.dtype == torch.bfloat16 else t
        return t.float().contiguous()  # (an int param's values not read back to be checked: a synchronisation)
    # (integers and float64 as they are: the call checks them on the host — an int param's whole numbers, a value past
    # float32's range — before it rounds them to float32)
    torch = _torch()
    return (t if not t.is_floating_point() or t.dtype == torch.float64 else t.float()).cpu().numpy()


def out_dtypes(fused: FusedCascade, first):
    """``{output name: torch dtype}`` of the per-element outputs for a first input of dtype ``first``."""
    torch = _torch()
    from ..codegen.strategies.rows_policy import out_dtypes as stored

    names = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
             "e4m3": torch.float8_e4m3fn}
    first = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(first, "float32")
    dtypes = {fused.cascade.inputs[0].name: first}
    return {name: names[d] for name, d in stored(fused, dtypes, None)}


def _output(value, want, device):
    """A kernel output as a tensor of dtype ``want`` on ``device``: 16-bit patterns read as bfloat16 and bytes as e4m3
    (the values they store, never converted as integers), then converted where ``want`` differs."""
    torch = _torch()
    if isinstance(value, Encoded):  # (bfloat16 patterns, e4m3 bytes)
        value = value.bits
    if isinstance(value, np.ndarray):
        t = torch.from_numpy(value)
    else:  # a device array (numba): the tensor shares its memory
        t = torch.as_tensor(value, device=device)
    if t.dtype in (torch.uint16, torch.int16):
        t = t.view(torch.bfloat16)
    elif t.dtype == torch.uint8:
        t = t.view(torch.float8_e4m3fn)
    return t.to(want) if t.dtype != want else t


def _wanted(kernel: Kernel, per_element: dict, name: str):
    """The dtype a call returns output ``name`` in: the 16-bit type ``out_dtype`` asks for (stored so by the kernels
    where the strategy can, converted otherwise); else torch's convention — per-element outputs in the input's dtype
    (``per_element``), float32 otherwise."""
    torch = _torch()
    if name.endswith(".index"):
        return torch.int32
    if kernel.out_dtype in ("bfloat16", "float16", "float32"):
        return getattr(torch, kernel.out_dtype)
    return per_element.get(name, torch.float32)



def call(kernel: Kernel, inputs: dict, params: dict | None = None, keep=None, out: dict | None = None) -> dict:
    """Run ``kernel`` on torch tensors; the outputs as tensors on the first input's device.

    CUDA tensors on the current device take the prepared path (:class:`_Call`): after the first call
    of a signature, a call allocates its outputs from torch's caching allocator, binds pointers and
    launches on torch's current stream.

    ``out``: ``{output name: tensor}`` to write into — the dtype and shape the call would return, on the
    inputs' device; the prepared path writes contiguous ones in place, others receive a copy.
    """
    if not kernel.rename:  # the common case, kept free of the translation (it runs on every call)
        return _call(kernel, inputs, params or {}, keep, out)
    with kernel.user_messages():
        return kernel.to_user(_call(kernel, kernel.from_user(inputs), kernel.from_user(params or {}), keep,
                                    kernel.from_user(out)))


def _no_gradient(kernel: Kernel, inputs: dict, params: dict) -> None:
    """Warn once a kernel where a tensor that requires grad is given with grad mode on: the outputs carry no gradient
    (the kernels compute forward values; ``torch_op`` refuses such a call, this one runs it, as inference with a
    model's parameters does). Asked on a signature's first call, not on every one."""
    if "no gradient" in kernel._hinted or not _torch().is_grad_enabled():
        return
    if any(is_tensor(t) and t.requires_grad for t in (*inputs.values(), *params.values())):
        kernel._hinted.add("no gradient")
        warnings.warn(f"{kernel.fused.cascade.name}: an input or param requires grad, and the outputs carry no gradient "
                      f"(redalgebra's kernels compute forward values only); call under torch.no_grad() or "
                      f"torch.inference_mode() to say so", stacklevel=4)


def _call(kernel: Kernel, inputs: dict, params: dict, keep, out) -> dict:
    if kernel.backend == "cuda":
        torch = _torch()
        device = _current_device(torch)
        key = _signature(kernel, inputs, params, keep, device)
        if key is not None:
            prepared = kernel._calls.get(key)
            if prepared is not None:  # the key holds every input's shape and strides: contiguous, or K-major where read so
                return prepared(inputs, params, keep, out)
            # the kernels index rows by their length: a view is copied on the device (clone, not .contiguous():
            # torch calls a size-1 dimension of stride 0 contiguous, numba does not) — but a K-major weight (W.t()
            # of an (n, L) matrix, as (1, L, n)), which a strategy may read as it lies (Spec.k_major)
            inputs = broadcast_rows(inputs)  # (w.expand(R, L, n): its one row, shared)
            views = {name: t.clone(memory_format=torch.contiguous_format) for name, t in inputs.items()
                     if is_tensor(t) and (not t.is_contiguous() or 0 in t.stride()) and not _k_major(t)}
            if views:
                return _call(kernel, {**inputs, **views}, params, keep, out)
            _no_gradient(kernel, inputs, params)
            if len(kernel._calls) >= 256:
                kernel._calls.clear()
            try:
                try:  # a query as the model holds it (float16, bfloat16): read as it is where the strategy stages it so
                    prepared = _Call(kernel, inputs, params, keep, device, halves=True)
                except Params16Unread:  # (the strategy reads float32 params: widened on each call)
                    prepared = _Call(kernel, inputs, params, keep, device)
            except KMajorUnread:  # this signature's strategy reads rows by their length: its K-major views copied
                prepared = _Copied(kernel, tuple(name for name, t in inputs.items() if is_tensor(t) and _k_major(t)))
            kernel._calls[key] = prepared
            return prepared(inputs, params, keep, out)
    _no_gradient(kernel, inputs, params)
    if out:  # (refused before the kernels run; _into then checks each against its result)
        _out_grads(out)
        _one_tensor_an_output(out)
    return _into(_slow_call(kernel, inputs, params, keep), out)


def _k_major(t) -> bool:
    """Whether tensor ``t`` is (1, L, n) with the axis innermost: ``W.t()[None]`` of a contiguous (n, L) ``W``."""
    return t.dim() == 3 and t.shape[0] == 1 and t.shape[1] > 1 and t.shape[2] > 1 and t.stride()[1:] == (1, t.shape[1])


class _Copied:
    """A signature whose K-major views the strategy does not read as they lie: each call copies them, then runs the
    contiguous copies' prepared call."""

    def __init__(self, kernel: Kernel, names: tuple):
        self.kernel, self.names = kernel, names

    def __call__(self, inputs: dict, params: dict, keep, given=None) -> dict:
        torch = _torch()
        copies = {name: inputs[name].clone(memory_format=torch.contiguous_format) for name in self.names}
        return _call(self.kernel, {**inputs, **copies}, params, keep, given)


def _out_grads(out: dict) -> None:
    """Refuse an ``out`` tensor that requires grad (with grad mode on): torch's own copy would say only that a leaf
    variable is used in an in-place operation."""
    for name, given in out.items():
        if is_tensor(given) and given.requires_grad and _torch().is_grad_enabled():
            raise RedalgebraError(f"out[{name!r}] requires grad: the kernels write forward values only, into a tensor "
                                  f"outside autograd (detach it, or call under torch.no_grad())")


def _one_tensor_an_output(out: dict) -> None:
    """Refuse, before the launch, outputs the call cannot write: on a device the kernels do not run on (``meta``);
    expanded (a stride of 0: one memory location for several elements); two given in one tensor's memory —
    overlapping elements, whether the tensors are contiguous or strided views (a buffer's interleaved columns are
    apart; a column and the whole buffer are not)."""
    tensors = {name: t for name, t in out.items() if is_tensor(t)}
    for name, t in tensors.items():
        _host_or_gpu(t, f"out[{name!r}]")
        if any(n > 1 and step == 0 for n, step in zip(t.shape, t.stride())):
            raise RedalgebraError(f"out[{name!r}] is expanded (strides {tuple(t.stride())}): several of its elements are "
                                  f"one memory location, which the call cannot write each; pass a tensor of its own")
    if len(tensors) > 1:
        shared_outputs({name: (t.data_ptr(), t.element_size(), tuple(t.shape),
                               None if t.is_contiguous() else tuple(t.stride())) for name, t in tensors.items()})


def _host_or_gpu(t, what: str) -> None:
    """Refuse a tensor on a device the kernels do not run on (``meta``, ``mps``, ...), by name."""
    if t.device.type not in ("cpu", "cuda"):
        raise RedalgebraError(f"{what} is a {t.device.type} tensor; the kernels run on CPU and CUDA tensors")


def _into(results: dict, out) -> dict:
    """``results`` with the caller's ``out`` tensors written (copied into) and returned in their place."""
    if not out:
        return results
    for name, given in out.items():  # (checked before the launch: _out_grads, _one_tensor_an_output)
        if name not in results:
            raise RedalgebraError(f"out: no output named {name!r}; the outputs are {sorted(results)}")
        got = results[name]
        if not is_tensor(given) or given.shape != got.shape or given.dtype != got.dtype or given.device != got.device:
            raise RedalgebraError(f"out[{name!r}] must be a {got.dtype} tensor of shape {tuple(got.shape)} on "
                                  f"{got.device}, got {getattr(given, 'dtype', type(given).__name__)} "
                                  f"{tuple(getattr(given, 'shape', ()))}")
        given.copy_(got)
        results[name] = given
    return results


def _slow_call(kernel: Kernel, inputs: dict, params: dict, keep) -> dict:
    """Through ``Kernel.run``: CPU tensors (as NumPy), and what the prepared path does not take."""
    c = kernel.fused.cascade
    unbound = unbound_names(c, inputs, params)
    if unbound:
        raise EvaluationError(unbound)
    for kind, given in (("input", inputs), ("param", params)):
        for name, t in given.items():
            if is_tensor(t):
                _host_or_gpu(t, f"{kind} {name}")
    if is_tensor(keep):
        _host_or_gpu(keep, "keep")
        keep = keep.float() if keep.dtype.is_floating_point and keep.element_size() == 1 else keep  # (float8: no NumPy type)
    first = inputs[c.inputs[0].name]
    sizes = {p.name: p.size for p in c.params}
    # (no input with rows — 0-d tensors — goes on to Kernel.run, which says what it wants)
    rows = max((int(t.shape[0]) for t in inputs.values() if is_tensor(t) and t.dim() >= 1), default=1)
    got = kernel._run({k: _input(v) if is_tensor(v) else v for k, v in inputs.items()},
                     {k: _param(v, rows, sizes[k] is not None) if k in sizes else v for k, v in params.items()},
                     keep.detach().cpu().numpy() if is_tensor(keep) else keep)
    per_element = out_dtypes(kernel.fused, first.dtype)
    return {name: _output(value, _wanted(kernel, per_element, name), first.device) for name, value in got.items()}


def _current_device(torch) -> int:
    """torch's current CUDA device (its raw getter where torch exposes one: this runs on every call)."""
    raw = getattr(torch._C, "_cuda_getDevice", None)
    return raw() if raw is not None and torch.cuda.is_initialized() else torch.cuda.current_device()


def _signature(kernel: Kernel, inputs: dict, params: dict, keep, device: int):
    """What the prepared path depends on, as a key; None for a call it does not take (host or other-device
    tensors, a missing argument: ``Kernel.run`` handles those, with its messages). Cheap: it runs on
    every call. A tensor's shape and strides are in the key, so what follows from them (contiguity, one
    row per row) is settled once per signature, when :class:`_Call` is built."""
    tensor = _torch().Tensor
    names, specs = kernel.names
    if len(inputs) != len(names) or len(params) != len(specs):
        return None  # (a name the cascade lacks: Kernel.run refuses it)
    try:
        parts = [device]
        for name in names:
            t = inputs[name]
            if not isinstance(t, tensor) or t.get_device() != device or not t.dim():
                return None
            parts.append((t.dtype, t.shape, t.stride(), t.data_ptr() % 16))
        for p in specs:
            v = params[p.name]
            if isinstance(v, tensor):  # (its alignment too: a vector param is read in 16-byte loads where direct, _way)
                parts.append((v.get_device() == device, v.dtype, v.shape, v.stride(), v.data_ptr() % 16))
            elif isinstance(v, _NUMBERS) and not isinstance(v, bool):
                parts.append(float)
            else:
                parts.append((type(v), np.shape(v)))
        if keep is not None:
            parts.append((keep.device, keep.dtype, keep.shape) if is_tensor(keep) else ("host", np.shape(keep)))
    except (KeyError, TypeError, AttributeError, ValueError):  # (ValueError: np.shape of a ragged list)
        return None
    return tuple(parts)


_NUMBERS = (int, float, np.integer, np.floating)
# how a prepared call passes a param (settled by its signature): its own data, a cached per-row tensor of a number,
# or converted on every call
_DIRECT, _NUMBER, _CONVERTED = "direct", "number", "converted"
_STORED = {"float32": "float32", "float16": "float16", "uint16": "bfloat16", "uint8": "float8_e4m3fn",
           "int32": "int32"}


class _Call:
    """A torch call prepared for one signature: the kernels as driver launches with their parameters
    packed, what to allocate per call, and how each pointer is found. The first call of a signature
    builds it through ``Kernel``'s own layout (all its checks and messages) and compiles the kernels."""

    def __init__(self, kernel: Kernel, inputs: dict, params: dict, keep, device: int, halves: bool = False):
        torch = _torch()
        c = kernel.fused.cascade
        self.kernel = kernel
        first = inputs[c.inputs[0].name]
        self.device = first.device
        self.index = first.device.index
        # (the call's rows: a param's too, where a row of the inputs is shared by many rows: a head's K/V by its queries)
        rows = max([int(t.shape[0]) for t in inputs.values()] +
                   [int(v.shape[0]) for p in c.params for v in (params[p.name],)
                    if is_tensor(v) and v.dim() == (2 if p.size is not None else 1)])
        host_params = {p.name: _param(params[p.name], rows, p.size is not None, halves) for p in c.params}
        host_keep = keep.detach().cpu().numpy() if is_tensor(keep) else keep
        given = {k: _input(v) for k, v in inputs.items()}
        src, module, named, outs, rows = kernel._arguments(given, host_params, host_keep)
        launch = kernel._device_launch(src, module, named, rows)
        spec, *_, strategy, _ = kernel._planned(given, host_params, host_keep)  # (the signature's plan, kept)
        # each param's dtype as the kernels read it: float32, or a vector one staged in 16 bits as it is
        self.kinds = {p.name: getattr(torch, dict(spec.dtypes).get(p.name, "float32")) for p in c.params}
        # the strategy whose float16 products refuse a large query, checked on every call's host params too
        self.split_query = strategy if strategy in SPLIT_QUERY and "float16" in dict(spec.dtypes).values() else None
        self.steps = launch.driver
        self.rows = rows
        self.inputs = tuple(s.name for s in c.inputs)
        per_element = out_dtypes(kernel.fused, first.dtype)
        self.outputs = []
        for name, _, _ in src.outputs:
            arr = outs[name]
            stored = getattr(torch, _STORED[np.dtype(arr.dtype).name])
            want = _wanted(kernel, per_element, name)
            self.outputs.append((name, f"out_{name.replace('.', '_')}", tuple(arr.shape), stored, want))
        # outputs a strategy writes in float32 where torch's convention is the input's dtype: (name, that dtype)
        self.converted = tuple((name, want) for name, _, _, stored, want in self.outputs if stored != want)
        # scratch the kernels write whole before reading it is the call's own per stream (calls on one stream run one
        # after the other, so they may share it): allocated on a stream's first call, not on every one (three
        # allocations of the FP8 product's four cost more host time than its kernels take); the rest is zero-filled
        # per call
        scratch = [(name, named[name].shape, getattr(torch, np.dtype(named[name].dtype).name)) for name, *_ in src.scratch]
        self.kept = tuple(entry for entry in scratch if entry[0] in src.written)
        self.scratch = tuple(entry for entry in scratch if entry[0] not in src.written)
        self.per_stream: dict = {}  # stream handle -> {name: its data pointer}, with the tensors kept alive
        self.params = tuple((p, self._way(p, params[p.name], device)) for p in c.params)
        self.numbers: dict = {}  # (param, value) -> its (rows,) device tensor
        # torch's current stream on the device: the raw handle where torch exposes it (no Stream object)
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self.stream = raw or (lambda index: torch.cuda.current_stream(index).cuda_stream)
        # without a mask the kernels read a 1x1 placeholder, kept alive here; a mask is bound per call
        self.placeholder = [a for _, names, args in launch.steps for n, a in zip(names, args) if n == "keep"]

    def _way(self, p, value, device: int) -> str:
        """How a param of this signature is passed: everything it depends on (device, dtype, shape, strides, a
        number or not) is in the call's key."""
        torch = _torch()
        if isinstance(value, torch.Tensor):
            if value.get_device() == device and value.dim() == (2 if p.size is not None else 1) \
                    and value.shape[0] == self.rows and value.dtype == self.kinds[p.name] and value.is_contiguous() \
                    and (p.size is None or value.data_ptr() % 16 == 0):  # (a vector param: read in 16-byte loads)
                return _DIRECT
            return _CONVERTED
        if p.size is None and isinstance(value, _NUMBERS) and not isinstance(value, bool):
            return _NUMBER
        return _CONVERTED

    def _number(self, p, value) -> "torch.Tensor":  # noqa: F821
        if p.integer:
            param_values(p, value)  # (whole, within float32's integers: as a call on the host checks)
        value = float(value)  # np.float32(0.5) and 0.5: one cached tensor
        key = (p.name, value.hex())  # by its bits: -0.0 is not 0.0's tensor, and a NaN finds its own
        t = self.numbers.get(key)
        if t is None:
            if len(self.numbers) >= 64:
                self.numbers.clear()
            t = self.numbers[key] = _torch().full((self.rows,), value, dtype=_torch().float32, device=self.device)
        return t

    def _converted(self, p, value) -> "torch.Tensor":  # noqa: F821
        if self.kinds[p.name] != _torch().float32:  # (16 bits, as the signature's: a contiguous copy on the device)
            return value.detach().to(self.device).clone(memory_format=_torch().contiguous_format)
        value = _param(value, self.rows, p.size is not None)  # a GPU tensor of one row per row, float32 and contiguous
        if is_tensor(value):
            if value.device == self.device:
                return value
            value = value.cpu().numpy()  # another GPU's
        host = bound_param(p, value, self.rows)
        if self.split_query:  # (a query the float16 products cannot hold: refused, as on the first call)
            query_fits_float16(self.split_query, self.kernel.fused.cascade, {p.name: host})
        # a copy: the layout may return a broadcast (read-only) view
        return _torch().from_numpy(np.array(host)).to(self.device)

    def __call__(self, inputs: dict, params: dict, keep, given=None) -> dict:
        torch = _torch()
        pointers, alive = {}, []
        if given:
            unknown = sorted(given.keys() - {name for name, *_ in self.outputs})
            if unknown:
                raise RedalgebraError(f"out: no output named {unknown}; the outputs are "
                                      f"{sorted(name for name, *_ in self.outputs)}")
            _out_grads(given)
        for name in self.inputs:
            pointers[name] = inputs[name].data_ptr()
        for p, way in self.params:
            value = params[p.name]
            if way is _DIRECT:
                pointers[p.name] = value.data_ptr()
            else:
                t = self._number(p, value) if way is _NUMBER else self._converted(p, value)
                alive.append(t)
                pointers[p.name] = t.data_ptr()
        if keep is not None:
            k = keep if is_tensor(keep) else torch.from_numpy(np.asarray(keep))
            # (read as booleans, as the reference reads a mask: 0.5 and 256 keep an element; the kernels test bytes
            # against 0, so a uint8 mask is read as it is)
            if k.dtype != torch.uint8:
                k = (k if k.dtype == torch.bool else k != 0).view(torch.uint8)
            k = k.to(self.device).contiguous()
            alive.append(k)
            pointers["keep"] = k.data_ptr()
        if given:
            _one_tensor_an_output(given)
        out, late = {}, None
        for name, arg, shape, stored, _ in self.outputs:
            mine = given.get(name) if given else None
            # written in place where it is what the kernels would allocate: contiguous and on a 16-byte boundary
            # (they store 16 bytes at a time; a slice of a larger tensor may start between two)
            if mine is not None and is_tensor(mine) and mine.dtype == stored and mine.shape == shape \
                    and mine.device == self.device and mine.is_contiguous() and mine.data_ptr() % 16 == 0:
                out[name] = mine
            else:
                out[name] = torch.empty(shape, dtype=stored, device=self.device)
                if mine is not None:
                    late = late or {}
                    late[name] = mine  # checked and copied into after the launch
            pointers[arg] = out[name].data_ptr()
        for name, shape, dtype in self.scratch:
            t = torch.zeros(shape, dtype=dtype, device=self.device)
            alive.append(t)
            pointers[name] = t.data_ptr()
        stream = self.stream(self.index)
        if self.kept:
            held = self.per_stream.get(stream)
            if held is None:
                if len(self.per_stream) >= 16:
                    self.per_stream.clear()
                tensors = [(name, torch.empty(shape, dtype=dtype, device=self.device)) for name, shape, dtype in self.kept]
                held = self.per_stream[stream] = ({name: t.data_ptr() for name, t in tensors}, tensors)
            pointers.update(held[0])
        for step in self.steps:
            step.bind(pointers)
            step.launch(stream)
        for name, want in self.converted:
            out[name] = out[name].to(want)
        return _into(out, late) if late else out


def _text(fused: FusedCascade) -> str:
    """The cascade's text: what makes two registrations the same op."""
    return str(fused.cascade)  # the cascade in the text format


def _op_name(fused: FusedCascade) -> str:
    base = re.sub(r"\W", "_", fused.cascade.name or "cascade")
    base = base if base[:1].isalpha() else f"c_{base}"
    text = _text(fused)
    name, n = base, 1
    while (name in _OPS and _OPS[name][0] != text) or _taken(name):
        n += 1
        name = f"{base}_{n}"
    return name


def _taken(name: str) -> bool:
    """Whether ``name`` is an attribute of ``torch.ops.redalgebra`` that is none of our ops (``name``, ``_dir``,
    ``__class__``: the namespace's own), which torch would return in the op's place (its registration then fails
    inside torch, half done)."""
    return name not in _OPS and hasattr(_torch().ops.redalgebra, name)


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
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or keyword.iskeyword(name):
        raise RedalgebraError(f"torch_op: the op's name must be a Python identifier (letters, digits, _; not a "
                              f"keyword), got {name!r}")
    if _taken(name):
        raise RedalgebraError(f"torch_op: torch.ops.redalgebra.{name} is the op namespace's own attribute, not an op "
                              f"name it can take; choose another name")
    args = [s.name for s in c.inputs] + [p.name for p in c.params]
    outputs = [o.name for o in c.outputs] + [f"{r.name}_index" for r in c.reductions if r.monoid.k is not None]
    returns = "Tensor" if len(outputs) == 1 else "(" + ", ".join(["Tensor"] * len(outputs)) + ")"
    # (the schema's argument names: the cascade's, or a position's where TorchScript reserves the name: None, def)
    schema = "(" + ", ".join(f"Tensor {a}" if not keyword.iskeyword(a) else f"Tensor arg{i}"
                             for i, a in enumerate(args)) + f") -> {returns}"
    kernels: dict = {}

    n_in = len(c.inputs)
    returned = [o.name for o in c.outputs] + [f"{r.name}.index" for r in c.reductions if r.monoid.k is not None]

    def run(*tensors):
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            raise RedalgebraError(f"redalgebra::{name} has no backward (the kernels compute forward values "
                                  f"only); an input requires grad: call it under torch.no_grad() or on "
                                  f"detached tensors")
        inputs = dict(zip(args[:n_in], tensors[:n_in]))
        params = dict(zip(args[n_in:], tensors[n_in:]))
        backend = "cuda" if tensors[0].is_cuda else "cpu"
        kernel = kernels.get(backend)
        if kernel is None:
            kernel = kernels[backend] = compile(fused, backend, strategy if backend == "cuda" else None)
        got = call(kernel, inputs, params)
        result = tuple(got[o].contiguous() for o in returned)
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

    # torch.library's low-level registration: a call costs a few microseconds of dispatch, where
    # ``torch.library.custom_op`` adds an autograd wrapper and output checks (6.7 us more per call on the development machine's CPU)
    lib = _library()
    try:
        lib.define(name + schema)
    except RuntimeError:  # (a name TorchScript's schema parser reserves beyond Python's keywords: by position)
        lib.define(name + "(" + ", ".join(f"Tensor arg{i}" for i in range(len(args))) + f") -> {returns}")
    for key in ("CPU", "CUDA"):
        lib.impl(name, run, key)
    torch.library.register_fake(f"redalgebra::{name}", fake, lib=lib)
    op = getattr(torch.ops.redalgebra, name)
    _OPS[name] = (text, op)
    return op


_LIBRARY: list = []


def _library():
    """The ``redalgebra`` op namespace (one ``torch.library.Library`` fragment, kept alive here)."""
    if not _LIBRARY:
        _LIBRARY.append(_torch().library.Library("redalgebra", "FRAGMENT"))
    return _LIBRARY[0]


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
