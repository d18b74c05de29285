"""Time budgets: a computation that runs too long ends in a verdict of "unknown", not a hang.

``with budget(seconds, what):`` sets a deadline for the block (nested budgets keep the earliest one).
Past it, :func:`check` raises :class:`~redalgebra.errors.BudgetExhausted`; in the main thread a timer
signal raises it too, inside SymPy's own loops, and repeats every :data:`RETRY_S` seconds in case
library code swallows it.  Elsewhere (a worker thread) only :func:`check`, called by the prover between
steps, enforces the deadline.  An operation inside one C call (a big-integer power) cannot be stopped;
the parser's limits (:mod:`redalgebra.ir.limits`) keep such operations small.

``DEFAULT_SECONDS`` is the budget of one analysis (``analyze``) and ``PROOF_SECONDS`` that of one
identity (``prove_equal``); the CLI's ``--budget`` sets the first.
"""

from __future__ import annotations

import functools
import signal
import threading
import time
from pathlib import Path
from contextlib import contextmanager

from ..errors import BudgetExhausted

DEFAULT_SECONDS = 30.0
PROOF_SECONDS = 20.0
RETRY_S = 0.05
_stack: list[list] = []  # [deadline, what, seconds, fired], innermost last
_PACKAGE = str(Path(__file__).resolve().parent.parent)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")


def _earliest():
    return min(_stack, key=lambda d: d[0]) if _stack else None


def _exhausted(entry) -> BudgetExhausted:
    _, what, seconds, _ = entry
    return BudgetExhausted(f"the time budget of {seconds:g} s for {what} was exhausted")


_closing = [0]  # > 0 while a budget is being closed: the handler must not raise there


def _on_alarm(signum, frame):
    entry = _earliest()
    if entry is None or _closing[0]:
        return
    if time.monotonic() >= entry[0]:
        signal.setitimer(signal.ITIMER_REAL, RETRY_S)  # again, in case library code swallows the exception
        if entry[3] and frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
            return  # our own code, handling the first one: it calls check() where it matters
        entry[3] = True
        raise _exhausted(entry)
    _arm()


def _arm() -> None:
    if not _main_thread():
        return
    entry = _earliest()
    if entry is None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(entry[0] - time.monotonic(), 1e-4))


@contextmanager
def budget(seconds: float | None, what: str):
    """Run the block under a deadline ``seconds`` from now (``None``: no deadline of its own)."""
    if seconds is None:
        yield
        return
    previous = signal.getsignal(signal.SIGALRM) if _main_thread() and not _stack else None
    _stack.append([time.monotonic() + float(seconds), what, float(seconds), False])
    try:
        _arm()
        yield
    finally:
        _closing[0] += 1
        try:
            if _main_thread():
                signal.setitimer(signal.ITIMER_REAL, 0)
            _stack.pop()
            if _stack:
                _arm()
            elif previous is not None:
                signal.signal(signal.SIGALRM, previous)
        finally:
            _closing[0] -= 1


def cache_decided(fn):
    """Memoize ``fn`` (hashable arguments) except results undecided for lack of time: a :class:`Proof`
    whose ``exhausted`` is true, or a tuple starting with one."""
    memo: dict = {}

    @functools.wraps(fn)
    def wrapper(*args):
        if args in memo:
            return memo[args]
        out = fn(*args)
        proof = out[0] if isinstance(out, tuple) else out
        if not getattr(proof, "exhausted", False):
            memo[args] = out
        return out

    wrapper.cache_clear = memo.clear
    return wrapper


def check() -> None:
    """Raise :class:`BudgetExhausted` when the earliest deadline has passed."""
    entry = _earliest()
    if entry is not None and time.monotonic() >= entry[0]:
        raise _exhausted(entry)


def remaining() -> float | None:
    """Seconds left to the earliest deadline (``None`` when there is none)."""
    entry = _earliest()
    return None if entry is None else entry[0] - time.monotonic()
