"""``columns_mma``: the ``columns`` level order with the column tiles' products on the tensor cores.

``columns`` streams a weight matrix ``w`` (every element of the axis a row ``w[k, :]`` of ``n`` columns that all
rows share) once per batch of rows and sums ``factor × w`` on the CUDA cores: 64 fused multiply-adds per 16-byte
chunk of weights at a batch of 16 tokens, so FP8 quantisation + GEMM at M = 16 is bound by the FP32 units, not by
the memory. Here the same sums are a matrix product ``F · W`` (``F[m, k]`` the factors of row ``m``, element ``k``)
on ``mma.sync.m16n8k16``:

1. **The scalar reductions first** — the ``rows`` code of the cascade's scalar part, as ``columns`` (the FP8
   scale is then the row's final absmax), a block per row.
2. **The factors**, by the same block after a barrier (or, without scalar reductions, a kernel of their own):
   ``F[m, k]`` in the weights' 16-bit type, zero past the row's end (and where a mask drops the element), the rows
   padded with zeros to whole tiles (``SCRATCH_TILE`` elements), stored in the order the products read them. An FP8 factor is exact in either
   16-bit type (e4m3 has 4 significant bits and exponents -9 … 8), so the products are exact and only the float32
   summation order differs from the unfused reference (``check`` holds it to the float32 tolerance); any other
   factor is rounded to the weights' type, as FlashAttention rounds its probabilities (``Strategy.rounds_products``:
   ``check`` allows that rounding once more).
3. **The product**, read straight into the fragments: at few rows (a decoding token's GEMV, M ≤ 16) the weights
   are read once and used once, so the kernel is a stream of weights at the memory's speed, and staging them in
   shared memory only adds barriers. A block takes 16 rows, the 128 columns (e4m3) or 64 (16-bit) that eight lanes'
   16-byte loads cover, and a segment of the axis; its warps take its steps of 16 elements in turn. Lane ``(g, t)``
   loads 16 bytes of each of the weight rows ``k … k + 3`` (``k = 16 step + 4 t``, columns ``EACH g …``) and, in one
   16-byte load, the factors of those four elements for rows ``g`` and ``g + 8``. The weights are the instruction's A
   operand (16 columns a product) and the factors its B (an n8 tile of 8 rows; the second only where the block has
   more than 8 rows), so a product does 256 weights' work at any number of rows and one token's step takes half the
   products and accumulators that the factors as A would (8 rows a block there: ``Spec.batch``). ``mma.m16n8k16``
   wants a lane's fragments to hold ``k = 2t, 2t + 1, 2t + 8, 2t + 9``: the kernel numbers the step's elements so
   that those are the lane's own four rows (a sum does not depend on the order of its terms; B is numbered the same
   way), so the A words are the columns' pairs of rows (``prmt``; e4m3 bytes widened to float16 by
   ``cvt.rn.f16x2.e4m3x2``, exact), and m16 tile ``mt``'s rows ``g`` and ``g + 8`` are the block's columns
   ``EACH g + 2 mt`` and the one after. With e4m3 weights past 8 rows a lane loads 8 bytes of each row instead
   (``Spec.group``: 8 columns, 64 a block): half the accumulators and the registers of its loads in flight, so
   four blocks a multiprocessor fit, not three. Four steps' loads are in flight
   before their products; no shared memory and no barrier in the loop. At the end the warps' sums meet in shared
   memory and are added in warp order (deterministic). The products are float16 ones for e4m3 weights: the factors
   must then be FP8 (exact in float16 too).
   **K-major weights** (``W.T[None]`` of a Linear layer's (n, L) weight, :attr:`Spec.k_major`: the call binds them
   as those (n, L) rows) are read as they lie (:meth:`ColumnsMmaKernel.k_major_loop`): a lane's 16-byte load is 16
   (e4m3) or 8 (16-bit) consecutive elements of one column, four steps' (two steps') worth of that column's ``k``
   for the lane, taken as the fragment's words directly (no ``prmt``); the factors are stored in that order.
4. **The segments' sums** and the outputs: ``columns``' third kernel (or the tiles kernel itself when the axis is
   one segment), launched while the products run (Hopper) and waiting for them. (Measured slower on the GPU, twice,
   and taken out: the last block of each tile adding the sums, found by an atomic count a tile; and, at a few rows,
   each products block computing its own factors instead of the factors' kernel: gpu/README.md.)

**Masked and non-finite weights.** A masked element's factor is 0, but its weight row still enters the product: an
inf or NaN there makes the outputs that mask it NaN (0 · inf), where the reference skips the element (as the
``mma`` strategy's masked values).
"""

from __future__ import annotations

from ...derive import FusedCascade
from ...errors import RedalgebraError
from ...ir.functions import RoundE4M3
from ..emit import Spec
from ..tree import Assign, Barrier, Call, For, If, Load, Shared
from . import VEC, Problem, Strategy, register
from .columns import ColumnsKernel, build as columns_build, prepass_vec, refusal as columns_refusal, split_body
from .columns import vector_columns
from .products import KINDS

#: Rows of a block (the m16 of the instruction); elements of a tile (the factors' rows are padded to whole tiles;
#: segments are whole tiles); steps of 16 elements a warp loads before their products (``Spec.unroll``: 8 and 16 were
#: slower or the same on the H200, at 1 and 16 tokens, four blocks a multiprocessor or three; gpu/README.md).
BM, BK, UNROLL = 16, 64, 4
#: Blocks of 128 threads a multiprocessor holds (the launch bounds: at most 168 registers a thread; ptxas took 158-164
#: at N = K = 7168, no spills).
RESIDENT = 3
#: Threads of a block on the GPU (four warps taking the steps in turn) and in the simulator (one warp); the sizes
#: taken (the warps' sums meet in 32 KB of shared memory: e4m3 weights, 64 sums a lane, up to four warps).
THREADS, SIM_THREADS, BLOCKS, BLOCKS_E4M3 = 128, 32, (32, 64, 128, 256), (32, 64, 128)


