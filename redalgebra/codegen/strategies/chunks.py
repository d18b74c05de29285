"""``columns_wgmma``'s module launched in chunks of rows: each chunk's factors made while the chunk before is
multiplied (:attr:`Spec.row_chunk`).

The module is two kernels: the factors (a memory-bound pass over the activations: read ``x``, write ``F``) and the
product (bound by the tensor cores). Launched once each, they run one after the other, and the GPU's memory idles
through the product while its tensor cores idle through the factors: at RMSNorm + GEMM M4096 K = N = 4096 on the
H200 the factors take about 30 µs of the module's 220.

Launched in chunks of rows — the factors of chunk 0, its product, the factors of chunk 1, its product, … — each
launch but the first is *dependent* (Hopper's programmatic dependent launch, :class:`~redalgebra.runtime.driver.
DriverStep`): the product lets the next launch start at once (``grid_launch``), so chunk ``c + 1``'s factors run
beside chunk ``c``'s product, and waits for its own chunk's factors (``grid_wait``) before its first copy. The
factors never wait: they read the call's inputs and write their own chunk's rows only. Only chunk 0's factors are
left in series with the products. The rows of each chunk are slices of the call's arrays (the inputs no rows share,
the params, the outputs, the scratch laid out by rows), so the kernels are the unchunked ones.

A chunk is a wave of the product's blocks (its rows × the column blocks fill the multiprocessors once), and a block
of the factors must fit beside a block of the product on a multiprocessor: the product's registers are capped at
:data:`CHUNK_REGISTERS` (206 uncapped; ptxas assembles the product at M4096 K = N = 4096 in 184 without spills, and
spills at 168), which leaves 18432 of a multiprocessor's 65536 to the factors' block (the ``rows`` kernel's 256
threads at 62 registers take 16384).

Chosen by :func:`row_chunk` where the module has the factors kernel of the ``rows`` strategy, one segment, the
16-bit product without a producer warpgroup, blocks a tile, no mask, and at least two waves of blocks.
"""

from __future__ import annotations

from . import Problem

#: Whether :func:`row_chunk` chunks the module's launch where it can (the GPU scripts' hook: ``chunks.ROW_CHUNKS=0``).
ROW_CHUNKS = True
#: Whether the simulator's calls are chunked too (they gain nothing by it: the tests' hook).
IN_SIMULATOR = False
#: A thread's registers at most in a chunked module's product (:attr:`Spec.max_registers`).
CHUNK_REGISTERS = 184


def row_chunk(p: Problem, rows_block: int, column_blocks: int, plain: bool) -> int:
    """Rows a chunk of the module's launch (a multiple of the product's ``rows_block``: as many row blocks as fill the
    multiprocessors with the ``column_blocks`` of each), or 0 for one launch of each kernel: ``plain`` false (the
    module is not a factors kernel of the ``rows`` strategy then a 16-bit product a block a tile, in one segment),
    a mask, an input shared by some rows but not all (its rows would not split with the chunks), or fewer than two
    chunks' rows."""
    if not (ROW_CHUNKS and plain) or p.has_keep:
        return 0
    if any(1 < rep < p.rows for _, rep in p.reps):
        return 0
    chunk = rows_block * max(1, p.multiprocessors() // max(column_blocks, 1))
    return chunk if p.rows >= 2 * chunk else 0
