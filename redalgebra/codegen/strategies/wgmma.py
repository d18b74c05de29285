"""``wgmma``: the ``mma`` kernel with its products on Hopper's warpgroup instructions (sm_90a).

Same cascades, same tiles, same derived update per tile as :mod:`.mma`; what changes is how the products are
computed. ``mma.sync`` takes every operand through the registers: each warp reads the whole key and value tile
from shared memory by ``ldmatrix`` (about 14 FLOP per byte of shared memory), which caps it near half the tensor
cores' rate. ``wgmma.mma_async`` reads its operands from shared memory itself, a 64-row tile per warpgroup (four
warps of 16 rows):

1. **Layout.** Tiles are staged in the 128-byte-swizzled layout the instruction reads: rows of 64 values (128
   bytes), the 16-byte chunk ``c`` of row ``r`` at chunk ``c ^ (r & 7)``, eight rows an atom of 1024 bytes; a
   vector longer than 64 components is blocks of 64 columns one after the other. ``cp.async`` writes each 16-byte
   chunk at its swizzled place; the params (queries) are written there by the threads. The layout starts on a
   1024-byte boundary of shared memory (``swizzle_pad``), as the swizzle is a function of the address.
2. **Scores** ``Q · Kᵀ``: ``wgmma_ss`` with both operands in shared memory, K-major (the query rows and the key
   rows, components contiguous), one instruction per 16 components, ``m64n64k16``: the 64 × 64 score tile of the
   warpgroup in float32 accumulators laid out as ``mma.sync``'s, n8 tile by n8 tile — so the per-element code
   and the derived update of :mod:`.mma` apply unchanged.
3. **Vector sums** ``P · V``: ``wgmma_rs`` with the factors in registers (the scores' accumulator layout is the A
   fragments' layout, as for ``mma.sync``) and the value tile in shared memory read *transposed* (MN-major: keys
   along K, components along N), one instruction per 16 keys, ``m64nDk16``.
4. **Order.** Shared-memory writes are made visible to the instruction's reads by ``fence.proxy.async`` before
   the block's barrier; ``wgmma.fence`` orders the registers' writes (the scaled accumulators, the factors) before
   the products; each chain of products is committed and waited for, and its accumulators passed through an
   empty instruction so that no use moves above the wait (a tile's ``P · V`` at d = 128: after the loop's next
   barrier, :attr:`WgmmaKernel.late_wait`).

5. **Wide vector sums** (MLA decode: 128 heads over one 512-wide latent row, key and value at once): a warpgroup's
   accumulators hold at most 128 columns comfortably, so two warpgroups share the block's 64 rows (``ncol`` column
   groups, 256 threads), each holding half the sums' columns. By default they take roles (:attr:`WgmmaKernel.handover`):
   the first computes each tile's scores at full width (``m64n64k16``) and its update, and hands the second the factor
   tile and the rows' corrections at a named barrier; each multiplies the factors by its half of the value columns
   (the first from its registers, ``wgmma_rs``; the second from the shared tile, ``wgmma_sst``). Otherwise (two vector
   sums, a gate, :data:`HANDOVER` 0) each computes the scores of its half of the tile's keys (``m64n32k16``), the
   groups exchange each scalar reduction's row partials through shared memory (combined in group order: both hold the
   same state, bit for bit), write their factors into one shared tile, and each multiplies the whole tile's factors
   by its half of the value columns (``wgmma_sst``: both operands from shared memory). Dot products summed in the
   cascade (``dot(qc, c) + dot(qr, kr)``) are one chain of accumulators. A param whose residual rows do not fit
   beside two stages of keys (MLA's 576-wide query) keeps only its 16-bit rows in shared memory; a block whose
   params are not exact in 16 bits adds the residual's product by ``mma.sync``, its A fragments computed from the
   param in global memory. Few rows (a decode step) split the axis into segments across blocks, merged by
   ``vrows``' combine kernel with the derived merge. In a block with a producer warpgroup (``threads=384``) a
   consumer warpgroup holds up to 256 columns whole instead (:data:`~.products.PRODUCER_COMPONENTS`, 128 float32 a
   thread with the producer's registers handed over): heads of 192 or 256 components, on tiles of 64 or 32 keys.

6. **Pipelined order** (:attr:`WgmmaKernel.pipelined`, FlashAttention-3's within a warpgroup): where a stage is to
   spare, a tile's ``P · V`` is issued after the next tile's scores and left in flight while the warpgroup waits for
   the scores (``wgmma_wait1``) and computes their update; the accumulators are scaled once it is done. (A block whose
   query is not exact in 16 bits waits for it with its residuals' products: correct, without the overlap.) Measured on
   the H200: 12–19 % faster at d = 64 (two runs, before and after); at d = 128 the stage does not fit beside the staged residuals of two blocks.

The simulator runs the same kernel with one warp (16 rows; whole warpgroups with column groups): the stand-ins of
the instructions compute each thread's accumulators from the descriptors, decoding the swizzled layout as the
hardware does. ``gpu/wgmma_check.py`` checks the layouts on exact integers, on the GPU and in the simulator.

Rounding is :mod:`.mma`'s: the factors enter ``P · V`` in the vector input's 16-bit type. The launch policy (blocks,
shared memory, stages, the policy's block for long rows, what a call takes) is :mod:`.wgmma_policy`.
"""

from __future__ import annotations

import functools

from ...derive import FusedCascade
from ...errors import RedalgebraError
from ..emit import Spec
from ..tree import Assign, Barrier, Call, For, If
from . import Strategy, register
from . import mma
from .mma import MmaKernel
from .products import MOST_COMPONENTS, PRODUCER_COMPONENTS, SHARED_LIMIT, column_groups, wide_refusal
from .tile_producer import TileProducer
# (the swizzled layout's constants are the policy's, which plans the shared memory; other kernels import them here)
from .wgmma_policy import ATOM, ROW, THREADS, _blocks, configure, grid, shared_plan

