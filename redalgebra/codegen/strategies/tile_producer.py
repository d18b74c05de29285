"""``wgmma``'s block warp-specialized: a producer warpgroup and two consumer warpgroups taking turns (FlashAttention-3's
schedule, derived for any cascade ``wgmma`` builds).

With one warpgroup a block, a tile is a chain: the scores on the tensor cores, the derived update on the CUDA cores,
then ``P · V`` — each unit idle while the other works, two blocks a multiprocessor overlapping only as they drift.
Asked for with a block of three warpgroups (``threads=384``; three warps in the simulator), the block takes 128 rows
and splits its warps by role:

- **The producer warpgroup** makes every ``cp.async`` copy of the vector inputs' tiles into a ring of ``stages``
  stages. It copies tile ``t`` into stage ``t % S`` once both consumer warpgroups have released tile ``t - S`` (an
  "empty" barrier a stage), keeps :meth:`TileProducer.in_flight` tiles' copies in flight, and signals each landed
  tile to each consumer warpgroup (a "full" barrier a stage and warpgroup: ``cp_wait``, the proxy fence,
  ``bar_arrive``).
- **Two consumer warpgroups** of 64 rows each take every tile in the pipelined order (:attr:`WgmmaKernel.pipelined`:
  a tile's ``P · V`` is issued after the next tile's scores and runs while the update is computed). They issue their
  products in turns (a turn barrier each): a warpgroup waits for its turn, issues the tile's scores and the pending
  ``P · V``, hands the turn on, then waits for its scores and computes the update, so that one warpgroup's products
  run on the tensor cores while the other's update runs on the CUDA cores. A stage is released once the products
  reading it are complete (the pending ``P · V``: the stage of the tile before).

Measured on the H200 (LLaMA-65B d128, ``gpu/README.md``): with the producer's copies as a loop, not faster than one
warpgroup a block (0.3606–0.3790 ms against 0.3579 at L2048): the producer issued 22 instructions a copy, 32 % of the
block's, and the consumers waited at the "full" barriers. With its whole tiles' copies unrolled from bases moved on
every few copies (:meth:`~.tile_copies.TileCopies.chained`), tiles of 128: 0.294–0.297 ms against 0.346–0.347 at
L2048, 1.02–1.04 against 1.26–1.29 ms at L4096, so it is the policy's block for long rows of 128 components
(:func:`~.wgmma_policy.with_defaults`); a causal mask's, a row tile a block, was slower than one warpgroup (0.229 against
0.220 ms).

**Walking row tiles** (:attr:`TileProducer.walking`, ``Spec.persistent``; by default in one segment and, under a
gate, with at most three stages, :data:`PERSISTENT`): as many blocks as multiprocessors, each taking row tiles
``blockIdx.x``, ``+ gridDim.x``, …, its ring counted across them, so that the producer copies the next row tile's
first tiles while the consumers store this one's outputs and stage its query, and the block's prologue is paid once
a multiprocessor instead of once a row tile (one block fits a multiprocessor: nothing else hid it). The consumers
vote on their query's residuals at a named barrier of their own (:data:`VOTE`, ``bar_red_or``); under a gate true on
a prefix of the row each role counts its tiles itself (:meth:`TileProducer.walking_kernel`). Measured on the H200
(one process, two rounds): LLaMA-65B L2048 0.2843/0.2873 ms against 0.2961/0.2946 a block a row tile (float16),
0.2831/0.2851 against 0.2914/0.2939 (bfloat16); L4096 1.0169/1.0198 against 1.0237/1.0257; causal L2048
0.2201/0.2199 against 0.2247/0.2238 for one warpgroup a block, L4096 0.6792/0.6803 against 0.7629/0.7623.

**Under a causal mask** (a gate true on a prefix of the row), walking blocks take row tiles **in pairs**
(:attr:`TileProducer.order`): a head's ``p``-th row tile, then its ``p``-th from the end, every pair the same work,
consecutive pairs one head's.
Longest first across all heads (the order of a block a row tile) had every block of a round on another head, so that a
head's keys were read again from memory by each round: ncu on the H100 (LLaMA-65B causal L2048, 2026-12-05) read 318 MB
from DRAM at a 43 % L2 hit rate, in pairs 104 MB at 78 %. And the two consumer warpgroups go on to the next row tile
**each on its own** (:attr:`TileProducer.decoupled`): the turns run on across row tiles and each warpgroup counts the
block's live tiles itself, so that one issues the next row tile's first products while the other finishes its last
tile and stores its outputs. Kernel alone, two rounds (``gpu/README.md``): causal L2048 202.3 / 199.5 µs as before,
195.8 / 197.1 in pairs, 199.1 / 198.2 decoupled, **187.3 / 188.3 both**; causal L4096 706.8 / 708.4, 684.2 / 676.7,
711.6 / 717.5, **663.1 / 644.0**. Without a mask the warpgroups stay in step (decoupled there: L4096 1031 → 1045 µs,
bfloat16 L2048 243–252 → 250–254, float16 L2048 259–260 → 252–262 in four timings).

Named barriers: one "full" a stage and consumer warpgroup, one "empty" a stage, two turns (``3 S + 2`` of the 15; four
stages fit, 192 KB of shared memory at d = 128 with the query's residuals). Every arrival is matched by a wait: an
"empty" arrival only for a stage the producer will wait for; warpgroup 0's first turn handed by warpgroup 1 before
the loop, its last taken after it (no branch on the warpgroup inside the loop). A block of one row tile meets at
barrier 0 only while it stages the params (and, under a causal mask, votes on its tile counts), before the roles
split. Both consumer warpgroups see the same tiles, so the turns stay balanced. A gate true on a prefix of the row (a causal mask) is
decided before the roles split: the block's live tiles and those it sees whole are both prefixes, counted once
(:meth:`TileProducer.spans`); other gates, whose tiles are voted on at the block's barrier every tile, keep one or two
warpgroups without a producer.
"""

