"""``mma``'s launch policy: its block (threads, rows per warp), the shared memory it plans (:func:`shared_plan`),
whether it suits a call (:func:`applicable`), what it takes (:func:`configure`, as the registry calls it) and its
grid. The kernel is built by :mod:`.mma`; ``wgmma``'s policy (:mod:`.wgmma_policy`) reads its stages and grid."""

from __future__ import annotations

from ...derive import FusedCascade
from ...errors import RedalgebraError
from ..emit import Spec
from . import Problem, vector_out_dtypes
from .products import dots, staged
from .products import applicable as form_and_call
from .tile_update import BN

#: Threads of a block on the GPU (four warps of 16 rows: 64 rows) and in the simulator (one warp: its barriers are
#: what makes a simulated kernel slow).
THREADS, SIM_THREADS = 128, 32
#: Tiles of the vector inputs in shared memory by default (one computing, one loading); at most MOST_STAGES.
STAGES, MOST_STAGES = 2, 4


def shared_plan(fused: FusedCascade, sizes: dict, rows: int, stages: int = STAGES, tile: int = BN):
    """The dynamic shared memory, in 16-bit units: ``(pitch, base, param tiles, bytes)``. ``stages`` tiles of every
    vector input, then for every dot product its param's rows of the block as 16-bit values and as residuals
    (``rows`` of the block each). Every row is padded by 8 values (16 bytes): the 8 rows an ``ldmatrix`` reads then fall in
    distinct banks."""
    c = fused.cascade

    def length(x):  # (the staged components: padded to a multiple of 16)
        return staged(x.size if isinstance(x.size, int) else sizes[x.size])
    pitch, base, at = {}, {}, 0
    for x in c.inputs:
        if x.size is not None:
            pitch[x.name], base[x.name] = length(x) + 8, at
            at += stages * tile * pitch[x.name]
    params, tiles = {p.name: p for p in c.params}, []
    for dot in dots([e for _, e in fused.prologue.steps] + list(fused.bodies.values())):
        p = next(params[a.name] for a in dot.args if a.name in params)
        tiles.append(at)
        at += 2 * rows * (length(p) + 8)
    return pitch, base, tiles, 2 * at


def applicable(fused: FusedCascade, p: Problem) -> str | None:
    """Why ``mma`` does not suit this call (None: it does): :func:`.products.applicable` with ``mma``'s shared memory."""
    return form_and_call(fused, p, "mma", _shared_bytes)


def _shared_bytes(fused: FusedCascade, p: Problem) -> int:
    threads, per_warp = _block(p)
    return shared_plan(fused, dict(p.sizes), threads // 32 * per_warp)[-1]


def _block(p: Problem) -> tuple[int, int]:
    """(threads, rows per warp) of a call: the caller's, else 128 threads (32 in the simulator) and 16 rows."""
    threads = p.option("threads") or (SIM_THREADS if p.option("simulator") else THREADS)
    return threads, p.option("group") or 16


def configure(fused: FusedCascade, p: Problem) -> dict:
    """128 threads (four warps of 16 rows), tiles of 64 elements, exp by ``ex2.approx`` unless asked otherwise: its
    2^-22 relative error is far below the 16-bit rounding of the factors that enter the products."""
    reason = applicable(fused, p)
    if reason is not None:
        raise RedalgebraError(reason)
    threads, per_warp = _block(p)
    if threads not in (32, 64, 128, 256):
        raise RedalgebraError(f"mma: blocks of 32, 64, 128 or 256 threads (16 rows per warp), got {threads}")
    if per_warp not in (16, 32):
        raise RedalgebraError(f"mma: 16 or 32 rows per warp (the group), got {per_warp}")
    bm = threads // 32 * per_warp
    for name, fixed in (("tile", BN), ("segments", 1), ("batch", bm)):
        if p.option(name) not in (None, fixed):
            raise RedalgebraError(f"mma: the {name} is fixed by the instruction shapes (tiles of {BN} elements, "
                                  f"{per_warp} rows per warp, one segment)")
    return dict(threads=threads, tile=BN, batch=bm, group=per_warp, vec=8, segments=1,
                fast_exp=p.option("fast_exp", True), shared=shared_plan(fused, dict(p.sizes), bm)[-1],
                out_dtypes=vector_out_dtypes(fused, p.option("out_dtype")))


def grid(rows: int, spec: Spec, named) -> dict:
    vectors = [k for k, a in named.items() if getattr(a, "ndim", 0) == 3 and not k.startswith(("part_", "out_"))]
    shared = {int(named[f"rep_{x}"]) for x in vectors}
    if len(shared) != 1:
        raise RedalgebraError(f"mma: every vector input must be shared by the same rows, got {sorted(shared)}")
    rep = shared.pop()
    # a block per 64 rows of a group (the rows sharing a vector row), the whole grid on x; segments on y
    blocks = rows // rep * -(-rep // spec.batch)
    return {"rows": ((blocks, int(named["nseg"])) if spec.segments > 1 else blocks, spec.threads, 0, spec.shared),
            "combine": (rows, 32)}
