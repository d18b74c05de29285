"""Compile generated source with numba, cache it in real files, launch it, validate it.

Owns: the source cache (:mod:`.cache`), back-end selection (:mod:`.backends`),
``compile`` (:mod:`.compile`) and validation against the float64 reference
(:mod:`.check`).

May import: every layer below, numba and numba-cuda; never torch or matplotlib.
"""

from .compile import BFloat16, Kernel, as_bfloat16, compile

__all__ = ["BFloat16", "Kernel", "as_bfloat16", "compile"]
