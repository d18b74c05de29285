"""``compile(fused, backend, strategy)``: a callable running the generated kernel.

The callable takes the reference evaluator's layout (see
:mod:`redalgebra.ir.reference`) — NumPy arrays, or device arrays exposing the
CUDA array interface (numba, CuPy, PyTorch) on the CUDA back ends — and
returns the outputs by name (plus ``"NAME.index"`` for top-k).  A kernel is
generated and compiled once per distinct set of compile-time facts (vector
sizes, input dtypes, masking), then cached.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from ..codegen import STRATEGIES, KernelSource, Spec, generate
from ..derive import FusedCascade
from ..errors import EvaluationError, RedalgebraError
from .backends import check_backend, cuda_module
from .cache import load

_FLOAT_DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16"}
DEFAULT_STRATEGY = {"cpu": "row", "cuda": "tile", "cudasim": "tile_shared"}
SIM_EQUIVALENT = {"warp": "block_shared", "block": "block_shared", "tile": "tile_shared",  # no shuffles there
                  "split": "split_shared", "lanes": "lanes_shared",
                  "split_lanes": "split_lanes_shared"}


@dataclass(frozen=True)
class BFloat16:
    """bfloat16 data as its 16-bit patterns (NumPy has no bfloat16): ``as_bfloat16(x)`` makes one."""

    bits: object  # uint16/int16 NumPy array or device array

    @property
    def shape(self):
        return tuple(self.bits.shape)


def as_bfloat16(x) -> BFloat16:
    """Mark ``x`` as bfloat16 input: a float array is rounded to bfloat16 (nearest, ties to even);
    a 16-bit integer array (NumPy, or a device array such as ``tensor.view(torch.int16)``) is taken
    as the bit patterns."""
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
        rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        return BFloat16(np.where(np.isnan(x), 0x7FC0, rounded).astype(np.uint16))
    if _dtype(x).itemsize != 2 or _dtype(x).kind not in "iu":
        raise RedalgebraError(f"as_bfloat16 takes floats to round, or 16-bit integer bit patterns; got {_dtype(x)}")
    return BFloat16(x)


def bfloat16_to_float(bits: np.ndarray) -> np.ndarray:
    """The float32 values of bfloat16 bit patterns (host side, for references)."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def _is_device(a) -> bool:
    return hasattr(a, "__cuda_array_interface__") and not isinstance(a, np.ndarray)


def _dtype(a) -> np.dtype:
    """The element type of a NumPy array or of a device array (numba, CuPy, PyTorch)."""
    if _is_device(a):
        return np.dtype(a.__cuda_array_interface__["typestr"])
    return np.dtype(a.dtype)


SHARED_BYTES = 48 * 1024  # static shared memory a block may declare


def fit_threads(fused: FusedCascade, sizes: dict, threads: int) -> int:
    """Threads for ``block_shared`` (one state per thread in shared memory), halved until the states fit."""
    floats = 0
    for r in fused.cascade.reductions:
        size = fused.cascade.sizes[r.name]
        width = r.monoid.k if r.monoid.k is not None else (1 if size is None else sizes.get(size, size))
        floats += width * (2 if r.monoid.k is not None else 1)
    while threads > 32 and threads * floats * 4 > SHARED_BYTES:
        threads //= 2
    if threads * floats * 4 > SHARED_BYTES:
        raise RedalgebraError(f"block_shared: {floats} state values per thread do not fit in shared memory even "
                              f"with 32 threads; use the warp or block strategy")
    return threads