#: Outputs asked for in 16 bits leave through shared memory (:attr:`WgmmaKernel.staged_output`); 0 stores them from
#: the fragments (a timing setting: ``gpu/sweep.py``).
STAGE_OUTPUTS = 1
#: A block walking row tiles copies the next row tile's 16-bit params while its last products run
#: (:attr:`WgmmaKernel.params_ahead`); 0 loads them after the outputs are stored (a timing setting).
PARAMS_AHEAD = 1
#: Column groups taking roles (:attr:`WgmmaKernel.handover`): the first computes a tile's scores and update and hands the
#: second the factors and the rows' corrections; 0: each group the scores of its half of the keys, the two exchanging
#: their row partials (a timing setting: ``gpu/sweep.py``).
HANDOVER = 1
#: The named barrier at which the first group of :attr:`WgmmaKernel.handover` hands a tile over to the second.
HANDED = 1


class WgmmaKernel(TileProducer, MmaKernel):
    """Builds the statement tree of a ``wgmma`` kernel: :class:`~.mma.MmaKernel` with other products (and, asked for,
    a producer warpgroup: :class:`~.tile_producer.TileProducer`)."""

    def __init__(self, fused: FusedCascade, spec: Spec, target: str = "cuda"):
        super().__init__(fused, spec, target)
        if self.mt != 1:
            raise RedalgebraError("wgmma: 16 rows per warp (a warpgroup's 64-row tile is four warps of 16 rows)")
        sizes = dict(spec.sizes)
        names = {p.name for p in fused.cascade.params}
        #: vector params given in the products' 16-bit type (``float16``, ``bfloat16``): staged as they are
        self.param16 = {k: v for k, v in spec.dtypes if k in names and v != "float32"}
        # the params' residuals staged where the launch's shared memory (configure's plan) holds them
        plan = functools.partial(shared_plan, fused, sizes, self.bm, self.stages, groups=self.ncol, tile=self.kt)
        self.resid = plan(True)[-1] <= (spec.shared or SHARED_LIMIT)
        self.base, self.qtile, self.shared_bytes = plan(self.resid)
        self.check_producer()
        if self.handover:  # the first group computes the scores of the whole tile
            self.bn, self.key0 = self.kt, ""

    def check_widths(self) -> None:
        for x in self.vin:  # (any width: shared memory bounds them, the sums' columns are split)
            if self.size[x] % 8:
                raise RedalgebraError(f"wgmma: vectors of a multiple of 8 components; {x} has {self.size[x]}: use vrows")

    def column_groups(self) -> int:
        groups = column_groups([self.size[r.name] for r in self.c.reductions if self.c.sizes[r.name] is not None],
                               PRODUCER_COMPONENTS if self.producer else MOST_COMPONENTS)
        if groups is None:
            raise RedalgebraError(wide_refusal("wgmma"))
        return groups

    def setup(self, block: str | None = "cuda.blockIdx.x") -> list:
        out = super().setup(block) + [Assign("sb", "swizzle_pad(sm)")]
        if self.ncol > 1:  # the groups' row partials: float32 from ``xf`` on
            out += [Assign("smf", "cuda.shared.array(0, float32)"), Assign("xf", f"((sb + {self.base['X']}) >> 1)")]
        return out

    def access(self, *args, **kwargs):
        acc = super().access(*args, **kwargs)
        acc.div = "div_full"  # no subroutine call (an IEEE division's slow path) to serialize the wgmmas
        return acc

    def landed(self) -> list:
        return [Call("fence_async", ())]

    # -- the swizzled layout --------------------------------------------------------------------------------
    def stage_base(self, x: str, stage: str) -> str:
        return f"sb + {self.base[x]} + {stage} * {_blocks(self.width[x]) * self.kt * ROW}"

    def stage_offset(self, x: str, element: str, column: str) -> str:
        return f"({column} // {ROW}) * {self.kt * ROW} + {element} * {ROW} + (({column} & {ROW - 1}) ^ (({element} & 7) << 3))"

    def stage_step(self, x: str, rows: int) -> int | None:
        # rows apart by a multiple of 8: the same row within an atom, the same swizzle
        return rows * ROW if rows % 8 == 0 else None

    def params(self) -> list:
        """Every dot's param rows of the block into shared memory, as :meth:`~.mma.MmaKernel.params` (the 16-bit
        values, the residuals, ``split``), but read in 16-byte loads spread over the block's rows
        (:meth:`param_loads`, then :meth:`param_stores`). The operands are read by descriptors, so no thread needs its
        own rows. (The fragments' order, two 4-byte loads a pair of components, took 1–5 % more of prefill attention
        on the H200, measured with every consumer staging any of the block's rows: ``gpu/README.md``, 2026-12-04;
        :meth:`stagers` since.) A param given in the products' 16-bit type (:attr:`param16`) is loaded and written as
        it is: eight values a load, no rounding, no residual. Column groups (MLA's 576-wide query, staged once a block)
        too: in the fragments' order (two 4-byte loads a pair of components, a warp's load covering half of each
        32-byte sector it touches) the query's staging took 6–7 µs of MLA's partial kernel on an H100, all blocks
        loading it at once (``gpu/README.md``, 2026-12-06)."""
        return self.param_loads() + self.param_stores() + self.landed() + [Assign("split", "cuda.syncthreads_or(inexact)")]

    def param_chunks(self):
        """(the dot's index, its param, the param's 16-byte chunks a row, the chunk's row and column expressions, the
        load's index) of every load a thread makes: the stagers take the rows' four-component chunks in turn (a
        warp's 32 loads a contiguous 512 bytes), ``w / 8`` loads a thread (``w``: the staged width; 16 rows a warp of 32
        threads), a chunk of the row's padding read as zeros (:meth:`param_loads`). Where a
        row's chunks divide the stagers, a thread's chunks share one column, rows ``threads // chunks`` apart
        (``gen_qr0_{n}``, ``gen_qc_{n}``); else each load has its own (``gen_qr_{n}_{k}``, ``gen_qc_{n}_{k}``). And
        the chunk's guard: where the stagers do not divide the rows' chunks (column groups' 256 threads over 64 rows
        of a 16-bit param staged 16 wide mod 32: 2, 6, 10 … chunks a row), the last round's chunks past the rows
        (its row, clamped, is loaded, but not written), else None."""
        threads, rows, first, _ = self.stagers()
        for n, dot in enumerate(self.dot_list):
            p = self.param_of(dot)
            chunks = self.width[p] // (8 if p in self.param16 else 4)  # (as staged: multiples of 16)
            rounds = -(-rows * chunks // threads)
            for k in range(rounds):
                local = f"gen_qr0_{n} + {k * threads // chunks}" if threads % chunks == 0 else f"gen_qr_{n}_{k}"
                guard = f"{local} < {rows}" if (k + 1) * threads > rows * chunks else None
                column = f"gen_qc_{n}" if threads % chunks == 0 else f"gen_qc_{n}_{k}"
                yield n, p, chunks, f"{first}{local}", column, k, guard

    def stagers(self) -> tuple[int, int, str, str]:
        """(threads, rows, the first row's expression with a `` + ``, a thread's index among them) of a group of
        threads staging its rows of the params: the block's consumers, all rows; but in a block walking row tiles each
        warp its own 16 rows, the rows of its own accumulators. There a warpgroup stages the next row tile's rows while
        the other may still be reading this one's (nothing orders the two from one row tile's last products to the next
        row tile's vote): the rows it read itself are free once its own products are waited for. And a warp's rows
        hold its output on its way out (:meth:`outputs_out`) until the warp stages them again: no other warp
        writes them meanwhile."""
        if not self.walking:
            return self.threads, self.bm, "", "tid"
        return 32, 16, f"16 * {self.rw} + ", "lane"

    def param_loads(self, grp: str = "grp", rt: str = "rt", copy: bool = False) -> list:
        """Every load of the block's param rows into registers (``gen_qv_*``; rows past the group's clamped into it,
        as :meth:`~.mma.MmaKernel.row_tile`'s), all issued before any is used; with ``copy``, of row tile ``(grp,
        rt)``'s 16-bit params (:attr:`params_ahead`) straight to their staged place by ``cp.async``, committed."""
        out = []
        threads, _, _, tid = self.stagers()
        for n, p, chunks, r, c, k, guard in self.param_chunks():
            if threads % chunks == 0 and k == 0:
                out += [Assign(f"gen_qr0_{n}", f"uint32({tid}) // uint32({chunks})"),
                        Assign(c, f"{tid} - gen_qr0_{n} * {chunks}")]
            elif threads % chunks:
                out += [Assign(f"gen_qr_{n}_{k}", f"uint32({tid} + {k * threads}) // uint32({chunks})"),
                        Assign(c, f"{tid} + {k * threads} - gen_qr_{n}_{k} * {chunks}")]
            v = ", ".join(f"gen_qv_{n}_{k}_{i}" for i in range(4))
            end = "gend" if grp == "grp" else f"{grp} * grows + grows"  # (the group's end)
            row = f"min({grp} * grows + {rt} * {self.bm} + {r}, {end} - 1)"
            # a chunk in the row's padding (staged wider: products.staged) reads the row's last and is dropped
            step = 8 if p in self.param16 or copy else 4
            col, pad = f"{step} * {c}", self.padded(p)
            at = f"min({col}, {self.size[p] - step})" if pad else col
            if copy:
                size = f"pick({col} < {self.size[p]}, 16, 0)" if pad else "16"
                copied = Call("cp_async16_at", ("sm", self.staged_half(n, r, f"({r}) & 7", col), p,
                                                f"{row} * {self.size[p]} + {at}", size))
                out.append(copied if guard is None else If(guard, (copied,)))
                continue
            if p in self.param16:  # (four words of eight 16-bit values, as they are staged)
                out.append(Assign(v, f"ld_w4_at({p}, {row} * {self.size[p]} + {at})"))
            else:
                out.append(Assign(v, f"ld_f32x4({p}, {row}, {at})"))
            if pad:
                zero = "uint32(0)" if p in self.param16 else "float32(0)"
                out += [Assign(f"gen_qv_{n}_{k}_{i}", f"pick({col} < {self.size[p]}, gen_qv_{n}_{k}_{i}, {zero})")
                        for i in range(4)]
        return out + [Call("cp_commit", ())] * copy

    @property
    def params_ahead(self) -> bool:
        """Whether a block walking row tiles copies the next row tile's params into their staged rows by ``cp.async``
        as soon as its warps' last scores are waited for (:meth:`params_copied`): every param given in the products'
        16-bit type (nothing to round), and their rows not carrying an output (:attr:`staged_output`). The copies land
        while the last ``P · V`` runs and the outputs are stored; the next row tile only waits for them. Each warp
        copies its own 16 rows (:meth:`stagers`), read by its own warpgroup's scores only, all waited for by then."""
        return bool(PARAMS_AHEAD and self.walking and self.staged_output is None and self.exact16)

    @property
    def exact16(self) -> bool:
        """Whether every dot's param is given in the products' 16-bit type (:attr:`param16`): no residuals, nothing
        for ``split`` to vote on."""
        return bool(self.param16) and all(self.param_of(dot) in self.param16 for dot in self.dot_list)

    def params_copied(self, block: str) -> list:
        """Row tile ``block``'s param rows of the warp copied by ``cp.async`` (:attr:`params_ahead`), if it is one of the
        call's row tiles."""
        return [If(f"{block} < total", tuple(self.tile_place(block, "gen_ag", "gen_ar") +
                                             self.param_loads("gen_ag", "gen_ar", copy=True)))]

    def param_stores(self) -> list:
        """The loaded chunks (:meth:`param_loads`) rounded to two 16-bit words each, written at their swizzled place
        (and their residuals' where staged), and ``inexact``: whether any residual is not zero."""
        pack, unpack = f"pack_{self.kind}x2", f"unpack_{self.kind}x2"
        out = [Assign("inexact", "0")]
        for n, p, chunks, r, c, k, guard in self.param_chunks():
            if p in self.param16:  # given in the products' 16-bit type: its words as they are, no residual
                at = self.staged_half(n, r, f"({r}) & 7", f"8 * {c}")
                chunk = [Call("sts_w4", ("sm", at, *(f"gen_qv_{n}_{k}_{i}" for i in range(4))))]
            else:
                lo = _blocks(self.width[p]) * self.bm * ROW // 2  # (words from a value to its residual)
                # the chunk's first 32-bit word
                chunk = [Assign(f"gen_qa_{n}_{k}", f"(({self.staged_half(n, r, f'({r}) & 7', f'4 * {c}')}) >> 1)")]
                for w in range(2):
                    a, b = f"gen_qv_{n}_{k}_{2 * w}", f"gen_qv_{n}_{k}_{2 * w + 1}"
                    chunk += [Assign("qw", f"{pack}({a}, {b})"), Assign("u0, u1", f"{unpack}(qw)"),
                              Assign("d0", f"{a} - u0"), Assign("d1", f"{b} - u1"),
                              Assign("d0", "pick(d0 == d0, d0, float32(0))"),
                              Assign("d1", "pick(d1 == d1, d1, float32(0))"),
                              Assign("inexact", "pick(d0 != 0, 1, inexact)"),
                              Assign("inexact", "pick(d1 != 0, 1, inexact)"), Assign(f"smw[gen_qa_{n}_{k} + {w}]", "qw")]
                    if self.resid:
                        chunk.append(Assign(f"smw[gen_qa_{n}_{k} + {w + lo}]", f"{pack}(d0, d1)"))
            out += chunk if guard is None else [If(guard, tuple(chunk))]
        return out

    # -- outputs ----------------------------------------------------------------------------------------------
    @property
    def staged_output(self) -> str | None:
        """The vector output that leaves through shared memory, asked for in a 16-bit type (``out_dtype``): each warp
        writes its accumulators' pairs as words into its own rows of the first param's staged rows (free once its
        products are waited for, and wide enough: the output no wider than the param), then stores whole 16-byte
        chunks, a warp's 32 stores covering contiguous rows. From the fragments, a warp's 4-byte stores would cover
        half of each 32-byte sector they touch. One vector output only (two would share the rows); None otherwise.
        Only in a block walking row tiles: a block of a row tile (BERT's two warpgroups at d = 64) took 155 registers
        instead of 128 this way, one block a multiprocessor instead of two, and ran 19–27 % slower on the H200
        (``gpu/README.md``, 2026-12-04); it stores from the fragments. One warpgroup's column groups (MLA) and
        segments' states keep the fragments' stores too."""
        vectors = [o.name for o in self.c.outputs if self.c.sizes[o.name] is not None]
        if not STAGE_OUTPUTS or not self.walking or self.ncol > 1 or self.segmented or len(vectors) != 1 or \
                dict(self.spec.out_dtypes).get(vectors[0]) not in ("bfloat16", "float16") or \
                self.out_width(vectors[0]) > self.width[self.param_of(self.dot_list[0])]:
            return None
        return vectors[0]

    def out_width(self, name: str) -> int:
        return self.lay.constants[self.lay.size_const(self.c.sizes[name])]

    def staged_half(self, n: int, row: str, low: str, col: int | str) -> str:
        """The 16-bit index in ``sm`` of component ``col`` (a multiple of 8, or of 2 within a chunk; an int or an
        expression) of the block's row ``row`` (``low``: the row's value mod 8) in dot ``n``'s staged param rows:
        blocks of 64 components, the row's 16-byte chunks swizzled by the row."""
        at = self.qtile[n]
        if isinstance(col, int):
            return f"sb + {at + (col // ROW) * self.bm * ROW} + ({row}) * {ROW} + ({col % ROW} ^ (({low}) << 3))"
        return f"sb + {at} + (({col}) >> 6) * {self.bm * ROW} + ({row}) * {ROW} + ((({col}) & {ROW - 1}) ^ (({low}) << 3))"

    def store_pair(self, name: str, n: int, h: int, j: int, values: tuple, dtype: str):
        if name != self.staged_output:
            return super().store_pair(name, n, h, j, values, dtype)
        row = f"16 * {self.rw} + lg + {8 * h}"
        pack = "pack_bf16x2" if dtype == "bfloat16" else "pack_f16x2"
        # (a pair at the chunk's word t: the chunk 8 j // 8 of the row, swizzled; conflict-free, the 8 rows of a
        # warp's store at 8 different chunks)
        return Assign(f"smw[({self.staged_half(0, row, 'lg', 8 * j)} + 2 * t) >> 1]", f"{pack}({', '.join(values)})")

    def outputs_out(self) -> list:
        """The staged output (:attr:`staged_output`) from each warp's rows, a 16-byte chunk a lane at a time: a chunk
        ``c`` of row ``i`` of the warp's 16 is read and stored where the row is the group's."""
        name = self.staged_output
        if name is None:
            return []
        out, words = [Call("warp_sync", ())], "gen_ow_0, gen_ow_1, gen_ow_2, gen_ow_3"
        n = self.out_width(name)
        chunks = n // 8
        for k in range(-(-16 * chunks // 32)):  # (an odd count of chunks, d = 72: the last round's lanes in part)
            i, c = f"gen_oi_{k}", f"gen_oc_{k}"
            row = f"16 * {self.rw} + {i}"
            inside = "orow < gend" if 32 * (k + 1) <= 16 * chunks else f"orow < gend and lane < {16 * chunks - 32 * k}"
            out += [Assign(i, f"uint32(lane + {32 * k}) // uint32({chunks})"),
                    Assign(c, f"lane + {32 * k} - {i} * {chunks}"),
                    Assign("orow", f"grp * grows + rt * {self.bm} + {row}"),
                    If(inside, (Assign(words, f"lds_w4(sm, {self.staged_half(0, row, f'({i} & 7)', f'8 * {c}')})"),
                                Call("st_w4_at", (f"out_{name}", f"orow * {n} + 8 * {c}", words))))]
        return out + [Call("warp_sync", ())]  # (every lane's reads done before any lane writes the rows again)

    # -- products -------------------------------------------------------------------------------------------
    @staticmethod
    def tiles(prefix: str, count: int) -> str:
        """The accumulators ``{prefix}_{j}_{i}`` as the instructions take them: ``count`` n8 tiles of 4."""
        return "(" + " ".join("(" + ", ".join(f"{prefix}_{j}_{i}" for i in range(4)) + ")," for j in range(count)) + ")"

    def wait(self, acc: str) -> list:
        return [Call("wgmma_commit", ()), Call("wgmma_wait0", ()), Assign(acc, f"wgmma_hold({acc})")]

    def scores(self, after=None) -> list:
        """``sc_{n}_0_{j}_{i}``: the tile's dot products, a warpgroup's 64 rows by ``wgmma_ss`` per 16 components.
        ``after`` (pipelined, :meth:`tile`): the products are committed, then ``after`` is issued (the previous
        tile's ``P · V``), then the scores are waited for while it stays in flight."""
        out = []
        for g, group in enumerate(self.sums):
            acc = self.tiles(f"sc_{g}_0", self.bn // 8)

            def chain(value, n, desc, first):
                # one assignment of the nested products: each reassignment of 32 names would cost numba's SSA pass;
                # each operand's descriptor is its tile's plus the step's offset (16-byte units of the address field)
                p, x = self.param_of(self.dot_list[n]), self.input_of(self.dot_list[n])
                for ks in range(self.width[p] // 16):
                    a = ((ks // 4) * self.bm * ROW + (ks % 4) * 16) // 8
                    b = ((ks // 4) * self.kt * ROW + (ks % 4) * 16) // 8
                    value = (f"wgmma_ss_{self.kind}({value}, {desc} + {a}, dk_{x} + {b}, "
                             f"{0 if first and ks == 0 else 1})")
                return value
            inputs = dict.fromkeys(self.input_of(self.dot_list[n]) for n in group)
            own = "" if self.bn == self.kt else f" + cg * {self.bn * ROW}"  # the group's elements: rows of the tile
            out += [Assign(f"dk_{x}", f"wgmma_desc(sm, xb_{x}{own}, 16, {ATOM})") for x in inputs]
            value = acc
            for n in group:  # (the group's products summed: one chain, the first product's scale 0)
                value = chain(value, n, f"dq_{n}", n == group[0])
            if self.late_wait and g == 0:
                # the previous tile's products done before these scores, and so before the copies that take its
                # stage. Waited for with these scores instead, by a wait for the older group and one for the newer,
                # ptxas serializes every product of the kernel
                out += self.finish_pending()
            if g == 0:  # (with a producer warpgroup: this warpgroup's turn to issue products, TileProducer)
                out += self.turn_take()
            # the next tiles' copies issued while the first products run (their address arithmetic and the
            # load queue's throttling off the products' path)
            out += [Call("wgmma_fence", ()), Assign(acc, value), Call("wgmma_commit", ())]
            if after is None or g < len(self.sums) - 1:
                out += self.take_copies() + [Call("wgmma_wait0", ()), Assign(acc, f"wgmma_hold({acc})")]
            else:  # every group's scores committed, then the products left in flight: all but those waited for
                out += self.take_copies()
                give = self.turn_give()
                # (with turns, the turn handed on once both products are issued, before the waits)
                out += [If("pp", tuple(after + give) + (Call("wgmma_wait1", ()),),
                           tuple(give) + (Call("wgmma_wait0", ()),))]
                out.append(Assign(acc, f"wgmma_hold({acc})"))
            # the residuals' products where split votes for them: only of params not given in the 16-bit type (one
            # given so has no residual, and none staged)
            wide = [n for n in group if self.param_of(self.dot_list[n]) not in self.param16]
            if not wide:
                continue
            if self.resid:
                value = acc
                for n in wide:
                    value = chain(value, n, f"dl_{n}", False)
                late = [Call("wgmma_fence", ()), Assign(acc, value)] + self.wait(acc)
            else:
                late = [s for n in wide for s in self.residual_products(g, n)]
            out.append(If("split", tuple(late)))
        return out

    def residual_products(self, g: int, n: int) -> list:
        """``sc_{g} += lo(p) · xᵀ`` for dot ``n`` of ``p`` and ``x`` when the residuals do not fit in shared memory (a wide param, as MLA's 576-wide
        query): by ``mma.sync``, each warp its 16 rows, the A fragments computed from the param in global memory
        and the B fragments read from the swizzled stage by ``ldmatrix`` — slower than the staged form, taken only
        by a block whose params are not exact in the 16-bit type."""
        pack = f"pack_{self.kind}x2"
        p, x = self.param_of(self.dot_list[n]), self.input_of(self.dot_list[n])
        body = []
        for r in range(4):
            body += self.param_pair(p, r & 1, f"16 * ks + {8 * (r >> 1)} + 2 * t", past_row=True)
            body.append(Assign(f"fa_0_{r}", f"{pack}(d0, d1)"))
        for jp in range(self.bn // 16):
            at = self.stage_offset(x, f"({16 * jp}{self.key0} + krow)", "(16 * ks + kcol)")
            body += self.products(f"ldsm_x4(sm, xb_{x} + {at})", 2 * jp, f"sc_{g}", "fa")
        return [For("ks", "0", str(self.width[p] // 16), tuple(body))]

    def descriptors(self) -> list:
        """``dq_{n}``, ``dl_{n}``: the descriptors of dot ``n``'s param tile of the warpgroup (values, residuals),
        the same for every tile."""
        out = []
        for n, dot in enumerate(self.dot_list):
            p = self.param_of(dot)
            lo = self.qtile[n] + _blocks(self.width[p]) * self.bm * ROW
            # the warpgroup's 64 rows (with column groups, every warpgroup the block's 64)
            group = f" + {ROW * ROW} * uniform(int32(warp // 4))" if self.ncol == 1 else ""
            for name, at in ((f"dq_{n}", self.qtile[n]), (f"dl_{n}", lo))[:1 + self.resid]:
                out.append(Assign(name, f"wgmma_desc(sm, sb + {at}{group}, 16, {ATOM})"))
        return out

    def loop(self) -> list:
        return self.prelude() + super().loop() + self.states_handed()

    def prelude(self) -> list:
        """What the tiles' loop needs first: the scores' accumulators, which exist before the first tile (each tile's
        first product ignores them: scale 0), the pending products' flag and words, the params' descriptors."""
        zero = self.consts.name(0.0)
        out = [Assign(f"sc_{g}_0_{j}_{i}", zero) for g in range(len(self.sums)) for _, j, i in self.slots()]
        if self.pipelined:  # no products pending; the factor words exist before the first tile packs them
            out += [Assign("pp", "0"), Assign("sp", "uint32(0)")]
            out += [Assign(f"pa_{r.name}_{kk}_{i}", "uint32(0)") for r in self.vred for kk in range(self.kt // 16)
                    for i in range(4)]
        if self.late_wait and self.vred:  # the words a pending product reads, held at the next tile's wait
            out += [Assign(f"pa_{kk}_{i}", "uint32(0)") for kk in range(self.kt // 16) for i in range(4)]
        return out + self.descriptors()

    # -- column groups, the tile handed over -----------------------------------------------------------------------
    @property
    def handover(self) -> bool:
        """Whether the two column groups take roles (:data:`HANDOVER`): the first computes each tile's scores at the
        tile's full width (``m64n64k16``) and its whole update — no row partials exchanged — and hands the second the
        factors (the shared factor tile) and each row's correction of the vector sum at a named barrier; each then
        multiplies the factors by its half of the value columns (the first from its registers, ``wgmma_rs``; the second
        from the tile, ``wgmma_sst``). Split in halves, each group's scores read the whole query for half the keys
        (1.5 times the shared-memory bytes of one ``m64n64`` chain; by a count at the tensor cores' peak, not measured
        apart, more than shared memory serves a cycle), and the groups met at three block barriers a tile. One vector
        sum (one factor tile), at least one scalar reduction (the states handed over at the end,
        :meth:`states_handed`), tiles of 64 elements (the factor tile's rows), no gate."""
        return bool(HANDOVER) and self.ncol == 2 and self.kt == ROW and self.gate is None and len(self.vred) == 1 \
            and bool(self.scal) and not self.producer

    def handover_tile(self) -> list:
        """A tile handed over (:attr:`handover`): the first group its scores (with the next tiles' copies issued while they
        run), its update, the hand-over (:meth:`hand_over`) and its half of ``P · V``; the second its share of the
        copies, then, at the hand-over, the rows' corrections and its half of ``P · V``."""
        copies = list(self.next_copies)  # (each group issues its threads' share)
        r = self.vred[0]
        x, dv = self.factors[r.name][1], self.cols(r)
        acc = self.tiles(f"o_{r.name}_0", dv // 8)
        scores = self.scores()  # (they issue the first group's copies, where the tile has products of scores)
        lead = self.take_copies() + scores + [If("gen_wh", tuple(self.updates(True)), tuple(self.updates(False)))]
        lead += self.hand_over(r) + self.value_products([r], lambda r_: "pa", lambda x_: f"xb_{x_}") + self.wait(acc)
        lead += self.advance()
        other = copies + [Call("bar_sync", (str(HANDED), str(self.threads)))]
        if self.f.analysis[r.name].deps:  # the rows' corrections, as the first group scaled its half
            for h in self.rows:
                other += [Assign(f"cf_{h}", self.row_slot(0, h))] + self.scaled(r, h, f"cf_{h}")
        other += self.shared_products(r, x, dv)
        out = [Assign(f"xb_{v}", self.stage_base(v, "st")) for v in self.vin] + self.tile_start()
        return out + [If("cg == 0", tuple(lead), tuple(other))]

    def hand_over(self, r) -> list:
        """The first group's hand-over of a tile: its factors into the shared factor tile (the words it multiplies
        itself), each row's correction of the vector sum (``cf_{h}``, by the row's first lane), then its arrival at the
        named barrier the second group waits at. The second group reads the factor tile with its products (the async
        proxy: the fence first). The tile before's factors and corrections were read by then: the second group waited
        for its products before the loop's block barrier."""
        out = []
        for kk in range(self.kt // 16):
            out += self.factor_words(r, kk, 0, f"pa_{kk}") + self.factor_stores(kk, f"{16 * kk}")
        if self.f.analysis[r.name].deps:
            out.append(If("t == 0", tuple(Assign(self.row_slot(0, h), f"cf_{h}") for h in self.rows)))
        return out + [Call("fence_async", ()), Call("bar_arrive", (str(HANDED), str(self.threads)))]

    def states_handed(self) -> list:
        """Handing over, after the last tile: the first group's states of the scalar reductions, which the second reads for
        the outputs (its own were never updated), through shared memory past the corrections' slots."""
        if not self.handover:
            return []
        write = [Assign(self.row_slot(k + 1, h), f"s_{q.name}_{h}") for k, q in enumerate(self.scal) for h in self.rows]
        read = [Assign(f"s_{q.name}_{h}", self.row_slot(k + 1, h)) for k, q in enumerate(self.scal) for h in self.rows]
        return [If("(cg == 0) and (t == 0)", tuple(write)), Barrier(), If("cg != 0", tuple(read))]

    def row_slot(self, k: int, h: int) -> str:
        """The float32 of the thread's row ``h`` in the ``k``-th row-wide slot of the groups' exchange area (``xf``):
        handing over, slot 0 holds the rows' corrections and slot ``1 + n`` scalar reduction ``n``'s final state (the
        area holds two slots a scalar reduction, :func:`~.wgmma_policy.shared_plan`)."""
        return f"smf[xf + {self.bm * k} + 16 * rw + lg + {8 * h}]"

    # -- the pipelined order (FlashAttention-3's within a warpgroup) -----------------------------------------
    @property
    def pipelined(self) -> bool:
        """Whether a tile's ``P · V`` is left in flight into the next tile: issued after the next tile's scores, it
        runs on the tensor cores while the warpgroup computes that tile's softmax-like update on the CUDA cores.
        One warpgroup per row tile (its factors in registers), and a stage for the tile whose values are still
        read besides the one computed and one loading at least."""
        return self.ncol == 1 and self.stages >= 3

    @property
    def ahead(self) -> int:
        # pipelined, the previous tile's values are read while this tile's scores are: one stage fewer loading
        return self.stages - 1 - self.pipelined

    def tile(self) -> list:
        """Pipelined: the scores of this tile, then the previous tile's ``P · V`` (pending: ``pp``, its stage ``sp``),
        the update while it runs, its accumulators scaled once it is done, and this tile's factors packed for the next
        tile. The accumulators see the same operations in the same order as unpipelined: ``o ⊗ c`` of a tile is
        applied after the previous tile's products are added and before its own."""
        if self.handover:
            return self.handover_tile()
        if not self.pipelined:
            return super().tile()
        scores = self.scores(after=self.pending())
        out = self.take_copies() + [Assign(f"xb_{x}", self.stage_base(x, "st")) for x in self.vin]
        out += self.tile_start() + scores
        self.scaling = {}
        out.append(If("gen_wh", tuple(self.updates(True)), tuple(self.updates(False))))
        scaling, self.scaling = self.scaling, None
        out += self.finish_pending() + self.release() + [st for key in sorted(scaling) for st in scaling[key]]
        for r in self.vred:
            for kk in range(self.kt // 16):
                out += self.factor_words(r, kk, 0, f"pa_{r.name}_{kk}")
        out += [Assign("sp", "st"), Assign("pp", "1")]
        return out + self.advance()

    def pending(self) -> list:
        """The pending tile's ``o_r += P · V`` issued and committed (its values in stage ``sp``), not waited for."""
        return self.value_products(self.vred, lambda r: f"pa_{r.name}", lambda x: self.stage_base(x, "sp")) + \
            [Call("wgmma_commit", ())]

    def finish_pending(self) -> list:
        """Every product done: the accumulators, and the factor words the pending products read (kept in their
        registers until then), through ``wgmma_hold`` after the wait (no use moves above it). The words are each
        sum's own pipelined (``pa_{r}``), the tile's (``pa``) with the late wait."""
        out = [Call("wgmma_wait0", ())]
        for r in self.vred:
            acc = self.tiles(f"o_{r.name}_0", self.cols(r) // 8)
            out.append(Assign(acc, f"wgmma_hold({acc})"))
        for name in dict.fromkeys(f"pa_{r.name}" if self.pipelined else "pa" for r in self.vred):
            words = self.tiles(name, self.kt // 16)
            out.append(Assign(words, f"wgmma_hold({words})"))
        return out

    def skipped(self) -> list:
        # the pending products finished here: the next live tile's copies may go to their stage (with a tile skipped
        # between, the pending stage is no longer the previous tile's)
        if self.late_wait:
            return self.finish_pending()
        if not self.pipelined:
            return []
        return [If("pp", tuple(self.pending() + self.finish_pending() + [Assign("pp", "0")]))]

    def drain(self) -> list:
        return self.skipped()

    # -- the deferred wait (one stage short of the pipelined order) -------------------------------------------
    @property
    def late_wait(self) -> bool:
        """Whether a tile's ``P · V`` is left in flight past the loop's barrier, waited for after it, before the next
        tile's scores (:meth:`scores`; a skipped tile's copies, :meth:`skipped`), and so before the copies that take its
        stage (issued while those scores run, with a gate too: :attr:`copies_in_tile`). The products run while the
        warpgroup waits for its copies and meets at the barrier. One warpgroup a block (its wait is the block's),
        where the pipelined order has no stage to spare (d = 128)."""
        return self.ncol == 1 and not self.pipelined and self.threads <= THREADS

    @property
    def copies_in_tile(self) -> bool:
        return self.late_wait

    def sum_products(self, r, x: str, dv: int) -> list:
        """``o_r += P · V`` for the tile, waited for (with column groups, :meth:`shared_sum_products`); with the
        deferred wait (:attr:`late_wait`) only committed."""
        if self.ncol > 1:
            return self.shared_sum_products(r, x, dv)
        out = [s for kk in range(self.kt // 16) for s in self.factor_words(r, kk, 0, f"pa_{kk}")]
        out += self.value_products([r], lambda r_: "pa", lambda x_: f"xb_{x_}")
        if self.late_wait:
            return out + [Call("wgmma_commit", ())]
        return out + self.wait(self.tiles(f"o_{r.name}_0", dv // 8))

    def value_products(self, sums, words, stage) -> list:
        """``o_r += P · V`` issued for each vector sum ``r`` of ``sums``: the factors as A fragments in registers (the
        words ``{words(r)}_{kk}_{i}``), the value tile read transposed from ``stage(x)`` by ``wgmma_rs`` per 16 keys
        (components in blocks of 64 values a tile's ``kt`` rows apart). The accumulators and the words pass through
        ``wgmma_hold`` before the fence, so that their writes (the scaling, the packing) stay before it."""
        out, chains = [], []
        for r in sums:
            x, dv = self.factors[r.name][1], self.cols(r)
            acc, held = self.tiles(f"o_{r.name}_0", dv // 8), self.tiles(words(r), self.kt // 16)
            out += [Assign(f"dv_{x}", f"wgmma_desc(sm, {stage(x)}, {self.kt * ROW * 2}, {ATOM})"),
                    Assign(acc, f"wgmma_hold({acc})"), Assign(held, f"wgmma_hold({held})")]
            value = acc
            for kk in range(self.kt // 16):
                fragment = ", ".join(f"{words(r)}_{kk}_{i}" for i in range(4))
                value = f"wgmma_rs_{self.kind}({value}, {fragment}, dv_{x} + {16 * kk * ROW // 8})"
            chains.append(Assign(acc, value))
        return out + [Call("wgmma_fence", ())] + chains

    def shared_sum_products(self, r, x: str, dv: int) -> list:
        """With column groups: each group writes its factors (its elements of the tile, rounded to the vector's
        16-bit type) into the shared factor tile (K-major, swizzled: the A operand), the block meets, and each group
        multiplies the whole tile's factors by its ``dv`` columns of the value tile (:meth:`shared_products`)."""
        # one factor tile for every vector sum: after the first, the block meets before it is rewritten (the other
        # group's products of the previous sum may still read it)
        out = [] if r is self.vred[0] else [Barrier()]
        for kk in range(self.bn // 16):
            out += self.factor_words(r, kk, 0, f"pa_{kk}") + self.factor_stores(kk, f"{self.bn} * cg + {16 * kk}")
        out += [Call("fence_async", ()), Barrier()]
        if r is self.vred[0]:  # a scalar reduction's exchange deferred to this barrier (TileUpdate.deferrable)
            out += self.deferred
        return out + self.shared_products(r, x, dv)

    def factor_stores(self, kk: int, key: str) -> list:
        """The words ``pa_{kk}_{w}`` of the thread's factors (16 keys from ``key``) into the shared factor tile."""
        out = []
        for w in range(4):
            at = (f"((sb + {self.base['P']} + (16 * rw + lg + {8 * (w & 1)}) * {ROW} + "
                  f"(({key} + {8 * (w >> 1)} + 2 * t) ^ (lg << 3))) >> 1)")
            out.append(Assign(f"smw[{at}]", f"pa_{kk}_{w}"))
        return out

    def shared_products(self, r, x: str, dv: int) -> list:
        """``o_r += P · V`` of the group's ``dv`` columns, the factors read from the shared factor tile (``wgmma_sst``:
        both operands from shared memory, the values transposed), waited for."""
        acc = self.tiles(f"o_{r.name}_0", dv // 8)
        value = acc
        for kk in range(self.kt // 16):
            value = f"wgmma_sst_{self.kind}({value}, dp + {2 * kk}, dv_{x} + {16 * kk * ROW // 8}, 1)"
        start = f"xb_{x} + cg * {dv // ROW * self.kt * ROW}"
        return [Assign("dp", f"wgmma_desc(sm, sb + {self.base['P']}, 16, {ATOM})"),
                Assign(f"dv_{x}", f"wgmma_desc(sm, {start}, {self.kt * ROW * 2}, {ATOM})"),
                Assign(acc, f"wgmma_hold({acc})"), Call("wgmma_fence", ()), Assign(acc, value)] + self.wait(acc)


register(Strategy("wgmma", "cuda", "mma's tiles on Hopper's warpgroup instructions (sm_90a): operands from "
                  "128-byte-swizzled shared memory by descriptors, P·V with the factors in registers; vector sums up "
                  "to 128 wide a warpgroup, 256 with a producer warpgroup, 512 in column groups",
                  functools.partial(mma.build, kernel=WgmmaKernel, name="wgmma"), configure, grid,
                  rounds_products=True, vector_multiple=8, cc=(9, 0, "a"), walking=("rows",), params16=True))
