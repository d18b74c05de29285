"""``columns_wgmma``: ``columns_mma`` for many rows — the product ``F · W`` as a GEMM on Hopper's ``wgmma`` (sm_90a).

``columns_mma`` multiplies 16 rows at a time on ``mma.sync``: every block re-reads its weight tiles for its 16 rows,
and every operand passes through the registers. With hundreds or thousands of rows (FP8 quantisation + GEMM at
M = 4096, RMSNorm + GEMM over a prefill batch) the product is a GEMM and is bound by the tensor cores: here a block
takes 128 rows (two warpgroups of 64; 16 in the simulator's one warp) and 256 columns, and each warpgroup multiplies
its 64 rows of the factor tile by the block's whole weight tile with ``wgmma.mma_async.m64n256k16``, both operands
read by the instruction from shared memory:

1. **Level order** as ``columns_mma``: the scalar reductions first (so an FP8 scale is the row's final absmax), then
   the factors ``F[m, k]`` in the weights' 16-bit type (FP8 values exactly; float16 beside e4m3 weights) —
   one kernel — then the product, then the segments' sums when the axis is split (few blocks: fewer than the
   multiprocessors). The first kernel is the ``rows`` strategy's, built from the scalar part with the factor as a
   per-element output (:func:`~.columns.factor_part`): the row read once into registers, reduced, its factors written
   from the registers (:func:`row_spec`); with a mask (whose dropped elements' factors are zeros) it is ``columns``'
   block-a-row kernel followed by a loop over the factors.
2. **Layout.** Tiles of 64 elements are staged by ``cp.async`` in the 128-byte-swizzled layout (the 16-byte chunk
   ``c`` of a 128-byte row ``r`` at chunk ``c ^ (r & 7)``): the factor tile K-major (a row's 64 factors one
   128-byte row), the weight tile as it lies in memory — rows ``w[k, :]``, so the instruction reads it MN-major
   (transposed), in blocks of 64 columns. Four tiles in flight (192 KB: one block a multiprocessor).
3. **Pipeline** (as a GEMM's): at tile ``t``, wait for its copies, fence them to the instructions' proxy, one
   barrier; issue the copies of tile ``t + 2`` into the stage that tile ``t - 2``'s products read (retired by the
   previous iteration's wait); then the four ``k16`` products of tile ``t``, committed as a group, and wait until
   at most one group is in flight — the tensor cores always have the next tile's products queued.
4. **Epilogue**: each accumulator is an output ``(row, column)`` (the instruction's layout: warp ``w``, lane
   ``g·4 + t``, rows ``16 w + g`` and ``+ 8``, columns ``8 j + 2 t`` and ``+ 1``); the derived finish (an FP8 scale
   ``s / 448``, a bias) is applied per row as in ``columns``. float32 outputs are stored a pair a lane (8 bytes);
   16-bit ones (``out_dtype``) four a lane after an exchange with the neighbouring lane (:mod:`.pairs`), so that a
   quad's stores fill a row's 32-byte sector: a pair a lane filled half of each sector and made the product slower
   than with float32 outputs (measured on an H100: RMSNorm M4096 K = N = 4096, 187.9 and 196.5 µs paired against
   209.8 and 206.7 unpaired and 197.8 and 199.9 with float32 outputs; gpu/README.md).

**The factors in the product's tiles** (:attr:`Spec.tile_factors`, off by default): :mod:`.tile_factors`.

**e4m3 weights** are widened to float16 by a first kernel of the module (every e4m3 value is a float16, exactly), and
the product is the float16 one. Not the FP8 instruction (``m64n256k32.e4m3.e4m3``, twice the products a cycle): on
an H200 its sums keep fewer bits than float32 — against float64, 5.6e-4 of the largest output at K = 1001 and 1.9e-3
at K = 7168, where the float16 product is within 3e-7 (the FP8 accumulation DeepSeek-V3's report describes, about 14
bits). Only for one weight matrix shared by every row (the widened copy is one matrix).

**Weights given K-major** (``W.T[None]`` of an (n, L) matrix, as PyTorch's ``Linear`` holds its weight;
:attr:`Spec.k_major`, :func:`k_major`) are read along their rows: the weight tile is then K-major as the factor tile is
(``bc`` rows of 128 bytes), the products ``wgmma_ss`` (both operands K-major), the copies a weight row's 16-byte
chunks. 16-bit weights are read as they lie where ``L`` is a multiple of the tile (no row read past its end); e4m3
weights are widened row by row into float16 rows ``wf[n, k]``, padded with zeros to whole tiles. Without this every
call copied them first, a transposing copy: 0.30 ms of a 7168 × 7168 e4m3 call at 256 tokens, whose product takes
0.115 ms; the call now takes 0.117 ms there, against 0.424 (measured on the H200, gpu/README.md).

**The FP8 instruction when asked** (``compile(..., fp8_products=True)``): :mod:`.fp8_products`.

**The launch policy** (which calls suit it, the block, stages and segments, the weights read K-major):
:mod:`.columns_wgmma_policy`.

Rounding and exactness are ``columns_mma``'s: FP8 factors are exact in 16 bits (and as e4m3) and the products exact,
so only the float32 summation order differs from the float64 reference; other factors are rounded to the weights'
type. The epilogue divides with ``div.full.f32`` (within 2 ulp; an IEEE division's slow path is a subroutine call,
which would make ptxas serialize the ``wgmma``s) and takes square roots with ``sqrt.approx.f32`` (within 1 ulp,
measured), reciprocals included: a cascade's ``acc / sqrt(ss)`` is a few ulp from the IEEE result here.
"""

