"""Importing numba's targets: the CPU ``njit``, real CUDA, and the CUDA simulator.

The simulator is chosen by ``NUMBA_ENABLE_CUDASIM=1`` when ``numba.cuda`` is
first imported, so the choice is made once per process: asking for the other
one afterwards is an error that says how to proceed, not a silent fallback.
"""

from __future__ import annotations

import functools
import os
import sys

from ..errors import RedalgebraError

BACKENDS = ("cpu", "cuda", "cudasim")


def cuda_module(backend: str):
    """``numba.cuda`` for ``cuda``, ``cudasim`` or ``ptx`` (real CUDA's compiler, no GPU needed),
    checking the process has not chosen the other."""
    want_sim = backend == "cudasim"
    previous = os.environ.get("NUMBA_ENABLE_CUDASIM")
    if "numba.cuda" not in sys.modules:
        if want_sim:
            os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        elif previous == "1":
            raise RedalgebraError("NUMBA_ENABLE_CUDASIM=1 is set: unset it to use the real CUDA back end")
    try:
        from numba import config, cuda
    except ImportError as err:
        _restore(previous)
        raise RedalgebraError(f"the {backend} back end needs numba-cuda: pip install 'redalgebra[cuda]' ({err})") from None
    if bool(config.ENABLE_CUDASIM) != want_sim:
        # (the variable set above for nothing is taken back: numba rereads it when it reloads its configuration, as a
        # later compile does, and would then take this process's real CUDA module for the simulator)
        _restore(previous)
        if want_sim:  # numba imported without it: real CUDA, or only the CPU back end (its kernels import numba)
            raise RedalgebraError("the CUDA simulator is chosen when numba is first imported, and this process imported "
                                  "numba without it (real CUDA, the CPU back end or another import did): set "
                                  "NUMBA_ENABLE_CUDASIM=1 before starting Python, or run the cudasim back end first or "
                                  "in a fresh process")
        raise RedalgebraError(f"this process already uses {'the CUDA simulator' if config.ENABLE_CUDASIM else 'real CUDA'};"
                              f" run the {backend} back end in a fresh process")
    if backend == "cuda" and not cuda.is_available():
        raise RedalgebraError("no CUDA GPU is available here; use backend='cudasim' (or 'cpu')")
    if want_sim:
        from .sim_async import poison_shared_memory

        poison_shared_memory()  # (no zeros by luck: what a kernel never wrote reads as NaN)
    else:
        from .front_end import install

        install()  # (the compiler's two quadratic passes in linear time: the same PTX)
    return cuda


def _restore(previous: str | None) -> None:
    """``NUMBA_ENABLE_CUDASIM`` as it was before :func:`cuda_module` set it."""
    if previous is None:
        os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    else:
        os.environ["NUMBA_ENABLE_CUDASIM"] = previous


def device_capability(backend: str):
    """The current GPU's compute capability ``(major, minor)`` on the ``cuda`` back end, else None."""
    return _capability() if backend == "cuda" else None


def device_multiprocessors(backend: str):
    """The current GPU's multiprocessor count on the ``cuda`` back end, else None (the launch policies then plan for
    an H200's 132)."""
    return _device()[1] if backend == "cuda" else None


@functools.lru_cache(maxsize=1)
def _device() -> tuple:
    """(compute capability, multiprocessors) of the current GPU, asked once; (None, None) without one."""
    try:
        from numba import cuda

        device = cuda.get_current_device()
        count = getattr(device, "MULTIPROCESSOR_COUNT", None)
        return tuple(device.compute_capability), int(count) if count else None
    except Exception:  # noqa: BLE001 - no numba-cuda, driver or device (building PTX offline): nothing to go by
        return None, None


def _capability():
    return _device()[0]


def multiprocessors(cuda) -> int:
    """The current device's multiprocessor count (the simulator's stand-in device may not say: 1)."""
    count = getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", None)
    return int(count) if count else 1


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise RedalgebraError(f"unknown back end {backend!r}; choose one of {', '.join(BACKENDS)}")
    return backend