@dataclass
class Kernel:
    """A compiled fused cascade; call it with inputs, params and an optional ``keep`` mask."""

    fused: FusedCascade
    backend: str
    strategy: str
    threads: int = 128
    tile: int | None = None      # elements per thread (per warp in ``lanes``) per chunk; None: chosen per row length
    fast_exp: bool = False       # the hardware's approximate exp (real CUDA only)
    segments: int | None = None  # split strategies: segments per row; None: chosen from the shape
    _compiled: dict = field(default_factory=dict, repr=False)

    def source(self, spec: Spec) -> KernelSource:
        gen_backend = "cpu" if self.backend == "cpu" else "cuda"
        return generate(self.fused, gen_backend, self.strategy, spec)

    def _module(self, spec: Spec):
        if spec not in self._compiled:
            src = self.source(spec)
            if self.backend != "cpu":
                cuda_module(self.backend)  # picks the simulator or real CUDA before the module imports numba.cuda
            self._compiled[spec] = (src, load(src.source))
        return self._compiled[spec]

    # -- argument layout ---------------------------------------------------------------------------
    def _layout(self, inputs: dict, params: dict, keep):
        c = self.fused.cascade
        missing = [s.name for s in c.inputs if s.name not in inputs] + [p.name for p in c.params if p.name not in params]
        if missing:
            raise EvaluationError(f"{c.name}: no value given for {missing}")
        length = tuple(inputs[c.inputs[0].name].shape)[1]
        rows = max([tuple(inputs[s.name].shape)[0] for s in c.inputs] +
                   [np.shape(params[p.name])[0] for p in c.params if np.ndim(params[p.name]) == (1 if p.size is None else 2)])
        sizes, dtypes, reps = {}, [], {}
        for s in c.inputs:
            a = inputs[s.name]
            bf16 = isinstance(a, BFloat16)
            a = a.bits if bf16 else a
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
            if not bf16 and dt not in _FLOAT_DTYPES:
                raise EvaluationError(f"input {s.name} has dtype {dt}; the kernels read float32, float16, or "
                                      f"bfloat16 bit patterns wrapped with as_bfloat16()")
            dtypes.append((s.name, "bfloat16" if bf16 else _FLOAT_DTYPES[dt]))
        for p in c.params:
            if p.size is not None:
                self._size(sizes, p.size, np.shape(params[p.name])[-1], p.name)
        shared = self.strategy in ("block_shared", "tile_shared", "split_shared")
        threads = fit_threads(self.fused, sizes, self.threads) if shared else self.threads
        spec = Spec(tuple(sorted((k, v) for k, v in sizes.items() if isinstance(k, str))), tuple(dtypes),
                    keep is not None, threads, self._tile(length, threads), self.fast_exp)
        return spec, rows, length, reps

    def _tile(self, length: int, threads: int) -> int:
        """Elements per thread per chunk: the whole row in registers when it fits in 32 per thread.

        For ``nonincremental``, the staging capacity: ``length`` rounded up to a multiple of 1024,
        refused when the staged row does not fit in shared memory.
        """
        if self.strategy == "nonincremental":
            return self._stage(length, threads)
        if self.tile is not None:
            return self.tile
        if "lanes" in self.strategy:  # elements per warp per chunk: their loads in flight together
            return 4
        if not self.strategy.startswith("tile"):
            return 1
        wide = any(r.monoid.k is not None or self.fused.cascade.sizes[r.name] is not None
                   for r in self.fused.cascade.reductions)
        most = 4 if wide else 32  # vector and top-k states already fill the registers
        need = -(-length // threads)
        tile = 1
        while tile < min(need, most):  # powers of two: few distinct kernels to compile
            tile *= 2
        return tile if need <= most else min(8, most)

    def _stage(self, length: int, threads: int) -> int:
        cap = -(-max(length, 1) // 1024) * 1024  # a multiple of 1024: few distinct kernels to compile
        per = len([s for s in self.fused.cascade.inputs if s.size is None]) + len(self.fused.prologue.results) + 1
        extra = threads + sum(r.monoid.k * threads * 2 for r in self.fused.cascade.reductions if r.monoid.k)
        if (cap * per + extra) * 4 > SHARED_BYTES:
            raise RedalgebraError(f"nonincremental: a row of {length} elements does not fit in shared memory "
                                  f"({per} values per element); use the tile strategy, which merges incrementally")
        return cap

    @staticmethod
    def _size(sizes, name, got, who):
        if isinstance(name, int):
            if got != name:
                raise EvaluationError(f"{who} has size {got}, the cascade says {name}")
            return
        if sizes.setdefault(name, got) != got:
            raise EvaluationError(f"{who} has size {got} but {name} = {sizes[name]}")

    def _param(self, p, value, rows):
        a = np.asarray(value, dtype=np.float32)
        if p.size is None:
            a = np.broadcast_to(a.reshape(-1), (rows,)) if a.size in (1, rows) else None
        else:
            a = np.broadcast_to(a.reshape(-1, a.shape[-1]), (rows, a.shape[-1])) if a.ndim in (1, 2) else None
        if a is None:
            raise EvaluationError(f"param {p.name}: expected {'a number or (rows,)' if p.size is None else '(size,) or (rows, size)'}")
        return np.ascontiguousarray(a)

    # -- call --------------------------------------------------------------------------------------
    def _arguments(self, inputs: dict, params: dict, keep):
        """The generated module and every named kernel argument (host outputs and scratch allocated)."""
        if self.backend == "cpu":  # numba's CPU target has no float16 arrays: widen on the host
            inputs = {k: (np.asarray(v, np.float32) if not isinstance(v, BFloat16) and np.asarray(v).dtype == np.float16
                          else v) for k, v in inputs.items()}
        spec, rows, length, reps = self._layout(inputs, params, keep)
        src, module = self._module(spec)
        c = self.fused.cascade
        outs = self._outputs(src, rows, length, spec)
        named = {s.name: (inputs[s.name].bits if isinstance(inputs[s.name], BFloat16) else inputs[s.name])
                 for s in c.inputs}
        named.update({f"rep_{s.name}": reps[s.name] for s in c.inputs})
        named.update({p.name: self._param(p, params[p.name], rows) for p in c.params})
        named["keep"] = np.zeros((1, 1), np.uint8) if keep is None else np.ascontiguousarray(np.asarray(keep), np.uint8)
        named.update({f"out_{name.replace('.', '_')}": outs[name] for name, _, _ in src.outputs})
        nseg, seglen = self._segments(length, rows, src.threads, spec.tile)
        named.update(rows=rows, length=length, nseg=nseg, seglen=seglen)
        for name, dtype, layout, width in src.scratch:
            shape = (rows, nseg) if layout == "segments" else (rows,)
            named[name] = np.zeros(shape + (() if width is None else (src.constants[width],)), dtype)
        return src, module, named, outs, rows

    def _segments(self, length: int, rows: int, threads: int, tile: int) -> tuple[int, int]:
        """Segments of the split strategies: the requested count, or enough to fill the GPU with
        several elements per thread (``split``) or several tiles per warp (``split_lanes``: about
        four blocks per multiprocessor of an H200 over all rows)."""
        if self.segments is not None:
            nseg = self.segments
        elif self.strategy.startswith("split_lanes"):
            nseg = min(64, -(-528 // rows), -(-length // (threads // 32 * tile * 2)))
        else:
            nseg = min(32, -(-length // (threads * 8)))
        nseg = max(1, min(nseg, length))
        return nseg, -(-length // nseg)

    def __call__(self, inputs: dict, params: dict | None = None, keep=None) -> dict:
        src, module, named, outs, rows = self._arguments(inputs, params or {}, keep)
        if self.backend == "cpu":
            module.kernel(*[np.ascontiguousarray(named[a]) if isinstance(named[a], np.ndarray) else named[a]
                            for a in src.args])
            return outs
        on_device = any(_is_device(getattr(inputs[s.name], "bits", inputs[s.name])) for s in self.fused.cascade.inputs)
        launch = self._device_launch(src, module, named, rows)
        launch.run()
        return {name: arr if on_device else arr.copy_to_host() for name, arr in launch.outputs.items()}

    def prepare(self, inputs: dict, params: dict | None = None, keep=None) -> "Launch":
        """Everything but the launch done once — for timing: ``prepare(...).run()`` only launches."""
        if self.backend == "cpu":
            raise RedalgebraError("prepare() is for the CUDA back ends; call the kernel directly on the CPU")
        src, module, named, _, rows = self._arguments(inputs, params or {}, keep)
        return self._device_launch(src, module, named, rows)

    def _device_launch(self, src, module, named, rows) -> "Launch":
        cuda = cuda_module(self.backend)
        dev = {k: cuda.as_cuda_array(a) if _is_device(a) else (cuda.to_device(np.ascontiguousarray(a))
               if isinstance(a, np.ndarray) else a) for k, a in named.items()}
        outputs = {name: dev[f"out_{name.replace('.', '_')}"] for name, _, _ in src.outputs}
        entries = src.entries or (("kernel", src.args, "rows"),)
        steps = []
        for name, args, grid in entries:
            blocks, threads = self._grid(rows, src.threads)
            if grid == "rows_segments":
                blocks = (rows, named["nseg"])
            steps.append((getattr(module, name)[blocks, threads], tuple(dev[a] for a in args)))
        return Launch(tuple(steps), outputs)

    def _outputs(self, src: KernelSource, rows, length, spec) -> dict:
        out = {}
        for name, kind, size in src.outputs:
            width = () if size is None else (src.constants[size],)
            if kind == "index":
                out[name] = np.zeros((rows, size if isinstance(size, int) else src.constants[size]), np.int32)
            else:
                out[name] = np.zeros((rows, length, *width) if kind == "element" else (rows, *width), np.float32)
        return out

    def _grid(self, rows, t):
        if self.strategy == "thread":
            return (rows + t - 1) // t, t
        if self.strategy == "warp":
            per = t // 32
            return (rows + per - 1) // per, t
        return rows, t


@dataclass
class Launch:
    """Configured kernels with their device arguments; ``run()`` launches them in order (asynchronously)."""

    steps: tuple  # (configured kernel, arguments)
    outputs: dict

    def run(self) -> None:
        with warnings.catch_warnings():  # the simulator runs float32 scalars through NumPy in threads,
            warnings.simplefilter("ignore", RuntimeWarning)  # which warn on IEEE inf/nan (errstate is per thread)
            warnings.filterwarnings("ignore", message=".*under-utilization.*")  # small test grids, by design
            for kernel, args in self.steps:
                kernel(*args)


def compile(fused: FusedCascade, backend: str = "cpu", strategy: str | None = None, threads: int | None = None,
            tile: int | None = None, fast_exp: bool | None = None, segments: int | None = None) -> Kernel:
    """A callable that runs ``fused`` with a generated kernel.

    Parameters
    ----------
    backend : ``"cpu"`` | ``"cuda"`` | ``"cudasim"``
    strategy : str, optional
        ``row`` on the CPU; on CUDA one of ``codegen.STRATEGIES["cuda"]`` (default ``tile``):
        ``thread``, ``warp``, ``block``; ``tile`` (merges per tile of registers); ``lanes`` (each
        element to a warp whose lanes split the vectors: attention's head dimension);
        ``nonincremental``; ``split`` and ``split_lanes`` (segments across blocks); ``unfused``.
        Under the simulator, which has no warp operations, each is replaced by its shuffle-free
        ``*_shared`` form (``warp`` and ``block`` by ``block_shared``).
    threads : int, optional
        Threads per block (default 128; 32 under the simulator, which runs a thread per OS thread).
    tile : int, optional
        Elements per thread (per warp in ``lanes``) per chunk; chosen from the row length when omitted.
    fast_exp : bool, optional
        Compute ``exp`` with the hardware's approximate ``ex2`` (libdevice ``fast_expf``, a few ulp
        off; exact at 0 and -inf). Default: on for real CUDA, off elsewhere (the CPU and the simulator
        have no such instruction).
    segments : int, optional
        Segments per row for the split strategies (blocks that fold a row's segments in parallel).
    """
    check_backend(backend)
    if not isinstance(fused, FusedCascade):
        raise RedalgebraError(f"compile() takes a FusedCascade (from redalgebra.derive), got {type(fused).__name__}")
    strategy = strategy or DEFAULT_STRATEGY[backend]
    family = "cpu" if backend == "cpu" else "cuda"
    if strategy not in STRATEGIES[family]:
        raise RedalgebraError(f"strategy {strategy!r} is not available on {backend}; choose one of {STRATEGIES[family]}")
    if backend == "cudasim":
        strategy = SIM_EQUIVALENT.get(strategy, strategy)  # the simulator has no shuffles
    threads = threads or (32 if backend == "cudasim" else 128)
    if tile is not None and (tile < 1 or tile & (tile - 1)):
        raise RedalgebraError(f"tile must be a power of two, got {tile}")
    fast_exp = backend == "cuda" if fast_exp is None else fast_exp
    if fast_exp and backend != "cuda":
        raise RedalgebraError(f"fast_exp is a CUDA instruction; the {backend} back end has none")
    if segments is not None and segments < 1:
        raise RedalgebraError(f"segments must be at least 1, got {segments}")
    return Kernel(fused, backend, strategy, threads, tile, fast_exp, segments)