from __future__ import annotations

from ...derive import FusedCascade
from ...errors import RedalgebraError
from ..emit import Spec
from ..tree import Assign, Barrier, Call, For, If, Store, While
from . import Strategy, chunks, register
from .columns import build as columns_build, factor_part
from .columns_mma import ColumnsMmaKernel, exact_factors
from .columns_wgmma_policy import (BK, BLOCK_COLUMNS, BLOCK_THREADS, FP8_BLOCK_COLUMNS, configure, fac_store, grid,
                                   refusal, row_threads, stage_units)
from .fp8_products import Fp8Products
from .pairs import PAIRED_TYPES, column, exchange
from .producer import Producer, producer_threads
from .products import KINDS
from .rows import RowsKernel
from .tile_factors import TileFactors
from .wgmma import ATOM, ROW, WgmmaKernel

#: Bytes of the factors' row blocks a group of the product's tiles reads (each block a tile: ``gw`` row blocks — as
#: many as hold this many bytes of their segment, at least one — walked with every column block before the next
#: group, so that the blocks running at once read a few row blocks over and over, from L2, and each weight column
#: block once a group). In blocks' order row blocks first, each wave of blocks read all of the factors (29 MB at M4096
#: K7168 FP8), and no wave found them in L2: ``ncu`` counted 563 MB moved to and from DRAM (1.21 TB/s over 466 µs)
#: where the operands are 80 MB and the outputs 117 MB. Measured on the H200 (``gpu/kernel_steps.py``, interleaved
#: processes): the FP8 product M4096 K = N = 7168 (groups of 18 row blocks) 411.0 and 410.8 µs against 424.3 and
#: 423.5 in that order, 414.7 with 8 MB; RMSNorm's product M4096 K = N = 4096 the same (195.3, 192.4 against 194.1,
#: 194.9).
RASTER_BYTES = 16 << 20

#: 16-bit outputs stored 8 bytes a lane after an exchange between neighbouring lanes
#: (:meth:`ColumnsWgmmaKernel.paired`); off: 4 bytes a lane, half of each 32-byte sector a warp's store touches.
PAIRED_STORES = True

