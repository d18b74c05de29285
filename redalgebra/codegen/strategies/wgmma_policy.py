"""``wgmma``'s launch policy: its block sizes and the shared memory it plans (:func:`shared_plan`, :func:`_stages`),
the policy's block for long prefill rows (:func:`with_defaults`), whether it suits a call (:func:`applicable`), what it
takes (:func:`configure`, as the registry calls it) and its grid. The kernels are built by :mod:`.wgmma`."""

from __future__ import annotations

import dataclasses
import functools

import sympy as sp

from ...derive import FusedCascade
from ...errors import RedalgebraError
from ..emit import Spec
from . import Problem, vector_out_dtypes
from . import mma_policy
from .tile_update import BN
from .products import MOST_COMPONENTS, PRODUCER_COMPONENTS, column_groups, dots, prefix, staged
from .products import applicable as form_and_call
from . import tile_producer

#: Params given in the products' 16-bit type plan no residual rows (:func:`_stages`); 0 plans them as for float32
#: params (a timing setting: ``gpu/sweep.py``).
NO_RESIDUALS = 1
#: Whether a row tile's segments merge in a thread-block cluster by default where they can (:func:`_cluster`,
#: :mod:`.cluster_merge`), rather than through partial states in global memory and a combine kernel. Off: measured on
#: an H100 (``gpu/README.md``, 2026-12-06, thirteenth series; ``gpu/cluster_probe.py``) MLA's decode step took the same
#: time both ways wherever the clusters fit the GPU at once (B4: 34.8 / 35.6 µs in 8 segments, 53.7 / 54.3 in 4; B16:
#: 73.9 / 74.3 in 3), and where they do not — 30 clusters of 4 blocks of 231 KB at once, 15 of 8, 7 of 16, against a row
#: tile a cluster — the second wave doubled it (B16 in 4 segments 112.2 against 64.9; B4 in 16 51.6 against 30.7).
CLUSTER = 0
#: Whether the combine kernel of a row's segments is launched dependent (``Spec.dependent``, Hopper's programmatic
#: dependent launch): its launch made while the partial kernel runs, its blocks placed as the partial blocks leave.
#: Measured on an H100 (``gpu/README.md``, 2026-12-06, thirteenth series; ``gpu/sweep.py``, two rounds, one process):
#: the partial kernel letting it launch as its blocks end, MLA B4 0.0319 and 0.0318 ms against 0.0335 and 0.0334
#: launched after it, B16 0.0631 and 0.0629 against 0.0649 and 0.0646; letting it launch at its start
#: (:data:`~.tile_segments.EARLY_COMBINE`), B4 0.0414 and 0.0419 against 0.0336 and 0.0337, B16 the same both ways.
DEPENDENT_COMBINE = 1
#: Threads of a block: one warpgroup (64 rows) on the GPU, one warp (16 rows) in the simulator.
THREADS, SIM_THREADS = 128, 32
#: Rows of the producer block on the GPU: its two consumer warpgroups' 64 each.
PRODUCER_ROWS = 2 * (THREADS // 32) * 16
#: 16-bit values in a 128-byte row of the swizzled layout; bytes of an atom (eight rows).
ROW, ATOM = 64, 1024


def _blocks(n: int) -> int:
    return -(-n // ROW)


def dot_params(fused: FusedCascade) -> list:
    """The param of every dot product of the cascade, in the dots' order (a param twice where two dots read it)."""
    params = {p.name: p for p in fused.cascade.params}
    return [next(params[a.name] for a in dot.args if a.name in params)
            for dot in dots([e for _, e in fused.prologue.steps] + list(fused.bodies.values()))]


def shared_plan(fused: FusedCascade, sizes: dict, rows: int, stages: int, resid: bool = True, groups: int = 1,
                tile: int = BN):
    """The dynamic shared memory, in 16-bit units from the first 1024-byte boundary: ``(base, param tiles, bytes)``.
    ``stages`` tiles of every vector input (``tile`` rows, ``ceil(n / 64)`` blocks of 64 columns), then for every dot
    product its param's rows of the block as 16-bit values and (``resid``) as residuals; with column ``groups``,
    then the tile's factors (``rows`` × ``tile``, the A operand of ``P · V``) and each scalar reduction's row partials
    of every group (float32); 1024 bytes more to reach the boundary."""
    c = fused.cascade

    def length(x):  # (the staged components: padded to a multiple of 16)
        return staged(x.size if isinstance(x.size, int) else sizes[x.size])
    base, at = {}, 0
    for x in c.inputs:
        if x.size is not None:
            base[x.name] = at
            at += stages * _blocks(length(x)) * tile * ROW
    tiles = []
    for p in dot_params(fused):
        tiles.append(at)
        at += (2 if resid else 1) * _blocks(length(p)) * rows * ROW
    if groups > 1:
        base["P"], base["X"] = at, at + rows * tile
        at += rows * tile + 2 * groups * rows * sum(c.sizes[r.name] is None for r in c.reductions)
    return base, tiles, 2 * at + ATOM


def _widths(fused: FusedCascade, p: Problem) -> list:
    """The components of the cascade's vector sums in this call (their own: :func:`.products.column_groups` stages
    them; the policy's bounds, multiples of 16, classify a multiple of 8 as its staged width)."""
    c, sizes = fused.cascade, dict(p.sizes)
    return [s if isinstance(s, int) else sizes.get(s, 0) for s in (c.sizes[r.name] for r in c.reductions)
            if s is not None]


def _asks_producer(p: Problem) -> int:
    """The producer warpgroup's threads where the call asks for a block of three warpgroups (``threads=384``; three
    warps, ``96``, in the simulator, whose consumer warpgroups are a warp each), else 0."""
    unit = SIM_THREADS if p.option("simulator") else THREADS
    return unit if p.option("threads") == 3 * unit else 0


def _most(p: Problem) -> int:
    """The widest vector sums one warpgroup holds in this call's block (in all): :data:`~.products.PRODUCER_COMPONENTS`
    where it asks for a producer warpgroup, else :data:`~.products.MOST_COMPONENTS`."""
    return PRODUCER_COMPONENTS if _asks_producer(p) else MOST_COMPONENTS


def _groups(fused: FusedCascade, p: Problem) -> int:
    """Warpgroups that share a row tile (:func:`.products.column_groups`; 1 where it refuses, said by applicable)."""
    return column_groups(_widths(fused, p), _most(p)) or 1


#: Elements a row from which long prefill-like calls take the producer block with tiles of 128 by default
#: (:func:`with_defaults`), by the components of the vector sums and whether a gate is true on a prefix of the row
#: (a causal mask); widths between 64 and 128 take 128's, between 32 and 64 take 64's (:func:`_band`), wider ones
#: :func:`_wide`'s block, narrower ones keep one warpgroup. Measured on the H200 (``gpu/README.md``, 2026-12-04, sixth series; 64 heads at d = 128, 32 at d = 64), the producer block against one warpgroup, ms: d = 128 L1024
#: 0.0732 / 0.0905, L1999 0.2711 / 0.3298; causal L1024 0.0682 / 0.0656 (slower), L1999 0.1944 / 0.2065 — the
#: causal threshold between them; d = 64 L2048 0.0989 / 0.1163, L4096 0.3553 / 0.4356 (BERT's L512, below, slower),
#: causal L4096 0.2638 / 0.2836 (not timed shorter; its ring of four stages keeps a block a row tile there, as
#: walking under a gate takes three at most); d = 80 and 96 at L2048 0.23–0.26 against 0.18 while their copies
#: were irregular, 0.111 / 0.151 and 0.117 / 0.157 once copied as rows of 16 chunks
#: (:meth:`~.tile_copies.TileCopies.chunks`; 2026-12-04, seventh series); 2026-12-05 (``gpu/README.md``, the
#: padded widths): SigLIP's d = 72 at L729 (128 heads) 0.0996 (tiles of 64) and 0.1007 (of 128) against 0.1103 —
#: so 128's band from 729 keys, not 1024 —, Stable Diffusion's d = 40 at L4096 (16 heads) 0.1891 on tiles of 128
#: against 0.2203, one warpgroup — so 64's band from 33 components (d = 40 stages 48), not only at 64.
PRODUCER_LENGTHS = {(128, False): 729, (128, True): 1536, (64, False): 2048, (64, True): 4096}
#: Elements a row from which sums that column groups also hold (d = 256) take :func:`_wide`'s block: measured at
#: 2048 (``_wide``'s docstring), given from d = 128's lengths as they stood (1024, 1536 causal) and kept there.
WIDE_LENGTHS = {False: 1024, True: 1536}


def _band(width: int) -> int:
    """The width whose :data:`PRODUCER_LENGTHS` a vector sum of ``width`` components reads: 128's from 65 to 128 (its
    staged tiles padded to 128 columns, as 128's are), 64's from 33 to 64, else its own (none: one warpgroup)."""
    return 128 if 64 < width <= 128 else 64 if 32 < width <= 64 else width


def with_defaults(fused: FusedCascade, p: Problem) -> Problem:
    """``p`` with the block the policy prefers where the caller chose none: two consumer warpgroups and a producer
    (``threads=384``) on tiles of 128 elements for long rows (:data:`PRODUCER_LENGTHS` elements or more, by the
    width) of one row tile's vector sums 33 to 128 wide, unmasked, ungated or gated on a prefix of the row (a causal
    mask), where its row tiles fill the GPU (:func:`_fills`); sums 129 to 256 wide: :func:`_wide`; else ``p`` as
    given. Its blocks walk row tiles (:mod:`.tile_producer`), but under a gate with a ring of four stages (d = 64),
    where each takes one. Measured on the H200
    (``gpu/README.md``, 2026-12-04), LLaMA-65B prefill at d = 128: 0.284–0.287 ms against 0.346–0.347 for one
    warpgroup a block at L2048, 1.017–1.020 against 1.26–1.29 ms at L4096; causal 0.2199–0.2201 against 0.2238–0.2247
    at L2048, 0.679–0.680 against 0.762–0.763 ms at L4096. BERT's 512-key rows at d = 64 (0.045 against 0.038 ms for
    the producer block a row tile) stay with one warpgroup."""
    if p.option("simulator") or any(p.option(o) is not None for o in ("threads", "tile", "segments")):
        return p
    if MOST_COMPONENTS < max(_widths(fused, p), default=0) <= PRODUCER_COMPONENTS:
        return _wide(fused, p)
    widths = {staged(n) for n in dict(p.sizes).values()}
    shortest = PRODUCER_LENGTHS.get((_band(min(widths)), _gating(fused))) if len(widths) == 1 else None
    if shortest is None:  # (no vector input at all, or other widths)
        return p
    if p.has_keep or p.length < shortest or _groups(fused, p) != 1 or not _fills(fused, p) or not _takes(fused, p):
        return p
    return dataclasses.replace(p, options=tuple(dict(p.options, threads=3 * THREADS, tile=2 * BN).items()))


def _fills(fused: FusedCascade, p: Problem) -> bool:
    """Whether row tiles of 128 over the groups of rows sharing their keys pad them no more than tiles of 64 (a GQA
    group of 64 rows would leave half of every block idle), and are enough to fill the GPU once."""
    rep = max(1, min((dict(p.reps).get(s.name, 1) for s in fused.cascade.inputs if s.size is not None), default=1))
    bm = PRODUCER_ROWS
    tiles = p.rows // rep * -(-rep // bm)
    return -(-rep // bm) * bm <= -(-rep // (bm // 2)) * (bm // 2) and tiles >= p.multiprocessors()


def _takes(fused: FusedCascade, p: Problem) -> bool:
    """Whether the producer block takes the cascade as the policy would give it: ungated or gated on a prefix of the
    row, and under a gate walking row tiles (a block a row tile measured slower than one warpgroup there)."""
    return _prefix_gated(fused) and not (_gating(fused) and p.option("persistent") is False)


def _wide(fused: FusedCascade, p: Problem) -> Problem:
    """Vector sums 129 to 256 wide (d = 192, 256): the producer block whose consumers hold them whole
    (:data:`~.products.PRODUCER_COMPONENTS`), on tiles of 64 elements, of 32 where three stages of 64 would not fit
    beside the query's 128 rows (:func:`_tile`: attention above 192 components), wherever it takes the cascade
    (:func:`_takes`). Where column groups hold the sums too (multiples of 128: d = 256, MLA's latent at half its width), only as the policy's block
    for d = 128 is given (unmasked, from :data:`WIDE_LENGTHS`, its row tiles filling the GPU): a decode
    step's few rows keep the column groups, and the wide block was measured on prefill only; else (d = 192) masked or
    not, at any length; else ``p`` (column groups, or ``vrows``). Measured on the H200 (``gpu/README.md``, 2026-12-04,
    seventh series): Gemma-7B H16 L2048 d256 0.153 ms against 0.270 on column groups (cuDNN 0.112), causal 0.121
    (cuDNN 0.099); d = 192, which no column groups hold, 0.194 on tiles of 64, 0.250 on tiles of 32 (cuDNN 0.169)."""
    if not _takes(fused, p):
        return p
    if column_groups(_widths(fused, p)) is not None and (
            p.has_keep or p.length < WIDE_LENGTHS[_gating(fused)] or not _fills(fused, p)):
        return p
    return dataclasses.replace(p, options=tuple(dict(p.options, threads=3 * THREADS).items()))


def _producer(fused: FusedCascade, p: Problem) -> int:
    """Threads of the block's producer warpgroup (:mod:`.tile_producer`): asked for (:func:`_asks_producer`) where
    the sums need no column groups, else 0."""
    return _asks_producer(p) if _groups(fused, p) == 1 else 0


def _threads(fused: FusedCascade, p: Problem) -> int:
    """The caller's block size (less its producer's threads: the consumers'), else one warpgroup (one warp in the
    simulator), or a warpgroup per column group (whole warpgroups in the simulator too: its stand-ins place a warp's
    rows by its index in the warpgroup)."""
    groups = _groups(fused, p)
    if groups > 1:
        return p.option("threads") or 128 * groups
    if p.option("threads"):
        return p.option("threads") - _producer(fused, p)
    return SIM_THREADS if p.option("simulator") else THREADS


def _rows(fused: FusedCascade, p: Problem) -> int:
    """Rows of a block: 16 a warp, the warps of a row tile's column groups counted once."""
    return _threads(fused, p) // 32 * 16 // _groups(fused, p)


#: Shared memory of a multiprocessor, and what each block resident there reserves besides its own (bytes).
SM_SHARED, RESERVED = 233472, 1024


def _stages(fused: FusedCascade, p: Problem) -> tuple[int, int]:
    """``(stages, bytes)``: as many tiles in flight (up to :data:`~.mma_policy.MOST_STAGES`) as fit beside the params when two
    blocks of one warpgroup share a multiprocessor (one block's element-wise work then overlaps the other's
    products), or one block of two warpgroups; at least two, three with a producer warpgroup (three or more: the
    pipelined order, :attr:`WgmmaKernel.pipelined`; d = 64 gets four, d = 128 two: three would fit only without the residuals
    staged, and measured 0.415 against 0.418 ms at LLaMA-65B L2048, while a query not exact in 16 bits would
    then multiply its residual by ``mma.sync``). The params' residuals are staged too where two stages
    fit beside them; else (MLA's 576-wide query) they are not (:meth:`WgmmaKernel.residual_products`). Params given
    in the products' 16-bit type have no residuals: without a gate their shared memory goes to the ring
    (:func:`_residual_free`: three stages at d = 80 … 128 beside two blocks of one warpgroup, and so the pipelined
    order). Measured on the H200 (``gpu/README.md``, 2026-12-04, sixth series; one warpgroup, ms, three stages /
    two): d80 L2048 0.1638 / 0.1753, d128 L1024 0.0876 / 0.0903, but d96 L2048 0.1806 / 0.1777 and causal d128
    L1024 0.0671 / 0.0646 — so a gated cascade keeps two stages."""
    sizes, rows = dict(p.sizes), _rows(fused, p)
    blocks = 2 if _threads(fused, p) <= THREADS else 1
    groups, tile = _groups(fused, p), _tile(fused, p)
    least = 3 if _producer(fused, p) else mma_policy.STAGES  # (a producer's consumers: the pipelined order)
    for resid in (False,) if _residual_free(fused, p) else (True, False):
        stages, fixed, per = _ring(fused, sizes, rows, resid, groups, tile, blocks)
        if stages >= least:
            break
    stages = max(least, stages)
    return stages, fixed + stages * per


def _ring(fused: FusedCascade, sizes: dict, rows: int, resid: bool, groups: int, tile: int,
          blocks: int) -> tuple[int, int, int]:
    """``(stages, fixed, per)``: how many stages of ``tile`` elements fit (up to :data:`~.mma_policy.MOST_STAGES`)
    beside the block's params (``fixed`` bytes) when ``blocks`` blocks share a multiprocessor, a stage ``per`` bytes."""
    fixed = shared_plan(fused, sizes, rows, 0, resid, groups, tile)[-1]
    per = shared_plan(fused, sizes, rows, 1, resid, groups, tile)[-1] - fixed
    return min(mma_policy.MOST_STAGES, (SM_SHARED // blocks - RESERVED - fixed) // per), fixed, per


def _residual_free(fused: FusedCascade, p: Problem) -> bool:
    """Whether the ring plans no residual rows: every dot product's param given in the products' 16-bit type (staged
    as it is: no residual), in a cascade without a gate (:func:`_stages` says why)."""
    if not NO_RESIDUALS or _gating(fused):
        return False
    dtypes, params = dict(p.dtypes), dot_params(fused)
    return bool(params) and all(dtypes.get(q.name, "float32") != "float32" for q in params)


def _tile(fused: FusedCascade, p: Problem) -> int:
    """Elements of a tile: the caller's (32 or 128 with a producer warpgroup: applicable), else
    :data:`~.tile_update.BN`, or half of it in a producer block whose ring would not hold three stages of 64 elements
    beside the params' rows (the pipelined order's least: :func:`_stages`) — vectors wider than 192 components in
    attention (d = 256: 64 KB a stage beside the query's 64 KB), whose keys and values the ring holds alike; keys of
    256 beside values of 128 take 64 (48 KB a stage, three fit). Planned without the params' residual rows: a float32
    query not exact in 16 bits then adds its residual's product from global memory (``mma.sync``), as attention's at
    d = 192 does; a 16-bit query has none (before, such keys took tiles of 32 and staged the residuals: neither form
    is timed). Planned for the GPU's block (its two consumer warpgroups' 128 rows), in the simulator too, which so
    runs the GPU's tiles."""
    if p.option("tile"):
        return p.option("tile")
    if _most(p) > MOST_COMPONENTS and _ring(fused, dict(p.sizes), PRODUCER_ROWS, False, 1, BN, 1)[0] < 3:
        return BN // 2
    return BN


def _shared_bytes(fused: FusedCascade, p: Problem) -> int:
    return _stages(fused, p)[1]


@functools.lru_cache(maxsize=1)
def _targets_sm90a() -> bool:
    """Whether the installed numba-cuda builds for ``sm_90a`` on a cc 9.0 GPU (0.30 does; older releases are not
    known to)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major, minor = (int(x) for x in version("numba-cuda").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (0, 30)


def hopper_refusal(p: Problem, name: str, instead: str) -> str | None:
    """Why strategy ``name`` cannot build Hopper's warpgroup instructions for this call (None: it can): another
    GPU, or a numba-cuda that does not build sm_90a; ``instead`` is the strategy to name."""
    if p.option("simulator"):
        return None
    cc = p.option("cc")
    if cc is not None and tuple(cc)[:2] != (9, 0):
        return f"{name}: Hopper's warpgroup instructions need an sm_90 GPU; this one is sm_{cc[0]}{cc[1]}: use {instead}"
    if not _targets_sm90a():
        return f"{name}: numba-cuda 0.30 or later is needed to build sm_90a kernels: pip install -U numba-cuda; use {instead}"
    return None


def _block(fused: FusedCascade, p: Problem) -> tuple[Problem, str | None]:
    """(The call with the policy's block (:func:`with_defaults`) where that block suits it, else as given; why
    ``wgmma`` does not suit it then, or None.)"""
    chosen = with_defaults(fused, p)
    if chosen is not p and _applicable(fused, chosen) is None:
        return chosen, None
    return p, _applicable(fused, p)


def applicable(fused: FusedCascade, p: Problem) -> str | None:
    """Why ``wgmma`` does not suit this call (None: it does): :func:`.products.applicable`'s reasons (with wide vectors),
    then the device and the block (the policy's, :func:`with_defaults`, where the caller chose none and it suits)."""
    return _block(fused, p)[1]


def _applicable(fused: FusedCascade, p: Problem) -> str | None:
    reason = form_and_call(fused, p, "wgmma", _shared_bytes, wide=True, most=_most(p))
    if reason is not None:
        return reason
    reason = hopper_refusal(p, "wgmma", "mma")
    if reason is not None:
        return reason
    threads, groups = _threads(fused, p), _groups(fused, p)
    reason = _params16_refusal(fused, p)
    if reason is not None:
        return reason
    # (three warpgroups: two consumers and a producer, tile_producer; in the simulator three warps)
    allowed = (32, 64, 96, 128, 256) if p.option("simulator") and groups == 1 else (128 * groups,) if groups > 1 \
        else (128, 256, 384)
    threads += _producer(fused, p)
    if threads not in allowed:
        split = f" (vector sums of {groups} warpgroups' columns)" if groups > 1 else " (whole warpgroups)"
        return f"wgmma: blocks of {', '.join(map(str, allowed))} threads{split}, got {threads}"
    if p.option("tile") not in (None, BN) and not (p.option("tile") in (BN // 2, 2 * BN) and _producer(fused, p)):
        return (f"wgmma: tiles of {BN} elements, or {BN // 2} or {2 * BN} with a producer warpgroup (threads=384; 96 "
                f"in the simulator), got {p.option('tile')}")
    for name, fixed in (("batch", _rows(fused, p)), ("group", 16)):
        if p.option(name) not in (None, fixed):
            return f"wgmma: the {name} is fixed by the instruction shapes (16 rows per warp)"
    if p.option("persistent"):
        if not _producer(fused, p):
            return "wgmma: blocks walk row tiles (persistent) only as the producer block (threads=384)"
        if (p.option("segments") or 1) > 1:
            return "wgmma: blocks walking row tiles (persistent) take each row in one segment: leave segments out"
        if _gating(fused) and _stages(fused, p)[0] > 3:
            return ("wgmma: blocks walk row tiles (persistent) under a gate with at most 3 stages (the producer's "
                    "vote takes a named barrier), and this call's ring has 4: use persistent=False")
    return None


def _params16_refusal(fused: FusedCascade, p: Problem) -> str | None:
    """Why the vector params given in 16 bits (a query on the device as a model holds it) cannot be staged as they
    are: only in the products' own type (the staged words are what the products read)."""
    names, dtypes = {q.name for q in fused.cascade.params}, dict(p.dtypes)
    given = {k: v for k, v in dtypes.items() if k in names and v != "float32"}
    if not given:
        return None
    kinds = {dtypes.get(x.name, "float32") for x in fused.cascade.inputs if x.size is not None}
    for name, kind in given.items():
        if kinds != {kind}:
            return (f"wgmma: param {name} given in {kind} is staged as it is only where the vector inputs are "
                    f"{kind} too (they are {', '.join(sorted(kinds))}): pass it in their type or in float32")
    return None


def configure(fused: FusedCascade, p: Problem) -> dict:
    """One warpgroup of 128 threads (64 rows; two warpgroups with ``threads=256``; two consumer warpgroups and a
    producer with ``threads=384``, :mod:`.tile_producer`; a warpgroup per column group of wide vector sums), tiles of
    64 elements (128 asked for with the producer), exp by ``ex2.approx`` unless asked otherwise (as
    :func:`.mma_policy.configure`); on the GPU, segments of the axis across blocks while the blocks would not fill the
    multiprocessors (a decode step: MLA's 128 heads of a few tokens are a few blocks), each of at least four tiles."""
    p, reason = _block(fused, p)
    if reason is not None:
        raise RedalgebraError(reason)
    threads, bm, tile = _threads(fused, p), _rows(fused, p), _tile(fused, p)
    stages, shared = _stages(fused, p)
    nseg = p.option("segments")
    if nseg is None:
        rep = max(1, min(dict(p.reps).get(s.name, 1) for s in fused.cascade.inputs if s.size is not None))
        blocks = max(1, p.rows // rep * -(-rep // bm))
        busy = p.multiprocessors() * (2 if threads <= THREADS else 1)
        # (at least 4 tiles a segment: MLA B4 on the H100, 2026-12-05, 0.0393 ms in 16 segments of 4 tiles against
        # 0.0445 in 8 of 8 — 128 blocks of 132 multiprocessors against 64; 24 segments, two waves, 0.0622)
        nseg = 1 if p.option("simulator") or p.option("persistent") else max(1, min(busy // blocks, -(-p.length // (4 * tile))))
    nseg = max(1, min(int(nseg), max(-(-p.length // tile), 1), 65535))
    # (the kernel reads the count at run time: one compiled kernel for every count of segments above one)
    producer = bool(_producer(fused, p))
    persistent = _walking(fused, p, producer, nseg, stages)
    cluster = _cluster(fused, p, nseg, bm, shared, producer or persistent)
    # segments merged by the combine kernel: launched while the partial kernel runs (programmatic dependent launch,
    # Hopper), its blocks taking each multiprocessor a partial block leaves, waiting for the whole partial kernel
    # (grid_wait) before they read its states (:data:`DEPENDENT_COMBINE`)
    dependent = bool(DEPENDENT_COMBINE) and nseg > 1 and not cluster and p.dependent_launch()
    return dict(threads=threads, tile=tile, batch=bm, group=16, vec=8, segments=min(nseg, 2), nseg=nseg,
                fast_exp=p.option("fast_exp", True), shared=shared, stages=stages, producer=producer,
                persistent=persistent, cluster=cluster, dependent=dependent,
                out_dtypes=vector_out_dtypes(fused, p.option("out_dtype")))


def _cluster(fused: FusedCascade, p: Problem, nseg: int, bm: int, shared: int, walking: bool) -> bool:
    """Whether a row tile's segments run as one thread-block cluster and merge there (:mod:`.cluster_merge`): as asked
    (``cluster``), else by :data:`CLUSTER` (off) wherever it applies — two to :data:`~.cluster_merge.CLUSTER_MOST`
    segments, blocks of consumers only (no producer warpgroup, not walking), and the states parked in the block's
    shared memory (:func:`.cluster_merge.park_plan`). Asked where it does not apply, refused; a row of one segment
    (a short call) has nothing to merge and runs without, asked or not."""
    from .cluster_merge import CLUSTER_MOST, park_plan

    asked = p.option("cluster")
    wanted = bool(CLUSTER if asked is None else asked)
    if nseg < 2 or not wanted:  # (nothing to merge: a call short enough for one segment, whatever was asked)
        return False
    c = fused.cascade
    sizes = dict(p.sizes)
    vectors = {r.name: (c.sizes[r.name] if isinstance(c.sizes[r.name], int) else sizes[c.sizes[r.name]])
               for r in c.reductions if c.sizes[r.name] is not None}
    park = park_plan([r.name for r in c.reductions if c.sizes[r.name] is None], vectors, bm)[1]
    why = (f"{nseg} segments, more than a cluster's {CLUSTER_MOST} blocks" if nseg > CLUSTER_MOST else
           "its blocks have a producer warpgroup or walk row tiles" if walking else
           f"the states take {park} bytes of shared memory, the block has {shared}" if park > shared else None)
    if asked and why is not None:
        raise RedalgebraError(f"wgmma: cluster=True merges a row's segments in a thread-block cluster, but {why}")
    return why is None


def _walking(fused: FusedCascade, p: Problem, producer: bool, nseg: int, stages: int) -> bool:
    """Whether the producer block walks row tiles (:attr:`~.tile_producer.TileProducer.walking`): as asked
    (``persistent``), else by :data:`~.tile_producer.PERSISTENT` where the row is one segment and, if a let may gate
    elements out, the ring has at most 3 stages."""
    asked = p.option("persistent")  # (asked of another block: refused by applicable)
    if asked is not None:
        return bool(asked)
    # (under a gate, the producer's own vote takes a named barrier: at most 3 stages)
    return producer and nseg == 1 and tile_producer.PERSISTENT and (not _gating(fused) or stages <= 3)


def _prefix_gated(fused: FusedCascade) -> bool:
    """Whether every let that may gate elements out is ``where(c, …, -inf)`` with ``c`` true on a prefix of the row (a
    causal mask: :func:`.products.prefix`), as the producer block takes it; none at all included."""
    return all(isinstance(e, sp.Piecewise) and len(e.args) == 2 and e.args[1].expr == -sp.oo
               and e.args[1].cond == sp.true and prefix(e.args[0].cond)
               for _, e in fused.prologue.steps if e.has(-sp.oo))


def _gating(fused: FusedCascade) -> bool:
    """Whether a let of the cascade may gate elements out (``where(…, -inf)``: a causal mask)."""
    return any(e.has(-sp.oo) for _, e in fused.prologue.steps)


def grid(rows: int, spec: Spec, named) -> dict:
    """:func:`.mma_policy.grid`, the blocks of a producer warpgroup's kernel with its threads (half the consumers')."""
    out = mma_policy.grid(rows, spec, named)
    if spec.producer:
        blocks, threads, *rest = out["rows"]
        out["rows"] = (blocks, threads + spec.threads // 2, *rest)
    return out
