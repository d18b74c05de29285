"""Time budgets: a computation that runs too long ends in a verdict of "unknown", not a hang.

``with budget(seconds, what):`` sets a deadline for the block (nested budgets keep the earliest one).
Past it, :func:`check` raises :class:`~redalgebra.errors.BudgetExhausted`; in the main thread a timer
signal raises it too, inside SymPy's own loops, and repeats every :data:`RETRY_S` seconds in case
library code swallows it; in another thread a watchdog thread raises it there asynchronously
(``PyThreadState_SetAsyncExc``), the same way.  An operation inside one C call (a big-integer power) cannot be stopped;
the parser's limits (:mod:`redalgebra.ir.limits`) keep such operations small.

``DEFAULT_SECONDS`` is the budget of one analysis (``analyze``) and ``PROOF_SECONDS`` that of one
identity (``prove_equal``); the CLI's ``--budget`` sets the first.
"""

from __future__ import annotations

import ctypes
import functools
import numbers
import signal
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path
from contextlib import contextmanager

from ..errors import BudgetExhausted, RedalgebraError

DEFAULT_SECONDS = 30.0
PROOF_SECONDS = 20.0
RETRY_S = 0.05
_local = threading.local()  # per thread: its _State
_PACKAGE = str(Path(__file__).resolve().parent.parent)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")


class _Expired(BudgetExhausted):
    """Raised asynchronously in a worker thread (without arguments); it names the budget that ran out."""

    def __str__(self) -> str:
        entry = _earliest()
        return str(_exhausted(entry)) if entry is not None else "a time budget was exhausted"


class _State:
    """One thread's budgets: the stack, a flag while one is being closed, and the lock the watchdog takes."""

    def __init__(self):
        self.stack: list = []   # [deadline, what, seconds, fired], innermost last
        self.closing = 0
        self.lock = threading.Lock()
        self.ident = threading.get_ident()
        self.watchdog: threading.Thread | None = None

    def earliest(self):
        return min(self.stack, key=lambda d: d[0]) if self.stack else None


def _state() -> _State:
    if not hasattr(_local, "state"):
        _local.state = _State()
    return _local.state


def _earliest():
    return _state().earliest()


def _exhausted(entry) -> BudgetExhausted:
    _, what, seconds, _ = entry
    return BudgetExhausted(f"the time budget of {seconds:g} s for {what} was exhausted")


def _ours(frame) -> bool:
    """Whether ``frame`` runs redalgebra's own code (which checks its budget itself after the first raise)."""
    return frame is not None and frame.f_code.co_filename.startswith(_PACKAGE)


def _machinery(frame) -> bool:
    """Whether ``frame`` runs this module's own bookkeeping (arming the timer as a budget is entered, the cache's
    wrapper): raised there, the exception would leave a ``with budget(...)`` before its block, past the code that
    handles it (a budget of 1e-9 s could fire inside ``_arm``); the next try comes RETRY_S later, in the block."""
    return frame is not None and frame.f_code.co_filename == __file__


def _callback(frame) -> bool:
    """Whether ``frame`` is a finalizer or a weak-reference or GC callback: an exception raised there is only
    printed as "ignored", and it would leave a cache half updated; the next signal comes soon."""
    return frame is not None and (frame.f_code.co_filename.endswith("weakref.py")
                                  or frame.f_code.co_name in ("__del__", "remove", "_remove", "gc_callback"))


def _on_alarm(signum, frame):
    state = _state()
    entry = state.earliest()
    if entry is None or state.closing:
        return
    if time.monotonic() >= entry[0]:
        signal.setitimer(signal.ITIMER_REAL, RETRY_S)  # again, in case library code swallows the exception
        if entry[3] and _ours(frame) or _callback(frame) or _machinery(frame):
            return  # our own code, handling the first one (it calls check() where it matters), a callback, or this
            # module's bookkeeping
        entry[3] = True
        raise _exhausted(entry)
    _arm(state)


def _arm(state: _State) -> None:
    if not _main_thread():
        _watch(state)
        return
    entry = state.earliest()
    if entry is None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(entry[0] - time.monotonic(), 1e-4))