from __future__ import annotations

from ...errors import RedalgebraError
from ..tree import Assign, Call, For, If, While
from .products import MOST_COMPONENTS

#: Whether the producer block walks row tiles by default (:attr:`TileProducer.walking`: a block a multiprocessor,
#: ``Spec.persistent``) where the row is one segment and, under a gate, the ring has at most three stages.
PERSISTENT = True
#: The named barriers at which a walking block's consumers vote (on their params' residuals, and under a gate true on
#: a prefix of the row on their tile counts) and its producer votes (on the live tiles), past the ring's.
VOTE, PRODUCER_VOTE = 15, 14
#: The named barrier at which the second consumer warpgroup of a block walking row tiles votes on its own
#: (:attr:`TileProducer.decoupled`; the first at :data:`VOTE`).
SECOND_VOTE = 13
#: When the consumer warpgroups of a block walking row tiles go on to the next row tile each on its own
#: (:attr:`TileProducer.decoupled`): 1 under a gate true on a prefix of the row (a causal mask), 2 always, 0 never.
DECOUPLED = 1
#: Timing bounds only (wrong results; ``gpu/sweep.py`` ``tile_producer.ABLATE=N``), bits: in a walking block, 1, the
#: consumers stage the query of their first row tile only, 2, no outputs stored (a condition no row meets); in any
#: producer block under a prefix gate, 4, no tile masked (every live tile taken whole). 0: as built.
ABLATE = 0
#: Whether blocks walking row tiles under a gate take them in pairs of one group (:attr:`TileProducer.order`); 0,
#: longest first across the groups in a snake, as before (a timing setting).
PAIRS = 1
#: Bits of the block's tile counts voted on (spans): counts below 2**21 (rows of 134 million keys in tiles of 64;
#: a row's length is an int32's, and its tiles fewer).
BITS = 21


def ring_barriers(groups: int, stages: int) -> tuple:
    """The named barriers of a producer's ring (``wgmma``'s here and ``columns_wgmma``'s, :mod:`.producer`): ("full"
    barrier of stage ``st`` and consumer warpgroup ``g``, "empty" barrier of stage ``st``, turn barrier of warpgroup
    ``g``) as functions of expressions, numbered 1 … (groups + 1) · stages + groups."""
    assert (groups + 1) * stages + groups <= 15, "named barriers are 1 … 15"
    return (lambda st, g: f"1 + {g} + {groups} * ({st})", lambda st: f"{1 + groups * stages} + ({st})",
            lambda g: f"{1 + (groups + 1) * stages} + ({g})")


