"""The registry of kernel strategies: one object per strategy, one module per family.

A :class:`Strategy` names its back end, its simulator twin (the form the CUDA simulator runs, which
has no warp shuffles), how it builds kernels, and its launch policy: from the facts of a call
(:class:`Problem`: rows, length, sizes, dtypes, alignment, the caller's options) it fills in the
compile-time :class:`~redalgebra.codegen.emit.Spec` and the grid. ``compile``, ``check``, the CLI's
choices, the GPU scripts, the tests and the README's list all read :data:`REGISTRY`; a new strategy
is one module that calls :func:`register`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...errors import RedalgebraError


@dataclass(frozen=True)
class Problem:
    """What a launch policy may look at: the shape of one call and the caller's options."""

    rows: int
    length: int
    sizes: tuple = ()          # ((dimension, int), ...)
    dtypes: tuple = ()         # ((input, "float32" | "float16" | "bfloat16" | "e4m3"), ...)
    has_keep: bool = False
    vec_ok: bool = False       # every per-element array starts on a 16-byte boundary
    pitch_ok: bool = False     # ... and every row does too (pitch a multiple of 16 bytes)
    same_frame: bool = False   # every per-element array has pitch = length and one row per row
    reps: tuple = ()           # ((input, rows that share each of its rows), ...): a weight given once has rep = rows
    options: tuple = ()        # ((name, value), ...): threads, tile, segments, fast_exp, group, out_dtype,
    #                            simulator, persistent (None: the policy chooses), cc and sms (the GPU's compute
    #                            capability and multiprocessors, on the cuda back end)
    k_major: tuple = ()        # vector inputs given K-major (shape (1, L, n), the axis innermost): a strategy that
    #                            reads them so lists them in Spec.k_major; the others' calls copy or refuse them

    def option(self, name: str, default=None):
        value = dict(self.options).get(name)
        return default if value is None else value

    def multiprocessors(self) -> int:
        """The GPU's multiprocessors (option ``sms``, the current device's on the ``cuda`` back end), else the H200's
        :data:`SMS` (building offline, the simulator)."""
        return int(self.option("sms") or SMS)

    def dependent_launch(self) -> bool:
        """Whether a module's later kernel may be launched while the one before runs (Hopper's programmatic dependent
        launch, ``Spec.dependent``): on an sm_90 GPU or later, not in the simulator."""
        return not self.option("simulator") and tuple(self.option("cc") or ())[:1] >= (9,)

    def busy_blocks(self) -> int:
        """Blocks that keep the GPU busy, about four a multiprocessor: few rows are split into segments up to this."""
        return 4 * self.multiprocessors()


@dataclass(frozen=True)
class Strategy:
    """A way to map a fused cascade onto the hardware."""

    name: str
    backend: str                      # "cpu" | "cuda"
    summary: str
    build: Callable                   # (fused, spec, target) -> KernelSource; target "cpu" | "cuda" | "cudasim"
    configure: Callable               # (fused, problem) -> dict of Spec fields
    grid: Callable                    # (rows, spec, named arguments) -> {entry grid name: (blocks, threads)}
    sim: str | None = None            # the strategy the simulator runs instead; None: this one as is
    shared_states: bool = False       # every thread's state in shared memory (threads fitted to it)
    whole_warps: bool = False         # its kernels work in warps (shuffles, a warp a row): threads a multiple of 32,
    #                                   refused otherwise on the simulator too, whose twin would run them
    final_scales: bool | Callable = False  # every cast rounds at the row's final scale, as the unfused form does
    #                                   (every reduction folded with its dependencies final: the level order); a
    #                                   callable (fused -> bool) where that depends on the cascade
    rounds_products: bool | Callable = False  # factors enter tensor-core products in the vector inputs' 16-bit
    #                                   type; a callable (fused -> bool) where that depends on the cascade
    vector_multiple: int = 1          # vectors must have a multiple of this many components (mma, wgmma: 8)
    cc: tuple = (9, 0)                # the compute capability its PTX is built for (wgmma: sm_90a, (9, 0, "a"))
    shared_vectors: bool = False      # needs each vector row shared by a block's rows (check gives them once)
    walking: tuple | None = None      # with Spec.persistent, the grids whose blocks walk their work by gridDim (None:
    #                                   every grid): launched with as many blocks as are resident at once
    chunked: tuple = ()               # with Spec.row_chunk, the grids launched again for each chunk of rows, in order
    #                                   (the others first, once): runtime.launch.chunked_steps
    params16: bool = False            # reads vector params given on the device in 16 bits as they are (Spec.dtypes
    #                                   names them); the others take float32 params

    def final(self, fused) -> bool:
        """Whether this strategy rounds every cast of ``fused`` at the row's final scale (``check`` then holds it to the
        float32 tolerance, not the cast's)."""
        return self.final_scales(fused) if callable(self.final_scales) else self.final_scales

    def rounds(self, fused) -> bool:
        """Whether this strategy rounds ``fused``'s factors before a product (``check`` then allows that rounding)."""
        return self.rounds_products(fused) if callable(self.rounds_products) else self.rounds_products