def load_columns(e4m3: bool) -> int:
    """Columns of one 16-byte load of a weight row: 16 e4m3 bytes, 8 16-bit values."""
    return 16 if e4m3 else 8


def loads(e4m3: bool) -> tuple[int, int]:
    """The columns a lane may load of a weight row (``Spec.group``): a 16-byte load's (the default) or an 8-byte
    load's."""
    return load_columns(e4m3), load_columns(e4m3) // 2


def row_threads(spec: Spec) -> int:
    """Threads of the kernel of the scalar reductions and the factors (a block per row): :attr:`Spec.row_threads` where
    :func:`configure` fitted them to the row, else four times the module's, up to 1024."""
    return spec.row_threads or _widest(spec.threads)


def _widest(threads: int) -> int:
    """The most threads the kernel of the scalars and the factors takes: four times the module's, up to 1024."""
    return min(4 * threads, 1024)


def fit_row_threads(threads: int, length: int) -> int:
    """The kernel of the scalar reductions and the factors: four times the module's threads, up to 1024 — at 512, a
    7168-wide row of 16-bit values is read in one pass of 16-byte loads and its factors written in two (a few rows'
    kernel waits on its latency, not its bandwidth) — but no more than write a row's factors in one pass
    (:data:`FACTORS_EACH` a thread, a warp at least): a row of 100 elements takes a warp, not 512 threads that would
    wait on each other's barriers with nothing to do. Rows of 4096 or more elements keep 512 at 128 threads."""
    most, rt = _widest(threads), 32
    while rt < most and rt * FACTORS_EACH < length:
        rt *= 2
    return rt

#: Weight rows a block of the products brings into L2 while it waits for the factors' kernel (Spec.dependent): one
#: 128-byte line a row, 64 KB a block, about 25 MB over the ~400 blocks of one wave (half the H200's L2: what the
#: memory moves in the factors' 6 µs, and none evicted before it is read). K-major weights: as many lines a block.
PREFETCH_ROWS = 512
#: Weights (bytes, one matrix) small enough for each block of a few rows' products to bring its whole segment into L2
#: while the factors' kernel runs (:attr:`Spec.warm_all`), where the first PREFETCH_ROWS rows' bytes leave more than
#: a third of a segment: the weights then stream from memory from the call's start, not from the factors' end.
#: Measured on the H100 (50 MB of L2; ``gpu/README.md``, 2026-12-06), prefetching 2048 rows' bytes against 512: FP8
#: M1 with e4m3 weights of 7168 × 7168 (51 MB; 512 rows are half a segment) 0.0241–0.0244 → 0.0209 ms, M16 0.0288 →
#: 0.0268; but RMSNorm M16 (32 MB; 512 rows three quarters of a segment) the same or 1.5 % slower, 102 MB of bfloat16
#: weights slower (0.0400 → 0.0418), and 64 rows (four row blocks) far slower (0.0455 → 0.0571).
WARM_ALL_BYTES = 64 << 20

#: Factors of one step of 16 rows (16 elements each), in the fragments' order: lane ``4 g + t``'s eight are rows
#: ``g`` and ``g + 8``, elements ``4 t … 4 t + 3`` of the step.
FRAGMENT = 256
#: Elements of the factors a thread computes (two 8-byte stores into two lanes' places of the fragments' order; the
#: rows are whole tiles).
FACTORS_EACH = 8


def refusal(fused: FusedCascade, dtypes: dict | None = None) -> str | None:
    """Why ``columns_mma`` cannot build this cascade (None: it can): ``columns``' reasons, then one vector reduction
    over a 16-bit or e4m3 vector input whose factor fits the range of the type it is multiplied in."""
    reason = columns_refusal(fused)
    if reason is not None:
        return reason.replace("columns", "columns_mma", 1)
    c = fused.cascade
    vred = [r for r in c.reductions if c.sizes[r.name] is not None]
    if len(vred) != 1:
        return f"columns_mma sums one vector reduction on the tensor cores; {c.name} has {len(vred)}: use columns"
    vin = {s.name for s in c.inputs if s.size is not None}
    factor, vector = split_body(fused.bodies[vred[0].name], vin)
    kind = (dtypes or {}).get(vector.name)
    if dtypes is not None and kind not in (*KINDS, "e4m3"):
        return (f"columns_mma: the tensor cores take bfloat16, float16 or e4m3 weights; {vector.name} is "
                f"{kind or 'float32'}: use columns")
    if kind == "e4m3" and not exact_factors(fused):
        return (f"columns_mma: e4m3 weights are widened to float16 on chip, whose range (65504) only FP8 factors "
                f"(fp8(...)) are known to fit; {vred[0].name}'s is {factor}: use columns")
    if kind == "float16" and not exact_factors(fused):
        # float16 tops out at 65504: an FP8 factor (|f| <= 448) fits, another may not
        return (f"columns_mma: with float16 weights only FP8 factors (fp8(...)) are known to fit float16's range; "
                f"{vred[0].name}'s is {factor}: use columns or bfloat16 weights")
    return None