def ring_producer(q: str, stages: int, ahead: int, stage, copies: list, arrive: list, empty, waiters: str,
                  count: str) -> tuple[list, list]:
    """The producer warpgroup's side of a ring of ``stages`` stages (``wgmma``'s block here, ``columns_wgmma``'s in
    :mod:`.producer`): (a tile's step, what follows the last tile). Tile ``q`` (its count along the ring) waits for its
    stage ``st`` to be released (the "empty" barrier ``empty(st)`` of ``waiters`` threads) once the ring has gone
    round, issues ``copies`` into it and commits them; with ``ahead`` tiles' copies in flight it waits for the oldest,
    fences its writes to the instructions' proxy and signals its stage ``sf`` (``arrive``: the "full" arrivals).
    After the last of ``count`` tiles, the ones still in flight are waited for and signalled. ``stage(e)``: the stage
    of tile ``e`` (text)."""
    step = [Assign("st", stage(q)), If(f"{q} >= {stages}", (Call("bar_sync", (empty("st"), waiters)),))]
    step += copies + [Call("cp_commit", ()),
                      If(f"{q} >= {ahead - 1}", (Call(f"cp_wait{ahead - 1}", ()), Call("fence_async", ()),
                                                 Assign("sf", stage(f"{q} - {ahead - 1}")), *arrive))]
    last = [Call("cp_wait0", ()), Call("fence_async", ()),
            For("jt", f"max({count} - {ahead - 1}, 0)", count, (Assign("sf", stage("jt")), *arrive))]
    return step, last


