"""The first generation of skeletons (:mod:`..kernels`, :mod:`..lanes`, :mod:`..multikernel`), registered.

These build kernels as text lines and write float32 outputs; ``rows`` (its own module) is built on the
statement tree. Their launch policies — block size, elements per thread, staging capacity, segments,
the grid — live here, beside their names.
"""

from __future__ import annotations

from ...derive.fused import as_written
from ...errors import RedalgebraError
from . import REGISTRY, Problem, Strategy, register

SHARED_BYTES = 48 * 1024  # static shared memory a block may declare


def _build(name: str):
    def build(fused, spec, target):
        from ..kernels import _Gen
        from ..multikernel import MultiGen

        if name in ("levels", "unfused"):  # a pass per reduction: the cascade as written, not its partial sums
            fused = as_written(fused)
        gen = MultiGen if name.startswith("split") or name == "unfused" else _Gen
        return gen(fused, spec, "cpu" if target == "cpu" else "cuda", name).module()
    return build


def _wide(fused) -> bool:
    return any(r.monoid.k is not None or fused.cascade.sizes[r.name] is not None for r in fused.cascade.reductions)


#: The strategies whose warps (not threads) keep a state each in shared memory for their block's merge.
_WARP_STATES = ("block", "tile", "lanes", "lanes_shared", "split", "split_lanes", "split_lanes_shared")


