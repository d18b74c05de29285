"""Element masks (``keep`` arrays) for the catalogue's shapes, and the per-row integer params that write
the same masks in a cascade (``param qpos int`` with ``where(pos <= qpos, s, -inf)``)."""

from __future__ import annotations

import numpy as np


def causal(queries: int, keys: int, heads: int = 1) -> np.ndarray:
    """``keep`` for causal attention: query ``i`` sees keys ``j <= i + (keys - queries)``.

    Rows are ordered head-major, ``heads * queries`` rows of ``keys`` elements,
    matching the attention workload's one-query-per-row layout.
    """
    offset = keys - queries
    one_head = np.arange(keys)[None, :] <= np.arange(queries)[:, None] + offset
    return np.tile(one_head, (heads, 1))


def query_positions(queries: int, keys: int, heads: int = 1) -> np.ndarray:
    """``qpos`` per row, in the layout of :func:`causal`: query ``i`` is at position ``i + (keys - queries)``.

    ``where(pos <= qpos, s, -inf)`` with these positions masks exactly what ``causal(queries, keys, heads)``
    leaves out.
    """
    return np.tile(np.arange(queries) + (keys - queries), heads)


#: Attention with the causal mask written in the cascade: each row's query position a param (:func:`query_positions`),
#: so the tensor-core strategies stop a row block at its first key tile above the diagonal (``alibi_attention`` is the
#: catalogue's cascade with this mask and ALiBi's biases).
CAUSAL_ATTENTION = """\
input k[d]
input v[d]
param q[d]
param scale > 0
param qpos int
let s = dot(q, k) * scale
let sc = where(pos <= qpos, s, -inf)
reduce m = max(sc)
reduce l = sum(exp(sc - m))
reduce o = sum(exp(sc - m) * v)
out y = o / l
"""


def alibi_slopes(heads: int, queries: int = 1) -> np.ndarray:
    """ALiBi's slope per row, head-major: head ``h`` (0-based) has ``2 ** (-8 (h + 1) / heads)``
    (Press et al., ICLR 2022; exact for a power-of-two head count)."""
    return np.repeat(2.0 ** (-8.0 * np.arange(1, heads + 1) / heads), queries)
