"""16-bit outputs from a tensor-core accumulator's fragments, four values a lane.

``mma.sync`` and ``wgmma`` leave lane ``4 g + t`` of a warp two neighbouring columns ``8 j + 2 t`` and ``+ 1`` of each
8-column block ``j`` (rows ``g`` and ``g + 8``). Stored from there in a 16-bit type, a pair is one 4-byte store and a
warp's store fills half of each 32-byte sector it touches (float32 pairs fill whole ones). Two neighbouring blocks are
exchanged between lanes ``t`` and ``t ^ 1`` instead, one shuffle a value: the even lane keeps block ``j``'s
columns ``8 j + 2 t … + 3``, the odd lane block ``j + 1``'s ``8 j + 8 + 2 (t - 1) … + 3`` — in both,
``8 j + 2 t + 6 odd`` — so each lane stores four values, 8 bytes, and a quad's four stores cover a row's 32
contiguous bytes. The shuffles run in every lane of the warp, so they come before any test of a lane's row; the stores
after it.
"""

from __future__ import annotations

from ..tree import Assign, Shuffle

#: The stored types whose pairs are exchanged (float32 pairs already fill a quad's 32 bytes).
PAIRED_TYPES = ("bfloat16", "float16")


def exchange(k: int | str, a: tuple, b: tuple, odd: str) -> tuple[list, tuple]:
    """(statements every lane runs, the four values this lane stores at column ``8 j + 2 t + 6 odd``): ``a`` and ``b``
    the lane's pairs of blocks ``j`` and ``j + 1`` (value texts), ``odd`` the text of ``t & 1``, ``k`` naming the
    exchange's registers (``ps_k_*``, ``pr_k_*``) apart from every other exchange whose values are yet to be stored."""
    sent = [Assign(f"ps_{k}_{i}", f"{a[i]} if {odd} else {b[i]}") for i in (0, 1)]  # the even lane gives block j + 1
    got = [Shuffle(f"pr_{k}_{i}", f"ps_{k}_{i}", "1") for i in (0, 1)]
    values = (tuple(f"(pr_{k}_{i} if {odd} else {a[i]})" for i in (0, 1))
              + tuple(f"({b[i]} if {odd} else pr_{k}_{i})" for i in (0, 1)))
    return sent + got, values


def column(pair_column: str, odd: str) -> str:
    """The column of a lane's four values, from its pair's column in the first block (``8 j + 2 t``)."""
    return f"{pair_column} + 6 * {odd}"