class TileProducer:
    """The warp-specialized block of a :class:`~.wgmma.WgmmaKernel` (``Spec.producer``), whose ``params``, ``prelude``,
    ``initial``, ``count``, ``tile``, ``drain``, ``gate_at``, ``copy_setup`` and ``issue`` it calls."""

    @property
    def producer(self) -> bool:
        return bool(self.spec.producer)

    def check_producer(self) -> None:
        """Why this kernel cannot take a producer warpgroup, raised."""
        if not self.producer:
            return
        if self.ncol != 1 or self.threads // 32 % 2:
            raise RedalgebraError("wgmma: a producer warpgroup serves two consumer warpgroups of one row tile each "
                                  "(threads=384), not column groups")
        if self.gate is not None and not self.prefix:
            raise RedalgebraError("wgmma: a producer warpgroup takes cascades without a gate, or with one true on a "
                                  "prefix of the row (a causal mask): the tiles another gate skips are voted on at the "
                                  "block's barrier every tile; use threads=128 or 256")
        if not self.pipelined or 3 * self.stages + 2 > 15:
            raise RedalgebraError(f"wgmma: a producer warpgroup needs 3 or 4 stages of tiles, got {self.stages}")
        if self.walking and self.segmented:
            raise RedalgebraError("wgmma: blocks walking row tiles (persistent) take each row in one segment")
        if self.walking and self.gate is not None and 3 * self.stages + 2 >= PRODUCER_VOTE:
            raise RedalgebraError("wgmma: blocks walk row tiles (persistent) under a gate with at most 3 stages (the "
                                  "producer's vote takes a named barrier): use persistent=False")

    @property
    def walking(self) -> bool:
        """Whether the block walks row tiles (``tile``, ``tile + gridDim.x``, …; ``Spec.persistent``, the grid as many
        blocks as are resident): the ring of stages runs on across them, so that the producer copies the next row
        tile's first tiles while the consumers store this one's outputs and stage its params."""
        return self.producer and bool(self.spec.persistent)

    @property
    def order(self) -> str:
        """Walking row tiles under a gate (:attr:`walking`, :meth:`walking_kernel`), ``pairs``: a block takes a
        group's ``p``-th row tile and then its ``p``-th from the end (under a causal mask, ``p + 1`` and ``ntr - p``
        tiles: every pair the same work), pairs ``b``, ``b + gridDim.x``, … of the call's, a group's pairs one after
        the other; then the groups' middle row tiles (an odd count a group), the last blocks first."""
        return "pairs" if self.walking and self.gate is not None and PAIRS else super().order

    @property
    def group(self) -> int:
        """Threads of a consumer warpgroup (a warp in the simulator), and of the producer."""
        return self.threads // 2

    def barrier_ids(self):
        """("full" barrier of stage ``st`` and warpgroup ``w``, "empty" barrier of stage ``st``, turn barrier of
        warpgroup ``w``) as functions of expressions: named barriers 1 … 3 S + 2 (:func:`ring_barriers`)."""
        return ring_barriers(2, self.stages)

    def turn_take(self) -> list:
        if not self.producer:
            return []
        return [Call("bar_sync", (self.barrier_ids()[2]("wgi"), str(self.threads)))]

    def turn_give(self) -> list:
        if not self.producer:
            return []
        return [Call("bar_arrive", (self.barrier_ids()[2]("1 - wgi"), str(self.threads)))]

    def release(self) -> list:
        """The pending tile's stage (``sp``: tile ``it - 1``) released once its products are complete, where the
        producer will wait for it (tile ``it - 1 + S`` exists)."""
        if not self.producer:
            return []
        empty = self.barrier_ids()[1]
        # (walking row tiles, the producer waits for every stage's release: those of a row tile's last tiles before
        # it copies the next row tile's, or past its last)
        ahead = "" if self.walking else f" and it + {self.stages - 1} < ntile"
        return [If(f"pp != 0{ahead}", (Call("bar_arrive", (empty("sp"), str(self.threads + self.group))),))]

    @property
    def in_flight(self) -> int:
        """Tiles whose copies the producer keeps in flight before it waits for the oldest: the consumers hold two
        stages (the tile computed, the pending ``P · V``'s), so at most ``S - 2`` are ahead of them."""
        return max(1, self.stages - 2)

    def bounds(self) -> dict:
        if not self.producer:
            return super().bounds()
        return {"partial" if self.segmented else "kernel": self.threads + self.group}

    def kernel(self) -> list:
        if not self.producer:
            return super().kernel()
        if self.walking:
            return self.walking_kernel()
        warps = self.threads // 32
        head = [Assign("seg", "cuda.blockIdx.y")] if self.segmented else []
        *staging, split = self.params()  # (every thread at the block's barrier that votes for the residuals)
        consumers = [Assign("wgi", f"uniform(int32(warp // {self.group // 32}))")] + self.prelude() + \
            self.initial() + self.consumer_loop() + (self.parts() if self.segmented else self.outputs())
        return head + self.setup() + [If(f"warp < {warps}", tuple(staging), (Assign("inexact", "0"),)), split] + \
            self.count() + self.spans() + [self.roles(self.producer_loop(), consumers)]

    def roles(self, producer: list, consumers: list) -> If:
        """The block split by role. Tiles of 128 elements (scores and factors twice a 64-element tile's) hand the
        producer's registers to the consumers (setmaxnreg; a kernel calling it is loaded from its whole PTX,
        runtime.driver): without it ptxas spilled 576 bytes and serialized the wgmmas; so do vector sums wider than
        :data:`~.products.MOST_COMPONENTS` in all (d = 256 on tiles of 32: 312 bytes spilled in 168 registers, none in
        232). Tiles of 64 keep the 168 registers a thread of 384 get: ptxas assembles attention at d = 128 in them
        without spills."""
        if self.kt > 64 or sum(self.cols(r) for r in self.vred) > MOST_COMPONENTS:
            producer, consumers = [Call("regs_give40", ())] + producer, [Call("regs_take232", ())] + consumers
        return If(f"warp >= {self.threads // 32}", tuple(producer), tuple(consumers))

    def walking_kernel(self) -> list:
        """The block walking row tiles (:attr:`walking`). Both roles take the same row tiles in the same order; the
        consumers stage each one's params and vote on their residuals at a named barrier of their own (:data:`VOTE`,
        ``bar_red_or``), so that the producer never waits for them but at its ring's barriers; the ring's tiles are
        counted across row tiles (``gq``: the block's tiles before this row tile's). A row tile's last stage is
        released once its sums are complete, and the producer, past its last tile, waits for the releases it did not
        wait for before (every arrival matched by a wait). Under a gate true on a prefix of the row, each role counts
        the row tile's live tiles itself (:meth:`spans`' counts, each at its own named barrier: the consumers the live
        and the whole ones of their rows — decoupled, each warpgroup of the block's, a row a thread —, the producer the
        live ones, a row of the block a thread), and the row tiles are taken in pairs (:attr:`order`), or with
        ``PAIRS=0`` longest first (:meth:`~.mma.MmaKernel.row_tile`) in a snake: round ``k`` ascending for an even
        ``k``, descending for an odd one, so that a block's long row tiles pair with its short ones. Params given in the
        products' 16-bit type are copied ahead (:attr:`~.wgmma.WgmmaKernel.params_ahead`): the first row tile's before
        the walk, each next one's once the consumers' tiles are done (``following``: the walk's next row tile); a row
        tile then only waits for its copies."""
        assert 3 * self.stages + 2 < VOTE and self.group == self.bm
        first = self.vin[0]
        if self.order == "pairs":
            middle = "pend + cuda.gridDim.x - 1 - cuda.blockIdx.x"  # (the groups' middle row tiles, after the pairs)
            nxt = "pick((tile & 1) == 0, tile + 1, tile + 2 * cuda.gridDim.x - 1)"
            following = f"pick(tile >= pend, tile + cuda.gridDim.x, pick({nxt} < pend, {nxt}, {middle}))"
            begin = f"pick(2 * cuda.blockIdx.x < pend, 2 * cuda.blockIdx.x, {middle})"
            start, step = self.row_groups(), [Assign("tile", following)]
        elif self.prefix:  # (the snake)
            begin, start = "cuda.blockIdx.x", [Assign("wk", "0")]
            following = ("(wk + 1) * cuda.gridDim.x + pick(((wk + 1) & 1) != 0, cuda.gridDim.x - 1 - cuda.blockIdx.x, "
                         "cuda.blockIdx.x)")
            step = [Assign("tile", following), Assign("wk", "wk + 1")]
        else:
            begin, start, following = "cuda.blockIdx.x", [], "tile + cuda.gridDim.x"
            step = [Assign("tile", following)]
        if self.params_ahead:  # (the first row tile's params copied before the walk, each next one's after its tiles)
            staging, ahead = [Call("cp_wait0", ())] + self.landed() + [Assign("inexact", "0")], self.params_copied(following)
        else:
            (*staging, _), ahead = self.params(), []

        def walk(body: list, own: str | None = None) -> list:
            each = self.row_tile("tile", own) + self.count() + body + [Assign("gq", "ntile", "+")] + step
            return [Assign("gq", "0")] + start + [Assign("tile", begin), While("tile < total", tuple(each))]
        _, empty, _ = self.barrier_ids()
        last = [If("ntile > 0", (Call("bar_arrive", (empty("sp"), str(self.threads + self.group))),))]
        # (under a gate, the block's live tiles and those every row sees whole, voted on by the consumers)
        spans = self.own_spans() + self.span_votes((VOTE, self.threads)) if self.prefix else []
        outputs = self.outputs()
        if ABLATE & 1 and not ahead:
            staging = [Assign("inexact", "0"), If("gq == 0", tuple(staging))]
        if ABLATE & 2:
            outputs = [If("rows < 0", tuple(outputs))]
        split, own = [Assign("split", f"bar_red_or({VOTE}, {self.threads}, inexact)")], None
        if self.decoupled:  # (each warpgroup votes at its own barrier, a thread a row of the block; turns run on)
            vote = f"pick(wgi == 0, {VOTE}, {SECOND_VOTE})"
            split = [Assign("split", "0" if self.exact16 else f"bar_red_or({vote}, {self.group}, inexact)")]
            if self.prefix:
                own = f"(tid - {self.group} * wgi)"
                spans = self.own_spans() + self.span_votes((vote, self.group)) + self.row_tile("tile")
        consumers = [Assign("wgi", f"uniform(int32(warp // {self.group // 32}))")] + \
            (self.row_groups() + self.params_copied(begin) if ahead else [])
        walked = walk(staging + split + spans + self.prelude() + self.initial() + self.consumer_loop(ahead) + last +
                      outputs, own)
        consumers += self.turns_around(walked) if self.decoupled else walked
        total = f"int32(uint32(rows) // uint32(rep_{first})) * ((rep_{first} + {self.bm - 1}) // {self.bm})"
        return self.setup(None) + [Assign("total", total), self.roles(self.producer_loop(walk), consumers)]

    @property
    def decoupled(self) -> bool:
        """Whether the two consumer warpgroups of a block walking row tiles go on to the next row tile each on its
        own: the turns run on from one row tile to the next (handed once before the walk, taken once after it), each
        warpgroup finds the block's live tiles itself (a thread a row of the block) and votes at its own named
        barrier, so that one warpgroup issues the next row tile's first products while the other stores its
        outputs. Both take the same row tiles and count the same tiles, so the turns stay paired; nothing else in
        shared memory is the other's (each warp stages its own params and outputs). A vote needs a barrier beside
        the ring's (:data:`SECOND_VOTE`): under a gate, or for params with residuals, the ring has at most 3 stages."""
        vote = self.prefix or not self.exact16
        wanted = DECOUPLED == 2 or DECOUPLED == 1 and self.prefix
        return bool(wanted and self.walking and (not vote or 3 * self.stages + 2 < SECOND_VOTE))

    def turns_around(self, body: list) -> list:
        """``body`` with warpgroup 0's first turn handed to it by warpgroup 1 before and its last taken after (every
        turn's arrival matched by a wait): around a row tile's loop, or, decoupled (:attr:`decoupled`), around the
        whole walk over row tiles."""
        _, _, turn = self.barrier_ids()
        return [If("wgi == 1", (Call("bar_arrive", (turn(0), str(self.threads))),))] + list(body) + \
            [If("wgi == 0", (Call("bar_sync", (turn(0), str(self.threads))),))]

    def spans(self) -> list:
        """With a gate true on a prefix of the row (a causal mask; :func:`.products.prefix`), before the roles split:
        ``ntile`` lowered to the block's live tiles (those whose first position the gate holds at for some row of the
        block) and ``nopen``, the tiles every row of the block sees whole (the gate holds at their last position):
        both are prefixes of the row's tiles. Each consumer thread counts its own rows' tiles in turn (no barrier);
        the block takes the largest count of live tiles and the smallest of open ones bit by bit, a vote at barrier 0
        a bit (``syncthreads_or``, ``syncthreads_and``; the producer's threads vote neither up nor down). The
        consumers then skip no tile and test no mask on the open ones (``op``), and the producer copies the live
        ones only — the tiles no row sees are never read."""
        if not self.prefix:
            return []
        warps = self.threads // 32
        return [If(f"warp < {warps}", tuple(self.own_spans()), (Assign("ml", "0"), Assign("mo", f"{1 << BITS}")))] + \
            self.span_votes()

    def span_votes(self, barrier: tuple | None = None, whole: bool = True) -> list:
        """``ntile`` lowered to ``nlive``, the largest of the voters' live tiles (:meth:`own_spans`), and with
        ``whole`` ``nopen``, the smallest of those they see whole: votes at barrier 0 or ``barrier``
        (:meth:`span_vote`)."""
        out = [Assign("nlive", "0"), self.span_vote("nlive", "ml", "or", barrier)]
        if whole:
            out += [Assign("nopen", "0"), self.span_vote("nopen", "mo", "and", barrier)]
        return out + [Assign("ntile", "nlive")]

    def own_spans(self, whole: bool = True) -> list:
        """``ml``: the live tiles of the thread's rows (the gate holds at a tile's first position for one of them);
        with ``whole``, ``mo``: those they see whole (it holds at its last for all of them) — both prefixes."""
        first = self.first
        live = [Assign("pf", f"float32(({first}ml) * {self.kt})")] + self.gate_at("pf", (Assign("go", "1"),))
        out = [Assign("ml", "0"), Assign("go", "1"),
               While("go != 0", (Assign("go", "0"), If("ml < ntile", tuple(live)), Assign("ml", "ml + go")))]
        if not whole:
            return out
        seen = [Assign("pe", f"float32(({first}mo) * {self.kt} + {self.kt - 1})"), Assign("go", "1")] + \
            self.gate_at("pe", (Assign("go", "0"),), negate=True)
        return out + [Assign("mo", "0"), Assign("go", "1"),
                      While("go != 0", (Assign("go", "0"), If("mo < ml", tuple(seen)), Assign("mo", "mo + go")))]

    @staticmethod
    def span_vote(acc: str, test: str, how: str, barrier: tuple | None = None) -> For:
        """``acc``: the largest (``how`` "or") or smallest ("and") of ``test`` over the voting threads, bit by bit from
        the highest a count of tiles may have: the whole block at barrier 0, or ``barrier`` (id, threads) — a
        named barrier's vote is an "or" only, so "and" asks whether no thread is below the candidate."""
        if barrier is None:
            ballot = f"cuda.syncthreads_{how}(int32({test} >= cand))"
        elif how == "or":
            ballot = f"bar_red_or({barrier[0]}, {barrier[1]}, int32({test} >= cand))"
        else:
            ballot = f"(1 - bar_red_or({barrier[0]}, {barrier[1]}, int32({test} < cand)))"
        return For("gen_b", str(BITS - 1), "-1", (If("(1 << gen_b) <= ntile", (
            Assign("cand", f"{acc} | (1 << gen_b)"), Assign(acc, f"pick({ballot} != 0, cand, {acc})"))),), "-1")

    def consumer_loop(self, after: list = ()) -> list:
        """The consumers' loop over the row tile's tiles, then ``after`` (every score of the warpgroup waited for), the
        pending products drained."""
        full, _, _ = self.barrier_ids()
        step = [Assign("st", f"uint32({'gq + ' if self.walking else ''}it) % uint32({self.stages})"),
                Call("bar_sync", (full("st", "wgi"), str(2 * self.group)))] + self.lanes("fresh(tid)")
        if self.prefix:  # (every row of the block sees the tile whole: no mask an element, spans)
            step.append(Assign("op", "1" if ABLATE & 4 else "int32(it < nopen)"))
        self.next_copies = []
        step += self.tile()
        tiles = [For("it", "0", "ntile", tuple(step))] + list(after) + self.drain()
        return tiles if self.decoupled else self.turns_around(tiles)  # (decoupled: around the walk instead)

    def producer_loop(self, walk=None) -> list:
        """The producer's loop over the block's tiles and what follows it; with ``walk`` (:meth:`walking_kernel`'s
        loop over row tiles), each row tile's copies at the ring's count ``gq + it``, and past the last row tile the
        releases it did not wait for. Under a gate, walking, the producer's threads find the row tile's live tiles
        themselves, a row of the block each. (Its first tile's copies issued before the block's barrier at which the
        consumers stage the params, so that the two latencies overlap, measured at most 2 % faster on the H200,
        2026-12-04: walking row tiles overlaps more, and took its place.)"""
        full, empty, _ = self.barrier_ids()
        s, waiters = self.stages, str(self.threads + self.group)
        stage = lambda e: f"uint32({e}) % uint32({s})"  # noqa: E731
        self.producing = (self.group, "ptid")
        try:
            arrive = [Call("bar_arrive", (full("sf", w), str(2 * self.group))) for w in range(2)]
            q, count = ("gq + it", "gq") if walk else ("it", "ntile")
            step, last = ring_producer(q, s, self.in_flight, stage, self.issue(f"{self.first}it", "st", loop=True),
                                       arrive, empty, waiters, count)
            start, loop = [Assign("ptid", f"tid - {self.threads}")], [For("it", "0", "ntile", tuple(step))]
            if walk is None:
                return start + self.copy_setup() + loop + last
            releases = For("jt", f"max(gq - {s}, 0)", "gq", (Call("bar_sync", (empty(stage("jt")), waiters)),))
            spans, own = [], None
            if self.prefix:
                spans, own = self.own_spans(whole=False) + self.span_votes((PRODUCER_VOTE, self.group), False), "ptid"
            return start + walk(spans + self.copy_setup() + loop, own) + last + [releases]
        finally:
            self.producing = None
