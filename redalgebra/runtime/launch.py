"""A call's kernels configured with their device arguments (:class:`Launch`), made by :func:`device_launch`: each
entry of the generated module once, in order — or, where the strategy launches the module in chunks of rows
(:attr:`~redalgebra.codegen.Spec.row_chunk`, ``codegen/strategies/chunks.py``), the entries launched once first and
then the chunked ones for each chunk in turn, on slices of the call's arrays (:func:`chunked_steps`). On the GPU every
step is a :class:`~.driver.DriverStep` (launched by the driver, its arguments packed once); in the simulator the
kernels run one after another.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ..codegen import Spec
from ..codegen.strategies import get
from ..errors import RedalgebraError
from .backends import cuda_module, multiprocessors
from .formats import is_device


@dataclass
class Launch:
    """Configured kernels with their device arguments; ``run()`` launches them in order (asynchronously)."""

    steps: tuple  # (configured kernel, argument names, arguments)
    outputs: dict
    driver: tuple = ()  # real CUDA: a DriverStep per step (launched by the driver, arguments packed once)

    def run(self, stream: int = 0) -> None:
        """Launch every step on ``stream`` (a CUDA stream handle; 0: the default stream)."""
        if self.driver:
            for step in self.driver:
                step.launch(stream)
            return
        with warnings.catch_warnings():  # the simulator runs float32 scalars through NumPy in threads,
            warnings.simplefilter("ignore", RuntimeWarning)  # which warn on IEEE inf/nan (errstate is per thread)
            warnings.filterwarnings("ignore", message=".*under-utilization.*")  # small test grids, by design
            from .sim_async import _sim_barriers_clear, _sim_barriers_done, _sim_sweep_ended

            for kernel, _, args in self.steps:
                _sim_barriers_clear()  # (rounds an earlier kernel stopped by an error left are not this one's)
                _sim_sweep_ended()  # (nor copies and reads its threads left)
                kernel(*args)
                _sim_barriers_done(getattr(getattr(kernel, "dispatcher", kernel), "__name__", "a kernel"))


def device_launch(backend: str, cascade, src, module, named: dict, rows: int) -> Launch:
    """The :class:`Launch` of a call of ``cascade``'s generated ``module`` (``src``: its
    :class:`~redalgebra.codegen.kernels.KernelSource`) with the kernel arguments ``named`` (host arrays copied to
    the device, device arrays taken as they are) on the ``backend`` ("cuda" or "cudasim")."""
    cuda = cuda_module(backend)
    dev = {k: cuda.as_cuda_array(a) if is_device(a) else (cuda.to_device(np.ascontiguousarray(a))
           if isinstance(a, np.ndarray) else a) for k, a in named.items()}
    outputs = {name: dev[f"out_{name.replace('.', '_')}"] for name, _, _ in src.outputs}
    entries = src.entries or (("kernel", src.args, "rows"),)
    spec = src.spec or Spec(threads=src.threads)
    strategy = get(src.strategy)
    grids = strategy.grid(rows, spec, named)
    if spec.persistent:  # the kernels walk their work by gridDim: as many blocks as are resident at once
        cap = multiprocessors(cuda) * max(1, spec.min_blocks)
        grids = {k: capped(g, cap) if strategy.walking is None or k in strategy.walking else g
                 for k, g in grids.items()}
    if spec.row_chunk and rows > spec.row_chunk and strategy.chunked:
        plan = chunked_steps(module, entries, strategy, spec, dev, rows, row_indexed(cascade, src, dev),
                             backend == "cudasim", grids)
    else:  # each kernel once (with Spec.dependent, every kernel but the first may start while the one before runs)
        plan = [_step(module, name, grids[grid], args, dev, False, spec.dependent and k > 0,
                      cluster=clusters_of(spec, grids[grid]), backend=backend)
                for k, (name, args, grid) in enumerate(entries)]
    driver = ()
    if backend == "cuda":  # launched through the driver with arguments packed once
        from .driver import DriverStep

        driver = tuple(DriverStep(kernel, args, names, dependent=dependent, offsets=offsets, cluster=cluster)
                       for kernel, names, args, dependent, offsets, cluster in plan)
    return Launch(tuple(step[:3] for step in plan), outputs, driver)


def clusters_of(spec: Spec, grid: tuple) -> tuple | None:
    """The cluster shape a kernel of ``spec`` is launched in on ``grid`` (``((x, y), threads, …)``), or None: with
    :attr:`~redalgebra.codegen.Spec.cluster`, a row tile's segments (the grid's y) are one cluster, ``(1, y, 1)``."""
    blocks = grid[0]
    if not spec.cluster or not isinstance(blocks, tuple) or len(blocks) < 2:
        return None
    return (1, int(blocks[1]), 1)  # (at most a cluster's blocks: the policy refused more)


def row_indexed(cascade, src, dev: dict) -> set:
    """The kernel arguments with a row per row of the call (what a chunk of rows takes a slice of): the inputs no
    rows share, every param (bound a row per row), the outputs and the scratch laid out by rows."""
    names = {s.name for s in cascade.inputs if dev.get(f"rep_{s.name}") == 1} | {p.name for p in cascade.params}
    names |= {f"out_{name.replace('.', '_')}" for name, _, _ in src.outputs}
    return names | {name for name, _, layout, _ in src.scratch if layout in ("rows", "segments", "tiles")}


def chunked_steps(module, entries, strategy, spec, dev: dict, rows: int, indexed: set, simulated: bool,
                  grids: dict) -> list:
    """The launch of a call in chunks of ``spec.row_chunk`` rows: the entries not in ``strategy.chunked`` once (on
    the call's ``grids``), then the chunked ones for each chunk in turn, on the slices of the ``indexed`` arrays
    that hold the chunk's rows. Each step is ``(configured kernel, argument names, arguments, dependent, offsets)``:
    every chunked step after the first is launched dependent — it may start while the step before it runs (the
    next chunk's factors while this chunk's product runs; each product waits for its own factors, ``grid_wait``) —
    and ``offsets`` gives each sliced array's byte offset from the array's start (what :meth:`DriverStep.bind` adds
    to a new pointer for the same array)."""
    once = [e for e in entries if e[2] not in strategy.chunked]
    per = [e for e in entries if e[2] in strategy.chunked]
    if list(entries[:len(once)]) != once:
        raise RedalgebraError(f"a chunked launch takes the kernels launched once first: {[e[0] for e in entries]}")
    plan = [_step(module, name, grids[grid], args, dev, simulated) for name, args, grid in once]
    for r0 in range(0, rows, spec.row_chunk):
        n = min(spec.row_chunk, rows - r0)
        sub, offsets = {**dev, "rows": n}, {}
        for name in indexed:
            sub[name] = dev[name][r0:r0 + n]
            offsets[name] = r0 * int(dev[name].strides[0])
        chunk = strategy.grid(n, spec, sub)
        plan += [_step(module, name, chunk[grid], args, sub, simulated, r0 > 0 or name != per[0][0],
                       {a: offsets[a] for a in args if a in offsets}) for name, args, grid in per]
    return plan


def _step(module, name: str, grid, args, values: dict, simulated: bool, dependent: bool = False,
          offsets: dict | None = None, cluster: tuple | None = None, backend: str = "cuda") -> tuple:
    """One step of a :class:`Launch`'s plan: ``(configured kernel, argument names, arguments, dependent, offsets,
    cluster)``. The simulator's ``kernel[grid]`` sets the grid on the kernel itself and returns it, so a kernel
    launched with several grids (each chunk's) would run with the last: ``simulated``, it is configured when called
    (:class:`_Configured`), as a simulated kernel launched in clusters is (its blocks run a cluster at a time)."""
    kernel = getattr(module, name)
    if cluster is not None and backend == "cudasim":
        simulated = True
    return (_Configured(kernel, grid, cluster if backend == "cudasim" else None) if simulated else kernel[grid],
            tuple(args), tuple(values[a] for a in args), dependent, offsets or {}, cluster)


class _Configured:
    """A simulated kernel with its launch grid (and cluster shape), configured when called."""

    def __init__(self, kernel, grid, cluster: tuple | None = None):
        self.dispatcher, self.grid, self.cluster = kernel, grid, cluster

    def __call__(self, *args):
        if self.cluster is None:
            return self.dispatcher[self.grid](*args)
        from .cluster import clustered

        with clustered(self.cluster, int(self.grid[3]) if len(self.grid) > 3 else 0):
            return self.dispatcher[self.grid](*args)


def capped(grid: tuple, cap: int) -> tuple:
    """A launch grid, ``(blocks, threads)`` or ``((x, y, z), threads, stream, shared)``, with at most ``cap`` blocks
    in x (a walking kernel's one dimension: its y and z are 1)."""
    blocks, *rest = grid
    if isinstance(blocks, tuple):
        return ((min(blocks[0], cap), *blocks[1:]), *rest)
    return (min(blocks, cap), *rest)
