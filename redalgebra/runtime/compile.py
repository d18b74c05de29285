"""``compile(fused, backend, strategy)``: a callable running the generated kernel.

The callable takes the reference evaluator's layout (see
:mod:`redalgebra.ir.reference`) — NumPy arrays, or device arrays exposing the
CUDA array interface (numba, CuPy, PyTorch) on the CUDA back ends — and
returns the outputs by name (plus ``"NAME.index"`` for top-k).  A kernel is
generated and compiled once per distinct set of compile-time facts (vector
sizes, input dtypes, masking), then cached.
"""

from __future__ import annotations

from collections.abc import Mapping

import functools
import re
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ..codegen import KernelSource, Problem, Spec, generate
from ..codegen.kernels import scratch_shape
from ..codegen.strategies import for_target, get
from ..codegen.strategies.columns import refusal as columns_refusal
from ..codegen.strategies.columns import scalars_fuse as columns_scalars_fuse
from ..derive import FusedCascade
from ..errors import EvaluationError, ExactnessHint, NotFusableError, PerformanceHint, RedalgebraError
from ..ir.reference import unbound_names
from .backends import check_backend, cuda_module, device_capability, device_multiprocessors
from .cache import load
from .choice import ROUNDED_GAIN, ROUNDED_NOTE, choose, rounded_alternative
from .formats import Encoded, dtype_of as _dtype, is_device as _is_device
from .arguments import SPLIT_QUERY, bound_param, query_fits_float16
from .outputs import ASKED, asked_outputs, given_outputs, host_output, output_shapes, poisoned, returned
from .call_layout import (_alignment, _c_contiguous, _contiguous_alignment, _signature, broadcast_rows, k_major,
                          param_kind)
from .launch import Launch, device_launch

_FLOAT_DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16"}
DEFAULT_STRATEGY = {"cpu": "auto", "cuda": "auto", "cudasim": "auto"}
class KMajorUnread(EvaluationError):
    """A device input laid out K-major that the call's strategy does not read as it lies (``Spec.k_major``): a
    raw device array is refused with this message; a torch call copies the view instead."""


class Params16Unread(EvaluationError):
    """A vector param given on the device in 16 bits that the call's strategy does not stage as it is
    (``Strategy.params16``): a raw device array is refused with this message; a torch call widens it instead (a host
    array is widened on the host)."""


class _KMajorRows:
    """A K-major device array (shape (1, L, n), the axis innermost) as the C-contiguous (n, L) matrix it is: the same
    memory through the CUDA array interface (``Spec.k_major``)."""

    __slots__ = ("base", "shape", "ndim", "__cuda_array_interface__")

    def __init__(self, a):
        face = a.__cuda_array_interface__
        self.base, self.shape, self.ndim = a, (face["shape"][2], face["shape"][1]), 2
        self.__cuda_array_interface__ = {**face, "shape": self.shape, "strides": None}


def _check_mappings(inputs, params, out) -> None:
    """A call's inputs, params and out by name: a named error for anything else (a bare array has no ``.items``)."""
    for what, d in (("inputs", inputs), ("params", params), ("out", out)):
        if not isinstance(d, Mapping) and (d is not None or what == "inputs"):
            raise EvaluationError(f"{what}: a dict by name ({{'x': array}}), got {type(d).__name__}")


