"""Decoding of stored number formats on the host, in NumPy alone (no numba: importing this fixes nothing about
the CUDA simulator switch, which :mod:`.intrinsics` reads when imported)."""

from __future__ import annotations

import numpy as np


def e4m3_values(codes) -> np.ndarray:
    """The float32 values of FP8 e4m3 bytes ``s eeee mmm`` (bias 7, no infinities, ``0x7F``/``0xFF`` NaN): exact."""
    c = np.asarray(codes).astype(np.int32)
    e, m = (c >> 3) & 0xF, (c & 7).astype(np.float64)
    mag = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e - 7))
    return np.where((c & 0x7F) == 0x7F, np.nan, np.where(c & 0x80, -mag, mag)).astype(np.float32)
