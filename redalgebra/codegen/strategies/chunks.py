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
factors do their work without waiting (they read the call's inputs and write their own chunk's rows only) and let
the next product be scheduled at once; only their last block waits, at its end, for the product before them. A
wait is documented to cover the kernel launched just before the waiting one; without the last block's wait, chunk
``c + 1``'s product could end before chunk ``c``'s, and whether a kernel launched after the module would then wait
for every product, not only the last, is not documented. With it, each product's end implies every earlier
product's, so the module's last kernel ends after all of it. Only chunk 0's factors are left in series with the
products. The rows of each chunk are slices of the call's arrays (the inputs no rows share,
the params, the outputs, the scratch laid out by rows), so the kernels are the unchunked ones.

A chunk is a wave of the product's blocks (its rows × the column blocks fill the multiprocessors once), and a block of
the factors must fit beside a block of the product on a multiprocessor: the product's registers are capped at
:data:`CHUNK_REGISTERS` (210 uncapped on the GPU), which leaves 16384 of a multiprocessor's 65536 to the factors' block
(the ``rows`` kernel's 256 threads at 51 registers take 14336). ptxas (offline) assembles the product without spills at
192 in every variant tried (bfloat16 outputs, K-major weights, FP8's exact product with e4m3 weights widened, 11008
columns, a partial column block); at 184 the K-major product spilled 8 bytes, at 168 the plain one 24. On an H100 the
product ran as fast capped as uncapped: 47.2–50.4 µs a chunk at 184, 47.1–50.8 at 192, 47.3–50.8 at 210. The cap is
numba's ``max_registers`` without launch bounds: ptxas ignores it beside them (the first run of this on an H100 kept 210
registers, and the chunks gained nothing).

Measured on an H100 (gpu/README.md, 2026-12-06; RMSNorm + GEMM M4096 K = N = 4096, bfloat16 outputs, interleaved in one
process): 0.2043–0.2088 ms chunked (capped at 184) against 0.2158–0.2211 launched whole, over two runs of two rounds,
0.2036 and 0.2072 capped at 192; ``torch.compile`` 0.2003–0.2016. Each chunk's product alone takes 47.2–50.4 µs and its
factors 5.9–7.3.

Chosen by :func:`row_chunk` where the module has the factors kernel of the ``rows`` strategy with a block that fits
beside the product's, one segment, the 16-bit product without a producer warpgroup, blocks a tile, no mask, at
least two chunks, and no more waves of the product's blocks in chunks than whole (a chunk fills the multiprocessors
once with whole row blocks: at 56 column blocks only 112 of 132, and M4096 N14336 would take 16 waves against 14).
"""

from __future__ import annotations

from . import Problem

#: Whether :func:`row_chunk` chunks the module's launch where it can (the GPU scripts' hook: ``chunks.ROW_CHUNKS=0``).
ROW_CHUNKS = True
#: Whether each chunk's factors end only after the product before them (their last block's wait: the chain that makes
#: the module's last kernel end after every product; the GPU scripts' hook ``chunks.CHAIN=0`` times it left out).
CHAIN = True
#: Whether the simulator's calls are chunked too (they gain nothing by it: the tests' hook).
IN_SIMULATOR = False
#: A thread's registers at most in a chunked module's product (:attr:`Spec.max_registers`).
CHUNK_REGISTERS = 192
#: A multiprocessor's registers (Hopper's), and what a thread of the factors kernel is counted to take (its ``rows``
#: kernel took 51 on the GPU at RMSNorm K = 4096, 62 offline).
REGISTER_FILE, FACTOR_REGISTERS = 65536, 64


def row_chunk(p: Problem, rows_block: int, column_blocks: int, threads: int, factor_threads: int, plain: bool) -> int:
    """Rows a chunk of the module's launch (a multiple of the product's ``rows_block``: as many row blocks as fill the
    multiprocessors with the ``column_blocks`` of each), or 0 for one launch of each kernel: ``plain`` false (the
    module is not a factors kernel of the ``rows`` strategy then a 16-bit product a block a tile, in one segment),
    a block of the factors' ``factor_threads`` that would not fit beside one of the product's ``threads`` at
    :data:`CHUNK_REGISTERS` (:data:`FACTOR_REGISTERS` a thread: the rows of 14 KB of FP8 quantisation at K = 7168 take
    512 threads a row, which do not fit), a mask, an input shared by some rows but not all (its rows would not split
    with the chunks), fewer than two chunks' rows, or chunks that would take more waves of the product's blocks than
    the whole call (a chunk's products end together: one that fills few multiprocessors leaves the rest idle till
    then)."""
    if not (ROW_CHUNKS and plain) or p.has_keep:
        return 0
    if factor_threads * FACTOR_REGISTERS > REGISTER_FILE - CHUNK_REGISTERS * threads:
        return 0
    if any(1 < rep < p.rows for _, rep in p.reps):
        return 0
    sms, blocks = p.multiprocessors(), -(-p.rows // rows_block)
    per = max(1, sms // max(column_blocks, 1))  # (row blocks a chunk)
    if blocks < 2 * per:
        return 0
    # the product's waves of blocks, chunked and whole: chunks are not taken where they cost a wave (a chunk of
    # 2 row blocks × 56 column blocks fills 112 of 132 multiprocessors, and M4096 N14336 would take 16 waves in
    # chunks against 14 whole; a vocabulary's 501 column blocks, 4 waves a row block: 128 against 122)
    chunked = sum(-(-min(per, blocks - b) * column_blocks // sms) for b in range(0, blocks, per))
    return rows_block * per if chunked <= -(-blocks * column_blocks // sms) else 0