def _caller_level() -> int:
    """The ``stacklevel`` of a warning raised by the caller of this function that names the first frame outside
    the package (a call, a launch prepared, a layout asked for: the user's line, whichever way it came in)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "redalgebra":
        frame, level = frame.f_back, level + 1
    return level


@dataclass
class Kernel:
    """A compiled fused cascade; call it with inputs, params and an optional ``keep`` mask."""

    fused: FusedCascade
    backend: str
    strategy: str
    threads: int | None = None   # threads per block; None: the strategy's choice
    tile: int | None = None      # elements per thread (per warp in ``lanes``) per chunk; None: chosen per row length
    fast_exp: bool = False       # the hardware's approximate exp (real CUDA only)
    segments: int | None = None  # split strategies: segments per row; None: chosen from the shape
    group: int | None = None     # rows: threads per row; None: chosen from the shape
    out_dtype: str | None = None  # "float32": every output in float32; None: as the strategy writes them; a 16-bit type: the outputs a strategy can store so
    min_blocks: int | None = None  # launch bounds: blocks per multiprocessor the registers must allow
    persistent: bool | None = None  # rows: blocks walk rows on a grid of multiprocessors x min_blocks; None: chosen
    #                               (columns_wgmma: its product's blocks walk the output's tiles; None: off)
    batch: int | None = None     # columns: rows a block processes together; None: chosen from the shape
    fp8_products: bool = False   # columns_wgmma: the product on the FP8 instruction (sums promoted every 128 elements)
    cluster: bool | None = None  # wgmma with segments: a row tile's segments merged in a thread-block cluster; None: chosen
    _compiled: dict = field(default_factory=dict, repr=False)
    #: user name -> the name in the generated code, for names that could collide with the generator's
    #: (``fused`` is then the cascade derived under the generated names; calls map names both ways)
    rename: dict = field(default_factory=dict, repr=False)
    user: FusedCascade | None = field(default=None, repr=False)  # the cascade as given, when renamed
    _plans: dict = field(default_factory=dict, repr=False)  # call signature -> _layout's result
    _calls: dict = field(default_factory=dict, repr=False)  # torch call signature -> prepared call (tensors.py)
    _hinted: set = field(default_factory=set, repr=False)  # the hints given once (choice.rounded_alternative; "no gradient")

    def to_generated(self, d):
        """A dict keyed by user names, keyed by the generated code's names."""
        if not self.rename or not d:
            return d
        return {self.rename.get(k, k): v for k, v in d.items()}

    def from_user(self, d):
        """:meth:`to_generated` of a call's dict, which must hold the user's names only: a generated name there would
        pass as the name it stands for, or override the user's value of that name."""
        if not self.rename or not d:
            return d
        inner = [k for k in d if k not in self.rename and k in self._generated]
        if inner:
            back = {v: k for k, v in self.rename.items()}
            err = EvaluationError(f"{inner[0]!r} is not a name of the cascade (it is the generated code's name for "
                                  f"{back[inner[0]]!r}: give that name)")
            err.user_names = True  # (user_messages leaves it as it is)
            raise err
        return self.to_generated(d)

    @functools.cached_property
    def _generated(self) -> frozenset:
        return frozenset(self.rename.values())

    @contextmanager
    def user_messages(self):
        """Errors raised inside speak of the user's names, not the generated code's."""
        try:
            yield
        except RedalgebraError as err:
            if not self.rename or getattr(err, "user_names", False):
                raise
            back = {v: k for k, v in self.rename.items()}
            message = re.sub(r"\bu\d+\b", lambda m: back.get(m.group(), m.group()), str(err))
            try:
                renamed = type(err)(message)
            except TypeError:  # an error type with more arguments
                renamed = RedalgebraError(message)
            raise renamed from None

    def to_user(self, d: dict) -> dict:
        """Outputs keyed by the generated code's names (``NAME.index`` too), keyed by the user's names."""
        if not self.rename:
            return d
        back = {v: k for k, v in self.rename.items()}
        out = {}
        for key, value in d.items():
            head, dot, tail = key.partition(".")
            out[back.get(head, head) + dot + tail] = value
        return out

    @property
    def names(self) -> tuple:
        """(input names, param declarations) in declaration order, computed once (calls read them)."""
        if not hasattr(self, "_names"):
            c = self.fused.cascade
            self._names = (tuple(s.name for s in c.inputs), tuple(c.params))
        return self._names

    def resolve(self, rows: int, length: int, sizes: dict | None = None, reps: dict | None = None,
                problem: Problem | None = None) -> str:
        """The registered strategy ``rows`` rows of ``length`` run with (``auto`` chooses; the simulator's twin).
        ``problem``: the call's dtypes and alignment, for strategies that depend on them (the tensor cores)."""
        name = choose(self.fused, rows, length, sizes, reps, problem) if self.strategy == "auto" else self.strategy
        if self.strategy == "auto" and name == "columns":  # (said once a kernel and alternative)
            alt = rounded_alternative(self.fused, rows, reps, problem)
            if alt is not None and alt not in self._hinted:
                self._hinted.add(alt)
                factor = f"here {self.fused.cascade.name or 'the cascade'}'s"
                warnings.warn(PerformanceHint(ROUNDED_NOTE.format(factor=factor, alt=alt, gain=ROUNDED_GAIN[alt])),
                              stacklevel=2)
        if self.threads is not None and self.threads % 32 and get(name, self.backend).whole_warps:
            raise RedalgebraError(f"the {name} strategy works in whole warps (shuffles, or a warp a row or an element): "
                                  f"threads must be a multiple of 32, got {self.threads}")
        return for_target(name, self.backend).name

    def source(self, spec: Spec, strategy: str | None = None) -> KernelSource:
        return generate(self.fused, self.backend, strategy or self.strategy, spec)

    def _module(self, spec: Spec, strategy: str):
        key = (strategy, spec)
        if key not in self._compiled:
            src = self.source(spec, strategy)
            if self.backend != "cpu":
                cuda_module(self.backend)  # picks the simulator or real CUDA before the module imports numba.cuda
            self._compiled[key] = (src, load(src.source))
        return self._compiled[key]

    # -- argument layout ---------------------------------------------------------------------------
    def layout(self, inputs: dict, params: dict | None = None, keep=None):
        """(Spec, rows, length, repetitions, strategy, launch values) of a call with inputs and params keyed
        by the user's names: what the call would compile and launch (the tools' view of a call)."""
        with self.user_messages():
            return self._layout(broadcast_rows(self.from_user(inputs)), self.from_user(params or {}), keep)

    def _layout(self, inputs: dict, params: dict, keep):
        c = self.fused.cascade
        unbound = unbound_names(c, inputs, params)
        if unbound:
            raise EvaluationError(unbound)
        for s in c.inputs:  # the number of dimensions first: every message below reads shape[0] and shape[1]
            given = getattr(inputs[s.name], "bits", inputs[s.name])
            want = 2 if s.size is None else 3
            if not hasattr(given, "shape"):
                raise EvaluationError(f"input {s.name} must be an array of {want} dimensions (a NumPy array, a torch "
                                      f"tensor or a CUDA device array), got a {type(given).__name__}")
            shape = tuple(given.shape)
            if len(shape) != want:
                raise EvaluationError(f"input {s.name} must be a {want}-D array (rows, L{', size' if want == 3 else ''}), "
                                      f"got shape {shape}")
            if 0 in shape:
                raise EvaluationError(f"input {s.name} has shape {shape}: rows, the axis and vector sizes must "
                                      f"have at least one entry")
        for p in c.params:  # numbers or arrays of them (a ragged list is neither: NumPy would say so deep below)
            try:
                np.shape(params[p.name])
            except ValueError:
                raise EvaluationError(f"param {p.name}: expected a number or an array of numbers, got a ragged "
                                      f"{type(params[p.name]).__name__}") from None
        length = tuple(inputs[c.inputs[0].name].shape)[1]
        given = {p.name: getattr(params[p.name], "bits", params[p.name]) for p in c.params}  # (bfloat16 as its bits)
        rows = max([tuple(inputs[s.name].shape)[0] for s in c.inputs] +
                   [tuple(np.shape(given[p.name]))[0] for p in c.params
                    if np.ndim(given[p.name]) == (1 if p.size is None else 2)])
        if keep is not None and tuple(np.shape(keep)) != (rows, length):
            raise EvaluationError(f"keep must be (rows, L) = ({rows}, {length}) booleans, got shape {tuple(np.shape(keep))}")
        sizes, dtypes, reps, major = {}, [], {}, []
        for s in c.inputs:
            a = inputs[s.name]
            encoded = a.dtype if isinstance(a, Encoded) else None
            a = a.bits if encoded else a
            want = 2 if s.size is None else 3
            if len(a.shape) != want or a.shape[1] != length:
                raise EvaluationError(f"input {s.name} must be (rows, L{', size' if want == 3 else ''}) with L = "
                                      f"{length}, got {tuple(a.shape)}")
            if rows % a.shape[0]:
                raise EvaluationError(f"input {s.name} has {a.shape[0]} rows, which does not divide {rows}")
            reps[s.name] = rows // a.shape[0]
            if want == 3:
                self._size(sizes, s.size, a.shape[2], s.name)
            dt = _dtype(a)
            if want == 3 and k_major(a):  # read as the (n, L) rows it is where the strategy can (Spec.k_major)
                major.append(s.name)
            elif _is_device(a) and self.backend == "cuda" and not _c_contiguous(a, dt.itemsize):
                raise EvaluationError(f"input {s.name} is a device array that is not C-contiguous (strides "
                                      f"{a.__cuda_array_interface__.get('strides')}): the kernels index rows by their "
                                      f"length; pass a contiguous copy (cupy.ascontiguousarray, .copy())")
            if not encoded and dt not in _FLOAT_DTYPES:
                raise EvaluationError(f"input {s.name} has dtype {dt}; the kernels read float32, float16, "
                                      f"bfloat16 bit patterns wrapped with as_bfloat16(), or FP8 e4m3 bytes wrapped "
                                      f"with as_e4m3()")
            dtypes.append((s.name, encoded or _FLOAT_DTYPES[dt]))
        halves, on_device = [], False
        for p in c.params:
            if p.size is not None:
                kind = param_kind(params[p.name]) if self.backend != "cpu" else None
                if kind is not None:  # (read as it is by a strategy that stages it so, Strategy.params16)
                    halves.append((p.name, kind))
                    on_device |= _is_device(given[p.name])
                shape = () if given[p.name] is None else tuple(np.shape(given[p.name]))
                if not shape:
                    raise EvaluationError(f"param {p.name} is a vector of size {p.size}: pass (size,) or (rows, size) "
                                          f"values, got {type(params[p.name]).__name__}")
                self._size(sizes, p.size, shape[-1], p.name)
        def plan(major):
            alignment = _alignment(inputs, c, length, reps, bool(self.fused.per_element_outputs), tuple(major))
            try:
                return self.spec_for(rows, length, dtypes + halves, sizes, keep is not None, alignment, reps,
                                     tuple(major))
            except Params16Unread:
                if on_device:
                    raise
            # (16-bit params given on the host that the strategy does not stage as they are: widened on the host)
            return self.spec_for(rows, length, dtypes, sizes, keep is not None, alignment, reps, tuple(major))

        device = [n for n in major if _is_device(getattr(inputs[n], "bits", inputs[n])) and self.backend == "cuda"]
        try:
            strategy, spec, extra = plan(major)
        except RedalgebraError as err:  # (e.g. K-major weights off the 16-byte grid: a copy would be aligned)
            if not device or isinstance(err, Params16Unread):
                raise
            raise self._k_major_unread(inputs, device, str(err)) from None
        unread = [n for n in major if n not in spec.k_major]
        if any(n in device for n in unread):
            raise self._k_major_unread(inputs, [n for n in unread if n in device],
                                       f"{strategy} reads rows by their length")
        if unread:  # host arrays copied contiguous (1, L, n): judged so
            strategy, spec, extra = plan([n for n in major if n in spec.k_major])
        named = self.fused.one_pass_inexact
        if strategy == "rows" and named and not spec.staged:
            # (rows stages a cascade of scalar reductions and top-k lists one reduction at a time, a pass each over a row
            # too long for its registers; one with vector reductions is folded in the one-pass form. Python shows a
            # warning once per place)
            warnings.warn(ExactnessHint(
                f"rows of {length} elements are not staged by the rows kernel (the cascade has vector reductions), so "
                f"it folds them in the one-pass form, which differs from the unfused reference on some "
                f"rows for {', '.join(named)} (ties ranked by the corrections' rounding, or a correction that does not "
                f"exist on a prefix of the row); strategy 'unfused' computes them with their dependencies final"),
                stacklevel=_caller_level())
        return spec, rows, length, reps, strategy, extra

    @staticmethod
    def _k_major_unread(inputs: dict, names: list, why: str) -> "KMajorUnread":
        a = getattr(inputs[names[0]], "bits", inputs[names[0]])
        return KMajorUnread(
            f"input {names[0]} is a device array laid out K-major (shape {tuple(a.shape)}, strides "
            f"{a.__cuda_array_interface__.get('strides')}), which this call cannot read as it lies ({why}); only "
            f"columns_wgmma (e4m3 weights; 16-bit ones with L a multiple of 64; with fp8_products L a multiple of "
            f"128) and columns_mma (L a multiple of 64) read weights so (one matrix for all rows, 16-byte aligned): "
            f"pass a contiguous copy (cupy.ascontiguousarray, .copy())")

    def spec_for(self, rows: int, length: int, dtypes=(), sizes: dict | None = None, keep: bool = False,
                 alignment: tuple | None = None, reps: dict | None = None,
                 k_major: tuple = (), device: tuple | None = None) -> tuple[str, Spec, dict]:
        """(strategy, compile-time Spec, launch-only values such as ``nseg``) of a call with ``rows`` rows
        of ``length``: ``auto`` resolved and the strategy's launch policy applied, as a call would.

        ``dtypes``: ``{input: "float32" | "float16" | "bfloat16" | "e4m3"}`` (float32 where not given); ``sizes``:
        the vector dimensions; ``alignment``: (vec_ok, pitch_ok, same_frame), by default that of fresh
        aligned, contiguous device arrays (as host inputs are copied to); ``reps``: ``{input: rows sharing each
        of its rows}`` (1 where not given; a weight given once for all rows has ``rows``); ``k_major``: inputs given
        K-major, shape (1, L, n) with the axis innermost (``Spec.k_major`` lists those the strategy reads so);
        ``device``: the (compute capability, multiprocessors) to plan for, where not the current GPU's (``redalgebra
        ptx`` without one plans for a Hopper's). Used by calls and ``redalgebra ptx``.
        """
        c = self.fused.cascade
        given = self.to_generated(dict(dtypes))
        # (vector params given in 16 bits on the device named too: Strategy.params16)
        dtypes = tuple((s.name, given.get(s.name, "float32")) for s in c.inputs) + \
            tuple((p.name, given[p.name]) for p in c.params if given.get(p.name, "float32") != "float32")
        sizes = dict(self.to_generated(dict(sizes or {})))
        missing = sorted({x.size for x in (*c.inputs, *c.params) if isinstance(x.size, str)} - set(sizes))
        if missing:
            raise EvaluationError(f"{c.name}: no value given for the vector size(s) {missing}")
        if alignment is None:
            alignment = _contiguous_alignment(c, length, dict(dtypes), sizes, bool(self.fused.per_element_outputs))
        reps = dict(self.to_generated(dict(reps or {})))  # the user's names, as the generated cascade has them
        reps = {s.name: reps.get(s.name, 1) for s in c.inputs}
        problem = Problem(rows, length, tuple(sorted((k, v) for k, v in sizes.items() if isinstance(k, str))),
                          dtypes, keep, *alignment, tuple(sorted(reps.items())),
                          options=(("threads", self.threads), ("tile", self.tile), ("segments", self.segments),
                                   ("fast_exp", self.fast_exp), ("group", self.group), ("batch", self.batch), ("out_dtype", self.out_dtype),
                                   ("simulator", self.backend == "cudasim"), ("persistent", self.persistent),
                                   ("fp8_products", self.fp8_products), ("cluster", self.cluster),
                                   ("cc", device[0] if device else device_capability(self.backend)),
                                   ("sms", device[1] if device else device_multiprocessors(self.backend))),
                          k_major=tuple(self.to_generated({k: 0 for k in k_major})))
        strategy = self.resolve(rows, length, sizes, reps, problem)
        if self.cluster and strategy != "wgmma":  # (only wgmma's segments merge in a thread-block cluster)
            raise RedalgebraError(f"cluster=True merges a row's segments in a thread-block cluster, which only the "
                                  f"wgmma strategy does (Hopper); this call runs {strategy}: leave cluster out")
        halves = [p.name for p in c.params if given.get(p.name, "float32") != "float32"]
        if halves and not get(strategy).params16:
            names = ", ".join(halves)  # (user_messages names them as the user does)
            raise Params16Unread(f"param {names} is given on the device in 16 bits, which {strategy} does not read (it "
                                 f"reads float32 params; wgmma stages a query in the keys' 16-bit type as it is): pass "
                                 f"{names} in float32 (.float()) or use strategy='wgmma'")
        try:
            policy = get(strategy).configure(self.fused, problem)
        except RedalgebraError as err:
            if halves:  # (maybe the 16-bit params: said so, and a torch call or a host array widens them)
                raise Params16Unread(str(err)) from None
            raise
        extra = {k: policy.pop(k) for k in list(policy) if k not in Spec.__dataclass_fields__}
        if self.min_blocks:  # the caller's launch bounds over the policy's
            policy["min_blocks"] = self.min_blocks
        spec = Spec(problem.sizes, problem.dtypes, keep, **{"fast_exp": self.fast_exp, **policy})
        return strategy, spec, extra

    @staticmethod
    def _size(sizes, name, got, who):
        if isinstance(name, int):
            if got != name:
                raise EvaluationError(f"{who} has size {got}, the cascade says {name}")
            return
        if sizes.setdefault(name, got) != got:
            raise EvaluationError(f"{who} has size {got} but {name} = {sizes[name]}")

    def _planned(self, inputs: dict, params: dict, keep):
        """``_layout``'s result, computed once per call signature (shapes, dtypes, strides, 16-byte
        alignment, params' shapes, masking): what a call repeats is only binding and launching."""
        key = _signature(self.fused.cascade, inputs, params, keep)
        if key is None:  # something _layout will refuse with a message
            return self._layout(inputs, params, keep)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= 256:
                self._plans.clear()
            plan = self._plans[key] = self._layout(inputs, params, keep)
        return plan

    # -- call --------------------------------------------------------------------------------------
    def _arguments(self, inputs: dict, params: dict, keep, out=None):
        """The generated module and every named kernel argument (host outputs and scratch allocated)."""
        inputs = broadcast_rows(inputs)
        if self.backend == "cpu":  # numba's CPU target has no float16 arrays: widen on the host
            inputs = {k: (np.asarray(v, np.float32) if not isinstance(v, Encoded) and np.asarray(v).dtype == np.float16
                          else v) for k, v in inputs.items()}
        spec, rows, length, reps, strategy, extra = self._planned(inputs, params, keep)
        src, module = self._module(spec, strategy)
        c = self.fused.cascade
        on_device = self.backend != "cpu" and any(_is_device(getattr(inputs[s.name], "bits", inputs[s.name]))
                                                  for s in c.inputs)
        outs = self._outputs(src, rows, length, spec, on_device, out)
        named = {s.name: (inputs[s.name].bits if isinstance(inputs[s.name], Encoded) else inputs[s.name])
                 for s in c.inputs}
        for name in spec.k_major:  # the (n, L) rows a K-major input is (the same memory on the device)
            named[name] = _KMajorRows(named[name]) if _is_device(named[name]) else np.asarray(named[name])[0].T
        named.update({f"rep_{s.name}": reps[s.name] for s in c.inputs})
        kinds = dict(spec.dtypes)
        named.update({p.name: bound_param(p, params[p.name], rows, kinds.get(p.name, "float32")) for p in c.params})
        if strategy in SPLIT_QUERY and "float16" in dict(spec.dtypes).values():
            query_fits_float16(strategy, c, named)
        # (a mask is read as booleans, as the reference reads it: 0.5 and 256 keep an element)
        named["keep"] = np.zeros((1, 1), np.uint8) if keep is None else \
            np.ascontiguousarray(np.asarray(keep, dtype=bool), np.uint8)
        named.update({f"out_{name.replace('.', '_')}": outs[name] for name, _, _ in src.outputs})
        nseg = extra.get("nseg", 1)
        named.update(rows=rows, length=length, nseg=nseg, seglen=-(-length // nseg))
        for name, dtype, layout, width in src.scratch:
            shape = scratch_shape(layout, rows, length, nseg, None if width is None else src.constants[width])
            named[name] = np.zeros(shape, dtype)
            if name in src.written:
                # what a strategy says it writes whole before reading is poisoned on the simulator, so that a read
                # of an entry it did not write shows in the outputs (the GPU's allocation is not zero-filled)
                poisoned(named[name], self.backend)
        return src, module, named, outs, rows

    def __call__(self, inputs: dict, params: dict | None = None, keep=None, out: dict | None = None) -> dict:
        """The outputs by name: NumPy arrays for host inputs, device arrays for device inputs, and torch
        tensors (on the input's device, per-element outputs in its dtype) for torch tensors.

        ``inputs`` and ``params`` are keyed by the cascade's names, every one given; a name the cascade lacks
        is refused (a misspelt one would otherwise be ignored). ``out``: ``{output name: array}`` to write some
        outputs into (the shape and dtype the call would return, contiguous, where the inputs are); they are
        returned as given, written."""
        if type(inputs) is not dict or (params is not None and type(params) is not dict) or out is not None:
            _check_mappings(inputs, params, out)  # (off the common path: plain dicts, no out)
        torch = sys.modules.get("torch")  # (a tensor means torch was imported)
        if torch is not None:
            for v in inputs.values():  # a plain loop: this runs on every call
                if isinstance(v, torch.Tensor):  # a subclass too
                    return _torch_call()(self, inputs, params, keep, out)
        return self.run(inputs, params, keep, out)

    def run(self, inputs: dict, params: dict | None = None, keep=None, out: dict | None = None) -> dict:
        """The call on NumPy, :class:`BFloat16` or CUDA-array-interface inputs (no torch adaptation)."""
        with self.user_messages():
            return self.to_user(self._run(self.from_user(inputs), self.from_user(params or {}), keep,
                                          self.from_user(out)))

    def _run(self, inputs: dict, params: dict, keep, out=None) -> dict:
        src, module, named, outs, rows = self._arguments(inputs, params, keep, out)
        stored, given = dict(src.out_dtypes), out or {}
        if self.backend == "cpu":
            module.kernel(*[np.ascontiguousarray(named[a]) if isinstance(named[a], np.ndarray) else named[a]
                            for a in src.args])
            return {name: returned(self.out_dtype, v, name, stored.get(name), given.get(name)) for name, v in outs.items()}
        on_device = any(_is_device(getattr(inputs[s.name], "bits", inputs[s.name])) for s in self.fused.cascade.inputs)
        launch = self._device_launch(src, module, named, rows)
        launch.run()
        if on_device:  # (device arrays as the kernels stored them)
            return launch.outputs
        result = {}
        for name, arr in launch.outputs.items():
            mine = given.get(name)
            bits = mine.bits if isinstance(mine, Encoded) else mine
            if mine is not None and bits.dtype == arr.dtype:  # (written in place; else asked in 16 bits: rounded in)
                host = arr.copy_to_host(bits)
                result[name] = mine if isinstance(mine, Encoded) else host_output(host, stored.get(name))
            else:
                result[name] = returned(self.out_dtype, host_output(arr.copy_to_host(), stored.get(name)), name, stored.get(name),
                                          mine)
        return result

    def prepare(self, inputs: dict, params: dict | None = None, keep=None) -> Launch:
        """Everything but the launch done once — for timing: ``prepare(...).run()`` only launches."""
        if self.backend == "cpu":
            raise RedalgebraError("prepare() is for the CUDA back ends; call the kernel directly on the CPU")
        with self.user_messages():
            src, module, named, _, rows = self._arguments(self.from_user(inputs), self.from_user(params or {}),
                                                          keep)
        launch = self._device_launch(src, module, named, rows)
        launch.outputs = self.to_user(launch.outputs)
        return launch

    def _device_launch(self, src, module, named, rows) -> Launch:
        return device_launch(self.backend, self.fused.cascade, src, module, named, rows)

    def _outputs(self, src: KernelSource, rows, length, spec, on_device: bool = False, out=None) -> dict:
        """Output arrays: on the host (copied to the device with the call), or — when the inputs are on
        the device — allocated there, never passing through the host (the kernels write every entry).
        ``out``: arrays the caller gives for some outputs (checked, then written in place)."""
        shapes = output_shapes(src, rows, length)
        # an output stored in float32 where out_dtype asks for 16 bits is checked against the type asked; the kernels
        # write it into an array of their own here, and _run rounds it into the caller's (outputs.returned)
        asked = asked_outputs(self.out_dtype, out, shapes, on_device)
        given = given_outputs({k: v for k, v in (out or {}).items() if k not in asked}, shapes, on_device)
        given_outputs(asked, {name: (shapes[name][0], ASKED[self.out_dtype]) for name in asked}, on_device)
        if not on_device:
            return {name: given[name] if name in given else poisoned(np.zeros(shape, dtype), self.backend)
                    for name, (shape, dtype) in shapes.items()}
        cuda = cuda_module(self.backend)
        return {name: given[name] if name in given else cuda.device_array(shape, dtype)
                for name, (shape, dtype) in shapes.items()}

@functools.cache
def _torch_call():
    """``tensors.call``, imported on the first torch call (torch is optional; an import statement in the call
    would cost a microsecond every time)."""
    from .tensors import call

    return call


def compile(fused: FusedCascade, backend: str = "cpu", strategy: str | None = None, threads: int | None = None,
            tile: int | None = None, fast_exp: bool | None = None, segments: int | None = None,
            group: int | None = None, out_dtype: str | None = None, min_blocks: int | None = None,
            persistent: bool | None = None, batch: int | None = None, fp8_products: bool = False,
            cluster: bool | None = None) -> Kernel:
    """A callable that runs ``fused`` with a generated kernel.

    Parameters
    ----------
    backend : ``"cpu"`` | ``"cuda"`` | ``"cudasim"``
    strategy : str, optional
        A name of ``redalgebra.codegen.REGISTRY`` for the back end, or ``"auto"`` (the default: on CUDA and
        the simulator chosen per shape by :func:`choose`; on the CPU ``row``, the one-pass fused kernel, or
        ``levels``, a pass per reduction, for a cascade with a cast, whose one-pass form rounds at a running
        scale, a multi-term sum whose partial sums would cancel at the end (``FusedCascade.combined_late``), or one
        that does not fuse). Under the simulator, which has no warp operations, a strategy with a
        shuffle-free twin runs as the twin.
    threads : int, optional
        Threads per block; the strategy's choice when omitted. Strategies that work in warps (shuffles, a warp a row
        or an element: ``warp``, ``block``, ``tile``, ``split``, the ``lanes`` family, ``rows``, ``vrows``) take whole
        warps, a multiple of 32; the tensor-core ones name the blocks they take; ``thread`` and the shuffle-free
        merges take any count.
    tile : int, optional
        Elements (``rows``: chunks of 16 bytes) per thread per pass; chosen from the shape when omitted.
    fast_exp : bool, optional
        Compute ``exp`` with the hardware's approximate ``ex2`` (a few ulp off; exact at 0 and -inf).
        Default: on for real CUDA, off elsewhere (the CPU and the simulator have no such instruction).
    segments : int, optional
        Segments per row for the split strategies (blocks that fold a row's segments in parallel).
    group : int, optional
        ``rows``: threads per row (a power of two); chosen from the length when omitted. The columns strategies:
        columns a block / 8 (``columns_wgmma`` with ``fp8_products``: 8, 16, 20 or 24; chosen from the shape when
        omitted, 160 columns where their whole waves finish sooner than 128's).
    out_dtype : None | ``"float32"`` | ``"bfloat16"`` | ``"float16"``
        Outputs in the input's dtype where the strategy writes it (``rows``: bfloat16 in, bfloat16
        out; ``fp8(…)`` outputs as e4m3 bytes), or float32 for every output; a 16-bit type: every
        output in it (top-k indices aside), stored so by the kernels where the strategy can
        (``rows``' per-element outputs, ``columns_wgmma``'s outputs of the weights' width: half the
        bytes a GEMM's epilogue writes; ``mma``'s and ``wgmma``'s vector outputs) and converted on return elsewhere (host arrays and torch
        tensors; CUDA device arrays given as inputs get the outputs as the kernels stored them).
    min_blocks : int, optional
        CUDA launch bounds: registers limited so that this many blocks fit on a multiprocessor (more
        rows in flight, at the risk of spills: ``redalgebra ptx`` shows registers and spills).
    persistent : bool, optional
        ``rows``: launch only as many blocks as fit on the GPU at once (multiprocessors × ``min_blocks``),
        each walking rows, instead of a block per row; chosen from the shape when omitted. ``columns_wgmma``:
        the product's blocks (multiprocessors × ``min_blocks``, one a multiprocessor by default) walk the
        output's tiles (off when omitted). ``wgmma``: the producer block (``threads=384``) walks row tiles, a block a
        multiprocessor, its rows then in one segment; by default where the row is one segment (and, under a causal
        mask, the ring has at most three stages); ``True`` with a smaller block is refused.
    batch : int, optional
        ``columns``: rows a block processes together (they share its reads of the vector inputs; it must
        divide how many rows share each vector row); chosen from the shape when omitted.
    fp8_products : bool, optional
        ``columns_wgmma`` with e4m3 weights and factors that are ``fp8()`` values (FP8 quantisation + GEMM): the
        product on Hopper's FP8 instruction, twice the products a cycle of the float16 one, the weights transposed
        once a call. **Not exact**: the instruction sums in fewer bits than float32, so each tile of 128 elements is
        summed afresh and added in float32 (what cuBLAS's FP8 GEMM, ``torch._scaled_mm``, does); measured on an
        H200 about 1e-4 of the largest output from float64, where the default float16 product is within float32's
        rounding. Off by default. Where it does not apply (other weights or factors, a mask, several weight
        matrices, another strategy) the exact product runs; ``redalgebra ptx --fp8-products`` says which.
    cluster : bool, optional
        ``wgmma`` with a row split into segments (a decode step: few rows over a long axis): the segments of a tile of
        rows launched as one thread-block cluster (Hopper), which merges their states through its distributed shared
        memory — no partial states in global memory, no second kernel. Off by default (``None``, ``False``: the
        partial states and the combine kernel): on an H100 it took MLA's decode step the same time where a call's
        clusters all fit the GPU at once, and twice the time where they did not (a cluster of 4 blocks of 231 KB: 30 at
        once). ``True`` applies it where it can (2 to 16 segments, blocks without a producer warpgroup, the states
        fitting the block's shared memory; a call of one segment has nothing to merge) and is refused elsewhere. The
        merge is the combine kernel's in the same order, its final division by ``div.full`` (within 2 ulp, as the
        one-segment kernel divides; the combine kernel rounds it exactly).
    """
    check_backend(backend)
    if not isinstance(fused, FusedCascade):
        raise RedalgebraError(f"compile() takes a FusedCascade (from redalgebra.derive), got {type(fused).__name__}")
    c = fused.cascade
    if not c.outputs and all(r.monoid.k is None for r in c.reductions):  # (a top-k's positions are written anyway)
        # (evaluate returns the reductions too; the kernels write only the outputs)
        raise RedalgebraError(f"the cascade has no out line, so its kernels would compute nothing: add one per result "
                              f"wanted, e.g. out y = {c.reductions[-1].name if c.reductions else '...'}")
    strategy = strategy or DEFAULT_STRATEGY[backend]
    if not fused.analysis.fusable:  # the forms of derive.unfused: no fused form, so no one-pass strategy
        # the level order needs none: columns computes the scalar reductions first (when they fuse among
        # themselves) and streams the rest with them final, as the unfused form does; levels on the CPU
        level_order = backend != "cpu" and columns_refusal(fused) is None and columns_scalars_fuse(fused)
        if strategy == "auto":
            strategy = "levels" if backend == "cpu" else "columns" if level_order else "unfused"
        allowed = ("levels",) if backend == "cpu" else ("unfused", "columns") if level_order else ("unfused",)
        if strategy not in allowed:
            raise NotFusableError(f"{fused.cascade.name} is not fusable, so only {' or '.join(map(repr, allowed))} "
                                  f"(a pass per reduction{', or the level order' if 'columns' in allowed else ''}) "
                                  f"runs it on {backend}: {fused.guards[0]}", fused.analysis)
    if strategy == "auto" and backend == "cpu":
        # a cast (fp8) rounds at a running scale in the one-pass form: the level order rounds at the final one; a
        # top-k of corrected values ranks equal elements by the corrections' rounding: the level order as the reference;
        # a correction that does not exist on a prefix (NaN from there on): the level order has no corrections; partial
        # sums combined once, at the end, which cancel where their terms nearly do: the level order sums as written
        strategy = "levels" if (fused.exact_in_reals_only or fused.corrected_selections or fused.uncorrectable
                                or fused.combined_late) else "row"
    if strategy != "auto":
        chosen = get(strategy, backend)  # a clear error for a name that is not registered on this back end
        named = fused.one_pass_inexact
        if named and fused.analysis.fusable and not chosen.final(fused) and strategy != "unfused":  # (a pass a level)
            warnings.warn(ExactnessHint(
                f"strategy {strategy!r} runs the one-pass form, which differs from the unfused reference on some rows "
                f"for {', '.join(named)} (a correction that does not exist on a prefix of the row; ties ranked by "
                f"the corrections' rounding; elements of a segment skipped as empty, where a max is -inf, that "
                f"the reference still counts — a top-k of softmax values over a row with fewer finite elements than "
                f"k then keeps -inf and its normalised values are NaN; or partial sums subtracted at the end, which "
                f"lose every digit where the elements sit far from 0 against their spread: the derivation's guards "
                f"say which); the level "
                f"order ('levels' on the CPU, what auto takes there; 'rows' on the GPU) computes them with their "
                f"dependencies final"), stacklevel=2)
    for name, value in (("threads", threads), ("tile", tile), ("segments", segments), ("group", group),
                        ("min_blocks", min_blocks), ("batch", batch)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise RedalgebraError(f"{name} must be a positive integer, got {value!r}")
    if tile is not None and tile & (tile - 1):
        raise RedalgebraError(f"tile must be a power of two, got {tile}")
    fast_exp = backend == "cuda" if fast_exp is None else fast_exp
    if fast_exp and backend != "cuda":
        raise RedalgebraError(f"fast_exp is a CUDA instruction; the {backend} back end has none")
    if out_dtype not in (None, "float32", "bfloat16", "float16"):
        raise RedalgebraError(f"out_dtype is None (the input's dtype where the strategy can), 'float32', 'bfloat16' "
                              f"or 'float16', got {out_dtype!r}")
    from ..codegen.names import generated_names

    generated, rename = generated_names(fused)  # names the generated code could confuse with its own, renamed
    if persistent is not None and not isinstance(persistent, bool):
        raise RedalgebraError(f"persistent must be True, False or None, got {persistent!r}")
    if not isinstance(fp8_products, (bool, np.bool_)):
        raise RedalgebraError(f"fp8_products must be True or False, got {fp8_products!r}")
    fp8_products = bool(fp8_products)
    if cluster is not None and not isinstance(cluster, (bool, np.bool_)):
        raise RedalgebraError(f"cluster must be True, False or None, got {cluster!r}")
    return Kernel(generated, backend, strategy, threads, tile, fast_exp, segments, group, out_dtype, min_blocks,
                  persistent, batch, fp8_products, None if cluster is None else bool(cluster), rename=rename,
                  user=fused if rename else None)
