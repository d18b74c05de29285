"""The ``rows`` strategy's launch policy: a row's group of threads, its chunks a thread, its load width, whether the row
stays in registers and whether blocks walk the rows — from the shape alone (``configure``), and the per-element
outputs' stored types (``out_dtypes``). The kernel itself is ``rows.py``'s."""

from __future__ import annotations

from ...derive import FusedCascade
from ...derive.prepare import casts_in_reductions
from ...errors import RedalgebraError
from ...ir.functions import RoundE4M3
from ..states import require_scalar_elements
from . import VEC, pow2

#: Persistent blocks (each walking many rows) for 16-bit rows of the first input within these bytes, when
#: there are at least this many rows (measured on the H200: gpu/README.md).
PERSISTENT_ROW_BYTES = (8 * 1024, 32 * 1024)
PERSISTENT_ROWS = 4096
#: Threads a multiprocessor keeps resident (so registers a thread: 65536 / threads) in persistent blocks, for one input
#: and for more. Softmax (one input) measured best at 2048 (32 registers, though ptxas spills 76/116 bytes a thread);
#: LayerNorm (x with a weight and a bias a hidden index) spills 480/504 bytes there and took 0.505 ms at 16384 x 4096
#: bf16 on an H100, against 0.133 at 1024 (64 registers: 112/108), 0.152 at 768 (80) and 0.184 at 512 (128);
#: RMSNorm (x and a weight: 252/272 bytes spilled at 2048) takes 1024 unmeasured (gpu/README.md, 2026-12-05)
RESIDENT_THREADS = (2048, 1024)


def out_dtypes(fused: FusedCascade, dtypes: dict, want: str | None) -> tuple:
    """Per-element outputs in the first input's dtype (``e4m3`` bytes for ``fp8(…)``; float32 for an e4m3 input,
    whose three significant bits would round the outputs away), or ``want`` for all."""
    first = dtypes.get(fused.cascade.inputs[0].name, "float32")
    first = "float32" if first == "e4m3" else first
    out = []
    for sym, expr in fused.finalize.steps:
        if sym.name in fused.per_element_outputs:
            out.append((sym.name, want or ("e4m3" if isinstance(expr, RoundE4M3) else first)))
    return tuple(out)


#: Rows from which a row's index no longer fits 32 bits: its arithmetic is then 64-bit (``Spec.wide_rows``).
WIDE_ROWS = 2 ** 31


def scalar_reductions(fused: FusedCascade) -> bool:
    """Whether every reduction's state is a scalar or a top-k list: the cascades ``rows`` stages, one reduction at a
    time with its dependencies final, wherever the one-pass form would compute otherwise than the reference (and
    wherever a cast inside a reduction would round at a running scale)."""
    return all(fused.cascade.sizes[r.name] is None or r.monoid.k is not None for r in fused.cascade.reductions)