def _watch(state: _State) -> None:
    """In a worker thread: a watchdog thread raises :class:`_Expired` in it (``PyThreadState_SetAsyncExc``)."""
    if state.watchdog is not None and state.watchdog.is_alive():
        return

    def run():
        while True:
            with state.lock:
                entry = state.earliest()
                if entry is None:
                    state.watchdog = None
                    return
                wait = entry[0] - time.monotonic()
                if wait <= 0 and not state.closing:
                    frame = sys._current_frames().get(state.ident)
                    # (as the main thread's handler: not into our own code handling the first one, nor a callback,
                    # where it would only be printed as "ignored"; the next try comes RETRY_S later)
                    if not (entry[3] and _ours(frame) or _callback(frame) or _machinery(frame)):
                        entry[3] = True
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(state.ident),
                                                                   ctypes.py_object(_Expired))
            time.sleep(min(max(wait, 0) + 1e-3, 0.25) if wait > 0 else RETRY_S)

    state.watchdog = threading.Thread(target=run, name="redalgebra-budget", daemon=True)
    state.watchdog.start()


@contextmanager
def budget(seconds: float | None, what: str):
    """Run the block under a deadline ``seconds`` from now (``None``: no deadline of its own)."""
    if seconds is None:
        yield
        return
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or not 0 < seconds < float("inf"):
        raise RedalgebraError(f"a time budget is a positive number of seconds (or None), got {seconds!r}")
    state = _state()
    main = _main_thread()
    previous = signal.getsignal(signal.SIGALRM) if main and not state.stack else None
    state.stack.append([time.monotonic() + float(seconds), what, float(seconds), False])
    try:
        _arm(state)
        yield
    except _Expired:
        raise _exhausted(state.earliest() or state.stack[-1]) from None
    finally:
        state.closing += 1
        try:
            with state.lock:
                if main:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                else:  # drop an exception the watchdog may have sent but not yet delivered
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(state.ident), None)
                state.stack.pop()
            if state.stack and main:
                _arm(state)
            elif previous is not None:
                signal.signal(signal.SIGALRM, previous)
        finally:
            state.closing -= 1


def cache_decided(fn=None, *, undecided=None, kept: int | None = None):
    """Memoize ``fn`` (hashable arguments; others are not kept) except results undecided for lack of time: by default
    a :class:`Proof` whose ``exhausted`` is true, or a tuple starting with one; ``undecided(result)`` says so instead
    where given. ``kept``: at most this many results, the least recently used dropped first (None: every one). Safe
    to call from several threads (analyses run in worker threads too)."""
    if fn is None:
        return lambda f: cache_decided(f, undecided=undecided, kept=kept)
    memo: OrderedDict = OrderedDict()
    lock = threading.Lock()

    def exhausted(out) -> bool:
        return getattr(out[0] if isinstance(out, tuple) else out, "exhausted", False)

    test = undecided or exhausted

    @functools.wraps(fn)
    def wrapper(*args):
        try:
            hash(args)
        except TypeError:
            return fn(*args)
        with lock:
            if args in memo:
                memo.move_to_end(args)
                return memo[args]
        out = fn(*args)
        if not test(out):
            with lock:
                memo[args] = out
                while kept is not None and len(memo) > kept:
                    memo.popitem(last=False)
        return out

    wrapper.cache_clear = memo.clear
    wrapper.cache = memo
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


#: Seconds a cosmetic simplification may take before the expression is kept as it is.
SIMPLIFY_SECONDS = 2.0


def simplified(expr, seconds: float | None = None):
    """``sympy.simplify(expr)`` when it finishes within ``seconds`` (default :data:`SIMPLIFY_SECONDS`), else
    ``expr`` unchanged: for simplifications that make a formula shorter but are not needed for its truth.
    An enclosing budget that runs out meanwhile still raises."""
    import sympy as sp

    try:
        with budget(SIMPLIFY_SECONDS if seconds is None else seconds, "a simplification"):
            return sp.simplify(expr)
    except BudgetExhausted:
        check()  # the enclosing budget, if it is the one that ran out
        return expr