def fit_threads(name: str, fused, sizes: dict, threads: int) -> int:
    """Threads a block, halved until the states its merge keeps in shared memory fit (one a thread for the
    shared-state strategies, one a warp for :data:`_WARP_STATES`, plus the lane sums' ``lane_red``); a clear
    error where even one warp's do not (a vector state too wide: attention with d = 100000)."""
    per_warp = name in _WARP_STATES
    if not (per_warp or REGISTRY[name].shared_states):
        return threads
    floats, widest = 0, ("", 0)
    for r in fused.cascade.reductions:
        size = fused.cascade.sizes[r.name]
        width = r.monoid.k if r.monoid.k is not None else (1 if size is None else sizes.get(size, size))
        floats += width * (2 if r.monoid.k is not None else 1)
        if isinstance(width, int) and width > widest[1]:
            widest = (f"{r.name} ({size} = {width})" if isinstance(size, str) else r.name, width)

    def need(t: int) -> int:
        return 4 * ((t // 32 if per_warp else t) * floats + (t if name.endswith("lanes_shared") else 0))

    while threads > 32 and need(threads) > SHARED_BYTES:
        threads = max(32, threads // 64 * 32)  # halved in whole warps (96 -> 32, not 48)
    if need(threads) > SHARED_BYTES:
        most = (SHARED_BYTES // 4 - 32 * name.endswith("lanes_shared")) // (1 if per_warp else 32)
        what = "a warp's" if per_warp else "a thread's"
        raise RedalgebraError(
            f"{name}: {what} reduction states ({floats} values, the widest {widest[0]}) need {need(threads)} bytes "
            f"of shared memory even with 32 threads, more than the {SHARED_BYTES} a block may declare; "
            f"at most {most} values of state a row fit its merge ('thread' keeps the "
            f"states in local memory instead, one thread a row)")
    return threads


def _tile(name: str, fused, p: Problem, threads: int) -> int:
    """Elements per thread per chunk: the whole row in registers when it fits in 32 per thread."""
    if p.option("tile"):
        return p.option("tile")
    if "lanes" in name:  # elements per warp per chunk: their loads in flight together
        return 4
    if not name.startswith("tile"):
        return 1
    most = 4 if _wide(fused) else 32  # vector and top-k states already fill the registers
    need = -(-p.length // threads)
    tile = 1
    while tile < min(need, most):  # powers of two: few distinct kernels to compile
        tile *= 2
    return tile if need <= most else min(8, most)


def _stage(fused, p: Problem, threads: int) -> int:
    """The staging capacity of ``nonincremental``: the row rounded up to a multiple of 1024."""
    cap = -(-max(p.length, 1) // 1024) * 1024
    c = fused.cascade
    per = len([s for s in c.inputs if s.size is None]) + len(fused.prologue.results) + 1
    sizes = dict(p.sizes)
    vectors = sum(sizes.get(c.sizes[r.name], c.sizes[r.name]) for r in c.reductions
                  if r.monoid.k is None and c.sizes[r.name] is not None)  # (fv_: a vector state's final values)
    topk = sum(r.monoid.k * threads * 2 for r in c.reductions if r.monoid.k)
    if (cap * per + threads + vectors + topk) * 4 > SHARED_BYTES:
        what = [f"a row of {p.length} elements staged ({per} values per element)"] + \
            [f"{vectors} values of vector states"] * bool(vectors) + [f"the top-k lists of {threads} threads"] * bool(topk)
        raise RedalgebraError(f"nonincremental: {', '.join(what)} do not fit in shared memory "
                              f"({SHARED_BYTES} bytes); use the tile or rows strategy, which merge incrementally")
    return cap


def _segments(name: str, p: Problem, threads: int, tile: int) -> int:
    """Segments of the split strategies: the requested count, or enough to fill the GPU (about four
    blocks per multiprocessor of an H200 over all rows for ``split_lanes``)."""
    if p.option("segments"):
        nseg = p.option("segments")
    elif name.startswith("split_lanes"):
        nseg = min(64, -(-p.busy_blocks() // p.rows), -(-p.length // (threads // 32 * tile * 2)))
    else:
        nseg = min(32, -(-p.length // (threads * 8)))
    return max(1, min(nseg, p.length))


def _configure(name: str):
    def configure(fused, p: Problem) -> dict:
        threads = p.option("threads", 32 if p.option("simulator") else 128)
        threads = fit_threads(name, fused, dict(p.sizes), threads)
        tile = _stage(fused, p, threads) if name == "nonincremental" else _tile(name, fused, p, threads)
        out = dict(threads=threads, tile=tile)
        if name.startswith("split"):
            out["nseg"] = _segments(name, p, threads, tile)
        return out
    return configure


def _grid(name: str):
    def grid(rows, spec, named) -> dict:
        t = spec.threads
        blocks = -(-rows // t) if name == "thread" else -(-rows // (t // 32)) if name == "warp" else rows
        return {"rows": (blocks, t), "rows_segments": ((rows, named.get("nseg", 1)), t)}
    return grid


_LEGACY = (
    ("row", "cpu", "numba.njit(parallel=True): one fused pass per row over prange, in chunks of 128 merged by the derived merge", None),
    ("levels", "cpu", "the level order: a pass per reduction, its dependencies final (exact casts; any cascade)",
     None),
    ("thread", "cuda", "a thread per row runs the incremental loop over the whole row", None),
    ("warp", "cuda", "a warp per row: strided incremental loops, then the derived merge over shuffles", "block_shared"),
    ("block", "cuda", "a block per row: lanes, warps (shuffles), then the warps' states in shared memory",
     "block_shared"),
    ("block_shared", "cuda", "block without warp operations: every state in shared memory, a syncthreads tree",
     None),
    ("tile", "cuda", "a block per row merging per tile of registers (scalar loads, float32 outputs)", "tile_shared"),
    ("tile_shared", "cuda", "tile with the shuffle-free merge", None),
    ("lanes", "cuda", "a warp per element, its lanes splitting the vectors (attention's head dimension)",
     "lanes_shared"),
    ("lanes_shared", "cuda", "lanes with lane sums through shared memory", None),
    ("nonincremental", "cuda", "the row staged in shared memory, the reductions in sequence, no corrections",
     None),
    ("split", "cuda", "segments across blocks, merged by a second kernel (FlashDecoding's structure)", "split_shared"),
    ("split_shared", "cuda", "split with the shuffle-free block merge", None),
    ("split_lanes", "cuda", "lanes per segment across blocks, merged by a second kernel", "split_lanes_shared"),
    ("split_lanes_shared", "cuda", "split_lanes with lane sums through shared memory", None),
    ("unfused", "cuda", "the baseline: a kernel per reduction, then the epilogue", None),
)

for _name, _backend, _summary, _sim in _LEGACY:
    register(Strategy(_name, _backend, _summary, _build(_name), _configure(_name), _grid(_name), _sim,
                      shared_states=_name in ("block_shared", "tile_shared", "split_shared"),
                      whole_warps=bool(_sim) or "lanes" in _name,  # (shuffles; a warp a row or an element)
                      final_scales=_name in ("nonincremental", "levels")))
