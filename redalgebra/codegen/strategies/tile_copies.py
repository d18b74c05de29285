"""How the tiles of the vector inputs reach shared memory in the tensor-core kernels (``mma``, ``wgmma``).

Each thread issues its share of a tile's 16-byte ``cp.async`` copies into a stage (zeros past the row's end, and in
a row's padding to a multiple of 16 components, :func:`~.products.staged`: copies of no bytes). Where
every copy of a tile is regular (the same column, a fixed number of elements apart), a tile inside the row is copied
from one address a thread and input with constant steps (immediate offsets); the places that do not change from tile
to tile are computed once, before the loop (:meth:`TileCopies.copy_setup`). The layout of a stage (padded rows for
``ldmatrix``, swizzled rows for ``wgmma``) is the kernel's: :meth:`TileCopies.stage_base`,
:meth:`TileCopies.stage_offset` and :meth:`TileCopies.stage_step` are overridden there.
"""

from __future__ import annotations

from ..tree import Assign, Call, For, If

#: A producer's whole-tile copies of an input: unrolled, this many at constant offsets from bases moved on through
#: ``fresh`` (:meth:`TileCopies.chained`). As a loop the compiler does not unroll (commit 25d1fb7 and before) they
#: cost 22 instructions a copy and LLaMA-65B prefill 14–20 % (``gpu/README.md``, 2026-12-04).
CHAIN = 4
#: Whether a row whose 16-byte chunks do not divide the copying threads (d = 80: 10 chunks, 128 threads) is copied as
#: if padded to the next count that does (:meth:`TileCopies.chunks`); False: the irregular copies (timing only).
PAD_CHUNKS = True