class ColumnsMmaKernel(ColumnsKernel):
    """Builds the kernels of a ``columns_mma`` module: the scalars and the factors (one kernel, a block per row;
    ``columns``' scalar kernel), the products, ``columns``' combine."""

    def check_launch(self) -> None:
        spec = self.spec
        self.red = next(r for r in self.vector_reds)
        factor, vector = self.factors[self.red]
        self.factor, self.x = factor, vector.name
        kind = self.dtypes.get(self.x)
        reason = refusal(self.f, self.dtypes)
        if reason is not None:
            raise RedalgebraError(reason)
        # e4m3 weights: widened to float16 in registers (exact), multiplied as float16
        self.bytes = kind == "e4m3"
        self.kind = "f16" if self.bytes else KINDS[kind]
        self.fac_store = "bfloat16" if self.kind == "bf16" else "float16"  # the factors' stored type
        # columns of a lane's load of a weight row: a 16-byte load's, or (``group`` half of it) an 8-byte load's,
        # which halves a lane's accumulators and the registers its loads in flight hold
        self.each = spec.group
        self.words = self.each * (1 if self.bytes else 2) // 4  # 32-bit words of a lane's load
        self.fac_layout = "fragments"
        self.nt = spec.batch // 8  # n8 tiles of rows: 1 where a block has at most 8 rows, else 2
        self.warps = spec.threads // 32
        self.bc = 8 * self.each  # the block's columns: eight lanes' loads
        # Spec.k_major: the weights given K-major, bound as their (n, L) rows — a lane's 16-byte load is KL elements
        # of one column; 4 lanes' loads a super-step of 4 KL elements (k_major_loop)
        self.km = self.x in spec.k_major
        self.kl = 16 // (1 if self.bytes else 2) if self.km else 4
        self.unroll = spec.unroll or UNROLL  # steps' loads in flight before their products
        blocks = BLOCKS_E4M3 if self.bytes else BLOCKS
        if spec.threads not in blocks or spec.batch not in (8, BM) or spec.tile != BK \
                or spec.group not in loads(self.bytes):
            raise RedalgebraError(f"columns_mma: blocks of {', '.join(map(str, blocks))} threads taking {BM} rows, "
                                  f"{self.bc} columns and segments of whole tiles of {BK} elements")

    def row_threads(self) -> int:
        return row_threads(self.spec)

    def bounds(self) -> dict:
        return {"factors": self.row_threads()} if self.pre is not None else {}

    # -- 2. the factors -------------------------------------------------------------------------------
    def factor_kernel(self) -> list:
        """``fac``: the factor of every element, in the weights' 16-bit type (in the order of :meth:`factor_store`);
        0 past the row's end (the padding to whole tiles) and where the mask drops the element. A thread takes
        :data:`FACTORS_EACH` elements: 16-byte loads where the rows allow them (``pre_vec``) and the elements are all
        inside the row, two 8-byte stores."""
        acc = self.base()
        out = [Assign("tid", "cuda.threadIdx.x"), Assign("row", "cuda.blockIdx.x"),
               Assign("kx", f"(cuda.blockIdx.y * {self.spec.threads} + tid) * {FACTORS_EACH}")]
        return out + [If("kx < fac.shape[1]", tuple(self.factor_setup(acc) + self.factor_chunk(acc)))]

    def factor_setup(self, acc, held: bool = False) -> list:
        """The row's scalars (``acc`` learns their names; ``held``: already in registers — ``f_<r>`` and the scalar
        params' ``p_<name>``, bound by the scalar kernel's body before this — not read again) and the rows of its
        scalar inputs."""
        body = self.row_scalars(acc, "row", held)
        body += self.row_invariants(acc)
        for s in self.sin:
            body.append(Assign(f"rr_{s}", f"uint32(row) // uint32(rep_{s})"))  # (a 64-bit division is a call)
        return body

    def row_invariants(self, acc) -> list:
        """The parts of the elements' factors (and their lets) that depend on the row alone — its scalar reductions and
        scalar params, as RMSNorm's ``1 / sqrt(eps + ss / h)`` — computed once into registers ``rv_<n>`` that the
        elements' code then reads (``acc.named``): each element's code repeated an IEEE square root and reciprocal,
        which the compiler cannot share across the elements' tests. Printed by the same text: the same operations and
        bits, except where the compiler would have fused a hoisted product into an element's addition (an FMA)."""
        row = {r for r in self.scalar_reds} | {p.name for p in self.c.params if p.size is None}
        out, acc.named = self.hoist([e for _, e in self.f.prologue.steps] + [self.factor], row.issuperset, acc, "rv_")
        return out

    def factor_chunk(self, acc) -> list:
        """The factors of elements ``kx … kx + 7`` of ``row``, stored by :meth:`factor_store`."""
        each = FACTORS_EACH
        wide, tested = [], []
        for s in self.sin:
            dtype = self.dtypes.get(s, "float32")
            names = [f"xv_{s}_{j}" for j in range(each)]
            width = VEC[dtype]
            if self.spec.pre_vec > 1 and width <= each:
                wide += [Load(tuple(names[u:u + width]), s, f"rr_{s}", f"kx + {u}", dtype) for u in range(0, each, width)]
            else:
                wide += [Load((names[j],), s, f"rr_{s}", f"kx + {j}", dtype) for j in range(each)]
            tested += [If(f"kx + {j} < length", (Load((names[j],), s, f"rr_{s}", f"kx + {j}", dtype),),
                          (Assign(names[j], self.consts.name(0.0)),)) for j in range(each)]
        body = [If(f"kx + {each} <= length", tuple(wide), tuple(tested))]
        for j in range(each):
            acc.scalar["pos"] = f"float32(kx + {j})"
            acc.scalar["element.index"] = f"kx + {j}"
            inside = [Assign(f"e_{s}", f"xv_{s}_{j}") for s in self.sin]
            for sym, expr in self.f.prologue.steps:
                pre, text = self.print(expr, acc)
                inside += pre + [Assign(f"e_{sym.name}", text)]
            pre, text = self.print(self.factor, acc)
            inside += pre + [Assign(f"fv_{j}", text)]
            ok = f"kx + {j} < length" + (f" and keep[row, kx + {j}] != 0" if self.spec.has_keep else "")
            body.append(If(ok, tuple(inside), (Assign(f"fv_{j}", self.consts.name(0.0)),)))
        return body + self.factor_store(tuple(f"fv_{j}" for j in range(each)))

    def factor_store(self, values: tuple) -> list:
        """Elements ``kx … kx + 7`` of ``row``'s factors into the scratch in the fragments' order (:data:`FRAGMENT`):
        rows in blocks of 16, each block's steps of 16 elements one after another, a step lane by lane — two 8-byte
        stores, elements ``kx … kx + 3`` at lane ``4 (row % 8) + (kx % 16) // 4``, the next four at the next lane, the
        rows ``8 … 15`` of a block 4 values into a lane's 8."""
        pack = f"pack_{self.kind}x2"
        at = (f"(row // 16 * (fac.shape[1] // 16) + kx // 16) * {FRAGMENT} + 8 * (4 * (row % 8) + (kx % 16) // 4) + "
              f"4 * ((row // 8) % 2)")
        if self.km:  # K-major weights (:meth:`k_major_loop`): element kx of super-step kx // (4 KL), lane (kx % 4 KL) // KL,
            # step (kx % KL) // 4 of the super-step's KL // 4
            kl = self.kl
            at = (f"(row // 16 * (fac.shape[1] // 16) + kx // {4 * kl} * {kl // 4} + (kx % {kl}) // 4) * {FRAGMENT} + "
                  f"8 * (4 * (row % 8) + (kx % {4 * kl}) // {kl}) + 4 * ((row // 8) % 2)")
        # (the next four elements: the next lane's place, or with K-major weights the lane's place in the next step)
        nxt = FRAGMENT if self.km else 8
        return [Assign("fo", at)] + [
            Call("st_w2_at", ("fac", f"fo + {nxt * h}", f"{pack}({values[4 * h]}, {values[4 * h + 1]})",
                              f"{pack}({values[4 * h + 2]}, {values[4 * h + 3]})")) for h in (0, 1)]

    # -- 3. the products ------------------------------------------------------------------------------
    def load_step(self, u: str, step: str, tested: bool) -> list:
        """Step ``step`` of this warp (16 elements of the axis) into registers of suffix ``u``: lane ``(lg, tq)``'s
        16 bytes of weight rows ``k … k + 3`` (``k = lo + 16 step + 4 tq``, columns ``EACH lg …`` of the block's), one
        load each, not kept in L1 (read once), and its 16 bytes of factors (rows ``lg`` and ``lg + 8``, elements
        ``k … k + 3``: the factors lie in the fragments' order). ``tested``: weight rows past the segment's end are
        zeros (their factors are 0, but 0 · NaN is not), read from nowhere."""
        n, x, nw = self.n, self.x, self.words
        out = [Assign(f"wk_{u}", f"wo + ({step}) * {16 * n}")]
        for r in range(4):
            words = ", ".join(f"wv_{u}_{r}_{q}" for q in range(nw))
            load = Assign(words, f"ld_w{nw}_stream_at({x}, wk_{u} + {r * n})")
            if tested:
                out.append(If(f"lo + 16 * ({step}) + 4 * tq + {r} < hi", (load,),
                              (Assign(words, ", ".join(["uint32(0)"] * nw)),)))
            else:
                out.append(load)
        out.append(Assign(f"fa_{u}_0, fa_{u}_1, fb_{u}_0, fb_{u}_1", f"ld_w4_at(fac, fq + ({step}) * {FRAGMENT})"))
        return out

    def step_products(self, u: str) -> list:
        """The products of a loaded step: the weights are ``mma.m16n8k16``'s A operand (16 columns a product) and
        the rows' factors its B (8 rows an n8 tile; a second tile for rows 8 … 15 only where the block has them), so
        a product does 256 weights' work whatever the number of rows, and one token's step takes half the products
        (and half the accumulators) of the factors as A. The 16 elements are taken in the order that puts a lane's
        own four weight rows where the instruction wants its ``k = 2 tq, 2 tq + 1, 2 tq + 8, 2 tq + 9`` (a sum does
        not depend on the order of its terms, so A and B need only agree): B's words are the factor pairs as loaded,
        A's the columns' pairs of rows ``k, k + 1`` and ``k + 2, k + 3`` (``prmt``; e4m3 bytes widened exactly to
        float16). m16 tile ``mt``'s row ``g`` is the block's column ``EACH g + 2 mt``, its row ``g + 8`` the next
        column."""
        mma, out = f"mma_{self.kind}", []
        per = 4 if self.bytes else 2  # columns of a word
        pairs = "e4m3_pairs" if self.bytes else "b16_pairs"
        lo_ = ", ".join(f"p{c}" for c in range(per))
        hi_ = ", ".join(f"h{c}" for c in range(per))
        b = [f"fa_{u}_0, fa_{u}_1", f"fb_{u}_0, fb_{u}_1"]
        for q in range(self.words):
            out += [Assign(lo_, f"{pairs}(wv_{u}_0_{q}, wv_{u}_1_{q})"), Assign(hi_, f"{pairs}(wv_{u}_2_{q}, wv_{u}_3_{q})")]
            for h in range(per // 2):
                mt, a = per // 2 * q + h, f"p{2 * h}, p{2 * h + 1}, h{2 * h}, h{2 * h + 1}"
                for nt in range(self.nt):
                    regs = ", ".join(f"ac_{mt}_{nt}_{i}" for i in range(4))
                    out.append(Assign(regs, f"{mma}({a}, {b[nt]}, {regs})"))
        return out

    def k_major_loop(self) -> tuple[list, list]:
        """The products' loop over K-major weights (:attr:`Spec.k_major`, bound as their (n, L) rows): (its setup, its
        loops). Lane ``(lg, tq)`` loads 16 bytes of each of its ``EACH`` columns — ``KL`` elements (16 e4m3, 8 16-bit
        values), ``KL tq … KL tq + KL - 1`` of a super-step of ``4 KL`` — the same bytes a step's loads take in rows,
        for ``KL / 4`` steps of 16. Step ``s`` of the super-step takes the lane's elements ``4 s … 4 s + 3``: as the
        instruction's ``k = 2 tq, 2 tq + 1, 2 tq + 8, 2 tq + 9`` (the factors are stored in that order:
        :meth:`factor_store`), a column's word ``s`` of e4m3 bytes widened as two float16 words (``e4m3_halves``), or
        its words ``2 s``, ``2 s + 1`` of 16-bit values as they are. Segments are whole super-steps (the axis a multiple
        of ``4 KL``: :func:`k_major`), so no load is past a row's end and there is no partial step; the warps take the
        super-steps in turn, :attr:`unroll` steps' loads in flight before their products, as the rows' loop."""
        n, each, kl = self.n, self.each, self.kl
        spl, sk = kl // 4, 4 * kl  # steps of a super-step, its elements
        su = max(self.unroll // spl, 1)  # super-steps loaded before their products
        setup = [Assign("nsup", f"max(hi - lo, 0) // {sk}"),
                 # the lane's first column (a partial last block's lanes past the last read the last columns: not
                 # stored), its elements of the segment's first super-step
                 Assign("wo", f"min(cb + {each} * lg, {n - each}) * length + lo + {kl} * tq")]

        def load(u: str, sup: str, tail: bool) -> list:  # (whole super-steps: none is partial)
            out = [Assign(", ".join(f"wv_{u}_{c}_{q}" for q in range(4)),
                          f"ld_w4_stream_at({self.x}, wo + {c} * length + ({sup}) * {sk})") for c in range(each)]
            return out + [Assign(f"fa_{u}_{st}_0, fa_{u}_{st}_1, fb_{u}_{st}_0, fb_{u}_{st}_1",
                                 f"ld_w4_at(fac, fq + (({sup}) * {spl} + {st}) * {FRAGMENT})") for st in range(spl)]

        def products(u: str) -> list:
            out, mma = [], f"mma_{self.kind}"
            for st in range(spl):
                b = [f"fa_{u}_{st}_0, fa_{u}_{st}_1", f"fb_{u}_{st}_0, fb_{u}_{st}_1"]
                for mt in range(each // 2):  # m16 tile mt: rows g and g + 8 are the lane's columns 2 mt, 2 mt + 1
                    c0, c1 = 2 * mt, 2 * mt + 1
                    if self.bytes:
                        out += [Assign("a0, a2", f"e4m3_halves(wv_{u}_{c0}_{st})"),
                                Assign("a1, a3", f"e4m3_halves(wv_{u}_{c1}_{st})")]
                        a = "a0, a1, a2, a3"
                    else:
                        a = f"wv_{u}_{c0}_{2 * st}, wv_{u}_{c1}_{2 * st}, wv_{u}_{c0}_{2 * st + 1}, wv_{u}_{c1}_{2 * st + 1}"
                    for nt in range(self.nt):
                        regs = ", ".join(f"ac_{mt}_{nt}_{i}" for i in range(4))
                        out.append(Assign(regs, f"{mma}({a}, {b[nt]}, {regs})"))
            return out

        count, loops = self.warps_take_steps("nsup", "nsup", su, load, products)
        return setup + [count], loops

    def warps_take_steps(self, full: str, total: str, ahead: int, load, products) -> tuple:
        """The products' loops (and, first, the count of their main loop's rounds): the warps take the segment's
        ``total`` steps in turn (warp ``w`` steps ``w, w + W, …``), ``ahead`` steps' loads (a round) in flight before
        their products while whole rounds of the ``full`` steps last (``nmain`` of them), then the rest one at a time
        (``load(u, step, tail)``: the loads of step ``step`` into registers named by ``u``; ``tail``: a step that may
        be partial). (The next round's loads issued before this round's products, into a second set of registers,
        were slower or the same on the H200: gpu/README.md, 2026-12-04.)"""
        w = self.warps
        body = [Assign("ks", f"warp + it * {ahead * w}")]
        for u in range(ahead):
            body += load(str(u), f"ks + {u * w}", False)
        for u in range(ahead):
            body += products(str(u))
        return (Assign("nmain", f"max({full} - warp - {(ahead - 1) * w} + {ahead * w - 1}, 0) // {ahead * w}"),
                [For("it", "0", "nmain", tuple(body)),
                 For("ks", f"warp + nmain * {ahead * w}", total, tuple(load("t", "ks", True) + products("t")),
                     str(w))])

    def tiles(self) -> list:
        """A block: 16 rows, the ``8 EACH`` columns of one 16-byte load per lane and weight row (128 e4m3, 64 of a
        16-bit type), a segment of the axis; its warps take its steps of 16 elements in turn (warp ``w`` steps ``w,
        w + W, …``), :attr:`unroll` steps' loads in flight before their products, no shared memory and no barrier in
        the loop. The warps' sums meet in shared memory at the end and are added in warp order."""
        n, w, each, un = self.n, self.warps, self.each, self.unroll
        segmented = self.spec.segments > 1
        out = [Assign("tid", "cuda.threadIdx.x"), Assign("lane", "tid % 32"), Assign("warp", "tid // 32"),
               Assign("lg", "lane >> 2"), Assign("tq", "lane & 3"),
               Assign("r0", f"cuda.blockIdx.x * {BM}"), Assign("cb", f"cuda.blockIdx.y * {self.bc}"),
               # 32-bit divisions (a 64-bit one is a subroutine call)
               Assign("rw", f"int32(uint32(min(r0, rows - 1)) // uint32(rep_{self.x}))"),
               # segments of whole tiles (the factors' rows are padded to whole tiles with zeros)
               Assign("segl", f"int32((uint32(length + nseg - 1) // uint32(nseg) + {BK - 1}) // {BK} * {BK})"),
               Assign("lo", "cuda.blockIdx.z * segl"), Assign("hi", "min(lo + segl, length)")]
        if not self.km:
            out += [Assign("nfull", "max(hi - lo, 0) // 16"), Assign("nstep", "max(hi - lo + 15, 0) // 16")]
        # the block's factors of the segment's first step, this lane's 16 bytes (rows past the last hold whatever the
        # scratch held: their outputs are not stored)
        out.append(Assign("fq", f"(cuda.blockIdx.x * (fac.shape[1] // 16) + lo // 16) * {FRAGMENT} + 8 * lane"))
        if self.km:
            setup, loops = self.k_major_loop()
        else:
            # columns past the last read the last 16 bytes (not stored either)
            count, loops = self.warps_take_steps("nfull", "nstep", un, self.load_step, self.step_products)
            setup = [Assign("wo", f"(rw * length + lo + 4 * tq) * {n} + min(cb + {each} * lg, {n - each})"), count]
        out += setup
        zero = self.consts.name(0.0)
        slots = [(mt, nt, i) for mt in range(each // 2) for nt in range(self.nt) for i in range(4)]
        out += self.early_start()
        out += [Assign(f"ac_{mt}_{nt}_{i}", zero) for mt, nt, i in slots]
        out += loops
        if w > 1:  # the warps' sums meet: slot (j, i) of lane l at red[warp, slot, l], added by the slot's warp
            out.append(Shared("red", (str(w), str(len(slots)), "32")))
            out += [Assign(f"red[warp, {k}, lane]", f"ac_{mt}_{nt}_{i}") for k, (mt, nt, i) in enumerate(slots)]
            out.append(Barrier())
        # each lane's outputs: rows 2 tq and 2 tq + 1 of each n8 tile (accumulators 0, 2 and 1, 3 of an m16 tile), the
        # row's scalars read once for its EACH columns
        for nt in range(self.nt):
            for bit in (0, 1):
                acc = self.base()
                stmts = [] if segmented else self.row_scalars(acc, "orow")
                for k, (mt, nt_, i) in enumerate(slots):
                    if nt_ != nt or i & 1 != bit:
                        continue
                    # accumulator i of m16 tile mt: the tile's row lg (+ 8: the next column), its column 2 tq (+ 1)
                    col, total, body = f"cb + {each} * lg + {2 * mt + (i >> 1)}", f"ac_{mt}_{nt}_{i}", []
                    if w > 1:
                        total = f"t_{k}"
                        body = [Assign(total, f"red[0, {k}, lane]")] + [Assign(total, f"red[{v}, {k}, lane]", "+")
                                                                        for v in range(1, w)]
                    if segmented:
                        body.append(Assign(f"part_{self.red}[orow, cuda.blockIdx.z, {col}]", total))
                    else:
                        body += self.finish("orow", col, [lambda r, v=total: v], acc)
                    stored = If(f"{col} < {n}", tuple(body))
                    stmts.append(If(f"warp == {k % w}", (stored,)) if w > 1 else stored)
                out += [Assign("orow", f"r0 + {8 * nt} + 2 * tq + {bit}"), If("orow < rows", tuple(stmts))]
        return out

    def early_start(self) -> list:
        """Launched while the factors' kernel runs (``Spec.dependent``): the block's first weight rows brought into L2
        (the weights are the stream this kernel reads; nothing before it writes them), the combine let start, then
        the wait for the factors."""
        if not self.spec.dependent:
            return []
        if self.km:  # K-major: each of the block's columns' first lines of the segment (the whole segment's with
            # warm_all; else as many bytes as PREFETCH_ROWS rows' lines), the columns side by side. Each line once:
            # lines past the segment's end were clamped to its last, sending many prefetches to one line (8192 rows'
            # worth measured slower than 2048 K-major, the same for weights read in rows, whose loop stops at the
            # segment's end; the repeats not timed apart)
            line = 128 // (1 if self.bytes else 2)  # (elements a 128-byte line)
            lines = f"(hi - lo + {line - 1}) // {line}"
            if not self.spec.warm_all:
                lines = f"min({max(PREFETCH_ROWS // self.bc, 1)}, {lines})"
            col = f"cb + pk % {self.bc}"
            at = f"({col}) * length + lo + {line} * (pk // {self.bc})"
            # (none for an empty segment, lo >= length, nor past the last column: no address past the weights' end)
            warm = If("lo < hi", (Assign("wl", lines), For("pk", "tid", f"{self.bc} * wl", (
                If(f"{col} < {self.n}", (Call("prefetch_l2_at", (self.x, at)),)),), str(self.spec.threads))))
        else:
            row = f"(rw * length + pk) * {self.n} + cb"
            end = "hi" if self.spec.warm_all else f"min(hi, lo + {PREFETCH_ROWS})"
            warm = For("pk", "lo + tid", end, (Call("prefetch_l2_at", (self.x, row)),), str(self.spec.threads))
        return [warm, Call("grid_launch", ()), Call("grid_wait", ())]

    def kernels(self) -> list:
        from ..kernels import kernel_args

        args = list(kernel_args(self.c))
        common = [a for a in args if a not in ("rows", "length")]
        pre = [f"out_pre_{r}" for r in self.scalar_reds]
        part = [f"part_{self.red}"] if self.spec.segments > 1 else []
        out = [self.factors_kernel(tuple(common + pre + ["fac", "rows", "length"]))]
        out.append(("tiles", tuple(common + pre + ["fac"] + part + ["rows", "length", "nseg"]), "tiles", self.tiles()))
        if part:
            out.append(("combine", tuple(common + pre + part + ["rows", "length", "nseg"]), "combine", self.combine()))
        if self.spec.dependent:  # the factors' kernel lets the products start at once; the combine waits for them
            out[0] = out[0][:3] + ([Call("grid_launch", ())] + list(out[0][3]),)
            if part:
                out[-1] = out[-1][:3] + ([Call("grid_wait", ())] + list(out[-1][3]),)
        return out

    def factors_kernel(self, factors: tuple) -> tuple:
        """The module's first kernel ``(name, arguments, grid, body)``: the scalars and the factors (``factors``: the
        arguments a factors kernel alone takes)."""
        first = self.prepass()
        if first is None:  # no scalar reduction: the factors alone, spread over blocks
            return ("factors", factors, "factors", self.factor_kernel())
        # a block per row reduces it, then writes its factors (the row read once from memory, once from the cache, one
        # launch fewer), the row's scalars taken from the registers the reduction leaves them in
        (_, pre_args, _, pre_body), acc, each = first, self.base(), FACTORS_EACH
        held = self.pre.scalar_values({f"pre_{r}": f"f_{r}" for r in self.scalar_reds})
        setup = self.factor_setup(acc, held=True)  # (first: acc learns the scalars' names)
        loop = For("kx", f"tid * {each}", "fac.shape[1]", tuple(self.factor_chunk(acc)), str(self.row_threads() * each))
        args = tuple(pre_args) + tuple(a for a in factors if a not in pre_args)
        return ("factors", args, "rowfactors", [*pre_body, *held, *setup, loop])

    def scratch(self) -> tuple:
        # (the fragments' order: the rows rounded up to blocks of 16)
        fac = ("fac", {"bfloat16": "uint16", "float16": "float16", "e4m3": "uint8"}[self.fac_store], self.fac_layout, None)
        return super().scratch() + (fac,)


# -- registration ----------------------------------------------------------------------------------------
def build(fused: FusedCascade, spec: Spec, target: str):
    from dataclasses import replace

    src = columns_build(fused, spec, target, kernel=ColumnsMmaKernel, name="columns_mma")
    # no zero fill per call: every entry of the scratch arrays is written before it is read — the scalars (a block
    # per row), the factors (the padding past the row's end too), the segments' sums (every block, an empty
    # segment's zeros too) — but the factor rows past the last row up to a whole block of 16: the products read
    # them and nothing else (an output row of mma.sync depends on its own factor row only), and their outputs are
    # not stored
    return replace(src, written=tuple(name for name, *_ in src.scratch))


def _threads(p: Problem) -> int:
    return p.option("threads") or (SIM_THREADS if p.option("simulator") else THREADS)


def _columns(fused: FusedCascade, p: Problem) -> int:
    """The weight rows' length (columns of the output)."""
    return next(s.size if isinstance(s.size, int) else dict(p.sizes)[s.size] for s in fused.cascade.inputs
                if s.size is not None)


def applicable(fused: FusedCascade, p: Problem) -> str | None:
    """Why ``columns_mma`` does not suit this call (None: it does)."""
    reason = refusal(fused, dict(p.dtypes))
    if reason is not None:
        return reason
    c = fused.cascade
    n = _columns(fused, p)
    each = 16 if _e4m3(fused, p) else 8
    if n % each:
        return (f"columns_mma: the weight rows are read 16 bytes at a time: {n} columns is not a multiple of {each}; "
                f"use columns")
    if not p.vec_ok:  # (with a multiple of 8 columns, every weight row then starts on one too)
        return "columns_mma: the weights must start on a 16-byte boundary (16-byte loads); use columns"
    reps = dict(p.reps)
    share = min(reps.get(s.name, 1) for s in c.inputs if s.size is not None)
    if share < p.rows and share % BM:
        return (f"columns_mma: a block's {BM} rows share one weight matrix; here each is shared by {share} rows (not a "
                f"multiple of {BM}): use columns")
    threads, e4m3 = _threads(p), _e4m3(fused, p)
    blocks = BLOCKS_E4M3 if e4m3 else BLOCKS
    if threads not in blocks:
        return f"columns_mma: blocks of {', '.join(map(str, blocks))} threads{' (e4m3 weights)' if e4m3 else ''}, got {threads}"
    for name, fixed in (("tile", BK), ("batch", BM)):
        if p.option(name) not in (None, fixed):
            return (f"columns_mma: the {name} is fixed by the instruction shapes ({BM} rows, {8 * load_columns(e4m3)} "
                    f"columns a block, segments of whole tiles of {BK} elements)")
    if p.option("group") not in (None, *loads(e4m3)):
        return (f"columns_mma: a lane loads {' or '.join(map(str, loads(e4m3)))} columns of a weight row (16 or 8 "
                f"bytes), got group={p.option('group')}")
    return None


def _e4m3(fused: FusedCascade, p: Problem) -> bool:
    """Whether the weights are e4m3 bytes."""
    return any(dict(p.dtypes).get(s.name) == "e4m3" for s in fused.cascade.inputs if s.size is not None)


def configure(fused: FusedCascade, p: Problem) -> dict:
    """128 threads (32 in the simulator): blocks of 16 rows and 128 columns (e4m3 weights) or 64 (16-bit ones),
    three a multiprocessor, segments of the axis across blocks until they fill the GPU once (two tiles each at
    least)."""
    reason = applicable(fused, p)
    if reason is not None:
        raise RedalgebraError(reason)
    e4m3 = _e4m3(fused, p)
    # e4m3 weights past 8 rows (two n8 tiles of products): a lane loads 8 bytes of a weight row, not 16, which halves
    # its accumulators (118 registers, not 168, at 16 rows) and lets four blocks a multiprocessor hide the loads'
    # latency: FP8 M16 0.0316 -> 0.0274 ms on the H200 (gpu/README.md); at 8 rows or fewer it changed nothing
    narrow = e4m3 and p.rows > 8
    n, threads = _columns(fused, p), _threads(p)
    each = p.option("group") or loads(e4m3)[1 if narrow else 0]
    blocks = max(1, -(-p.rows // BM) * -(-n // (8 * each)))  # (no rows, or no columns: a launch of nothing)
    tiles = -(-p.length // BK)
    # registers for three blocks of four warps a multiprocessor (RESIDENT; no spills at 128 threads), four with 8-byte
    # loads of e4m3 weights; segments until they are all busy once, not past it (a second, partial wave costs as much
    # as the first)
    minb = p.option("min_blocks") or (RESIDENT + (each < load_columns(e4m3))) * 128 // threads
    nseg = p.option("segments") or max(1, min(p.multiprocessors() * minb // blocks, tiles // 2))
    nseg = min(int(nseg), max(tiles, 1), 65535)  # no segment without a tile; the grid's z dimension
    # on Hopper each kernel after the first starts while the one before runs (programmatic dependent launch)
    dependent = p.dependent_launch()
    # and a few rows' products bring their whole segments of weights into L2 meanwhile, where the weights fit and the
    # first PREFETCH_ROWS rows' bytes would leave much of a segment to be read after the wait
    itemsize = max(16 // VEC.get(dict(p.dtypes).get(s.name), 4) for s in fused.cascade.inputs if s.size is not None)
    weights = n * p.length * itemsize
    segment = -(-p.length // int(nseg) // BK) * BK if p.length else 0
    # (the elements of a column or a row prefetched otherwise: K-major, as many 128-byte lines as PREFETCH_ROWS rows')
    first = max(PREFETCH_ROWS // (8 * each), 1) * (128 // itemsize) if k_major(fused, p) else PREFETCH_ROWS
    warm_all = dependent and p.rows <= BM and weights <= WARM_ALL_BYTES and 3 * first < 2 * segment
    # rows of a block: 16, or 8 (one n8 tile of products) where there are no more
    return dict(threads=threads, group=each, vec=8, tile=BK, batch=8 if p.rows <= 8 else BM, segments=int(nseg),
                nseg=int(nseg),
                pre_vec=prepass_vec(fused, p), fast_exp=p.option("fast_exp", False), min_blocks=minb,
                dependent=dependent, k_major=k_major(fused, p), unroll=UNROLL, warm_all=warm_all,
                row_threads=fit_row_threads(threads, p.length))


def k_major(fused: FusedCascade, p: Problem) -> tuple:
    """The weights the products read as they lie (:attr:`Spec.k_major`): given K-major (``p.k_major``: ``W.T[None]`` of
    a Linear layer's (n, L) weight), bound as those (n, L) rows — a lane's 16-byte load then holds 16 (e4m3) or 8
    (16-bit) consecutive elements of one column (:meth:`ColumnsMmaKernel.k_major_loop`) — when ``L`` is a multiple of
    64 (whole super-steps: no load past a row's end, no partial step) and the call's arrays start on the 16-byte grid
    (``p.vec_ok``), and they are the cascade's one vector input. Other K-major weights are copied by the call."""
    vectors = [s.name for s in fused.cascade.inputs if s.size is not None]
    ok = len(vectors) == 1 and vectors[0] in p.k_major and p.length % BK == 0 and p.vec_ok
    return tuple(vectors) if ok else ()


def grid(rows: int, spec: Spec, named) -> dict:
    if spec.batch < BM and rows > spec.batch:  # blocks step by BM rows: rows past a block's products would be skipped
        raise RedalgebraError(f"columns_mma: kernels built for {spec.batch} rows a block run at most that many rows, "
                              f"got {rows}")
    n = vector_columns(spec, named)
    fac = named["fac"].shape[1] if "fac" in named else 0  # (none where columns_wgmma's tiles compute the factors)
    return {"scalars": (rows, spec.threads), "rowfactors": (rows, row_threads(spec)),  # a block per row
            "factors": ((rows, max(1, -(-fac // (spec.threads * FACTORS_EACH)))), spec.threads),
            "tiles": ((-(-rows // BM), -(-n // (spec.group * 8)), spec.segments), spec.threads),
            "combine": ((rows, -(-n // spec.threads)), spec.threads)}


register(Strategy("columns_mma", "cuda", "columns' level order with the products F·W on the tensor cores (mma.sync): "
                  "the factors in the weights' 16-bit type (FP8 ones exactly), the weights loaded straight into the "
                  "fragments", build,
                  configure, grid, final_scales=True, rounds_products=lambda fused: not exact_factors(fused),
                  vector_multiple=16, shared_vectors=True))  # 16: e4m3 weight rows are read 16 at a time


def exact_factors(fused: FusedCascade) -> bool:
    """Whether every vector reduction's factor is exact in a 16-bit type (an FP8 cast): the products then round
    nothing."""
    c = fused.cascade
    vin = {s.name for s in c.inputs if s.size is not None}
    return all(isinstance(split_body(fused.bodies[r.name], vin)[0], RoundE4M3)
               for r in c.reductions if c.sizes[r.name] is not None)