class ColumnsWgmmaKernel(TileFactors, Fp8Products, Producer, ColumnsMmaKernel):
    """Builds the kernels of a ``columns_wgmma`` module: ``columns_mma``'s scalars, factors and combine, the product
    on ``wgmma``."""

    def check_launch(self) -> None:
        spec = self.spec
        self.warps = spec.threads // 32
        self.bm, self.bc = 16 * self.warps, 8 * spec.group
        # Spec.fp8_products: e4m3 factors times the weights transposed to e4m3 rows (K-major), k32 steps, a tile of
        # 128 elements (one 128-byte row either way)
        self.fp8 = bool(spec.fp8_products)
        self.bk = 2 * BK if self.fp8 else BK
        self.factor_bytes = 1 if self.fp8 else 2  # (a factor's bytes: e4m3, or the 16-bit type)
        columns = FP8_BLOCK_COLUMNS if self.fp8 else BLOCK_COLUMNS
        if spec.threads not in BLOCK_THREADS or self.bc not in columns or spec.batch != self.bm or \
                spec.tile != self.bk:
            raise RedalgebraError(f"columns_wgmma: blocks of {', '.join(map(str, BLOCK_THREADS))} threads (16 rows a "
                                  f"warp), {', '.join(map(str, columns))} columns, tiles of {self.bk} elements")
        self.red = next(r for r in self.vector_reds)
        factor, vector = self.factors[self.red]
        self.factor, self.x = factor, vector.name
        reason = refusal(self.f, self.dtypes)
        if reason is not None:
            raise RedalgebraError(reason)
        # e4m3 weights: widened to float16 (``wf``) by the module's first kernel; the products read that copy
        # (Spec.fp8_products: transposed to e4m3 rows ``wt``, read K-major as the factors are)
        self.bytes = self.dtypes.get(self.x) == "e4m3" and not self.fp8
        self.kind = "e4m3" if self.fp8 else "f16" if self.bytes else KINDS[self.dtypes.get(self.x)]
        self.fac_store = fac_store(spec.dtypes, self.f, self.fp8)
        self.fac_layout = "tiles"  # the factors row by row (the tiles are staged by cp.async)
        # (Spec.k_major: the weights given K-major, bound as the (n, L) rows the instruction reads: not transposed)
        self.transposed = self.fp8 and self.x not in spec.k_major
        # the weight tile K-major (``bc`` rows of 128 bytes along the axis): the FP8 product's always, the exact
        # product's where the weights are given K-major (the 16-bit ones read as they lie, e4m3 widened row by row)
        self.b_k_major = self.fp8 or self.x in spec.k_major
        self.source = "wt" if self.transposed else "wf" if self.bytes else self.x
        self.stages = spec.stages
        self.stage = stage_units(self.bm, self.bc)
        self.ahead = self.stages - 2  # tiles loading while one is multiplied and one group of products is in flight
        # Spec.tile_factors: the activations staged where the factor tile would be, turned into factors in registers
        self.tf = bool(spec.tile_factors)
        self.b_base = self.bm * ROW  # the weight tile, after the factor tile of a stage
        if self.tf:
            self.tile_factor_parts()

    def factor_store(self, values: tuple) -> list:
        if self.fac_store == "e4m3":  # (Spec.fp8_products: bytes, four a store)
            return [Store("fac", "row", f"kx + {k}", values[k:k + 4], "e4m3") for k in range(0, len(values), 4)]
        return [Store("fac", "row", "kx", values, self.fac_store)]

    def bounds(self) -> dict:
        # (the transposing kernel's blocks are of 256 threads whatever the product's)
        # (the product's: a producer warpgroup beside the consumers, with Spec.fp8_products or Spec.producer; its one
        # block a multiprocessor takes no min_blocks)
        extra = producer_threads(self.spec)
        row = dict(self.spec.row_spec)  # (the rows kernel's registers capped where it asks blocks resident)
        factors = {"factors": (row["threads"], row["min_blocks"])} if row.get("min_blocks") else {}
        return {**super().bounds(), **factors, **({"transpose": 256} if self.transposed else {}),
                **({"tiles": self.spec.threads + extra} if extra else {})}

    def registers(self) -> dict:
        # (Spec.row_chunk: the product's registers capped, so that a block of the next chunk's factors fits beside
        # each of its blocks on a multiprocessor: :mod:`.chunks`)
        return {"tiles": self.spec.max_registers} if self.spec.max_registers else {}

    def _prepass_kernel(self):
        """With :attr:`Spec.row_spec`, the ``rows`` kernel of the scalar part with the factors as a per-element output
        (:func:`factor_part`): the row read once into registers, reduced, its factors written from the registers (16
        bytes a store where the row's chunks are of 8 or 16 elements; 16-bit activations or e4m3), and zeros past the
        row's end up to the tiles' width; else ``columns``' scalar kernel, which the factors' loop follows (the row
        read again)."""
        if self.spec.tile_factors:  # (the product's blocks fold the scalar reductions)
            return None
        if not self.spec.row_spec:
            return super()._prepass_kernel()
        sub, out = factor_part(self.f)
        names = {s.name for s in sub.cascade.inputs}
        spec = Spec(self.spec.sizes, tuple((k, v) for k, v in self.spec.dtypes if k in names),
                    fast_exp=self.spec.fast_exp,
                    out_dtypes=((out, fac_store(self.spec.dtypes, self.f, self.spec.fp8_products)),),
                    **dict(self.spec.row_spec))
        k = RowsKernel(sub, spec)
        k.arrays, k.padded, k.divisors = {out: "fac"}, {out: "fac.shape[1]"}, True
        return k

    def factors_kernel(self, factors: tuple) -> tuple:
        """With :attr:`Spec.row_spec`, the ``rows`` kernel of :meth:`_prepass_kernel`, its per-element output stored in
        the scratch ``fac`` (its body built once: a ``rows`` body names the terms it computes once as it builds them);
        else ``columns_mma``'s."""
        if not self.spec.row_spec:
            return super().factors_kernel(factors)
        from ..kernels import kernel_args

        out_fac = f"out_{next(iter(self.pre.arrays))}"
        args = tuple("fac" if a == out_fac else a for a in kernel_args(self.pre.c))
        body = self.pre.body()
        if self.spec.row_chunk:  # (a chunk's factors: :mod:`.chunks`)
            body = [Call("grid_launch", ())] + body + [
                If("cuda.blockIdx.x == cuda.gridDim.x - 1", (Call("grid_wait", ()),))] * chunks.CHAIN
        return ("factors", args, "rowfactors", body)

    def row_threads(self) -> int:
        # many rows: blocks enough at 128 or 256 threads (:func:`_row_threads`; at 1024, RMSNorm M4096's kernel of the
        # scalars and the factors took 120 us more on the H200: two blocks a multiprocessor)
        return row_threads(self.spec)

    # -- the copies of a tile ---------------------------------------------------------------------------------------
    def chunks(self, t: int | None = None) -> tuple[int, int, int, int]:
        """(16-byte copies a thread makes of the factor tile, of the weight tile; weight chunks a row; rows a pass),
        the copies spread over ``t`` threads (the block's by default)."""
        t = t or self.spec.threads
        per_row = self.bc // 8
        return -(-self.bm * 8 // t), -(-BK * per_row // t), per_row, t // per_row

    def widen(self) -> list:
        """e4m3 weights as float16 in ``wf[k, n]`` (exactly: every e4m3 value is a float16): a thread per 16
        elements of a row, one 128-bit load and two 128-bit stores (a thread per element where a row is not a
        multiple of 16 bytes). Weights given K-major (:attr:`b_k_major`): :meth:`widen_rows`."""
        t, n = self.spec.threads, self.n
        out = [Assign("tid", "cuda.threadIdx.x"), Assign("wi", f"cuda.blockIdx.x * {t} + tid")]
        if self.b_k_major:
            return out + self.widen_rows()
        if n % 16 == 0:
            values = [f"wv_{v}" for v in range(16)]
            body = (Assign(", ".join(values), f"ld_e4m3x16({self.x}, (0, wk), wc)"),
                    Call("st_h16x8", ("wf", "wk", "wc", *values[:8])), Call("st_h16x8", ("wf", "wk", "wc + 8", *values[8:])))
            return out + [Assign("wk", f"wi // {n // 16}"), Assign("wc", f"16 * (wi % {n // 16})"), If("wk < length", body)]
        return out + [Assign("wk", f"wi // {n}"), Assign("wc", f"wi % {n}"),
                      If("wk < length", (Call("st_h16", ("wf", "wk", "wc", f"ld_e4m3({self.x}, (0, wk), wc)")),))]

    def widen_rows(self) -> list:
        """e4m3 weights given K-major, rows ``w[n, :L]``, as float16 rows ``wf[n, k]`` padded with zeros to the
        scratch's width (whole tiles: the product reads them whole): a thread per 16 elements, one 128-bit load where
        the row's 16 bytes are all in and the rows are of whole 16 bytes (decided per call: ``length`` is not a
        constant), else a load an element; two 128-bit stores."""
        values = [f"wv_{v}" for v in range(16)]
        one = [Assign(v, self.consts.name(0.0)) for v in values]
        one += [If(f"wc + {v} < length", (Assign(f"wv_{v}", f"ld_e4m3({self.x}, wn, wc + {v})"),)) for v in range(16)]
        body = (If("wc + 16 <= length and length % 16 == 0",
                   (Assign(", ".join(values), f"ld_e4m3x16({self.x}, wn, wc)"),), tuple(one)),
                Call("st_h16x8", ("wf", "wn", "wc", *values[:8])), Call("st_h16x8", ("wf", "wn", "wc + 8", *values[8:])))
        return [Assign("wpr", "wf.shape[1] // 16"), Assign("wn", "wi // wpr"), Assign("wc", "16 * (wi % wpr)"),
                If(f"wn < {self.n}", body)]

    def offsets(self, t: int | None = None, tid: str = "tid") -> list:
        """Each thread's copies as element offsets from a tile's first element, and their swizzled places in a stage
        (16-bit units; rows ``8 k`` apart share the swizzle), computed once: factor rows clamped to the last row, the
        weight column clamped (0 bytes past the last). ``t`` threads copy (the block's by default), ``tid`` each one's
        index among them."""
        t = t or self.spec.threads
        na, nb, per_row, step = self.chunks(t)
        out = []
        for u in range(na):
            q = f"({tid} + {u * t})"
            if self.tf:  # the activations' row (rows repeated: its shared row)
                ro = f"min(r0 + {q} // 8, rows - 1)"
                out.append(Assign(f"fo_{u}", f"int32(uint32({ro}) // uint32(rep_{self.staged})) * xp + 8 * ({tid} % 8)"))
            else:
                out.append(Assign(f"fo_{u}", f"min(r0 + {q} // 8, rows - 1) * fac.shape[1] + 8 * ({tid} % 8)"))
            out.append(Assign(f"fd_{u}", f"({q} // 8) * {ROW} + ((({tid} % 8) ^ (({q} // 8) & 7)) << 3)"))
        if self.b_k_major:  # a weight row's 16-byte chunk wc8 of rows wr, + t / 8, ... (issue_rows)
            return out + [Assign("wr", f"{tid} // 8"), Assign("wc8", f"{tid} % 8"),
                          Assign("wd", f"{self.b_base} + wr * {ROW} + ((wc8 ^ (wr & 7)) << 3)")]
        out += [Assign("wcol", f"cb + 8 * ({tid} % {per_row})"),
                Assign("wn", f"pick(wcol < {self.n}, 16, 0)"),
                Assign("wrow", "rw * length"), Assign("wcl", f"min(wcol, {self.n - 8})"),
                Assign("wo", f"(wrow + {tid} // {per_row}) * {self.n} + wcl")]
        for u in range(nb):
            kr = f"({tid} // {per_row} + {u * step})"
            out.append(Assign(f"wd_{u}", f"{self.b_base} + (({tid} % {per_row}) // 8) * {BK * ROW} + {kr} * {ROW} + "
                                         f"((({tid} % 8) ^ ({kr} & 7)) << 3)"))
        return out

    def guarded(self, u: int, total: int, *stmts, t: int | None = None, tid: str = "tid") -> list:
        """``stmts`` (a thread's copy ``u`` of a tile of ``total`` chunks), guarded where the ``t`` copying threads
        (the block's by default) outnumber the chunks left."""
        t = t or self.spec.threads
        if (u + 1) * t <= total:
            return list(stmts)
        return [If(f"{tid} + {u * t} < {total}", tuple(stmts))]

    def issue(self, tile: str, stage: str, t: int | None = None, tid: str = "tid") -> list:
        """``cp.async`` of tile ``tile`` into ``stage``: the factors (always whole: the rows are padded to whole tiles
        with zeros; under :attr:`Spec.tile_factors` the activations, :meth:`x_copies`), the weights from
        the offsets plus constants, or, in the segment's last partial tile, 0 bytes for the rows past its end (their
        factors are 0, but 0 · NaN is not); a K-major weight tile's rows by :meth:`issue_rows`."""
        out = [Assign("kt0", f"lo + ({tile}) * {BK}"), Assign("sd", f"sb + {stage} * {self.stage}")]
        out += self.a_copies(t, tid)
        if self.b_k_major:
            return out + self.issue_rows(t, tid)
        _, nb, per_row, step = self.chunks(t)
        whole, partial = [Assign("wt", f"wo + kt0 * {self.n}")], []
        for u in range(nb):
            whole += self.guarded(u, BK * per_row, Call("cp_async16_at", ("sm", f"sd + wd_{u}", self.source,
                                                                f"wt + {u * step * self.n}", "wn")), t=t, tid=tid)
            kr = f"kt0 + {tid} // {per_row} + {u * step}"
            partial += self.guarded(u, BK * per_row, Call("cp_async16_at", (
                "sm", f"sd + wd_{u}", self.source, f"(wrow + min({kr}, hi - 1)) * {self.n} + wcl",
                f"pick({kr} < hi, wn, 0)")), t=t, tid=tid)
        return out + [If(f"kt0 + {BK} <= hi", tuple(whole), tuple(partial))]

    def a_copies(self, t: int | None, tid: str) -> list:
        """The factor tile's copies (always whole: the rows are padded to whole tiles with zeros; under
        :attr:`Spec.tile_factors` the activations' tile, :meth:`x_copies`)."""
        if self.tf:
            return self.x_copies(t, tid)
        na = self.chunks(t)[0]
        return [st for u in range(na) for st in self.guarded(u, self.bm * 8, Call(
            "cp_async16_at", ("sm", f"sd + fd_{u}", "fac", f"fo_{u} + kt0", "16")), t=t, tid=tid)]

    def issue_rows(self, t: int | None, tid: str) -> list:
        """The weight tile's copies where it is K-major (:attr:`b_k_major`, the exact product): ``bc`` rows of the
        weights (output columns ``cb ..``, clamped to the last), 128 bytes of each from ``kt0``, in 16-byte chunks —
        thread ``tid`` takes chunk ``tid % 8`` of rows ``tid // 8``, ``+ t / 8``, … into their swizzled places. Always
        whole: 16-bit weights are read so only where the axis is whole tiles, and the widened rows are padded."""
        t = t or self.spec.threads
        step = t // 8  # (rows a pass; a multiple of 8 on the GPU, so that every pass's rows share one swizzle)
        out = []
        for u in range(-(-self.bc * 8 // t)):
            kr = f"wr + {u * step}"
            place = f"wd + {u * step * ROW}" if step % 8 == 0 else \
                f"{self.b_base} + ({kr}) * {ROW} + ((wc8 ^ (({kr}) & 7)) << 3)"
            copy = Call("cp_async16_at", ("sm", f"sd + {place}", self.source,
                                          f"min(cb + {kr}, {self.n - 1}) * {self.source}.shape[1] + kt0 + 8 * wc8", "16"))
            out += self.guarded(u, self.bc * 8, copy, t=t, tid=tid)
        return out

    def span(self, tile: str) -> list:
        """The block's tile ``tile`` of the output — segments of the axis outermost, then groups of ``gw`` row blocks
        (:data:`RASTER_BYTES`), each group's tiles row blocks first, then column blocks — its first row ``r0``, first
        column ``cb``, segment ``sg`` and that segment's tiles ``lo`` .. ``hi`` (``ntile`` of them), and each thread's
        copy offsets. 32-bit divisions: a 64-bit one is a subroutine call,
        which makes ptxas serialize the wgmmas (back to signed: offsets computed from them may step below a row's
        start before a clamp)."""
        nnb = self.nnb
        return [Assign("sg", f"int32(uint32({tile}) // uint32(nmb * {nnb}))"),
                Assign("st_", f"{tile} - sg * nmb * {nnb}"),
                Assign("gi", f"int32(uint32(st_) // uint32(gw * {nnb}))"),
                Assign("gm", "min(nmb - gi * gw, gw)"),
                Assign("wi", f"st_ - gi * gw * {nnb}"),
                Assign("mb", "gi * gw + int32(uint32(wi) % uint32(gm))"),
                Assign("nb", "int32(uint32(wi) // uint32(gm))"),
                Assign("r0", f"mb * {self.bm}"), Assign("cb", f"nb * {self.bc}"),
                Assign("rw", f"int32(uint32(min(r0, rows - 1)) // uint32(rep_{self.x}))"),
                Assign("lo", "sg * segl"), Assign("hi", "min(lo + segl, length)"),
                Assign("ntile", f"max(hi - lo + {self.bk - 1}, 0) // {self.bk}")] + (
                    [] if producer_threads(self.spec) else self.offsets())  # (a producer computes its own)

    def prologue(self) -> list:
        """The copies of a tile's first ``ahead`` tiles, a commit group each."""
        out = []
        for s_ in range(self.ahead):
            out += [If(f"{s_} < ntile", tuple(self.issue(str(s_), str(s_)))), Call("cp_commit", ())]
        return out

    # -- the products -----------------------------------------------------------------------------------------------
    def products(self, wait: bool = True, acc: str = "ac", at: str = "it") -> list:
        """The four products of the tile staged at ``at`` (the ring's count: ``it``, the tile's) into ``acc``, one group
        committed: this warpgroup's 64 factor
        rows (K-major, 32 bytes a step) times the weight tile — ``k16`` steps of 16-bit values, the weight tile
        MN-major (16 rows of 128 bytes a step); with :attr:`Spec.fp8_products` ``k32`` steps of e4m3 values, the weight
        tile K-major too (32 bytes a step), summed afresh (``scale_d`` 0 at the first step); with
        :attr:`Spec.tile_factors` the factors from registers (``wgmma_rs``: the A fragments ``pa_<s>_<m>`` of
        :meth:`fragments`, held before the fence so that their packing stays above it)."""
        # (a K-major weight tile steps 32 bytes along its rows; an MN-major one 16 rows of 128 bytes)
        op = "wgmma_ss_e4m3" if self.fp8 else f"wgmma_ss_{self.kind}" if self.b_k_major else f"wgmma_sst_{self.kind}"
        b_step = 2 if self.b_k_major else 16 * ROW * 2 // 16
        acc = WgmmaKernel.tiles(acc, self.bc // 8)
        value, held = acc, []
        for ks in range(4):
            if self.tf:  # (the weight tile MN-major, or K-major: wgmma_rsk)
                words = ", ".join(f"pa_{ks}_{m}" for m in range(4))
                rs = f"wgmma_rsk_{self.kind}" if self.b_k_major else f"wgmma_rs_{self.kind}"
                value = f"{rs}({value}, {words}, db + sa + {b_step * ks})"
            else:
                value = f"{op}({value}, da + sa + {2 * ks}, db + sa + {b_step * ks}, {int(ks > 0 or not self.fp8)})"
        if self.tf:
            words = WgmmaKernel.tiles("pa", 4)
            held = [Assign(words, f"wgmma_hold({words})")]
        return [Assign("sa", f"(uint32({at}) % uint32({self.stages})) * {self.stage * 2 // 16}"), *held,
                Call("wgmma_fence", ()), Assign(acc, value), Call("wgmma_commit", ())] + (
                    [Call("wgmma_wait1", ())] if wait else [])

    @property
    def nnb(self) -> int:
        """Column blocks of the output."""
        return -(-self.n // self.bc)

    def tiles(self) -> list:
        """The product's kernel: a block a tile of the output, or, with :attr:`Spec.persistent`, blocks walking the
        output's tiles (``tile``, ``tile + gridDim.x``, ...; launched multiprocessors × ``min_blocks`` of them, one
        a multiprocessor by default — one fits), the next tile's first copies loading while this tile's outputs are
        stored."""
        segmented, bk = self.spec.segments > 1, self.bk
        # (Spec.row_chunk: the next chunk's factors may start at once; this chunk's are waited for: :mod:`.chunks`)
        out = [Call("grid_launch", ()), Call("grid_wait", ())] if self.spec.row_chunk else []
        out += [Assign("tid", "cuda.threadIdx.x"), Assign("lane", "tid % 32"), Assign("warp", "tid // 32"),
               Assign("lg", "lane >> 2"), Assign("tq", "lane & 3"),
               Assign("sm", "cuda.shared.array(0, uint16)"), Assign("sb", "swizzle_pad(sm)"),
               Assign("segl", f"int32((uint32(length + nseg - 1) // uint32(nseg) + {bk - 1}) // {bk} * {bk})"),
               Assign("nmb", f"int32(uint32(rows + {self.bm - 1}) // uint32({self.bm}))"),
               Assign("total", f"nmb * {self.nnb} * nseg"), Assign("tile", "cuda.blockIdx.x"),
               Assign("gw", f"int32(max(min(uint32(nmb), uint32({min(RASTER_BYTES // (self.bm * self.factor_bytes), 2 ** 31)}) // "
                            f"uint32(max(segl, {bk}))), uint32(1)))")]
        # descriptors of stage 0: the warpgroup's 64 factor rows (K-major), the weight tile (MN-major: blocks of 64
        # columns 64 rows of 128 bytes apart)
        # (Spec.fp8_products, or weights given K-major: the weight tile K-major too, as the factor tile)
        lbo = 16 if self.b_k_major else BK * ROW * 2
        if not self.tf:  # (Spec.tile_factors: the factors from registers, no descriptor)
            out.append(Assign("da", f"wgmma_desc(sm, sb + {64 * ROW} * uniform(int32(warp // 4)), 16, {ATOM})"))
        out.append(Assign("db", f"wgmma_desc(sm, sb + {self.b_base}, {lbo}, {ATOM})"))
        if producer_threads(self.spec):  # a producer warpgroup and the consumers (a block a tile, or walking them)
            epilogue = self.epilogue(segmented, "r0", "cb", "sg")
            if self.spec.persistent:
                return out + self.specialized(epilogue, self.span)
            return out + [If("tile < total", tuple(self.span("tile") + self.specialized(epilogue)))]
        if self.tf:  # the staged activations' row pitch in 16-bit elements (a shift: a 64-bit division is a call,
            # which makes ptxas serialize the wgmmas); where the thread's fragments lie in a stage
            out += [Assign("xp", f"int32({self.staged}.strides[0] >> 1)")] + self.fragment_places()
        zero = self.consts.name(0.0)
        stage = f"uint32(it + {self.ahead}) % uint32({self.stages})"

        wait = Call(f"cp_wait{self.ahead - 1}", ())
        copies = [If(f"it + {self.ahead} < ntile", tuple(self.issue(f"it + {self.ahead}", stage))),
                  Call("cp_commit", ())]  # tile it + ahead's copies, one commit group
        acc = WgmmaKernel.tiles("ac", self.bc // 8)
        # (Spec.tile_factors: the rows of the thread's fragments here, not with the copies' offsets — a block walking
        # tiles computes the next tile's offsets before this tile's epilogue, and would keep both alive through it)
        body = [Assign(f"ac_{j}_{i}", zero) for j in range(self.bc // 8) for i in range(4)]
        body += self.fragment_rows() if self.tf else []
        # (Spec.tile_factors: tile it's factors formed in registers from its activations while the previous tile's
        # products run)
        step = [wait, Call("fence_async", ()), Barrier()] + copies + (
            self.fragments("it", f"uint32(it) % uint32({self.stages})") if self.tf else []) + self.products(
                wait=not self.tf)  # (Spec.tile_factors: the wait is in the next tile's fragments)
        body += self.states_init() if self.tf else []
        body += [For("it", "0", "ntile", tuple(step)), Call("wgmma_wait0", ()), Assign(acc, f"wgmma_hold({acc})")]
        body += self.states_meet() if self.tf else []
        first = self.span("tile") + self.prologue()
        if not self.spec.persistent:  # a block a tile
            return out + [If("tile < total", tuple(first + body + self.epilogue(segmented, "r0", "cb", "sg")))]
        # this tile's place kept for its outputs; every warpgroup's products done (the barrier) before the stages take
        # the next tile's first copies, which load while this tile's outputs are stored
        body += [Assign("er0", "r0"), Assign("ecb", "cb"), Assign("esg", "sg"),
                 Assign("nxt", "tile + cuda.gridDim.x"), Barrier(),
                 If("nxt < total", tuple(self.span("nxt") + self.prologue()))]
        body += self.epilogue(segmented, "er0", "ecb", "esg") + [Assign("tile", "nxt")]
        return out + [If("tile < total", tuple(first)), While("tile < total", tuple(body))]

    def epilogue(self, segmented: bool, r0: str, cb: str, seg: str) -> list:
        """Each thread's outputs of the tile at row ``r0``, column ``cb`` and segment ``seg``: rows ``16 warp + lg``
        (+ 8), columns ``8 j + 2 tq`` and ``+ 1`` — a pair of columns stored by one 8-byte store (``st_f32x2``; the
        columns are a multiple of 8, so a pair is in or out whole), without the columns' tests where the block's columns
        are all in (every block but a last partial one)."""
        out = []
        for h in (0, 1):
            head, pairs = self.outputs_of(h, "orow", segmented, r0, cb, seg)
            whole = [st for _, body in pairs for st in body]
            tested = [If(f"{col} < {self.n}", tuple(body)) for col, body in pairs]
            row = [Assign("orow", f"{r0} + 16 * warp + lg + {8 * h}")]
            # (rows past the end read their scalars at the last row, orc: the exchange runs in every lane)
            paired = None if segmented or self.n < self.bc else \
                self.paired(*self.outputs_of(h, "orc", segmented, r0, cb, seg), cb)
            if paired is not None:  # (the exchange's shuffles run in every lane: outside the tests of rows)
                test = tested if self.n % self.bc else []
                out += row + ([If(f"{cb} + {self.bc} <= {self.n}", tuple(paired),
                                  (If("orow < rows", tuple(head + test)),))] if test else paired)
                continue
            if self.n % self.bc == 0:
                inside = whole
            elif self.n < self.bc:  # one partial column block
                inside = tested
            else:
                inside = [If(f"{cb} + {self.bc} <= {self.n}", tuple(whole), tuple(tested))]
            out += row + [If("orow < rows", tuple(head + inside))]
        return out

    def outputs_of(self, h: int, row: str, segmented: bool, r0: str, cb: str, seg: str) -> tuple[list, list]:
        """(the row's scalars, ``(column, statements)`` of each 8-column block) of the thread's row half ``h``, read
        at the row named ``row``."""
        acc = self.base()
        # (2 ulp) an IEEE division's or square root's slow path is a call: the wgmmas would be serialized
        acc.div, acc.sqrt = "div_full", "sqrt_full"
        if self.tf:
            head = self.row_scale(acc, row, h)
        else:
            head = [] if segmented else self.row_scalars(acc, row)
        pairs = []
        for j in range(self.bc // 8):
            col, values = f"{cb} + {8 * j} + 2 * tq", (f"ac_{j}_{2 * h}", f"ac_{j}_{2 * h + 1}")
            if self.tf:
                values = tuple(f"(rsc * {v})" for v in values)
            if segmented:
                body = [Store(f"part_{self.red}", (row, seg), col, values)]
            else:
                body = self.finish(row, col, [lambda r, v=v: v for v in values], acc)
            pairs.append((col, body))
        return head, pairs

    def paired(self, head: list, pairs: list, cb: str) -> list | None:
        """The statements of :meth:`epilogue`'s whole column blocks with 16-bit outputs stored 8 bytes a lane
        (:mod:`.pairs`; None where this does not apply: outputs not all 16-bit vectors stored in pairs, or
        :data:`PAIRED_STORES` off): ``pairs`` and ``head`` read at the row ``orc``, the last row for the rows past the
        end, as every lane shuffles; only the rows inside store."""
        if not PAIRED_STORES or len(pairs) % 2 or not all(isinstance(st, Assign) for st in head):
            return None
        bodies = [body for _, body in pairs]
        if not all(isinstance(st, Assign) or (isinstance(st, Store) and st.width == 2 and st.dtype in PAIRED_TYPES)
                   for body in bodies for st in body):
            return None
        out = [Assign("orc", "min(orow, rows - 1)"), Assign("podd", "tq & 1")] + head
        for j in range(0, len(bodies), 2):
            stores = []
            for half, body in enumerate(bodies[j:j + 2]):
                for st in body:
                    if isinstance(st, Assign):
                        out.append(st)
                        continue
                    k = len(stores) if half == 0 else \
                        next(i for i, (a, *_rest) in enumerate(stores) if a.array == st.array)
                    names = tuple(f"pw{half}_{k}_{i}" for i in (0, 1))
                    out += [Assign(n, v) for n, v in zip(names, st.values)]
                    if half == 0:
                        stores.append((st, names))
                    else:
                        stores[k] = (*stores[k], names)
            for k, (st, a, b) in enumerate(stores):
                swap, values = exchange(k, a, b, "podd")
                out += swap + [If("orow < rows", (Store(st.array, "orow", column(f"{cb} + {8 * j} + 2 * tq", "podd"),
                                                        values, st.dtype),))]
        return out

    def kernels(self) -> list:
        """``columns_mma``'s kernels (:attr:`Spec.tile_factors`: the product's alone); e4m3 weights widened to float16
        first."""
        if self.tf:
            from ..kernels import kernel_args

            common = [a for a in kernel_args(self.c) if a not in ("rows", "length")]
            out = [("tiles", tuple(common + ["rows", "length", "nseg"]), "tiles", self.tiles())]
        else:
            out = super().kernels()
        if self.bytes or self.transposed:  # the weights widened (transposed) first, the products reading them
            copy = "wt" if self.fp8 else "wf"
            at = next(i for i, k in enumerate(out) if k[0] == "tiles")
            name, targs, grid_name, tbody = out[at]
            cut = targs.index("fac") + 1 if "fac" in targs else targs.index("rows")
            out[at] = (name, targs[:cut] + (copy,) + targs[cut:], grid_name, tbody)
            first = ("transpose", (self.x, "wt", "length"), "transpose", self.transpose()) if self.fp8 else \
                ("widen", (self.x, "wf", "length"), "widen", self.widen())
            out.insert(0, first)
        return out

    def scratch(self) -> tuple:
        extra = (("wf", "float16", "transposed" if self.b_k_major else "axis", self.n_const),) if self.bytes else \
            (("wt", "uint8", "transposed", self.n_const),) if self.transposed else ()
        return extra if self.tf else super().scratch() + extra


# -- registration ----------------------------------------------------------------------------------------------------
def build(fused: FusedCascade, spec: Spec, target: str):
    from dataclasses import replace

    src = columns_build(fused, spec, target, kernel=ColumnsWgmmaKernel, name="columns_wgmma")
    # as columns_mma's: every scratch entry written before it is read (the factors' padding too)
    return replace(src, written=tuple(name for name, *_ in src.scratch))


register(Strategy("columns_wgmma", "cuda", "columns_mma for many rows: the product F·W as a GEMM on Hopper's wgmma "
                  "(128 × 256 blocks, both operands from 128-byte-swizzled shared memory, four tiles in flight)",
                  build, configure, grid, final_scales=True, rounds_products=lambda fused: not exact_factors(fused),
                  vector_multiple=16, shared_vectors=True, cc=(9, 0, "a"), walking=("tiles",),
                  chunked=("rowfactors", "tiles")))
