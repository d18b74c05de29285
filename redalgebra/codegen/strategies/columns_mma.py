"""``columns_mma``: the ``columns`` level order with the column tiles' products on the tensor cores.

``columns`` streams a weight matrix ``w`` (every element of the axis a row ``w[k, :]`` of ``n`` columns that all
rows share) once per batch of rows and sums ``factor × w`` on the CUDA cores: 64 fused multiply-adds per 16-byte
chunk of weights at a batch of 16 tokens, so FP8 quantisation + GEMM at M = 16 is bound by the FP32 units, not by
the memory. Here the same sums are a matrix product ``F · W`` (``F[m, k]`` the factors of row ``m``, element ``k``)
on ``mma.sync.m16n8k16``:

1. **The scalar reductions first** — the ``rows`` kernel of the cascade's scalar part, as ``columns`` (the FP8
   scale is then the row's final absmax).
2. **The factors**, one kernel: ``F[m, k]`` in the weights' 16-bit type, zero past the row's end (and where a mask
   drops the element), the rows padded to a whole number of 64-element tiles. An FP8 factor is exact in either
   16-bit type (e4m3 has 4 significant bits and exponents -9 … 8), so the products are exact and only the float32
   summation order differs from the unfused reference (``check`` holds it to the float32 tolerance); any other
   factor is rounded to the weights' type, as FlashAttention rounds its probabilities (``Strategy.rounds_products``:
   ``check`` allows that rounding once more).
3. **The product.** A block takes 16 rows, 64 columns per warp (256 with four warps: each weight row's 512 bytes,
   256 of e4m3, are read in one piece; ``threads=256`` gives eight warps of 32 columns, the same block, half the
   work a warp — not timed yet) and a segment of the axis; tiles of 64 elements of ``F`` (16 × 64) and ``w``
   (64 × 256) are staged by ``cp.async``, three in flight (rows padded by 16 bytes: the rows an ``ldmatrix`` reads fall in
   distinct banks); each warp multiplies the whole ``F`` tile by its 64 columns, the A fragments by ``ldmatrix``,
   the B fragments by the transposing ``ldmatrix`` (``w`` is row-major along the columns), 32 products per tile,
   and writes its own outputs (no exchange between warps).
   **e4m3 weights** (``as_e4m3``, ``float8_e4m3fn``: half the bytes) are staged as bytes, 16 per copy, five tiles
   in flight (a tile is half the bytes: as many bytes in flight as the 16-bit weights' three), and the B fragments
   are made from the bytes directly (``e4m3_b_frags``: four 32-bit shared loads, ``prmt`` to pair each column's
   ``k`` and ``k + 1``, ``cvt.rn.f16x2.e4m3x2``, exact): a thread's fragments then hold columns ``4g … 4g + 3`` of
   a 32-column group, so n8 tile ``j`` of the group is the columns ``≡ j (mod 4)`` and the outputs are stored at
   those columns. The products are float16 ones; the factors must then be FP8 (exact in float16 too).
4. **The segments' sums** and the outputs: ``columns``' third kernel (or the tiles kernel itself when the axis is
   one segment).

**Masked and non-finite weights.** A masked element's factor is 0, but its weight row still enters the product: an
inf or NaN there makes the outputs that mask it NaN (0 · inf), where the reference skips the element (as the
``mma`` strategy's masked values).
"""

from __future__ import annotations

from ...derive import FusedCascade
from ...errors import RedalgebraError
from ...ir.functions import RoundE4M3
from ..emit import Spec
from ..tree import Assign, Barrier, Call, For, If, Load, Store
from . import BUSY_BLOCKS, VEC, Problem, Strategy, register
from .columns import ColumnsKernel, build as columns_build, prepass_vec, refusal as columns_refusal, split_body
from .products import KINDS

