"""``columns_wgmma``'s factors computed in its product's tiles: no factors kernel (:attr:`Spec.tile_factors`).

Where the factor is a row scale times a part of
the elements alone, ``F = E(x, g, …) · S(scalar reductions, params)`` (RMSNorm's ``g · x`` and
``1 / sqrt(ss / h + eps)``: :func:`split_scale`, a SymPy ``as_independent`` on the reductions' symbols), and the scalar
reductions read the elements alone, ``Σ F w = S · Σ E w``, and no factors kernel is needed:

1. the blocks copy the activations ``x`` themselves (16-bit, rows on the 16-byte grid) by ``cp.async`` into the
   factor tile's place of each stage, in the same ring as the weights;
2. each warp reads its 16 rows of the tile into registers by ``ldmatrix``, in the layout of ``wgmma``'s A operand
   from registers (``mma.sync``'s A fragments: lane ``(g, t)`` holds rows ``g`` and ``g + 8``, elements ``2 t``,
   ``2 t + 1``, ``2 t + 8``, ``2 t + 9`` of each ``k16`` step), loads the elements' other inputs (RMSNorm's ``g``, a
   4-byte load a pair), folds each element into its row's states of the scalar reductions (any monoid with a binary
   op: a sum of squares, a max) and packs ``E`` in the weights' 16-bit type — while the previous tile's products run;
3. the products are ``wgmma_rs``: A from those registers, the weight tile from shared memory (FlashAttention 3's
   ``P · V``);
4. after the last tile the 4 lanes of a quad, which hold a row's elements between them, combine their states by two
   shuffles; the rows of a thread's fragments are the rows of its accumulators, so the epilogue scales its sums by
   ``S`` with no exchange through shared memory.

The activations are read once per column block, as the factors were; the factors' write and read (a 64 MB round trip
at RMSNorm M4096) and a kernel launch are gone. It takes one segment (``S`` needs the whole row) and no mask; the
weights are read as the plain product reads them (rows ``w[k, :]`` MN-major, ``wgmma_rs``; a ``Linear`` layer's rows
K-major, ``wgmma_rsk``; e4m3 ones widened to float16 first). Elsewhere (FP8's ``fp8(x · 448 / a)``, which does not
separate) the factors kernel stays.

**Rounding:** ``E`` is rounded once to 16 bits before the product and ``S`` applied to the float32 sums, where the
factors kernel rounds the whole factor ``E · S`` once: one rounding of each either way (2^-9 of a bfloat16 factor), at
a different place, so the outputs differ from the factors kernel's by about that much, not bit for bit.

**Off by default** (:data:`TILE_FACTORS`): slower. Measured on an H100 at RMSNorm M4096 K = N = 4096 (gpu/README.md,
2026-12-06), this product alone took 288–314 µs, the factors kernel and the plain product together 215–219 µs. Its
outputs were also wrong (inf) there, though right at K = 200 and in the simulator: each tile's fragments were written
while the previous tile's ``wgmma_rs`` still read the same registers (``wgmma_wait1``), which the PTX ISA leaves
undefined and the simulator's stand-in cannot see. Each tile now waits for the previous products (``wgmma_wait0``)
after its ``ldmatrix`` reads and before its fragments are written, and passes the words through ``wgmma_hold`` after
the wait, as the attention kernel does with its pending ``P · V`` (so that ptxas keeps their registers until then).
On the H200 that is right (against float64, within its bfloat16 outputs' rounding) and slower still: 299–300 µs against 188–189
µs for the plain product and 30–31 µs for the factors (the module 0.2130–0.2158 ms). The first form, ``E`` written
back to shared memory in place and both operands read from there, took 334–352 µs on the H200. What does pay at this
shape is to overlap the two kernels instead (:mod:`.chunks`).

:class:`TileFactors` is the kernel's part of it (a mixin of :class:`~.columns_wgmma.ColumnsWgmmaKernel`, which lays
out the ring and calls these pieces from its loop); :func:`choose` is the launch policy's.
"""

from __future__ import annotations

import sympy as sp

from ...derive import FusedCascade
from ...errors import RedalgebraError
from ..states import ScalarState, identity_text
from ..tree import Assign, Call, If, Load
from . import Problem
from .columns import split_body
from .products import KINDS
from .wgmma import ROW, WgmmaKernel

#: Elements of a staged tile (one 128-byte swizzled row of 16-bit values).
BK = ROW
#: Whether :func:`choose` computes the factors in the product's tiles where the cascade allows
#: (:attr:`Spec.tile_factors`); else the factors kernel always. Off: slower than the two kernels in both forms timed —
#: the factors made in shared memory in place, 334-352 us on the H200 at RMSNorm M4096 K = N = 4096 against 218-224 us
#: for the module; from registers, 288-314 us on an H100 against 215-219 us (and wrong at K = 4096 before the wait
#: that guards its registers), 299-300 us on the H200 with that wait, against 219 us (gpu/README.md). Read by
#: :func:`choose` only (the GPU scripts' hook).
TILE_FACTORS = False


