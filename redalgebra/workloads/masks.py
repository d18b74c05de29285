"""Element masks (``keep`` arrays) for the catalogue's shapes."""

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
