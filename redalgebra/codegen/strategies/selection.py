"""A top-k *selected* over a group of lanes: ``k`` rounds of arg-max, each removing its winner — the ``rows``
strategy's staged top-k (a router's experts), in place of merging sorted lists."""

from __future__ import annotations

from ..tree import Assign, For, If, Shuffle

#: A top-k's selection rounds are unrolled while k times a lane's values is at most this (a top-8 of 16 values
#: a lane); beyond, a loop, the row's list then indexed at run time (local memory). Unrolled, the router's top-40
#: of 16 values a lane (4096 bfloat16) was 15478 SASS instructions, 128 registers and 46 s of compiling, against
#: 3678, 68 registers (320 bytes of local memory) and 6 s as a loop.
UNROLLED_SELECTION = 128


def warp_rounds(k: int, width: int, regs: list, keep, ordered: bool) -> list:
    """``k`` rounds of arg-max over ``regs`` ((value, index) pairs of each lane) across aligned runs of
    ``width`` lanes, round ``j``'s winner (``bv``, ``bi``) stored by ``keep(j)`` in every lane. ``ordered``:
    each lane's indices increase along ``regs`` (a strict ``>`` then keeps the smaller of equal values'
    indices).

    The order is total, NaN included: NaN above every number (the reference's order: NumPy's ``argmax`` and
    PyTorch's ``topk`` put it there), NaNs by index. Without that a NaN never compares greater, never equal, and
    the lanes of a row with one would end the butterfly holding different winners. Round 0 compares in that
    order (five comparisons a step); its winner is a number only where the row holds no NaN, and then the later
    rounds compare plainly (three comparisons). A row holding a NaN takes a second copy of the later rounds that
    keeps the NaN order (the branch is uniform across the warp: its rows' flags are OR-ed by shuffles). Every
    -inf is written as (-inf, -1): the results are the total order's, bit for bit (NaN payloads included).

    Every comparison is a select (``pick``) on a condition of ``&``/``|`` without short circuit: no branch,
    and no block of numba's IR. The IR of ``if a or (b and c):`` is a block per operand, and numba's
    compiler walks the blocks recursively, a Python frame a block: the top-8 of 4096 bfloat16 values written
    with branches had 1589 blocks, a walk 864 deep under Python 3.11 and 981 under 3.12, past its limit of
    1000 frames (RecursionError); as selects, 173 blocks, 87 deep."""
    nan_better = "(ov > bv) | ((ov == bv) & (oi < bi)) | ((ov != ov) & ((bv == bv) | (oi < bi)))"
    better = "(ov > bv) | ((ov == bv) & (oi < bi))"

    def take(cond: str, pairs) -> list:
        return [Assign("ok_take", cond)] + [Assign(dst, f"pick(ok_take, {src}, {dst})") for dst, src in pairs]

    def lane_best(nan: bool) -> list:
        """The lane's best register in ``lv``, ``li``."""
        (v0, i0), *rest = regs
        if ordered:
            cond = "({v} > lv) | (({v} != {v}) & (lv == lv))" if nan else "{v} > lv"
        else:
            cond = "({v} > lv) | (({v} == lv) & ({i} < li))"
            cond += " | (({v} != {v}) & ((lv == lv) | ({i} < li)))" if nan else ""
        out = [Assign("lv", v0), Assign("li", i0)]
        return out + [s for v, i in rest for s in take(cond.format(v=v, i=i), (("lv", v), ("li", i)))]

    def round_(j: str, nan: bool) -> list:
        out = [Assign("bv", "lv"), Assign("bi", "li")]
        off = width // 2
        while off >= 1:
            out += [Shuffle("ov", "bv", str(off)), Shuffle("oi", "bi", str(off), "int32")]
            out += take(nan_better if nan else better, (("bv", "ov"), ("bi", "oi")))
            off //= 2
        return out + keep(j)

    def rounds(nan: bool) -> list:
        """Rounds 1 to k - 1, each after the lane that held the last winner removed it and looked again."""
        clear = [Assign(v, f"pick({i} == bi, NEG_INF, {v})") for v, i in regs]
        remove = [If("li == bi", tuple(clear + lane_best(nan)))]
        if k * len(regs) <= UNROLLED_SELECTION:
            return [s for j in range(1, k) for s in remove + round_(str(j), nan)]
        # beyond, a loop of rounds (a list kept in registers is then indexed at run time: local memory)
        return [For("j", "1", str(k), tuple(remove + round_("j", nan)))]

    out = lane_best(True) + round_("0", True)
    if k == 1:
        return out
    # round 0's winner is a NaN only where the row holds one (NaN ranks above every number). The branch must be the
    # same in every lane of the warp (a shuffle's lanes execute the same instruction): where a warp holds several
    # rows (runs of fewer than 32 lanes), its lanes OR their rows' flags, and a warp holding a NaN anywhere takes the
    # NaN order for all its rows (the same results where a row holds none)
    out += [Assign("bnan", "pick(bv != bv, int32(1), int32(0))")]
    off = width
    while off < 32:
        out += [Shuffle("onan", "bnan", str(off), "int32"), Assign("bnan", "bnan | onan")]
        off *= 2
    return out + [If("bnan == 0", tuple(rounds(False)), tuple(rounds(True)))]