def split_scale(fused: FusedCascade):
    """``(E, S)`` with the vector reduction's factor ``E * S``: ``E`` of the elements alone (no reduction's value), ``S``
    of the row's scalar reductions and scalar params alone (RMSNorm's ``g * x`` and ``1 / sqrt(ss / h + eps)``), where
    the scalar reductions read the elements alone (no reduction's value: each thread folds the elements it stages,
    and the threads' states meet at the end); None otherwise (an FP8 cast of ``x * 448 / a`` does not separate).
    Then ``Σ F w = S · Σ E w``: the product's blocks need no factors kernel (:attr:`Spec.tile_factors`)."""
    c = fused.cascade
    reds = {r.name for r in c.reductions}
    scal = [r for r in c.reductions if c.sizes[r.name] is None]
    vred = [r for r in c.reductions if c.sizes[r.name] is not None]
    if not scal or len(vred) != 1:
        return None
    if any(r.monoid.op is None or _names(fused.bodies[r.name]) & reds for r in scal):
        return None
    factor, _ = split_body(fused.bodies[vred[0].name], {s.name for s in c.inputs if s.size is not None})
    if factor is None:
        return None
    deps = [s for s in factor.free_symbols if s.name in reds]
    element, scale = factor.as_independent(*deps, as_Add=False)
    row = {r.name for r in scal} | {p.name for p in c.params if p.size is None}
    if _names(element) & reds or not _names(scale) <= row:
        return None
    return element, scale


def _names(expr) -> set:
    return {s.name for s in expr.free_symbols}


def staged_input(fused: FusedCascade, dtypes: dict, reps: dict) -> str | None:
    """The per-element input the product's blocks stage with ``cp.async`` under :attr:`Spec.tile_factors`: of the
    factor's row-free part, the one the fewest rows share (the activations, not RMSNorm's weight ``g``), if 16-bit
    (it is read into the A fragments 16 bits a value); None otherwise."""
    parts = split_scale(fused)
    if parts is None:
        return None
    names = element_names(fused, parts[0])
    ins = [s.name for s in fused.cascade.inputs if s.size is None and s.name in names]
    if not ins:
        return None
    x = min(ins, key=lambda n: reps.get(n, 1))
    return x if dtypes.get(x) in ("bfloat16", "float16") else None


def element_names(fused: FusedCascade, expr) -> set:
    """The names ``expr`` reads, through the per-element lets it reads (element atoms: no reduction in them)."""
    names = _names(expr)
    for sym, e in reversed(fused.prologue.steps):
        if sym.name in names:
            names |= _names(e)
    return names


def choose(fused: FusedCascade, p: Problem, nseg: int) -> str:
    """The input the product's blocks stage and turn into factors (:attr:`Spec.tile_factors`), or "" for the factors
    kernel: where the factor separates (:func:`split_scale`), the axis is one segment (the row's scale needs the
    whole row; few blocks split it), no mask, every row on the 16-byte grid (the activations copied 16 bytes at a
    time) and the elements' inputs of 2 or 4 bytes."""
    if not TILE_FACTORS or nseg > 1 or p.has_keep or not (p.vec_ok and p.pitch_ok):
        return ""
    dtypes = dict(p.dtypes)
    if any(dtypes.get(s.name, "float32") not in ("bfloat16", "float16", "float32")
           for s in fused.cascade.inputs if s.size is None):
        return ""
    return staged_input(fused, dtypes, dict(p.reps)) or ""