def configure(fused: FusedCascade, p) -> dict:
    """Group, block, chunks per thread and load width from the shape: the row in registers when it fits."""
    require_scalar_elements(fused, "rows")
    dtypes = dict(p.dtypes)
    first = dtypes.get(fused.cascade.inputs[0].name, "float32")
    wide = p.vec_ok and (p.pitch_ok or p.same_frame)
    vec = VEC[first] if wide else 1
    chunks = -(-p.length // vec) + (1 if wide and not p.pitch_ok else 0)
    heavy = any(r.monoid.k is not None or fused.cascade.sizes[r.name] is not None for r in fused.cascade.reductions)
    topk = any(r.monoid.k is not None for r in fused.cascade.reductions)
    # chunks per thread that stay in registers; a top-k is selected by rounds over the group's registers:
    # one chunk per thread up to a warp's, two beyond (H200, T4096 E4096 bf16 top-8: 0.153 ms in groups of
    # 512 threads, 0.095 ms in groups of 256 holding two chunks each: twice the rows in flight)
    most = max(1, (16 if heavy else 32) // vec)
    cap = 32 if p.option("simulator") else 1024  # the simulator runs a thread per OS thread
    per = (1 if chunks <= 32 else min(2, most)) if topk else most
    group = p.option("group") or min(cap, max(1 if heavy else 4, pow2(-(-chunks // per))))
    # any number of chunks per thread: a power of two would leave up to half the registers empty (a row
    # of 257 float32 in groups of 16: 8 chunks for 5; measured 81.8 against 50.2 us on the H200)
    tile = p.option("tile") or min(most, -(-chunks // group))
    threads = p.option("threads") or max(group, 64 if p.option("simulator") else 128 if heavy else 256)
    if not fused.per_element_outputs and not topk and group > 128 and not p.option("group"):
        # nothing is written per element, so the row is read once whether it is resident or walked in
        # passes: blocks of one 128-thread group (more rows in flight, no block-wide barriers) measured
        # best on the H200 (cross-entropy 8192 x 32000 bf16: 0.265 ms against 0.362 ms resident at 1024)
        group, tile = 128, p.option("tile") or most
        threads = p.option("threads") or 128
    if threads % group:
        raise RedalgebraError(f"rows: {threads} threads per block do not hold whole groups of {group}")
    if threads % 32:
        # (every shuffle names the whole warp: lanes a block does not have leave it undefined on the GPU)
        raise RedalgebraError(f"rows: {threads} threads per block are not whole warps (a multiple of 32): its "
                              f"shuffles exchange across a warp; take threads=32 or more with group={group}")
    resident = chunks <= group * tile
    if not resident and threads == 1024 and topk and not any(p.option(k) for k in ("group", "threads", "tile")):
        # a top-k over a row in passes: blocks of 512 threads holding twice the chunks (128 registers a thread, none
        # spilled; 1024 threads spilled at 64): on an H100 the router's top-8 over 1024 x 50257 bfloat16 0.914 ->
        # 0.841-0.847 ms in two runs (gpu/README.md, "rows in passes")
        group = threads = 512
        tile = 2 * tile
    elif (threads == 1024 and not topk and not p.option("tile")
          and (not resident or (len(fused.cascade.inputs) > 1 and tile * vec > 16))):
        # at 1024 threads (64 registers a thread) a thread holds 16 values, the row walked in passes. The register
        # set's 32 values spilled 36-304 bytes a thread (softmax float32 L50257: 152) and were no faster to load: on an
        # H100, softmax float32 667 x 50257 0.1387 -> 0.1255 ms, bfloat16 667 x 50257 0.0999 -> 0.0868, 220 x 151936
        # 0.0930 -> 0.0860, float32 261 x 128256 0.1436 -> 0.1430 (gpu/README.md, "rows in passes"). So is a row it
        # would hold whole beside another per-element input (ptxas: LayerNorm float32 at 20, 24 and 32 values a thread
        # spilled 80, 156 and 328 bytes, bfloat16 at 32 268), read again from L2: on an H100, LayerNorm float32
        # 1024 x 32768 0.1849 -> 0.1197 ms (torch.compile 0.1048; gpu/README.md, 2026-12-06). A row of one input
        # stays whole: softmax float32 spills nothing there, float16 24 bytes, and its passes gained 3 %.
        tile = max(1, most // 2)
        resident = chunks <= group * tile
    scalar = scalar_reductions(fused)
    # staged: each reduction in turn with its dependencies final (the level order) — over the registers when the row
    # is resident; over a row read in passes only where the one-pass form computes otherwise than the reference (a
    # top-k of corrected values, a correction that does not exist on a prefix, a cast at a running scale): a pass a
    # reduction, not one
    staged = scalar and (resident or bool(fused.one_pass_inexact) or casts_in_reductions(fused.cascade))
    persistent, min_blocks = p.option("persistent"), 0
    if persistent is None:
        persistent = (not p.option("simulator") and staged and resident and bool(fused.per_element_outputs) and not topk
                      and VEC.get(first) == 8 and PERSISTENT_ROW_BYTES[0] <= p.length * 2 <= PERSISTENT_ROW_BYTES[1]
                      and p.rows >= PERSISTENT_ROWS and not any(p.option(k) for k in ("group", "threads", "tile")))
        if persistent:
            # 16-bit rows of 8-32 KB (H200, softmax): bf16 32768 x 8192 0.376 -> 0.305 ms, 65536 x 4096
            # 0.438 -> 0.283 ms, 8192 x 16384 0.214 -> 0.179 ms; float32 rows gained nothing (16384 x 8192:
            # 0.267 -> 0.279 ms). Two chunks per thread, the block as large as that needs, registers capped
            # so that 2048 threads stay resident (1024 with more inputs than one: RESIDENT_THREADS), the grid
            # as many blocks as fit. (Copying the block's next row
            # into shared memory while it works on this one measured slower: bf16 softmax 32768 x 8192 299.0
            # against 295.2 us, the FP8 quantiser 16384 x 7168 153.9 against 139.3; gpu/README.md, 2026-12-03)
            group = threads = min(1024, pow2(-(-chunks // 2)))
            tile = -(-chunks // group)
            min_blocks = RESIDENT_THREADS[min(len(fused.cascade.inputs), 2) - 1] // threads
    return dict(threads=threads, group=group, tile=tile, vec=vec, shifted=wide and not p.pitch_ok,
                resident=resident, staged=staged, fast_exp=p.option("fast_exp", False),
                out_dtypes=out_dtypes(fused, dtypes, p.option("out_dtype")), persistent=bool(persistent),
                min_blocks=min_blocks, wide_rows=p.rows >= WIDE_ROWS)