#: Rows of a block (the m16 of the instruction), columns per warp (blocks of up to 4 warps; 8 warps take 32 each:
#: the same 256 columns a block, half the work a warp), elements of a tile (the factors' rows are padded to whole
#: tiles: a "tiles" scratch array), tiles in the stages (e4m3 weights: a tile is half the bytes, five fit).
BM, BC, BK, STAGES, STAGES_E4M3 = 16, 64, 64, 3, 5
#: Threads of a block on the GPU (a warp per 64 columns: 256 a block) and in the simulator (one warp); the sizes taken.
THREADS, SIM_THREADS, BLOCKS = 128, 32, (32, 64, 128, 256)


def warp_columns(threads: int) -> int:
    """Columns of a warp: 64, or 32 in blocks of eight warps."""
    return BC // 2 if threads > 128 else BC
#: Elements of the factors a thread computes (one 16-byte store of 16-bit values; the rows are whole tiles).
FACTORS_EACH = 8
#: 16-bit units of a staged row: 64 values and 16 bytes of padding.
PITCH = BK + 8


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
    """Builds the kernels of a ``columns_mma`` module: ``columns``' scalars and combine, the factors, the products."""

    def check_launch(self) -> None:
        spec = self.spec
        shape = (spec.batch, spec.tile, spec.group)
        self.cw = warp_columns(spec.threads)
        if spec.threads not in BLOCKS or shape != (BM, BK, spec.threads // 32 * self.cw // 8):
            raise RedalgebraError(f"columns_mma: blocks of 32, 64, 128 or 256 threads taking {BM} rows, {self.cw} columns a warp "
                                  f"and tiles of {BK} elements (the instruction shapes)")
        self.red = next(r for r in self.vector_reds)
        factor, vector = self.factors[self.red]
        self.factor, self.x = factor, vector.name
        kind = self.dtypes.get(self.x)
        reason = refusal(self.f, self.dtypes)
        if reason is not None:
            raise RedalgebraError(reason)
        # e4m3 weights: staged as bytes, widened to float16 in shared memory (exact), multiplied as float16
        self.bytes = kind == "e4m3"
        self.kind = "f16" if self.bytes else KINDS[kind]
        self.fac_store = "bfloat16" if self.kind == "bf16" else "float16"  # the factors' stored type
        self.warps = spec.threads // 32
        self.bc = self.cw * self.warps  # the block's columns
        # 16-bit units of a staged weight row: 16 bytes of padding after its values (float16/bfloat16: the rows an
        # ldmatrix reads fall in distinct banks; e4m3: the four rows of a fragment load too)
        self.pw = (self.bc + 16) // 2 if self.bytes else self.bc + 8
        self.stage = BM * PITCH + BK * self.pw
        self.stages = STAGES_E4M3 if self.bytes else STAGES

    # -- 2. the factors -------------------------------------------------------------------------------
    def factor_kernel(self) -> list:
        """``fac[row, k]``: the factor of every element, in the weights' 16-bit type; 0 past the row's end (the
        padding to whole tiles) and where the mask drops the element. A thread takes :data:`FACTORS_EACH` elements:
        16-byte loads where the rows allow them (``pre_vec``) and the elements are all inside the row, one 16-byte
        store."""
        acc = self.base()
        out = [Assign("tid", "cuda.threadIdx.x"), Assign("row", "cuda.blockIdx.x"),
               Assign("kx", f"(cuda.blockIdx.y * {self.spec.threads} + tid) * {FACTORS_EACH}")]
        return out + [If("kx < fac.shape[1]", tuple(self.factor_setup(acc) + self.factor_chunk(acc)))]

    def factor_setup(self, acc) -> list:
        """The row's scalars (``acc`` learns their names) and the rows of its scalar inputs."""
        body = self.row_scalars(acc, "row")
        for s in self.sin:
            body.append(Assign(f"rr_{s}", f"uint32(row) // uint32(rep_{s})"))  # (a 64-bit division is a call)
        return body

    def factor_chunk(self, acc) -> list:
        """The factors of elements ``kx … kx + 7`` of ``row``, stored at once."""
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
        values = tuple(f"fv_{j}" for j in range(each))
        body.append(Store("fac", "row", "kx", values, self.fac_store))
        return body

    # -- 3. the products ------------------------------------------------------------------------------
    def copies(self) -> tuple[int, int, int]:
        """(weights per 16-byte copy, copies per staged weight row, weight rows a block's threads copy at once)."""
        each = 16 if self.bytes else 8
        per_row = self.bc // each
        return each, per_row, self.spec.threads // per_row

    def offsets(self) -> list:
        """Each thread's copies of a whole tile as element offsets from the tile's first element, computed once: the
        factor rows it copies (clamped to the last row) and its weight column (clamped; 0 bytes past the last)."""
        t = self.spec.threads
        each, per_row, step = self.copies()
        out = [Assign(f"fo_{u}", f"min(r0 + tid // {BK // 8} + {u * t // (BK // 8)}, rows - 1) * fac.shape[1] + "
                                 f"8 * (tid % {BK // 8})") for u in range(-(-BM * (BK // 8) // t))]
        out += [Assign("wcol", f"cb + {each} * (tid % {per_row})"),
                Assign("wo", f"(rw * length + tid // {per_row}) * {self.n} + min(wcol, {self.n - each})"),
                Assign("wn", f"pick(wcol < {self.n}, 16, 0)"),
                Assign("wd", f"{BM * PITCH} + (tid // {per_row}) * {self.pw} + 8 * (tid % {per_row})")]
        return out

    def issue(self, tile: str, stage: str) -> list:
        """``cp.async`` of tile ``tile`` of the factors (16 rows) and the weights (64 elements × the block's columns)
        into ``stage``: a whole tile from the offsets of :meth:`offsets` plus constants (one address per copy, no
        test); the segment's last, partial tile clamped, zeros past the segment's end and past the last column."""
        t = self.spec.threads
        base = f"{stage} * {self.stage}"
        each, per_row, step = self.copies()
        whole = [Assign("sd", base)]
        for u in range(-(-BM * (BK // 8) // t)):
            copy = Call("cp_async16_at", ("sm", f"sd + (tid // {BK // 8}) * {PITCH} + 8 * (tid % {BK // 8}) + "
                                                f"{u * t // (BK // 8) * PITCH}", "fac", f"fo_{u} + kt0", "16"))
            whole += self.factor_copier(copy)
        whole.append(Assign("wt", f"wo + kt0 * {self.n}"))
        for u in range(BK * per_row // t):
            whole.append(Call("cp_async16_at", ("sm", f"sd + wd + {u * step * self.pw}", self.x,
                                                f"wt + {u * step * self.n}", "wn")))
        return [Assign("kt0", f"lo + ({tile}) * {BK}"),
                If(f"kt0 + {BK} <= hi", tuple(whole), tuple(self.clamped(base)))]

    def factor_copier(self, *stmts) -> list:
        """``stmts`` (one 16-byte copy of the factor tile), guarded when the block has more threads than the tile
        has copies (eight warps: 256 threads, 128 copies)."""
        if self.spec.threads <= BM * (BK // 8):
            return list(stmts)
        return [If(f"tid < {BM * (BK // 8)}", tuple(stmts))]

    def clamped(self, base: str) -> list:
        """The copies of a partial tile: every index clamped, zeros past the segment's end."""
        t = self.spec.threads
        out = []
        for u in range(-(-BM * (BK // 8) // t)):
            q = f"(tid + {u * t})"
            out += self.factor_copier(
                Assign("fr", f"{q} // {BK // 8}"), Assign("fk", f"kt0 + 8 * ({q} % {BK // 8})"),
                Call("cp_async16", ("sm", f"{base} + fr * {PITCH} + 8 * ({q} % {BK // 8})", "fac",
                                    "min(r0 + fr, rows - 1)", "fk", "pick(fk < hi, 16, 0)")))
        each, per_row, _ = self.copies()
        for u in range(BK * per_row // t):
            q = f"(tid + {u * t})"
            out += [Assign("wk", f"kt0 + {q} // {per_row}"), Assign("wc", f"cb + {each} * ({q} % {per_row})"),
                    Call("cp_async16", ("sm", f"{base} + {BM * PITCH} + ({q} // {per_row}) * {self.pw} + "
                                              f"8 * ({q} % {per_row})", self.x,
                                        "(rw, min(wk, length - 1))", f"min(wc, {self.n - each})",
                                        "pick(wk < hi and wc < " + str(self.n) + ", 16, 0)"))]
        return out

    def products(self) -> list:
        """The staged tile times this warp's 64 columns: A by ``ldmatrix``, B by the transposing ``ldmatrix``, per 16
        elements."""
        out = []
        mma = f"mma_{self.kind}"
        for sl in range(BK // 16):
            k0 = 16 * sl
            out.append(Assign("a0, a1, a2, a3", f"ldsm_x4(sm, sa + (lane & 15) * {PITCH} + {k0} + 8 * (lane >> 4))"))
            if self.bytes:  # per 32-column group h: columns 4 lg … 4 lg + 3 of rows 2 tq, + 1, + 8, + 9
                for h in range(self.cw // 32):
                    b = [f"b{i}" for i in range(8)]
                    out.append(Assign(", ".join(b), f"e4m3_b_frags(sm, sa + {BM * PITCH} + ({k0} + 2 * tq) * {self.pw} "
                                                     f"+ {self.cw // 2} * warp + {16 * h} + 2 * lg, {self.pw})"))
                    for j in range(4):
                        regs = ", ".join(f"ac_{4 * h + j}_{i}" for i in range(4))
                        out.append(Assign(regs, f"{mma}(a0, a1, a2, a3, b{j}, b{4 + j}, {regs})"))
                continue
            for np_ in range(self.cw // 16):
                out.append(Assign("b0, b1, b2, b3", f"ldsm_x4_t(sm, sa + {BM * PITCH} + ({k0} + vrow) * {self.pw} + "
                                                    f"{self.cw} * warp + {16 * np_} + vcol)"))
                for half in (0, 1):
                    regs = ", ".join(f"ac_{2 * np_ + half}_{i}" for i in range(4))
                    out.append(Assign(regs, f"{mma}(a0, a1, a2, a3, b{2 * half}, b{2 * half + 1}, {regs})"))
        return out

    def column(self, j: int, i: int) -> str:
        """The block's column of accumulator ``i`` of n8 tile ``j`` (its fragment column ``2 tq + (i & 1)``): tile
        ``j``'s eight columns in a row, or, from e4m3 fragments, every fourth column of a 32-column group."""
        c = f"2 * tq + {i & 1}"
        inner = f"4 * ({c}) + {j % 4} + {32 * (j // 4)}" if self.bytes else f"{8 * j} + {c}"
        return f"cb + {self.cw} * warp + {inner}"

    def tiles(self) -> list:
        ahead = self.stages - 1
        segmented = self.spec.segments > 1
        out = [Assign("tid", "cuda.threadIdx.x"), Assign("lane", "tid % 32"), Assign("warp", "tid // 32"),
               Assign("lg", "lane >> 2"), Assign("tq", "lane & 3"),
               Assign("vrow", "(lane & 7) + 8 * ((lane >> 3) & 1)"), Assign("vcol", "8 * (lane >> 4)"),
               Assign("sm", "cuda.shared.array(0, uint16)"),
               Assign("r0", f"cuda.blockIdx.x * {BM}"), Assign("cb", f"cuda.blockIdx.y * {self.bc}"),
               Assign("rw", f"min(r0, rows - 1) // rep_{self.x}"),
               # segments of whole tiles: a tile never straddles two segments (nor the factors' padding)
               Assign("segl", f"((length + nseg - 1) // nseg + {BK - 1}) // {BK} * {BK}"),
               Assign("lo", "cuda.blockIdx.z * segl"), Assign("hi", "min(lo + segl, length)"),
               Assign("ntile", f"max(hi - lo + {BK - 1}, 0) // {BK}")] + self.offsets()
        zero = self.consts.name(0.0)
        out += [Assign(f"ac_{j}_{i}", zero) for j in range(self.cw // 8) for i in range(4)]
        for s_ in range(ahead):
            out += [If(f"{s_} < ntile", tuple(self.issue(str(s_), str(s_)))), Call("cp_commit", ())]
        stage = f"uint32(it + {ahead}) % uint32({self.stages})"
        step = [If(f"it + {ahead} < ntile", tuple(self.issue(f"it + {ahead}", stage))),
                Call("cp_commit", ()), Call(f"cp_wait{ahead}", ()), Barrier(),
                Assign("sa", f"(uint32(it) % uint32({self.stages})) * {self.stage}")] + self.products() + [Barrier()]
        out.append(For("it", "0", "ntile", tuple(step)))
        # each thread's outputs: rows lg and lg + 8, columns 8 j + 2 tq and + 1 of its warp's 64
        for j in range(self.cw // 8):
            for i in range(4):
                row, col = f"r0 + lg + {8 * (i >> 1)}", self.column(j, i)
                if segmented:
                    stmts = [Assign(f"part_{self.red}[{row}, cuda.blockIdx.z, {col}]", f"ac_{j}_{i}")]
                else:
                    acc = self.base()
                    stmts = self.row_scalars(acc, row) + self.finish(row, col, lambda r, v=f"ac_{j}_{i}": v, acc)
                out.append(If(f"{row} < rows and {col} < {self.n}", tuple(stmts)))
        return out

    def kernels(self) -> list:
        from ..kernels import kernel_args

        args = list(kernel_args(self.c))
        common = [a for a in args if a not in ("rows", "length")]
        pre = [f"out_pre_{r}" for r in self.scalar_reds]
        part = [f"part_{self.red}"] if self.spec.segments > 1 else []
        out = []
        first = self.prepass()
        if first is not None:
            out.append(first)
        out.append(("factors", tuple(common + pre + ["fac", "rows", "length"]), "factors", self.factor_kernel()))
        out.append(("tiles", tuple(common + pre + ["fac"] + part + ["rows", "length", "nseg"]), "tiles", self.tiles()))
        if part:
            out.append(("combine", tuple(common + pre + part + ["rows", "length", "nseg"]), "combine", self.combine()))
        return out

    def scratch(self) -> tuple:
        fac = ("fac", {"bfloat16": "uint16", "float16": "float16"}[self.fac_store], "tiles", None)
        return super().scratch() + (fac,)


# -- registration ----------------------------------------------------------------------------------------
def build(fused: FusedCascade, spec: Spec, target: str):
    from dataclasses import replace

    src = columns_build(fused, spec, target, kernel=ColumnsMmaKernel, name="columns_mma")
    # every entry of the scratch arrays is written before it is read: the scalars (a block per row), the factors
    # (the padding too), the segments' sums (every block, an empty segment's zeros too)
    return replace(src, written=tuple(name for name, *_ in src.scratch))


def shared_bytes(threads: int, e4m3: bool = False) -> int:
    """Dynamic shared memory of the tiles kernel: its stages (e4m3 weights: more of them, of bytes)."""
    bc = threads // 32 * warp_columns(threads)
    if e4m3:
        return STAGES_E4M3 * (BM * PITCH + BK * (bc + 16) // 2) * 2
    return STAGES * (BM * PITCH + BK * (bc + 8)) * 2


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
        return "columns_mma: the weights must start on a 16-byte boundary (cp.async); use columns"
    reps = dict(p.reps)
    share = min(reps.get(s.name, 1) for s in c.inputs if s.size is not None)
    if share < p.rows and share % BM:
        return (f"columns_mma: a block's {BM} rows share one weight matrix; here each is shared by {share} rows (not a "
                f"multiple of {BM}): use columns")
    threads = _threads(p)
    if threads not in BLOCKS:
        return (f"columns_mma: blocks of 32, 64, 128 threads (a warp per 64 columns) or 256 (32 columns a warp), "
                f"got {threads}")
    for name, fixed in (("tile", BK), ("batch", BM), ("group", threads // 32 * warp_columns(threads) // 8)):
        if p.option(name) not in (None, fixed):
            return (f"columns_mma: the {name} is fixed by the instruction shapes ({BM} rows, {warp_columns(threads)} columns, tiles of "
                    f"{BK} elements)")
    return None


def _e4m3(fused: FusedCascade, p: Problem) -> bool:
    """Whether the weights are e4m3 bytes."""
    return any(dict(p.dtypes).get(s.name) == "e4m3" for s in fused.cascade.inputs if s.size is not None)


def configure(fused: FusedCascade, p: Problem) -> dict:
    """128 threads (32 in the simulator; 256 when asked: 32 columns a warp): blocks of 16 rows, 64 columns a warp and tiles of 64 elements, segments of
    the axis across blocks until the GPU is busy (at least four tiles each)."""
    reason = applicable(fused, p)
    if reason is not None:
        raise RedalgebraError(reason)
    n, threads = _columns(fused, p), _threads(p)
    bc = threads // 32 * warp_columns(threads)
    blocks = -(-p.rows // BM) * -(-n // bc)
    tiles = -(-p.length // BK)
    # segments until the blocks fill the GPU once (two of 108 KB per multiprocessor: half of BUSY_BLOCKS), not past
    # it (a second, partial wave would cost as much as the first), and four tiles each at least
    nseg = p.option("segments") or max(1, min(BUSY_BLOCKS // 2 // blocks, tiles // 4))
    nseg = min(int(nseg), max(tiles, 1), 65535)  # no segment without a tile; the grid's z dimension
    return dict(threads=threads, group=bc // 8, vec=8, tile=BK, batch=BM, segments=int(nseg), nseg=int(nseg),
                pre_vec=prepass_vec(fused, p),
                fast_exp=p.option("fast_exp", False), shared=shared_bytes(threads, _e4m3(fused, p)))


def grid(rows: int, spec: Spec, named) -> dict:
    n = next(a.shape[2] for k, a in named.items() if getattr(a, "ndim", 0) == 3 and not k.startswith(("part_", "out_")))
    fac = named["fac"].shape[1]
    return {"scalars": (rows, spec.threads),
            "factors": ((rows, -(-fac // (spec.threads * FACTORS_EACH))), spec.threads),
            "tiles": ((-(-rows // BM), -(-n // (spec.group * 8)), spec.segments), spec.threads, 0, spec.shared),
            "combine": ((rows, -(-n // spec.threads)), spec.threads)}


register(Strategy("columns_mma", "cuda", "columns' level order with the products F·W on the tensor cores (mma.sync): "
                  "the factors in the weights' 16-bit type (FP8 ones exactly), tiles staged by cp.async", build,
                  configure, grid, final_scales=True, rounds_products=lambda fused: not exact_factors(fused),
                  vector_multiple=16, shared_vectors=True))  # 16: e4m3 weight rows are read 16 at a time


def exact_factors(fused: FusedCascade) -> bool:
    """Whether every vector reduction's factor is exact in a 16-bit type (an FP8 cast): the products then round
    nothing."""
    c = fused.cascade
    vin = {s.name for s in c.inputs if s.size is not None}
    return all(isinstance(split_body(fused.bodies[r.name], vin)[0], RoundE4M3)
               for r in c.reductions if c.sizes[r.name] is not None)

