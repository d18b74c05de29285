"""``mma``: rows that share their element vectors, with the products on the tensor cores.

Prefill attention is a cascade over the keys whose elements are a key row ``k`` and a value row ``v``
that every query of a head shares. Row by row, each query re-reads all of them and computes its dot
products on the CUDA cores; here a block takes ``BM = 64`` rows of one group (the rows that share a
vector row: ``Problem.reps``; 16 rows in the simulator) and walks the axis in tiles of ``BN = 64`` elements:

1. **Staging.** Each tile of every vector input is copied to shared memory by ``cp.async`` (16 bytes
   per copy, zeros past the row's end), two tiles in flight: the next tile loads while this one
   computes. Rows are padded by 16 bytes, so the eight rows an ``ldmatrix`` reads fall in distinct banks.
2. **Scores.** Every dot product ``dot(q, k)`` of a vector param and a vector input is a 16-row by
   64-element tile per warp, ``Q · Kᵀ`` by ``mma.sync.m16n8k16`` (float32 accumulators): the param's
   rows, staged in shared memory once per block, are the A fragments and the staged tile the B
   fragments, both by ``ldmatrix`` (a param held in registers instead would spill at d = 128: the
   accumulators of ``P · V`` take 64 registers per thread). A float32 param is split into its 16-bit
   value and the residual (``q = hi + lo``); the residual's product is added only when some residual
   of the block is not zero, so a query given in the inputs' 16-bit type costs one product, any other
   keeps about twice the type's bits (measured in the simulator for float16: 6e-8 relative at
   components near 1, 1e-5 near 1e-3, where the float16 residual is subnormal; bfloat16's residual
   has float32's exponent range). A float16 query beyond ±65504 has no such split (its scores would be
   NaN): a call refuses such a param given on the host (``arguments.SPLIT_QUERY``; one on the device is not read back
   to check), and a −inf key component beside a query with a residual has none either.
3. **The derived update, per tile.** Each thread holds 32 scores per row tile of 16: rows ``g`` and
   ``g + 8`` of it, elements ``8 j + 2 t`` and ``+ 1`` (``g = lane >> 2``, ``t = lane & 3``); a warp takes
   one row tile or two (``group`` 16 or 32 rows: then each key and value fragment serves both, at twice
   the registers). The per-element lets are computed on them; then,
   reduction by reduction in dependency order, the tile's terms with the *new* dependencies
   (``F_i(e, D_new)``) are reduced over the thread's elements and the 4 lanes of a row (two xor
   shuffles) and joined to the old state times its correction — the derived incremental update,
   applied to a tile at once (the merge of the old state with the tile's, whose correction is 1): :mod:`.tile_update`.
4. **Vector reductions as products.** A vector reduction whose body is a scalar factor times a vector
   input (``exp(s - m) * v``) has its old value scaled by the correction in the accumulators, then
   adds ``P · V``: the factors of the tile, rounded to the vector input's 16-bit type, are the A
   fragments (the accumulator layout of the scores is the A layout of the next product, so they
   never leave the registers), the staged tile the B fragments by a transposing ``ldmatrix``.
5. Finalize per row, every thread its own components, written in float32 (a call on 16-bit tensors
   returns the input's dtype, as the other row-output strategies do).
6. **Tiles no row sees are skipped.** A let ``where(C, s, -inf)`` whose condition reads only positions and
   the row's params (a causal mask, a sliding window), and at ``-inf`` of which every body is its
   reduction's identity (checked symbolically, :func:`gate`), gates the tiles: each thread tests ``C`` on
   its elements, the block meets at a barrier, and a tile false everywhere is not computed — causal
   attention computes the tiles on and below the diagonal only.

**Rounding.** The factors ``P`` enter the product in the vector input's 16-bit type (as FlashAttention
does): a relative error of at most 2^-9 per factor for bfloat16, 2^-12 for float16, on top of the
float32 sums. ``check`` allows that rounding once more (``Strategy.rounds_products``). Float16 has
the range to hold them only when they lie in [0, 1] with each row's largest at 1 — softmax's
``exp(s - max(s))``, proved from the bounds of the states (``max(s) >= s``); other factors are refused
for float16 inputs (bfloat16's range is float32's).

**Masked values.** A masked element's factor is 0, but its value row still enters the product: a NaN
or inf there makes the rows that mask it NaN (0 · NaN), as PyTorch's masked attention does; the
reference and the other strategies skip it.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from ...derive import FusedCascade
from ...errors import RedalgebraError
from ..emit import Spec
from ..states import identity_text
from ..tree import Assign, Barrier, Call, For, If, Store, While, walk
from . import Strategy, mma_policy, register
from .base import TreeKernel
from .columns import split_body
from .mma_policy import configure, grid, shared_plan
from .pairs import PAIRED_TYPES, column, exchange
from .products import KINDS, MOST_COMPONENTS, dots, gate, prefix, refusal, replace_sums, staged, summed
from .tile_copies import TileCopies
from .tile_segments import TileSegments
from .tile_update import BN, TileUpdate

#: 16-bit vector outputs stored from the fragments four values a lane after an exchange between neighbouring lanes
#: (:mod:`.pairs`; ``columns_wgmma``'s product ran 2–5 % faster so on an H100); 0: a pair a lane. On an H100
#: (``gpu/sweep.py prefill:0,prefill:1 built:wgmma:bfloat16,mma.PAIRED_STORES=1:wgmma:bfloat16``, 2026-12-05), the
#: attention kernels alone: BERT-base L512 25.4 -> 24.0 us, ViT-L L197 14.4 -> 13.1 us, LLaMA-65B L2048 (plain and
#: causal) the same within the rounds' spread (248-258 and 199-202 us either way), registers unchanged (167, 168).
PAIRED_STORES = 1


class MmaKernel(TileCopies, TileUpdate, TileSegments, TreeKernel):
    """Builds the statement tree of an ``mma`` kernel."""

    def __init__(self, fused: FusedCascade, spec: Spec, target: str = "cuda"):
        super().__init__(fused, spec, refusal)
        # on the GPU, conditionals as selects (no blocks of numba's IR per element: numba's SSA pass grew with them);
        # the simulator keeps branches, as its Python math.exp raises where the unused side would overflow
        self.selects = target == "cuda"
        c = self.c
        self.dtypes = dict(spec.dtypes)
        self.vin = [s.name for s in c.inputs if s.size is not None]
        self.sin = [s.name for s in c.inputs if s.size is None]
        kinds = {self.dtypes.get(x, "float32") for x in self.vin}
        if len(kinds) != 1 or not kinds <= set(KINDS):
            raise RedalgebraError(f"mma: the tensor cores take bfloat16 or float16 vectors of one type; {c.name}'s are "
                                  f"{', '.join(sorted(kinds))}: use vrows")
        self.kind = KINDS[kinds.pop()]
        #: every vector's components as staged and multiplied (:func:`~.products.staged`: a multiple of 16, the
        #: padding zeros); ``size`` stays the row's own, as global memory holds it
        self.width = {name: staged(n) for name, n in self.size.items()}
        self.check_widths()
        exprs = [e for _, e in fused.prologue.steps] + [fused.bodies[r.name] for r in c.reductions]
        self.dots = dots(exprs)
        self.dot_list = list(self.dots)
        prologue = [(s, e.xreplace(self.dots)) for s, e in fused.prologue.steps]
        bodies = {r.name: fused.bodies[r.name].xreplace(self.dots) for r in c.reductions}
        # products summed (MLA's two dot products) add into one chain of accumulators, ``sc_{g}`` for group g
        self.sums, merged = summed([e for _, e in prologue] + list(bodies.values()), list(self.dots.values()))
        self.prologue = [(s, replace_sums(e, merged)) for s, e in prologue]
        self.bodies = {k: replace_sums(e, merged) for k, e in bodies.items()}
        self.scal = [r for r in c.reductions if c.sizes[r.name] is None]
        self.vred = [r for r in c.reductions if c.sizes[r.name] is not None]
        self.factors = {}
        for r in self.vred:
            factor, vector = split_body(self.bodies[r.name], set(self.vin))
            self.factors[r.name] = (factor, vector.name)
        self.threads = spec.threads
        self.mt = max(1, spec.group // 16)  # row tiles of 16 per warp: they share each key and value fragment
        # warps of one row tile that split the vector sums' columns (``wgmma``'s wide sums), and their warp index
        self.ncol = self.column_groups()
        self.rw = "warp" if self.ncol == 1 else "rw"
        # with column groups, each computes the scores of its own share of a tile's elements (``bn`` of them, from
        # element ``key0`` of the tile), the groups exchanging row partials and factors through shared memory
        self.kt = spec.tile or BN  # elements of a tile (wgmma's two consumer warpgroups: 64 or 128)
        self.bn = self.kt // self.ncol
        self.key0 = "" if self.ncol == 1 else f" + {self.bn} * cg"
        self.bm = spec.batch  # rows of the block
        if spec.threads % 32 or self.bm * self.ncol != spec.threads // 32 * 16 * self.mt or self.mt > 2:
            raise RedalgebraError(f"mma: a block of {spec.threads} threads takes 16 or 32 rows per warp, got {self.bm}")
        self.stages = spec.stages
        if not 2 <= self.stages <= mma_policy.MOST_STAGES:
            raise RedalgebraError(f"mma: 2 to {mma_policy.MOST_STAGES} stages of tiles, got {self.stages}")
        self.resid = True  # the params' residuals staged in shared memory beside their values
        plan = shared_plan(fused, dict(spec.sizes), self.bm, self.stages, self.kt)
        self.pitch, self.base, self.qtile, self.shared_bytes = plan
        self.gate = gate(fused, self.prologue, self.bodies, self.factors)
        self.prefix = self.gate is not None and prefix(self.gate[1])
        self.whole, self.kept = False, set()

    def bounds(self) -> dict:
        """Launch bounds of the kernels whose block is not ``Spec.threads``, by name (none here)."""
        return {}

    def check_widths(self) -> None:
        for x in self.vin:
            if self.size[x] % 8 or self.width[x] > MOST_COMPONENTS:
                raise RedalgebraError(f"mma: vectors of a multiple of 8 components, at most {MOST_COMPONENTS}; "
                                      f"{x} has {self.size[x]}: use vrows")

    def column_groups(self) -> int:
        """How many warps (warpgroups) share a row tile, each holding its share of the vector sums' columns: 1 here."""
        return 1

    def cols(self, r) -> int:
        """The columns of vector sum ``r`` (a reduction) each warp holds (as staged: the padding's too)."""
        return self.width[r.name] // self.ncol

    # -- names ---------------------------------------------------------------------------------------
    def param_of(self, dot) -> str:
        return next(a.name for a in dot.args if a.name in self.size and a.name not in self.vin)

    def input_of(self, dot) -> str:
        return next(a.name for a in dot.args if a.name in self.vin)

    def slots(self):
        """The thread's elements of a tile: ``(m, j, i)`` = row tile ``m`` of the warp, n-tile ``j``, accumulator
        ``i``; the thread's row ``2 m + (i >> 1)``."""
        return [(m, j, i) for m in range(self.mt) for j in range(self.bn // 8) for i in range(4)]

    @property
    def rows(self):
        """The thread's rows: two per row tile (``g`` and ``g + 8`` of it)."""
        return range(2 * self.mt)

    def identity(self, name: str) -> str:
        return identity_text(self.f, name, self.consts)

    def access(self, h: int, m: int | None = None, j: int | None = None, i: int | None = None, deps: str = "n"):
        """Names for the thread's row ``h`` (and its element ``(m, j, i)``); reduction symbols read the ``deps``
        side."""
        acc = self.lay.base_access()
        acc.exp = "fast_exp" if self.spec.fast_exp else "math.exp"
        acc.select = "pick" if self.selects else None  # every operand a register: conditionals as selects
        for p in self.c.params:
            if p.size is None:
                acc.scalar[p.name] = f"p_{p.name}_{h}"
        for r in self.c.reductions:
            if self.c.sizes[r.name] is None:
                acc.scalar[r.name] = f"{deps}_{r.name}_{h}"
                acc.scalar[f"{r.name}_a"] = f"s_{r.name}_{h}"
                acc.scalar[f"{r.name}_n"] = f"n_{r.name}_{h}"
                acc.scalar[f"{r.name}_z"] = f"z_{r.name}_{h}"  # (tile_update.floored)
                if self.spec.fast_exp:  # its -z·log2(e) (tile_update.floors): exp(e - z) by a fused multiply-add
                    acc.shifted[f"z_{r.name}_{h}"] = f"zn_{r.name}_{h}"
            else:
                acc.vector[r.name] = f"o_{r.name}_{{j}}"
        if j is not None:
            b, e = i & 1, f"{m}_{j}_{i}"
            for x in self.sin:
                acc.scalar[x] = f"e_{x}_{e}"
            for sym, _ in self.prologue:
                acc.scalar[sym.name] = f"e_{sym.name}_{e}"
            syms = list(self.dots.values())
            for g, group in enumerate(self.sums):
                acc.scalar[syms[group[0]].name] = f"sc_{g}_{e}"
            acc.scalar["element.index"] = f"(lt + {8 * j + b})"
            # float32 (as the other strategies), converted once per tile (``lf``): exact below 2**24
            acc.scalar["pos"] = f"(lf + {self.consts.name(float(8 * j + b))})" if 8 * j + b else "lf"
        return acc

    # -- pieces -----------------------------------------------------------------------------------------
    def setup(self, block: str | None = "cuda.blockIdx.x") -> list:
        """The thread's indices and the shared arrays, then the row tile numbered ``block`` (:meth:`row_tile`; none
        where ``block`` is None: a block walking row tiles takes each in its loop)."""
        out = self.lanes("cuda.threadIdx.x") + [
               Assign("sm", "cuda.shared.array(0, uint16)"), Assign("smw", "cuda.shared.array(0, uint32)")]
        return out + (self.row_tile(block) if block is not None else [])

    def row_tile(self, block: str, own: str | None = None) -> list:
        """Row tile ``block`` of the call's: its group of rows sharing their vectors (``grp``), its place in the group
        (``rt``), the thread's rows (``row_{h}``, ``ok_{h}``, ``rc_{h}``: clamped into the group; every ``h`` the
        tile's row ``own`` where given: a producer's thread a row), their scalar params and each vector input's row
        (``rr_{x}``)."""
        c = self.c
        out = self.row_groups() + self.tile_place(block) + [Assign("gend", "grp * grows + grows")]
        for h in self.rows:
            at = own if own is not None else f"{16 * self.mt} * {self.rw} + lg + {8 * h}"
            out += [Assign(f"row_{h}", f"grp * grows + rt * {self.bm} + {at}"),
                    Assign(f"ok_{h}", f"row_{h} < gend"), Assign(f"rc_{h}", f"min(row_{h}, gend - 1)")]
            out += [Assign(f"p_{p.name}_{h}", f"{p.name}[rc_{h}]") for p in c.params if p.size is None]
        out += [Assign(f"rr_{x}", f"uint32(rc_0) // uint32(rep_{x})") for x in self.vin]
        return out

    def row_groups(self) -> list:
        """The call's groups of rows sharing their vectors: ``grows`` rows a group, ``ntr`` row tiles a group and,
        under a gate, ``ngrp`` groups."""
        out = [Assign("grows", f"rep_{self.vin[0]}"), Assign("ntr", f"(grows + {self.bm - 1}) // {self.bm}")]
        if self.order == "pairs":  # (the pairs' row tiles a group, those of every group's pairs: ``pend``)
            out += [Assign("half", "ntr >> 1"), Assign("pend", "int32(uint32(rows) // uint32(grows)) * 2 * half")]
        return out + [Assign("ngrp", "uint32(rows) // uint32(grows)")] * (self.order == "longest")

    @property
    def order(self) -> str:
        """How row tiles are numbered (:meth:`tile_place`): ``groups``, a group's row tiles one after the other;
        ``longest``, under a gate (a causal mask), those that see the most tiles first across all groups, so that the
        last blocks to start are the short ones; ``pairs`` (:class:`~.tile_producer.TileProducer`'s walking blocks
        under a gate)."""
        return "groups" if self.gate is None else "longest"

    def tile_place(self, block: str, grp: str = "grp", rt: str = "rt") -> list:
        """``grp``, ``rt``: row tile ``block``'s group of rows and its place in the group (``grows``, ``ntr`` and
        what :attr:`order` needs assigned before, :meth:`row_tile`). In pairs, number ``2 u`` is the ``p``-th row tile
        of a group and ``2 u + 1`` the ``p``-th from its end (``u``: pair ``p`` of group ``u // half``); the middle
        row tile of each group with an odd count comes after every pair (``pend`` on)."""
        # 32-bit divisions: a 64-bit one is a subroutine call, and any call serializes Hopper's wgmma
        if self.order == "groups":
            return [Assign(grp, f"uint32({block}) // uint32(ntr)"), Assign(rt, f"{block} - {grp} * ntr")]
        if self.order == "longest":
            return [Assign(f"{rt}_b", f"uint32({block}) // uint32(ngrp)"),
                    Assign(grp, f"uint32({block}) - {rt}_b * ngrp"), Assign(rt, f"ntr - 1 - {rt}_b")]
        u, p = f"{rt}_u", f"{rt}_p"
        return [Assign(grp, f"uint32({block}) - uint32(pend)"), Assign(rt, "half"),
                If(f"{block} < pend", (Assign(u, f"uint32({block}) >> 1"), Assign(grp, f"{u} // uint32(half)"),
                                       Assign(p, f"{u} - {grp} * half"),
                                       Assign(rt, f"pick(({block} & 1) != 0, ntr - 1 - {p}, {p})")))]

    def lanes(self, tid: str) -> list:
        """The thread's indices from ``tid``: its lane, warp, ``lg``/``t`` (the fragments' group and thread), ``cg``
        (with column groups, the warp's group of columns) and ``rw`` (its row tile), and the lanes' ``ldmatrix`` rows
        and columns. Each tile takes them afresh (:meth:`loop`), so that the addresses computed from them are
        computed in the loop rather than hoisted out of it and held in registers across it."""
        out = [Assign("tid", tid), Assign("lane", "tid % 32"), Assign("warp", "tid // 32"),
               Assign("lg", "lane >> 2"), Assign("t", "lane & 3")]
        if self.ncol > 1:
            # (the warp's, made known to ptxas as such: the descriptors computed from it stay in uniform registers)
            out += [Assign("cg", f"uniform(int32(warp // {self.threads // 32 // self.ncol}))"),
                    Assign("rw", f"warp % {self.threads // 32 // self.ncol}")]
        return out + [Assign("krow", "(lane & 7) + 8 * (lane >> 4)"), Assign("kcol", "8 * ((lane >> 3) & 1)"),
                      Assign("vrow", "(lane & 7) + 8 * ((lane >> 3) & 1)"), Assign("vcol", "8 * (lane >> 4)")]

    def params(self) -> list:
        """Every dot's param rows into shared memory: the 16-bit values, then the residuals, and ``split``: whether
        any residual of the block is not zero. Each thread writes the words of its own A fragments. (``wgmma`` stages
        them in 16-byte loads instead, column groups too: :meth:`~.wgmma.WgmmaKernel.params`.)"""
        pack = f"pack_{self.kind}x2"
        out = [Assign("inexact", "0")]
        for n, dot in enumerate(self.dot_list):
            p = self.param_of(dot)
            for ks, m, r in itertools.product(range(self.width[p] // 16), range(self.mt), range(4)):
                h, c0 = 2 * m + (r & 1), 16 * ks + 8 * (r >> 1)
                at, lo = self.param_word(n, p, m, h, c0)
                if c0 >= self.size[p]:  # the padding (:func:`~.products.staged`): zeros
                    out += [Assign("qw", "uint32(0)"), Assign("d0", "float32(0)"), Assign("d1", "float32(0)")]
                else:
                    out += self.param_pair(p, h, f"{c0} + 2 * t")
                out += [Assign("inexact", "pick(d0 != 0, 1, inexact)"), Assign("inexact", "pick(d1 != 0, 1, inexact)")]
                out += [Assign(f"smw[{at}]", "qw")] + [Assign(f"smw[{at} + {lo}]", f"{pack}(d0, d1)")] * self.resid
        return out + self.landed() + [Assign("split", "cuda.syncthreads_or(inexact)")]

    def param_pair(self, p: str, h: int, col: str, past_row: bool = False) -> list:
        """Components ``col`` and ``+ 1`` of the thread's row ``h`` of param ``p``: ``qw``, their 16-bit values packed;
        ``d0``, ``d1``: their residuals (0 for a NaN). ``past_row``: ``col`` may lie in the row's padding
        (:meth:`~.tile_copies.TileCopies.padded`), which reads zeros (the row's last pair read instead, then dropped)."""
        pack, unpack = f"pack_{self.kind}x2", f"unpack_{self.kind}x2"
        n = self.size[p]
        if past_row and self.padded(p):
            load = [Assign("cq", f"min({col}, {n - 2})"), Assign("v0", f"{p}[rc_{h}, cq]"),
                    Assign("v1", f"{p}[rc_{h}, cq + 1]"), Assign("v0", f"pick({col} < {n}, v0, float32(0))"),
                    Assign("v1", f"pick({col} < {n}, v1, float32(0))")]
        else:
            load = [Assign("v0", f"{p}[rc_{h}, {col}]"), Assign("v1", f"{p}[rc_{h}, {col} + 1]")]
        return load + [Assign("qw", f"{pack}(v0, v1)"), Assign("u0, u1", f"{unpack}(qw)"),
                Assign("d0", "v0 - u0"), Assign("d1", "v1 - u1"),
                # branch-free (a conditional is three blocks of numba's IR, 32 of them per param row)
                Assign("d0", "pick(d0 == d0, d0, float32(0))"), Assign("d1", "pick(d1 == d1, d1, float32(0))")]

    def param_word(self, n: int, p: str, m: int, h: int, c0: int) -> tuple[str, int]:
        """(the 32-bit word of shared memory where the thread's row ``h`` (row tile ``m``) of dot ``n``'s param ``p``
        keeps components ``c0 + 2 t`` and ``+ 1``, how many words further its residual is). The word's index is the
        16-bit index shifted, not floor-divided: it is even and not negative, and numba's floor division of a signed
        64-bit integer adds a sign fix-up that ptxas cannot drop (about a third of a store's instructions)."""
        pq = self.width[p] + 8
        return (f"(({self.qtile[n]} + ({16 * self.mt} * {self.rw} + lg + {8 * h}) * {pq} + {c0} + 2 * t) >> 1)",
                self.bm * pq // 2)

    def products(self, load: str, j0: int, acc: str, a: str) -> list:
        """``load`` (an ``ldmatrix`` of the B fragments of n-tiles ``j0`` and ``j0 + 1``), then the products of every
        row tile ``m`` of the warp with them: A fragment ``{a}_{m}_0..3``, accumulators ``{acc}_{m}_{j}_0..3``."""
        out = [Assign("b0, b1, b2, b3", load)]
        for m, half in itertools.product(range(self.mt), (0, 1)):
            regs = ", ".join(f"{acc}_{m}_{j0 + half}_{i}" for i in range(4))
            frag = ", ".join(f"{a}_{m}_{r}" for r in range(4))
            out.append(Assign(regs, f"mma_{self.kind}({frag}, b{2 * half}, b{2 * half + 1}, {regs})"))
        return out

    def scores(self) -> list:
        """``sc_{n}_{j}_{i}``: the tile's dot products, on the tensor cores."""
        zero = self.consts.name(0.0)
        out = []
        for g, group in enumerate(self.sums):
            out += [Assign(f"sc_{g}_{m}_{j}_{i}", zero) for m, j, i in self.slots()]
            late = []
            for n in group:
                p, x = self.param_of(self.dot_list[n]), self.input_of(self.dot_list[n])
                ksteps, pq = self.width[p] // 16, self.width[p] + 8

                def products(tile):
                    body = []
                    for ks in range(ksteps):
                        for m in range(self.mt):  # the A fragments of each row tile, then each key fragment used by all
                            body.append(Assign(f"fa_{m}_0, fa_{m}_1, fa_{m}_2, fa_{m}_3",
                                               f"ldsm_x4(sm, {tile} + ({16 * self.mt} * warp + {16 * m} + (lane & 15)) "
                                               f"* {pq} + {16 * ks} + 8 * (lane >> 4))"))
                        for jp in range(self.kt // 16):
                            body += self.products(f"ldsm_x4(sm, xb_{x} + ({16 * jp} + krow) * {self.pitch[x]} + "
                                                  f"{16 * ks} + kcol)", 2 * jp, f"sc_{g}", "fa")
                    return body
                out += products(str(self.qtile[n]))
                late += products(str(self.qtile[n] + self.bm * pq))
            out.append(If("split", tuple(late)))
        return out

    def factor_words(self, r, kk: int, m: int, name: str) -> list:
        """``{name}_0..3``: the A fragment of row tile ``m`` and keys ``16 kk ..`` of ``r``'s factors, rounded to the
        vector's 16-bit type (the scores' accumulator layout is the A fragments' layout)."""
        pack = f"pack_{self.kind}x2"
        out = []
        for r_ in range(4):
            j, i0 = 2 * kk + (r_ >> 1), 2 * (r_ & 1)
            out.append(Assign(f"{name}_{r_}", f"{pack}(pf_{r.name}_{m}_{j}_{i0}, pf_{r.name}_{m}_{j}_{i0 + 1})"))
        return out

    def sum_products(self, r, x: str, dv: int) -> list:
        """``o_r += P · V`` for the tile: the factors as A fragments, the staged tile by transposing ``ldmatrix``."""
        out = []
        for kk in range(self.kt // 16):
            for m in range(self.mt):
                out += self.factor_words(r, kk, m, f"pa_{m}")
            for np_ in range(dv // 16):
                out += self.products(f"ldsm_x4_t(sm, xb_{x} + ({16 * kk} + vrow) * {self.pitch[x]} + {16 * np_} + vcol)",
                                     2 * np_, f"o_{r.name}", "pa")
        return out

    def tile(self) -> list:
        scores = self.scores()
        out = self.take_copies() + [Assign(f"xb_{x}", self.stage_base(x, "st")) for x in self.vin]
        out += self.tile_start() + scores
        # every tile but a row's last is whole: its element-wise work without a test (two selects) per element
        out.append(If("gen_wh", tuple(self.updates(True)), tuple(self.updates(False))))
        for r in self.vred:
            out += self.sum_products(r, self.factors[r.name][1], self.cols(r))
        return out + self.advance()

    def advance(self) -> list:
        """The scalar states after the tile: each reduction's new state becomes the state (``s_`` ← ``n_``)."""
        return [Assign(f"s_{r.name}_{h}", f"n_{r.name}_{h}") for r in self.scal for h in self.rows]

    def tile_start(self) -> list:
        """``kb``, the tile's first element, and ``gen_wh``, whether the tile is whole (:meth:`whole_test`), found
        before its products and copies are issued: tested after them, the test read the row's length again into a
        register that the copies' addresses had just held, waiting for the copies to be issued."""
        return [Assign("kb", f"({self.first}it) * {self.kt}"), Assign("gen_wh", self.whole_test())]

    def initial(self) -> list:
        """The row's states before its first tile: each scalar reduction's identity, the vector sums' zeros."""
        out = []
        for r in self.scal:
            out += [Assign(f"s_{r.name}_{h}", self.identity(r.name)) for h in self.rows]
        zero = self.consts.name(0.0)
        for r in self.vred:
            out += [Assign(f"o_{r.name}_{m}_{j}_{i}", zero) for m in range(self.mt)
                    for j in range(self.cols(r) // 8) for i in range(4)]
        return out

    def count(self) -> list:
        """``ntile``: the block's tiles of the axis; with segments, segment ``seg``'s, from tile ``tfirst`` (none past
        the row's end)."""
        if self.segmented:
            return [Assign("nall", f"(length + {self.kt - 1}) // {self.kt}"),
                    Assign("tps", "int32(uint32(nall + nseg - 1) // uint32(nseg))"),
                    Assign("tfirst", "seg * tps"), Assign("ntile", "max(0, min(nall - tfirst, tps))")]
        return [Assign("ntile", f"(length + {self.kt - 1}) // {self.kt}")]

    def loop(self) -> list:
        # a commit group per tile (empty past the last), ``ahead`` tiles loading ahead of the one computed
        ahead, first = self.ahead, self.first
        out = self.initial() + ([] if self.copies_first else self.first_copies())
        # the stage as an unsigned remainder (a signed one is five instructions more)
        stage = f"uint32(it + {ahead}) % uint32({self.stages})"
        # the thread's indices taken afresh each tile (see lanes); this tile's copies waited for, then one barrier:
        # every thread's copies have landed, and every warp is done with the previous tile — its stage, read by
        # nothing now (the pending products of the pipelined order read the one before), takes the copies of tile
        # ``it + ahead``, issued after the barrier (so one barrier a tile, not two)
        loads = [If(f"it + {ahead} < ntile", tuple(self.loads(f"{first}it + {ahead}", stage, ahead) +
                                                    self.stop(f"it + {ahead}"))), Call("cp_commit", ())]
        step = self.lanes("fresh(tid)") + [Call(f"cp_wait{ahead - 1}", ())]
        step += self.landed() + self.barrier() + [Assign("st", f"uint32(it) % uint32({self.stages})")]
        if self.gate is None:
            self.next_copies = loads
            step += self.tile()
            assert not self.next_copies, "the tile did not issue the copies"
        elif self.copies_in_tile:  # the live tile issues them with its scores (their ``kb`` then its own again)
            self.next_copies = loads + [Assign("kb", f"({first}it) * {self.kt}")]
            step += [If("lv & 1", tuple(self.tile()), tuple(self.skipped() + loads)), Assign("lv", "lv >> 1")]
            assert not self.next_copies, "the tile did not issue the copies"
        else:  # a tile that no row of the block sees (above a causal diagonal) is skipped whole
            step += loads + [If("lv & 1", tuple(self.tile()), tuple(self.skipped())), Assign("lv", "lv >> 1")]
        if self.prefix:  # the count of tiles lowered at the first dead one (stop)
            return out + [Assign("it", "0"), While("it < ntile", tuple(step) + (Assign("it", "it + 1"),))] + \
                self.drain()
        return out + [For("it", "0", "ntile", tuple(step))] + self.drain()

    def first_copies(self) -> list:
        """What every copy needs once (:meth:`copy_setup`), the block's tiles (:meth:`count`), then the copies of the
        first ``ahead`` tiles, each committed."""
        out = self.copy_setup() + self.count()
        if self.gate is not None:  # ``lv``: bit k, whether tile it + k is live (found when its copies are issued)
            out.append(Assign("lv", "0"))
        for s_ in range(self.ahead):
            out += [If(f"{s_} < ntile", tuple(self.loads(f"{self.first}{s_}", str(s_), s_) + self.stop(str(s_)))),
                    Call("cp_commit", ())]
        return out

    @property
    def copies_first(self) -> bool:
        """Whether the first tiles' copies are issued before the params are staged (:meth:`kernel`), so that they land
        while the params are loaded: column groups (MLA's 576-wide query, 74–147 KB a block, every block loading its
        own at once at the start), where the first tile waited for the query and then for its own copies. Measured
        with the query's 16-byte loads on an H100 (``gpu/README.md``, 2026-12-06, twelfth series), the two not timed
        apart: MLA B16 0.0716 → 0.0673 ms with a float32 query. The prefill blocks without a producer warpgroup
        (16–32 KB of query a block) read 1–5 % slower with it for every block (the targets' run after it against the
        one before: ViT-L 0.0142 → 0.0149 ms at 256 threads, BERT-base 0.0269 → 0.0273 at 128; the producer blocks
        beside them, unchanged, read the same), so they keep the params first. Not
        under a gate, whose copies vote at a block barrier on whether any row of the block sees the tile."""
        return self.ncol > 1 and self.gate is None

    def barrier(self) -> list:
        """The loop's one barrier a tile; with a gate true on a prefix of the row it also finds ``op``: whether the
        gate holds for every element of this tile and row of the block (at the tile's last position: it then holds
        before it), so that the tile's whole path computes no mask (:meth:`~.tile_update.TileUpdate.elements`; causal
        attention: every tile but the diagonal one). The same barrier, as a reduction (``bar.red.and``)."""
        if not self.prefix:
            return [Barrier()]
        out = [Assign("pe", f"float32(({self.first}it) * {self.kt} + {self.kt - 1})"), Assign("every", "1")]
        out += self.gate_at("pe", (Assign("every", "0"),), negate=True)
        return out + [Assign("op", "cuda.syncthreads_and(every)")]

    def gate_at(self, pos: str, then: tuple, negate: bool = False) -> list:
        """``then`` where the gate holds (``negate``: fails) at position ``pos`` (a float32 name) for some row of the
        thread: a test a row."""
        out = []
        for h in self.rows:
            pre, text = self.print(self.gate[1], self.at_position(h, pos))
            out += pre + [If(f"not {text}" if negate else text, then)]
        return out

    def at_position(self, h: int, pos: str):
        """Names for row ``h`` with the element position ``pos`` (a float32 name)."""
        acc = self.access(h)
        acc.scalar["pos"] = pos
        return acc

    def stop(self, index: str) -> list:
        """With a gate true on a prefix of the row (:func:`.products.prefix`): the loop ends before tile ``index``
        (counted in the segment) when it is dead — every later tile is dead too."""
        return [If("live == 0", (Assign("ntile", index),))] if self.prefix else []

    @property
    def ahead(self) -> int:
        """Tiles loading while one is computed: every stage but the computed one's."""
        return self.stages - 1

    def skipped(self) -> list:
        """What a tile no row of the block sees does (nothing here; see :class:`~.wgmma.WgmmaKernel`)."""
        return []

    def drain(self) -> list:
        """What follows the last tile before the outputs (nothing here; see :class:`~.wgmma.WgmmaKernel`)."""
        return []

    def loads(self, tile: str, stage: str, ahead: int) -> list:
        """The copies of tile ``tile`` (``ahead`` tiles after the one computed) into stage ``stage``; with a gate, only
        when some row of the block sees the tile (a causal mask: the key and value tiles above the diagonal are not
        read at all), and bit ``ahead`` of ``lv`` says so for when the tile is computed."""
        if self.gate is None:
            return self.issue(tile, stage)
        return self.live(tile) + [Assign("lv", f"lv | (live << {ahead})"), If("live", tuple(self.issue(tile, stage)))]

    def live(self, tile: str) -> list:
        """``live``: whether the gate's condition holds for some element of tile ``tile`` and row of the block (sets
        ``kb`` and ``lt`` for that tile)."""
        _, cond = self.gate
        out = [Assign("kb", f"({tile}) * {self.kt}"), Assign("lt", f"kb{self.key0} + 2 * t"), Assign("lf", "float32(lt)"),
               Assign("seen", "0")]
        if self.prefix:  # true at the tile's first position for some row, or nowhere in it: a test a row
            out += [Assign("pf", "float32(kb)")] + self.gate_at("pf", (Assign("seen", "1"),))
            return out + [Assign("live", "cuda.syncthreads_or(seen)")]
        for m, j, i in self.slots():
            pre, text = self.print(cond, self.access(2 * m + (i >> 1), m, j, i))
            out += pre + [If(text, (Assign("seen", "1"),))]
        return out + [Assign("live", "cuda.syncthreads_or(seen)")]

    def outputs(self) -> list:
        out = []
        outs, stored = {o.name for o in self.c.outputs}, dict(self.spec.out_dtypes)
        for h in self.rows:
            m, hh = divmod(h, 2)
            acc = self.access(h, deps="s")
            stores = []
            for sym, expr in self.f.finalize.steps:
                size = self.c.sizes.get(sym.name)
                if size is None:
                    pre, text = self.print(expr, acc)
                    out += pre + [Assign(f"y_{sym.name}_{h}", text)]
                    acc.scalar[sym.name] = f"y_{sym.name}_{h}"
                    if sym.name in outs:
                        stores.append(If(self.lead, (Assign(f"out_{sym.name}[row_{h}]", f"y_{sym.name}_{h}"),)))
                    continue
                n = self.lay.constants[self.lay.size_const(size)]  # (refusal: an output, from sums of its length)
                dtype = stored.get(sym.name, "float32")
                paired = self.paired(sym.name, dtype)
                blocks = n // self.ncol // 8
                for j in range(blocks):
                    values = []
                    for b in range(2):
                        pre, text = self.print(expr, acc, f"{m}_{j}_{2 * hh + b}")
                        values.append(f"y_{sym.name}_{j}_{b}")
                        out += pre + [Assign(values[-1], text)]
                    if not paired or j >= blocks - blocks % 2:
                        stores.append(self.store_pair(sym.name, n, h, j, tuple(values), dtype))
                    elif j % 2 == 0:  # (block j's pair waits for block j + 1's)
                        first = tuple(values)
                    else:  # (:mod:`.pairs`: the shuffles outside the row's test, the store inside)
                        # (named apart per output too: every output's shuffles come before the row's stores)
                        swap, four = exchange(f"{h}_{len(stores)}", first, tuple(values), "podd")
                        out += swap
                        stores.append(Store(f"out_{sym.name}", f"row_{h}", column(self.column(n, j - 1, 0), "podd"),
                                            four, dtype))
            out.append(If(f"ok_{h}", tuple(stores)))
        return ([Assign("podd", "t & 1")] if any(isinstance(st, Store) and st.width == 4 for st in walk(out)) else []) \
            + out + self.outputs_out()

    def paired(self, name: str, dtype: str) -> bool:
        """Whether the vector output ``name`` leaves four values a lane (:mod:`.pairs`, :data:`PAIRED_STORES`): in a
        16-bit type, from the fragments (not through shared memory, :meth:`store_pair`'s override)."""
        return bool(PAIRED_STORES) and dtype in PAIRED_TYPES and isinstance(
            self.store_pair(name, 8, 0, 0, ("0", "0"), dtype), Store)

    def store_pair(self, name: str, n: int, h: int, j: int, values: tuple, dtype: str):
        """The thread's two neighbouring components ``values`` of the ``n``-vector output ``name`` (its accumulator
        pair ``(h, j)``), one 8-byte store (4 bytes in a 16-bit type asked for: out_dtype; the vectors are multiples of
        8 components, so an even component on a row of an even length)."""
        return Store(f"out_{name}", f"row_{h}", self.column(n, j, 0), values, dtype)

    def outputs_out(self) -> list:
        """What follows the outputs' stores (nothing here: see :class:`~.wgmma.WgmmaKernel`)."""
        return []

    @property
    def lead(self) -> str:
        """The condition of the one thread of a row's quad (and of its column groups) that writes its scalars."""
        return "t == 0" if self.ncol == 1 else "(t == 0) and (cg == 0)"

    def column(self, n: int, j: int, b: int) -> str:
        """The component of an ``n``-vector that the thread's accumulator ``(j, b)`` holds."""
        return f"{8 * j + b} + 2 * t" if self.ncol == 1 else f"cg * {n // self.ncol} + {8 * j + b} + 2 * t"

    def kernel(self) -> list:
        head = [Assign("seg", "cuda.blockIdx.y")] if self.segmented else []
        head += [Call("cluster_check", ("nseg",))] if self.segmented and self.spec.cluster else []
        early = self.first_copies() if self.copies_first else []
        tail = (self.cluster_merge() if self.spec.cluster else self.parts()) if self.segmented else self.outputs()
        return head + self.setup() + early + self.params() + self.loop() + tail

    def kernels(self) -> list:
        """``(name, arguments, grid, body)`` of the module's kernels: one, or with segments those of
        :meth:`~.tile_segments.TileSegments.segment_kernels`."""
        from ..kernels import kernel_args

        args = kernel_args(self.c)
        if not self.segmented:
            return [("kernel", args, "rows", self.kernel())]
        return self.segment_kernels(args)


# -- registration ------------------------------------------------------------------------------------------
def build(fused: FusedCascade, spec: Spec, target: str, kernel=None, name: str = "mma"):
    """The module of ``kernel`` (a :class:`MmaKernel` class; this one by default) for ``target``."""
    from ..module import assemble

    if target == "cpu":
        raise RedalgebraError(f"the {name} strategy is CUDA-only (the tensor cores)")
    k = (kernel or MmaKernel)(fused, spec, target)
    c = fused.cascade
    outputs = tuple((o.name, "row", None if c.sizes[o.name] is None else k.lay.size_const(c.sizes[o.name]))
                    for o in c.outputs)
    kernels = k.kernels()
    src = assemble(fused, spec, target, name, kernels, k.consts, k.lay.constants, outputs,
                   {n: d for n, d in spec.out_dtypes if d != "float32"}, k.bounds())
    if k.segmented and spec.cluster:
        src = replace(src, entries=tuple((n, a, g) for n, a, g, _ in kernels))
    elif k.segmented:
        # every (row, segment) state is written by the partial kernel, an empty segment's as the identities: no
        # zero fill per call (three memsets for MLA)
        scratch = k.scratch()
        src = replace(src, scratch=scratch, written=tuple(name for name, *_ in scratch),
                      entries=tuple((n, a, g) for n, a, g, _ in kernels))
    return src


register(Strategy("mma", "cuda", "rows sharing their element vectors in tiles of 64 by 64: dot products and "
                  "vector sums on the tensor cores (mma.sync), cp.async staging, the derived update per tile",
                  build, configure, grid, rounds_products=True, vector_multiple=8))
