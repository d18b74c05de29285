"""Compile generated source with numba, cache it in real files, launch it, validate it.

Owns: the source cache (:mod:`.cache`), back-end selection (:mod:`.backends`),
``compile`` (:mod:`.compile`) and validation against the float64 reference
(:mod:`.check`).

May import: every layer below, numba and numba-cuda; torch only in :mod:`.tensors` (PyTorch
tensors in and out, ``torch_op``), lazily and only when a caller uses it; never matplotlib.
"""

from .compile import Kernel, compile
from .formats import E4M3, BFloat16, as_bfloat16, as_e4m3


def torch_op(fused, name=None, strategy=None):
    """The cascade as the PyTorch custom op ``torch.ops.redalgebra.<name>`` (see :mod:`.tensors`)."""
    from .tensors import torch_op as make

    return make(fused, name, strategy)


__all__ = ["BFloat16", "E4M3", "Kernel", "as_bfloat16", "as_e4m3", "compile", "torch_op"]
