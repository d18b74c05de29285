"""``columns_wgmma``'s launch policy: whether it suits a call (:func:`applicable`), the block, tile, stages and
segments it takes (:func:`configure`, as the registry calls it), the weights it reads K-major (:func:`k_major`), the
scalars-and-factors kernel's ``rows`` configuration (:func:`row_spec`) and the grids (:func:`grid`). The kernels are
built by :mod:`.columns_wgmma`."""

from __future__ import annotations

from ...derive import FusedCascade
from ...errors import RedalgebraError
from ..emit import Spec
from . import SMS, Problem, vector_out_dtypes
from . import columns_mma
from .columns import PREPASS_TILE, factor_part, prepass_vec, vector_columns
from .rows_policy import configure as rows_configure
from . import chunks, producer as producer_block
from .fp8_products import TRANSPOSE_COLUMNS, fp8_applies
from .producer import PRODUCER_STAGES, producer_threads
from .tile_factors import choose as choose_tile_factors
from .wgmma_policy import ATOM, ROW, hopper_refusal

#: Elements of a staged tile (one 128-byte swizzled row of 16-bit values).
BK = ROW
#: Threads of a block on the GPU (two warpgroups: 128 rows) and in the simulator (one warp: 16 rows); columns of a
#: block on the GPU (one m64n256 product per warpgroup and k16 step) and in the simulator; the sizes taken.
THREADS, SIM_THREADS, COLUMNS, SIM_COLUMNS = 256, 32, 256, 64
BLOCK_THREADS, BLOCK_COLUMNS = (32, 128, 256), (64, 128, 256)
#: ... and the FP8 product's (its K-major 128-byte weight rows; past 128 columns its two sets of accumulators take the
#: producer's registers: producer.HAND_OVER_COLUMNS). 160 columns make M4096 N7168's 1440 tiles 10.9 waves of one
#: block a multiprocessor (the last 91 % full), where 128 make 13.6 (58 %) and 192 make 9.2 (21 %): on the H200 the
#: 192-column product ran the tensor pipe 67.7 % of the time against 65.0 %, but no faster (gpu/README.md)
FP8_BLOCK_COLUMNS = (64, 128, 160, 192)
#: Shared memory a block may take (bytes, the H200's 227 KB) and the most stages.
MAX_SHARED, MOST_STAGES = 232448, 6
#: Threads of the scalars-and-factors kernel's block, where set: ``columns``' block-a-row kernel with that block
#: (the ``rows`` kernel of :func:`row_spec` is then not taken); :func:`configure`'s choice otherwise. Read by
#: :func:`configure` only (a sweep's hook: ``gpu/rowfactors_sweep.py``).
ROW_THREADS = None


def refusal(fused: FusedCascade, dtypes: dict | None = None) -> str | None:
    """Why ``columns_wgmma`` cannot build this cascade (None: it can): ``columns_mma``'s reasons."""
    reason = columns_mma.refusal(fused, dtypes)
    return None if reason is None else reason.replace("columns_mma", "columns_wgmma", 1)


def stage_units(rows: int, columns: int) -> int:
    """16-bit units of one stage: the factor tile (``rows`` rows of 128 bytes) and the weight tile (``columns``
    × 128 bytes: 64 rows of 64 16-bit columns)."""
    return (rows + columns) * ROW