REGISTRY: dict[str, Strategy] = {}

#: Components of 16 bytes (one 128-bit load), by stored dtype.
VEC = {"float32": 4, "float16": 8, "bfloat16": 8, "e4m3": 16}
#: Multiprocessors of an H200: what the launch policies plan for where the call's GPU is not known
#: (:meth:`Problem.multiprocessors`).
SMS = 132


def vector_out_dtypes(fused, want: str | None) -> tuple:
    """``((output, want), ...)`` for the outputs of a vector's width where ``out_dtype`` asks for a 16-bit type: stored
    so by the kernels (half the bytes they write, each rounded once more); ``()`` otherwise (float32, as the
    tensor-core strategies write them unless asked)."""
    if want not in ("bfloat16", "float16"):
        return ()
    c = fused.cascade
    return tuple((o.name, want) for o in c.outputs if c.sizes[o.name] is not None)


def pow2(n: int) -> int:
    """The smallest power of two at least ``n`` (1 for ``n <= 1``)."""
    p = 1
    while p < n:
        p *= 2
    return p


def register(strategy: Strategy) -> Strategy:
    if strategy.name in REGISTRY:
        raise RedalgebraError(f"a strategy named {strategy.name!r} is already registered")
    REGISTRY[strategy.name] = strategy
    return strategy


def get(name: str, backend: str | None = None) -> Strategy:
    """The strategy ``name`` (checked against ``backend``: ``cpu`` or ``cuda``/``cudasim``)."""
    family = None if backend is None else ("cpu" if backend == "cpu" else "cuda")
    choices = names(family) if family else tuple(REGISTRY)
    if name not in REGISTRY or (family and REGISTRY[name].backend != family):
        where = f" on {backend}" if backend else ""
        raise RedalgebraError(f"strategy {name!r} is not available{where}; choose one of {', '.join(choices)}"
                              + (" or auto" if family == "cuda" else ""))
    return REGISTRY[name]


def names(backend: str | None = None, real: bool = False) -> tuple:
    """Registered names for ``backend`` (``cpu`` | ``cuda``); ``real``: only forms that run on a GPU as is
    (not the simulator's shuffle-free twins)."""
    twins = {s.sim for s in REGISTRY.values() if s.sim}
    return tuple(n for n, s in REGISTRY.items() if (backend is None or s.backend == backend)
                 and not (real and n in twins))


def for_target(name: str, target: str) -> Strategy:
    """The form of ``name`` that runs on ``target`` (the simulator's twin under ``cudasim``)."""
    s = get(name, target)
    return REGISTRY[s.sim] if target == "cudasim" and s.sim else s


from . import legacy, rows, vrows, columns, columns_mma, columns_wgmma, mma, wgmma  # noqa: E402,F401,I001 - registration, in the order the lists show

__all__ = ["Problem", "REGISTRY", "VEC", "Strategy", "for_target", "get", "names", "pow2", "register"]