class TileFactors:
    """The pieces of the product's kernel under :attr:`Spec.tile_factors`: the activations' copies, their A fragments
    turned into factors in registers folding the scalar reductions, the states' meeting and the rows' scales."""

    def tile_factor_parts(self) -> None:
        """Under :attr:`Spec.tile_factors`: the factor's parts (``element``, ``scale``), the staged input, the other
        inputs the elements read (``loaded``) and the scalar params they read (``row_params``)."""
        parts, x = split_scale(self.f), self.spec.tile_factors
        if parts is None or x not in element_names(self.f, parts[0]) or \
                self.dtypes.get(x) not in ("bfloat16", "float16") or \
                self.spec.segments > 1 or self.spec.has_keep:
            raise RedalgebraError("columns_wgmma: the factors are computed in the product's tiles only for a factor that "
                                  "is a row scale times a part of the elements alone, 16-bit activations, one segment "
                                  "and no mask")
        self.element, self.scale = parts
        self.staged = x
        used = element_names(self.f, sp.Tuple(self.element, *(self.f.bodies[r] for r in self.scalar_reds)))
        self.lets = [(sym, expr) for sym, expr in self.f.prologue.steps if sym.name in used]  # (in their order)
        if x not in used:  # (the staged input read only through a let)
            raise RedalgebraError(f"columns_wgmma: the factors' elements do not read {x}")
        self.loaded = [s_ for s_ in self.sin if s_ in used and s_ != x]
        self.row_params = [p.name for p in self.c.params if p.size is None and p.name in used]
        self.monoids = {r.name: r.monoid for r in self.c.reductions}

    def fragment_rows(self) -> list:
        """The rows of the thread's A fragments (warp ``w``'s rows ``16 w + lg`` and ``+ 8`` of the tile, the rows of
        its accumulators too), clamped to the last row; the rows of the elements' other inputs and the scalar params
        there."""
        out = []
        for h in (0, 1):
            out.append(Assign(f"fr_{h}", f"min(r0 + 16 * warp + lg + {8 * h}, rows - 1)"))
            out += [Assign(f"rr_{s_}_{h}", f"int32(uint32(fr_{h}) // uint32(rep_{s_}))") for s_ in self.loaded]
            out += [Assign(f"p_{p}_{h}", f"{p}[fr_{h}]") for p in self.row_params]
        return out

    def x_copies(self, t: int | None, tid: str) -> list:
        """Under :attr:`Spec.tile_factors`, the activations' tile in the factor tile's place (``sd``, tile ``kt0``):
        whole chunks, or in the last tile the bytes inside the row and zeros (a chunk past the row's end copies
        nothing, from the tile's first element: a valid address)."""
        x, na = self.staged, self.chunks(t)[0]
        whole, partial = [], []
        for u in range(na):
            whole += self.guarded(u, self.bm * 8, Call("cp_async16_at", (
                "sm", f"sd + fd_{u}", x, f"fo_{u} + kt0", "16")), t=t, tid=tid)
            partial += self.guarded(u, self.bm * 8, Call("cp_async16_at", (
                "sm", f"sd + fd_{u}", x, f"fo_{u} + kt0 - pick(kt0 + 8 * ({tid} % 8) < hi, 0, 8 * ({tid} % 8))",
                f"2 * min(max(hi - kt0 - 8 * ({tid} % 8), 0), 8)")), t=t, tid=tid)
        return [If(f"kt0 + {BK} <= hi", tuple(whole), tuple(partial))]

    def fragment_places(self) -> list:
        """Where the thread's ``ldmatrix`` rows start in a stage, for each ``k16`` step (16-bit units; computed once):
        lane ``l`` gives row ``16 warp + (l & 15)`` of the tile, chunk ``2 s + (l >> 4)`` at its swizzled place."""
        return [Assign(f"axo_{s}", f"(16 * warp + (lane & 15)) * {ROW} + ((({2 * s} + (lane >> 4)) ^ (lane & 7)) << 3)")
                for s in range(BK // 16)]

    def fragments(self, tile: str, stage: str) -> list:
        """Tile ``tile``'s A fragments ``pa_<s>_<m>`` for ``wgmma_rs``, from its activations staged at ``stage``: each
        warp's 16 rows, ``k16`` step by step, by ``ldmatrix`` (word ``m`` of step ``s``: row ``lg + 8 (m & 1)``,
        elements ``16 s + 8 (m >> 1) + 2 tq`` and ``+ 1``); each element folded into its row's states of the scalar
        reductions (``s<h>_<r>``) and turned into the factor's row-free part ``E`` in the weights' 16-bit type, in
        registers. In the last tile, the elements past the row's end fold nothing and their factors are zeros."""
        out = [Assign("kt0", f"lo + ({tile}) * {BK}"), Assign("sx", f"sb + ({stage}) * {self.stage}")]
        steps = range(BK // 16)
        out += [Assign(", ".join(f"xw_{s}_{m}" for m in range(4)), f"ldsm_x4(sm, sx + axo_{s})") for s in steps]
        # the previous tile's products read the same A registers until they complete (the PTX ISA: touching a
        # wgmma's A registers before a wait_group that covers it is undefined): they are waited for here, after
        # this tile's shared-memory reads, before its fragments are written (one wait a tile, no wgmma_wait1), and
        # the words pass through wgmma_hold after the wait, so that no register is reused for another value (this
        # tile's shared-memory reads above) while they are read
        words = WgmmaKernel.tiles("pa", BK // 16)
        out += [Call("wgmma_wait0", ()), Assign(words, f"wgmma_hold({words})")]
        whole = [st for s in steps for m in range(4) for st in self.fragment_word(s, m, False)]
        tested = [st for s in steps for m in range(4) for st in self.fragment_word(s, m, True)]
        return out + [If(f"kt0 + {BK} <= hi", tuple(whole), tuple(tested))]

    def fragment_word(self, s: int, m: int, tested: bool) -> list:
        """Word ``m`` of step ``s``: its two elements' folds and factors, packed into ``pa_<s>_<m>``; the elements'
        other inputs loaded at the word's row (a row half's loads reused by the other where both rows read the same
        row of that input: a row shared by every row, as RMSNorm's ``g``)."""
        x, zero, h = self.staged, self.consts.name(0.0), m & 1
        unpack, pack = f"unpack_{KINDS[self.dtypes[x]]}x2", f"pack_{self.kind}x2"
        col = f"kt0 + {16 * s + 8 * (m >> 1)} + 2 * tq"
        out = [Assign("xv_0, xv_1", f"{unpack}(xw_{s}_{m})"), Assign("kc", col)]
        out += [Assign(f"p_{p}", f"p_{p}_{h}") for p in self.row_params]
        for s_ in self.loaded:
            dtype = self.dtypes.get(s_, "float32")
            names = [f"lv_{s_}_{s}_{m}_{c}" for c in (0, 1)]
            loads = tuple(Load((names[c],), s_, f"rr_{s_}_{h}", f"kc + {c}", dtype) for c in (0, 1))
            if tested:
                loads = tuple(If(f"kc + {c} < hi", (ld,), (Assign(names[c], zero),)) for c, ld in enumerate(loads))
            elif dtype in ("bfloat16", "float16"):  # (one 4-byte load: the rows on the 16-byte grid, kc even)
                loads = (Load(tuple(names), s_, f"rr_{s_}_{h}", "kc", dtype),)
            if h == 0:
                out += loads
            else:  # (the same row of the input as the word of the other half: its values)
                out.append(If(f"rr_{s_}_1 == rr_{s_}_0", tuple(Assign(n, f"lv_{s_}_{s}_{m - 1}_{c}")
                                                              for c, n in enumerate(names)), loads))
        acc = self.base()
        for c in (0, 1):
            acc.scalar["pos"], acc.scalar["element.index"] = f"float32(kc + {c})", f"kc + {c}"
            inside = [Assign(f"e_{x}", f"xv_{c}")] + [Assign(f"e_{s_}", f"lv_{s_}_{s}_{m}_{c}") for s_ in self.loaded]
            for sym, expr in self.lets:  # the element's lets, as the factors kernel computes them
                pre, text = self.print(expr, acc)
                inside += pre + [Assign(f"e_{sym.name}", text)]
            for r in self.scalar_reds:
                state = ScalarState(r, identity_text(self.f, r, self.consts))
                inside += state.fold(f"s{h}", self.monoids[r], self.f.bodies[r], acc, self.consts, self.counter,
                                     f"kc + {c}")
            pre, text = self.print(self.element, acc)
            inside += pre + [Assign(f"fv_{c}", text)]
            out += [If(f"kc + {c} < hi", tuple(inside), (Assign(f"fv_{c}", zero),))] if tested else inside
        return out + [Assign(f"pa_{s}_{m}", f"{pack}(fv_0, fv_1)")]

    def states_init(self) -> list:
        """Each row half's state of every scalar reduction at its identity, and the fragments' words (held at the first
        tile's wait: they exist before it)."""
        states = [Assign(f"s{h}_{r}", identity_text(self.f, r, self.consts)) for h in (0, 1) for r in self.scalar_reds]
        return states + [Assign(f"pa_{s}_{m}", "uint32(0)") for s in range(BK // 16) for m in range(4)]

    def states_meet(self) -> list:
        """The 4 lanes of a quad hold a row's elements between them (the fragments' layout): they combine their
        states by the monoid (shuffles across ``tq``), each left with the row's final values, which are the rows of its
        accumulators."""
        out = []
        for h in (0, 1):
            for r in self.scalar_reds:
                state = ScalarState(r, identity_text(self.f, r, self.consts))
                other = sp.Symbol("__other", extended_real=True)
                for off in (1, 2):
                    acc = self.lay.base_access()
                    acc.scalar[other.name] = f"o{h}_{r}"
                    out += state.shuffle(f"s{h}", f"o{h}", str(off))
                    out += state.fold(f"s{h}", self.monoids[r], other, acc, self.consts, self.counter, "-1")
        return out

    def row_scale(self, acc, row: str, h: int) -> list:
        """The row's scalar params and reductions (the thread's states of row half ``h``), and its scale ``rsc`` (the
        factor's part of the row alone)."""
        out = [Assign(f"p_{p.name}", f"{p.name}[{row}]") for p in self.c.params if p.size is None]
        for r in self.scalar_reds:
            acc.scalar[r] = f"s{h}_{r}"
        pre, text = self.print(self.scale, acc)
        return out + pre + [Assign("rsc", text)]