def plan(threads: int, columns: int) -> tuple[int, int]:
    """``(stages, bytes of dynamic shared memory)``: as many stages as fit one block (at most
    :data:`MOST_STAGES`), and 1024 bytes to reach the swizzle's alignment."""
    per = 2 * stage_units(threads // 2, columns)
    stages = min(MOST_STAGES, (MAX_SHARED - ATOM) // per)
    return stages, stages * per + ATOM


def row_threads(spec: Spec) -> int:
    """The scalars-and-factors kernel's block: the ``rows`` kernel's, else ``columns``' kernel's, else the product's."""
    return dict(spec.row_spec).get("threads") or spec.row_threads or spec.threads


def fac_store(dtypes, fused: FusedCascade, fp8: bool = False) -> str:
    """The factors' stored type: the weights' 16-bit type (float16 for e4m3 weights, widened to it); e4m3 bytes for
    :attr:`Spec.fp8_products`."""
    if fp8:
        return "e4m3"
    vector = next(s.name for s in fused.cascade.inputs if s.size is not None)
    return "bfloat16" if dict(dtypes).get(vector) == "bfloat16" else "float16"


#: The ``rows`` fields of :attr:`Spec.row_spec`.
ROW_FIELDS = ("threads", "group", "tile", "vec", "shifted", "resident", "staged", "persistent", "min_blocks",
              "wide_rows")


def row_spec(fused: FusedCascade, p: Problem) -> tuple:
    """The ``rows`` configuration of the scalars-and-factors kernel (:func:`factor_part`'s cascade): the ``rows``
    strategy's block shape for this row (the row in registers where it fits; for 8-32 KB rows of 16-bit values its
    block as wide as two 16-byte chunks a thread need), a block per row group — not blocks walking the rows, which
    measured slower here on the H200 (``gpu/rowfactors_sweep.py``: RMSNorm M4096 K4096 0.2264 ms walking against
    0.2227 ms; FP8 M4096 K7168 0.6527 against 0.6459; ``columns``' block-a-row kernel 0.2233 and 0.6579). Rows whose
    pitch is not a multiple of 16 bytes are read an element a load (never shifted: the factors' rows start on the
    16-byte grid, the activations' would not). () for ``columns``' kernel: :data:`ROW_THREADS` set, a mask (whose
    dropped elements' factors are zeros), no scalar reduction, or a cascade the derivation or the policy refuses. The
    user's options are the product's, not this kernel's."""
    if ROW_THREADS or p.has_keep:
        return ()
    part = factor_part(fused)
    if part is None:
        return ()
    sub = part[0]
    names = {s.name for s in sub.cascade.inputs}
    q = Problem(rows=p.rows, length=p.length, sizes=p.sizes, dtypes=tuple((k, v) for k, v in p.dtypes if k in names),
                vec_ok=p.vec_ok, pitch_ok=p.pitch_ok, same_frame=False,
                reps=tuple((k, v) for k, v in p.reps if k in names),
                options=(("simulator", p.option("simulator")), ("fast_exp", p.option("fast_exp"))))
    try:
        cfg = {**rows_configure(sub, q), "persistent": False, "min_blocks": 0}
    except RedalgebraError:  # a shape the rows policy refuses: columns' kernel
        return ()
    return tuple((k, cfg[k]) for k in ROW_FIELDS)


def _row_threads(threads: int, length: int) -> int:
    """The smallest block of 128 or more threads (at most the product's) that reads a row in one pass of the scalar
    kernel's ``PREPASS_TILE`` elements a thread: more rows in flight than a block of 256 where the rows are short.
    Measured on the H200 (``gpu/rowfactors_sweep.py``): RMSNorm M4096 K4096 58.5 µs at 256 threads, 42.6 at 128, 41.6
    at 64 (two passes), 93.4 at 512; FP8 K7168 73.1 µs at 256 (one pass), 66.9 at 128 (two), 102.9 at 512 — but its
    module 0.6477 ms at 256 and 0.6731 at 128, so 256 is kept there."""
    rt = 128
    while rt * PREPASS_TILE < length and rt < threads:
        rt *= 2
    return min(rt, threads)


def _threads(p: Problem) -> int:
    return p.option("threads") or (SIM_THREADS if p.option("simulator") else THREADS)


def _block_columns(p: Problem) -> int:
    group = p.option("group")
    return 8 * group if group else (SIM_COLUMNS if p.option("simulator") else COLUMNS)


def applicable(fused: FusedCascade, p: Problem) -> str | None:
    """Why ``columns_wgmma`` does not suit this call (None: it does)."""
    reason = refusal(fused, dict(p.dtypes))
    if reason is not None:
        return reason
    reason = hopper_refusal(p, "columns_wgmma", "columns_mma")
    if reason is not None:
        return reason
    n = columns_mma._columns(fused, p)
    e4m3 = columns_mma._e4m3(fused, p)
    if n % 8:  # (e4m3 weights: their float16 copy's rows)
        return f"columns_wgmma: the weight rows are read 16 bytes at a time: {n} columns is not a multiple of 8; use columns"
    if not p.vec_ok:
        return "columns_wgmma: the weights must start on a 16-byte boundary (cp.async); use columns"
    threads, bc = _threads(p), _block_columns(p)
    allowed = BLOCK_THREADS if p.option("simulator") else BLOCK_THREADS[1:]
    if threads not in allowed:
        return (f"columns_wgmma: blocks of {' or '.join(map(str, allowed))} threads (whole warpgroups; one warp in "
                f"the simulator), got {threads}")
    fp8 = fp8_applies(fused, p)
    if bc not in BLOCK_COLUMNS and not (fp8 and bc in FP8_BLOCK_COLUMNS):
        return (f"columns_wgmma: blocks of {', '.join(map(str, BLOCK_COLUMNS))} columns (group {bc // 8}; 160 and "
                f"192, groups 20 and 24, on the FP8 instruction: fp8_products with e4m3 weights)")
    bm = threads // 2
    reps = dict(p.reps)
    share = min(reps.get(s.name, 1) for s in fused.cascade.inputs if s.size is not None)
    if share < p.rows and share % bm:
        return (f"columns_wgmma: a block's {bm} rows share one weight matrix; here each is shared by {share} rows (not "
                f"a multiple of {bm}): use {'columns_mma' if share % columns_mma.BM == 0 else 'columns'}")
    if e4m3 and share < p.rows:
        return ("columns_wgmma: e4m3 weights are widened to float16 once a call, for one weight matrix shared by every "
                "row; here there are several: use columns_mma")
    tile = 2 * BK if fp8 else BK
    for name, fixed in (("tile", tile), ("batch", bm)):
        if p.option(name) not in (None, fixed):
            return f"columns_wgmma: the {name} is fixed by the instruction shapes ({bm} rows, tiles of {tile} elements)"
    if fp8 and p.option("group") and bc not in FP8_BLOCK_COLUMNS:
        return (f"columns_wgmma: fp8_products takes blocks of {', '.join(map(str, FP8_BLOCK_COLUMNS))} columns (group "
                f"8, 16, 20 or 24; its fresh sums take a second set of accumulators), got {bc}")
    return None


def configure(fused: FusedCascade, p: Problem) -> dict:
    """Two warpgroups (128 rows) and 256 columns a block (one warp, 16 rows and 64 columns in the simulator), tiles of
    64 elements, as many stages as fit one block a multiprocessor; segments of the axis across blocks until every
    multiprocessor has one (at least four tiles each)."""
    reason = applicable(fused, p)
    if reason is not None:
        raise RedalgebraError(reason)
    threads, bc = _threads(p), _block_columns(p)
    n = columns_mma._columns(fused, p)
    fp8 = fp8_applies(fused, p)
    if fp8 and not p.option("group"):  # fresh sums beside the float32 ones: 128 columns a block, or 160 (below)
        bc = min(bc, 128)
        if not p.option("simulator") and not p.option("persistent"):
            bc = fp8_block_columns(-(-p.rows // (threads // 2)), n, p.multiprocessors())
    blocks = max(1, -(-p.rows // (threads // 2)) * -(-n // bc))  # (no rows, or no columns: a launch of nothing)
    tiles = -(-p.length // (2 * BK if fp8 else BK))
    nseg = p.option("segments") or max(1, min(p.multiprocessors() // blocks, tiles // 4))
    nseg = min(int(nseg), max(tiles, 1))  # (the tiles are numbered in the grid's x: no limit of its z)
    major = k_major(fused, p, fp8)
    staged = "" if fp8 else choose_tile_factors(fused, p, int(nseg))
    stages, shared = plan(threads, bc)
    persistent = bool(p.option("persistent"))
    # a producer warpgroup: the FP8 product always, the 16-bit one where asked (producer.SIXTEEN_BIT; not with the
    # factors in the tiles)
    producer = not fp8 and producer_block.SIXTEEN_BIT and not staged
    if fp8 or producer:  # (named barriers enough for four stages)
        cut = max(stages - PRODUCER_STAGES, 0)
        stages, shared = stages - cut, shared - cut * 2 * stage_units(threads // 2, bc)
    # the product's blocks walk the output's tiles only when asked (``persistent``): on the H200, mixed — RMSNorm + GEMM
    # M4096 K = N = 4096's product took 192.5 us alone launched a block a tile, 196.1 walking (three runs each,
    # interleaved), FP8 M4096 K = N = 7168's 646 and 639 (two each, the exact product); the FP8 instruction's product,
    # its producer warpgroup walking on (the ring running across tiles), 413.3 and 414.6 against 414.0 and 407.5 us
    # (two each, interleaved). Not launched while the factors' kernel runs (Spec.dependent,
    # the weights' first tiles loading meanwhile): the module's time was the same, 245.0 against 245.1 us (two runs
    # each; gpu/README.md)
    # outputs of the vector reduction's width stored in 16 bits only when asked (out_dtype): half the bytes the
    # epilogue writes, each rounded once more (float32 otherwise, as the other columns strategies write them)
    outs = vector_out_dtypes(fused, p.option("out_dtype"))
    rows_spec = () if staged else row_spec(fused, p)
    # the factors of a chunk of rows made while the chunk before is multiplied (:mod:`.chunks`)
    chunk = chunks.row_chunk(p, threads // 2, -(-n // bc), threads, dict(rows_spec).get("threads", 0),
                             bool(rows_spec) and int(nseg) == 1 and not (
                                 fp8 or producer or persistent or p.option("simulator") and not chunks.IN_SIMULATOR))
    return dict(threads=threads, group=bc // 8, vec=8, tile=2 * BK if fp8 else BK, batch=threads // 2,
                segments=int(nseg), fp8_products=fp8, producer=producer,
                nseg=int(nseg), pre_vec=prepass_vec(fused, p), fast_exp=p.option("fast_exp", False),
                shared=shared, stages=stages, row_threads=ROW_THREADS or _row_threads(threads, p.length),
                row_spec=rows_spec, persistent=persistent, tile_factors=staged,
                out_dtypes=outs, k_major=major, row_chunk=chunk, max_registers=chunks.CHUNK_REGISTERS if chunk else 0)


#: The FP8 product's block widths the policy chooses from, with the work a block does in a given time relative to 128
#: columns' (a wider tile reuses each factor tile more). Measured on the H200 at M4096 K = N = 7168 (gpu/README.md,
#: one process each, in turn): 160 columns' product 384.0 and 379.3 µs against 128 columns' 402.9, 0.947 of the time
#: for 0.982 of the waves × columns (11 waves of 160 against 14 of 128): 1.037. 192 columns (9.2 waves, the last a
#: fifth full) measured no faster than 128 in three runs, and walking blocks spill at 160 and 192: neither is chosen.
#: (A block a tile of 160 columns assembles without spills linked too, as numba links it: a launch that cannot load
#: the whole PTX, and so ignores the register hand-over, loses nothing.)
FP8_COLUMN_RATES = {128: 1.0, 160: 1.037}


def fp8_block_columns(row_blocks: int, n: int, sms: int = SMS) -> int:
    """The FP8 product's columns a block: the width whose blocks, one on each of ``sms`` multiprocessors, finish the
    output's tiles soonest — whole waves of tiles times the width, over its rate (:data:`FP8_COLUMN_RATES`). Fewer
    tiles than multiprocessors take 128 (the axis is then split into segments, which narrower blocks fill better)."""
    if row_blocks * -(-n // 128) < sms:
        return 128
    return min(FP8_COLUMN_RATES, key=lambda bc: (-(-row_blocks * -(-n // bc) // sms) * bc / FP8_COLUMN_RATES[bc], bc))


def k_major(fused: FusedCascade, p: Problem, fp8: bool = True) -> tuple:
    """The weights the product reads along their rows (:attr:`Spec.k_major`): given K-major (``p.k_major``), the
    cascade's one vector input (the one the product reads), one matrix shared by every row, and the call's arrays on
    the 16-byte grid (``p.vec_ok``) — the (n, L) rows copied 128 bytes at a time — where no row is read past its end:
    the FP8 product (``fp8``) reads e4m3 rows as they lie when ``L`` is a multiple of its tile (128; the transposed
    copy has zeros there); the exact product reads 16-bit rows as they lie when ``L`` is a multiple of its tile (64),
    and widens e4m3 rows into padded float16 rows whatever ``L``. Other weights: the FP8 product transposes them by
    the module's first kernel; the exact product's call copies them (``KMajorUnread``)."""
    vectors = [s.name for s in fused.cascade.inputs if s.size is not None]
    if len(vectors) != 1 or vectors[0] not in p.k_major or not p.vec_ok or \
            dict(p.reps).get(vectors[0], 1) < p.rows:
        return ()
    e4m3 = dict(p.dtypes).get(vectors[0]) == "e4m3"
    whole = p.length % (2 * BK) == 0 if fp8 else (e4m3 or p.length % BK == 0)
    return tuple(vectors) if whole else ()


def grid(rows: int, spec: Spec, named) -> dict:
    out = columns_mma.grid(rows, spec, named)
    n = vector_columns(spec, named)
    if "wf" in named and spec.k_major:  # e4m3 rows widened: a thread per 16 elements of a padded row
        out["widen"] = (-(-n * (named["wf"].shape[1] // 16) // spec.threads), spec.threads)
    elif "wf" in named:  # e4m3 weights widened: a thread per 16 elements of a row (per element: rows not of 16 bytes)
        per = -(-n // 16) if n % 16 == 0 else n
        out["widen"] = (-(-named["wf"].shape[0] * per // spec.threads), spec.threads)
    if "wt" in named:  # e4m3 weights as rows (Spec.fp8_products): a block of 256 threads a 64 x 64 tile
        out["transpose"] = ((named["wt"].shape[1] // 64, -(-n // TRANSPOSE_COLUMNS)), 256)
    row = dict(spec.row_spec)
    per = row["threads"] // row["group"] if row else 1  # rows a block of the scalars-and-factors kernel
    out["rowfactors"] = (-(-rows // per), row_threads(spec))
    # a block a tile of the output, numbered in one dimension; with Spec.persistent, as many as are resident, a block
    # a multiprocessor, walking the tiles (Strategy.walking, :meth:`ColumnsWgmmaKernel.tiles`)
    out["tiles"] = ((-(-rows // spec.batch) * -(-n // (spec.group * 8)) * spec.segments, 1, 1),
                    spec.threads + producer_threads(spec), 0, spec.shared)
    return out