class TileCopies:
    """The copies of the vector inputs' tiles, mixed into :class:`~.mma.MmaKernel`, whose attributes it reads (``vin``,
    ``size``, ``width``, ``threads``, ``base``, ``pitch``)."""

    #: (threads, index) of a producer warpgroup making the copies (:class:`~.tile_producer.TileProducer`) while its
    #: statements are built; None: the block's threads (``tid``).
    producing: tuple | None = None

    @property
    def copiers(self) -> tuple[int, str]:
        """(the threads that copy a tile, the name of a thread's index among them)."""
        return self.producing or (self.threads, "tid")

    def landed(self) -> list:
        """What makes this thread's shared-memory writes readable by the products, before the block's barrier."""
        return []

    def stage_base(self, x: str, stage: str) -> str:
        """The 16-bit index of shared memory where stage ``stage`` of vector input ``x``'s tiles begins."""
        return f"{self.base[x]} + {stage} * {self.kt * self.pitch[x]}"

    def stage_offset(self, x: str, element: str, column: str) -> str:
        """... and how far from there component ``column`` (a multiple of 8) of its element ``element`` lies."""
        return f"{element} * {self.pitch[x]} + {column}"

    def copies(self, only: str | None = None):
        """``(x, u, guard)``: the thread's ``u``-th 16-byte copy of a tile of vector input ``x`` (``guard``: the test that
        it exists, for the last of a tile not a multiple of the block); ``only``: of that input alone."""
        for x in (only,) if only else self.vin:
            total = self.kt * self.chunks(x)
            n, tid = self.copiers
            for u in range(-(-total // n)):
                yield x, u, self.copy_test(x, None if (u + 1) * n <= total else f"{tid} + {u * n} < {total}")

    def chunks(self, x: str) -> int:
        """The 16-byte chunks of a row of ``x`` as its copies count them: the row's own, or where they do not divide
        the copying threads, the next count that does (the padding's copies never issued: :meth:`chunk_test`), so that each
        thread's copies of a tile are all of one column, a fixed number of rows apart (:meth:`regular`: unrolled from
        one address). d = 80 and 96 (10 and 12 chunks a row, 128 threads) copy as 16; irregular, each copy's place was
        held in registers (one warpgroup) or computed in a loop (a producer's, 22 instructions a copy)."""
        own, n = self.width[x] // 8, self.copiers[0]
        if not PAD_CHUNKS or n % own == 0:
            return own
        return next((c for c in range(own + 1, n + 1) if n % c == 0 and self.kt * c % n == 0), own)

    def copy_test(self, x: str, within: str | None) -> str | None:
        """The test that a copy of ``x`` exists: ``within`` (that it lies within the tile's copies) and
        :meth:`chunk_test`; None where there is none."""
        return " and ".join(t for t in (within, self.chunk_test(x)) if t) or None

    def chunk_test(self, x: str) -> str | None:
        """The test that this thread's copies of ``x`` are of the row's own chunks, not of the padding :meth:`chunks`
        counts (the same for all of them: the padded count divides the copying threads); None where there is none."""
        c, tid = self.chunks(x), self.copiers[1]
        return None if c == self.width[x] // 8 else f"8 * ({tid} % {c}) < {self.width[x]}"

    def padded(self, x: str) -> bool:
        """Whether vector ``x``'s rows (an input's, a param's) are staged wider than they are
        (:func:`~.products.staged`): a chunk of zeros a row, an input's copied as no bytes from the row's last chunk
        (:meth:`source_column`, :meth:`source_bytes`), a param's written as zeros."""
        return self.width[x] != self.size[x]

    def source_column(self, x: str, cc: str) -> str:
        """The first component a copy of ``x`` at staged component ``cc`` reads: ``cc``, but in the padding the row's
        last chunk (an address inside the row; the copy reads none of it)."""
        return f"min({cc}, {self.size[x] - 8})" if self.padded(x) else cc

    def source_bytes(self, x: str, cc: str) -> str:
        """The bytes a whole tile's copy of ``x`` at staged component ``cc`` reads: 16, none in the padding (zeros)."""
        return f"pick({cc} < {self.size[x]}, 16, 0)" if self.padded(x) else "16"

    def copy_setup(self) -> list:
        """What each copy needs that does not change from tile to tile, once. Where every input's copies are
        regular (:meth:`regular`), only their first places in a stage (``so_{x}_{v}``, one per period), global
        offset (``gb_{x}``) and, in a padded row (:meth:`padded`), bytes (``zs_{x}``): the copies of a partial tile
        compute theirs when issued, so that no per-copy value is live across the loop (MLA's 18 copies a thread would
        otherwise hold 54 registers). Else, for every copy, ``ce_{x}_{u}`` (its element of the tile), ``cc_{x}_{u}``
        (its first component), ``so_{x}_{u}`` (its place)."""
        out = []
        if all(self.regular(x) for x in self.vin):
            for x in self.vin:
                rows, _, period = self.regular(x)
                for v in range(period):
                    ce, cc = self.copy_place(x, v)
                    out.append(Assign(f"so_{x}_{v}", self.stage_offset(x, f"({ce})", f"({cc})")))
                ce, cc = self.copy_place(x, 0)
                out.append(Assign(f"gb_{x}", f"(rr_{x} * {x}.shape[1] + {ce}) * {self.size[x]} + "
                                             f"{self.source_column(x, f'({cc})')}"))
                if self.padded(x):
                    out.append(Assign(f"zs_{x}", self.source_bytes(x, f"({cc})")))
            return out
        for x, u, _ in self.copies():
            ce, cc = self.copy_place(x, u)
            at = f"{x}_{u}"
            out += [Assign(f"ce_{at}", ce), Assign(f"cc_{at}", cc),
                    Assign(f"so_{at}", self.stage_offset(x, f"ce_{at}", f"cc_{at}"))]
        return out

    def copy_place(self, x: str, u: int | str) -> tuple[str, str]:
        """The element of the tile and the first component of the thread's ``u``-th copy of ``x`` (text; ``u`` a number
        or the name of a loop's counter)."""
        per_row = self.chunks(x)
        n, tid = self.copiers
        at = f"{tid} + {u * n}" if isinstance(u, int) else f"{tid} + {u} * {n}"
        return f"({at}) // {per_row}", f"8 * (({at}) % {per_row})"

    def stage_step(self, x: str, rows: int) -> int | None:
        """How far (16-bit units) in a stage a copy ``rows`` elements after another lies, when that is the same for
        every copy (None: it is not)."""
        return rows * self.pitch[x]

    def regular(self, x: str) -> tuple[int, int, int] | None:
        """``(rows, step, period)`` when the thread's copies of a tile of ``x`` are all needed (but the padding's,
        :meth:`chunks`) and all of one column,
        ``rows`` elements apart, and copies ``period`` apart lie ``step`` units of a stage apart (then a full tile's
        copies are ``period`` places plus constants; a swizzled stage repeats every eight rows: 256 threads copying
        MLA's 64 chunks a row are four rows apart, a period of two)."""
        per_row = self.chunks(x)
        n = self.copiers[0]
        if n % per_row or (self.kt * per_row) % n:
            return None
        rows = n // per_row
        for period in (1, 2, 4, 8):
            if (self.kt // rows) % period == 0:
                step = self.stage_step(x, rows * period)
                if step is not None:
                    return rows, step, period
        return None

    def issue(self, tile: str, stage: str, loop: bool = False) -> list:
        """``cp.async`` copies of tile ``tile`` of every vector input into stage ``stage`` (zeros past the row's end).
        ``loop``: a producer warpgroup's (:mod:`.tile_producer`), in few registers: a partial tile's copies as a loop the
        compiler does not unroll (its count through ``fresh``), their places computed in it; a whole tile's chained
        (:meth:`chained`). Unrolled plainly, ptxas computed every copy's address first, and the producer needed about 150
        registers at tiles of 128 elements (with 88 it spilled 432 bytes; the hand-over leaves it 40)."""
        fast = all(r is not None for r in map(self.regular, self.vin))
        n, tid = self.copiers
        out = []
        for x in self.vin:
            if loop:  # (the places computed here, whether or not the copies are regular)
                total = self.kt * self.chunks(x)
                ce, cc = self.copy_place(x, "u")
                copy = self.copy_one(x, tile, stage, ce, cc, self.stage_offset(x, f"({ce})", f"({cc})"))
                test = self.copy_test(x, None if total % n == 0 else f"{tid} + u * {n} < {total}")
                body = [If(test, tuple(copy))] if test else copy
                out.append(For("u", "0", f"fresh({-(-total // n)})", tuple(body)))
                continue
            for _, u, guard in self.copies(x):
                if fast:  # (the places of a partial tile's copies computed here: see copy_setup)
                    ce, cc = self.copy_place(x, u)
                    at = self.stage_offset(x, f"({ce})", f"({cc})")
                else:
                    ce, cc, at = f"ce_{x}_{u}", f"cc_{x}_{u}", f"so_{x}_{u}"
                copy = self.copy_one(x, tile, stage, ce, cc, at)
                out += copy if guard is None else [If(guard, tuple(copy))]
        if not fast:
            return out
        # a tile inside the row: no clamp, no test (but the padding's), one address per input and constant steps (immediate offsets)
        full = []
        for x in self.vin:
            rows, step, period = self.regular(x)
            mine = [Assign(f"ga_{x}", f"gb_{x} + ({tile}) * {self.kt * self.size[x]}")]
            if loop:
                mine += self.chained(x, stage, rows, step, period)
            else:
                mine += [Call("cp_async16_at", ("sm", f"{self.stage_base(x, stage)} + so_{x}_{u % period} + {u // period * step}",
                                                x, f"ga_{x} + {u * rows * self.size[x]}", self.whole_bytes(x)))
                         for u in range(self.kt // rows)]
            live = self.chunk_test(x)
            full += [If(live, tuple(mine))] if live else mine
        return [If(f"({tile}) * {self.kt} + {self.kt} <= length", tuple(full), tuple(out))]

    def chained(self, x: str, stage: str, rows: int, step: int, period: int = 1) -> list:
        """A producer's copies of a whole tile of ``x``, unrolled: ``CHAIN`` copies (rounded up to a multiple of the
        ``period``) at constant offsets from bases (the places in the stage, one per copy of a period, and the element
        in ``x``), then the bases moved on through ``fresh``, so that ptxas neither computes every copy's address
        first (the registers the loop form saves) nor pays a loop's counter, branch and index products a copy (the
        loop form's). A period above 1: a row of more chunks than a warpgroup's threads over 8 (d = 256: copies 4
        rows apart, two swizzles) — taken by the per-copy loop before, 22 instructions a copy."""
        per, chain = rows * self.size[x], -(-CHAIN // period) * period
        sa = [f"gen_sa_{v}" if v else "gen_sa" for v in range(period)]
        out = [Assign(sa[v], f"{self.stage_base(x, stage)} + so_{x}_{v}") for v in range(period)]
        out.append(Assign("gen_ga", f"ga_{x}"))
        for u in range(self.kt // rows):
            k = u % chain
            if u and not k:
                out += [Assign(a, f"fresh({a} + {chain // period * step})") for a in sa]
                out.append(Assign("gen_ga", f"fresh(gen_ga + {chain * per})"))
            out.append(Call("cp_async16_at", ("sm", f"{sa[k % period]} + {k // period * step}", x,
                                              f"gen_ga + {k * per}", self.whole_bytes(x))))
        return out

    def whole_bytes(self, x: str) -> str:
        """The bytes each of the thread's copies of a whole tile of ``x`` reads (:meth:`copy_setup`'s ``zs_{x}``)."""
        return f"zs_{x}" if self.padded(x) else "16"

    def copy_one(self, x: str, tile: str, stage: str, ce: str, cc: str, at: str) -> list:
        """The copy of element ``ce`` (of tile ``tile``), components ``cc …`` of ``x`` to place ``at`` of stage
        ``stage``: zeros past the row's end (its source clamped to the row's last element) and in the row's padding
        (:meth:`padded`)."""
        size = f"pick(cl < length, {self.source_bytes(x, cc)}, 0)" if self.padded(x) else "pick(cl < length, 16, 0)"
        return [Assign("cl", f"({tile}) * {self.kt} + {ce}"),
                Call("cp_async16", ("sm", f"{self.stage_base(x, stage)} + {at}", x, f"(rr_{x}, min(cl, length - 1))",
                                    self.source_column(x, cc), size))]

    def take_copies(self) -> list:
        """The next tiles' copies (:meth:`~.mma.MmaKernel.loop`), once: where the tile issues them (its start, unless the products
        are asynchronous and the copies can follow them, :meth:`~.wgmma.WgmmaKernel.scores`)."""
        out, self.next_copies = self.next_copies, []
        return out

    next_copies: list = []

    #: Whether a gated tile (:meth:`~.mma.MmaKernel.loop`) issues the next tiles' copies itself, as an ungated one does, and a skipped
    #: one after :meth:`~.mma.MmaKernel.skipped`; else they are issued before the tile (see :class:`~.wgmma.WgmmaKernel`).
    copies_in_tile = False
