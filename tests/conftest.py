import os

# The test process runs CUDA kernels on numba's simulator (no GPU in CI); it must be chosen before
# anything imports numba.cuda. Real CUDA variants are compiled to PTX in a subprocess.
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
os.environ.setdefault("REDALGEBRA_CACHE", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "kernels"))
# CPU kernels compiled serial (prange as range: the same code a row), in a third of the time of numba's parallel
# build, which compiling them dominates on a clean clone (a catalogue kernel 0.35-0.5 s against 1.25 s). The parallel
# build is tested where it is asked for: a sample of the catalogue's kinds (test_kernels.py), the fuzzed cascades
# (test_hostile.py), the snapshots and the cache's CPU module. Subprocesses (notebooks, the CLI) inherit it.
os.environ.setdefault("REDALGEBRA_CPU_PARALLEL", "0")

import matplotlib  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

matplotlib.use("Agg")

# Deterministic by default so CI is reproducible; HYPOTHESIS_PROFILE=explore for random runs.
settings.register_profile("ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", deadline=None, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def parallel_cpu(monkeypatch):
    """CPU kernels built as users get them: ``njit(parallel=True)``."""
    monkeypatch.setenv("REDALGEBRA_CPU_PARALLEL", "1")


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(12345)


# whether numba-cuda's function is the one a patch below was written from (the sha256 of its source, first 16 hex
# digits); where it is not, the patch leaves numba-cuda as it is
from redalgebra.runtime.front_end import written_from as _written_from  # noqa: E402


def _patched(owner, name: str, replacement):
    """``owner.name`` replaced by ``replacement`` for the session (a fixture's body: ``yield from``), restored after."""
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


# numba-cuda's BlockManager.run, as this patch was written from (sha256 of its source, first 16 hex digits)
_BLOCK_MANAGER_RUN = "54626c6819f55d51"


@pytest.fixture(scope="session", autouse=True)
def _simulator_manager_waits_for_its_threads():
    """The CUDA simulator runs a Python thread per CUDA thread, and a manager thread that polls them in a loop
    (which are blocked at ``syncthreads``, which are alive) without ever waiting: every round reads each thread's flags
    and asks each whether it is alive, while the threads it runs wait for the GIL. Here the threads tell the manager
    instead: a thread arriving at ``syncthreads``, or ending (its error recorded first), counts itself under the
    manager's condition, and wakes the manager when it is the last live thread to block, or ends with an error, or
    ends the block (one wake a barrier, not one an arrival); the manager, asleep on the condition, checks then what
    numba-cuda's loop checks: a thread's error stops the block (every thread aborted and released, the error raised),
    and when every live thread is blocked at ``syncthreads`` all are released together, each by a lock of its own
    (an ``Event``'s wait takes a condition and makes a lock on every call: a simulated thread's loop of one load and
    a barrier, 128 threads, took 36 µs a round with events, 31 with locks, on the development machine). The same
    threads, barrier semantics (a thread that has ended no longer counts) and errors, without the polling. Applied
    only where numba-cuda's loop is the one this was written from (numba-cuda 0.30's ``BlockManager.run``)."""
    import threading

    import numpy as np
    from numba.cuda.simulator import kernel

    manager = kernel.BlockManager
    if not _written_from(manager.run, _BLOCK_MANAGER_RUN):
        yield  # another numba-cuda: its own loop, unchanged
        return

    class Thread(kernel.BlockThread):
        """numba-cuda's simulated CUDA thread, which tells its manager when it blocks at ``syncthreads`` and when it
        ends (``BlockThread.syncthreads`` and ``run`` otherwise as they are)."""

        def syncthreads(self):
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            manager = self._manager
            with manager.events:
                self.syncthreads_blocked = True
                manager.blocked += 1
                if manager.blocked == manager.count - len(manager.ended):  # the last live thread: wake the manager
                    manager.events.notify()
            self.gate.acquire()
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads clear")

        def run(self):
            try:
                super().run()  # (which records the thread's error in self.exception)
            finally:
                manager = self._manager
                with manager.events:
                    manager.ended.append(self)
                    if self.exception or manager.blocked == manager.count - len(manager.ended):  # (all ended: 0 == 0)
                        manager.events.notify()

    def run(self, grid_point, *args):  # numba-cuda 0.30's BlockManager.run, woken by its threads instead of polling
        self.events, self.blocked, self.ended = threading.Condition(), 0, []
        self.count = int(np.prod(self._block_dim))
        threads = []
        for block_point in np.ndindex(*self._block_dim):

            def target():
                self._f(*args)

            t = Thread(target, self, grid_point, block_point, self._debug)
            t.gate = threading.Lock()  # held until the manager releases the thread from syncthreads
            t.gate.acquire()
            t.start()
            threads.append(t)
        with self.events:
            while True:
                failed = next((t for t in self.ended if t.exception), None)
                if failed is not None:
                    for t_other in threads:
                        t_other.abort = True
                        if t_other.syncthreads_blocked:
                            t_other.syncthreads_blocked = False
                            t_other.gate.release()
                    raise failed.exception[0].with_traceback(failed.exception[1])
                if len(self.ended) == len(threads):
                    break
                if self.blocked and self.blocked == len(threads) - len(self.ended):  # every live thread waits
                    self.blocked = 0
                    for t in threads:
                        if t.syncthreads_blocked:
                            t.syncthreads_blocked = False
                            t.gate.release()
                self.events.wait()
        for t in threads:
            t.join()
            if t.exception:
                raise t.exception[0].with_traceback(t.exception[1])

    yield from _patched(manager, "run", run)


# numba-cuda's FakeCUDAKernel.__call__, as the fixture below was written from (sha256 of its source, first 16 hex digits)
_FAKE_KERNEL_CALL = "71c9d298b7bc6278"


@pytest.fixture(scope="session", autouse=True)
def _simulator_device_calls_in_the_kernels_module_go_straight():
    """A device function called in the simulator swaps its module's ``cuda`` for the running kernel's fake module
    around the call (``swapped_cuda_module``: an import, a global lock and a per-module lock, a reference count), a
    call of a generated module's helpers on every simulated thread. A kernel's launch has made that swap for the
    whole launch already, in the kernel's own module; a device function defined there (the generated helpers) is
    called directly while the launch runs, with the same globals and the same fake module as the swap would give it.
    Device functions of other modules, and calls outside a launch, go through numba-cuda's ``__call__`` as before.
    Applied only where ``FakeCUDAKernel.__call__`` is the one this was written from (numba-cuda 0.30's)."""
    from numba.cuda.simulator import kernel

    fake = kernel.FakeCUDAKernel
    if not _written_from(fake.__call__, _FAKE_KERNEL_CALL):
        yield  # another numba-cuda: its own call, unchanged
        return
    launched = [None]  # the globals of the kernel whose launch runs (the simulator runs one launch at a time)

    def call(self, *args):
        if self._device:
            if self.fn.__globals__ is launched[0]:
                return self.fn(*args)  # (its globals swapped by the launch, which lasts longer than this call)
            return original(self, *args)
        launched[0] = self.fn.__globals__
        try:
            return original(self, *args)
        finally:
            launched[0] = None

    original = fake.__call__
    yield from _patched(fake, "__call__", call)


_EARLY: list = []  # the PTX jobs' process and its folder, started with a whole-suite session


def pytest_configure(config):
    """On a run of the whole suite (no paths, -k, -m, --lf, --sw, --deselect, --ignore or --collect-only given; the
    main process, not an xdist worker), start compiling test_ptx's kernels at once, in the background: its report's
    path goes to the workers by the environment."""
    if hasattr(config, "workerinput"):
        return
    from tests.runtime import test_ptx

    os.environ.pop(test_ptx.EARLY, None)  # never a report of another session
    o = config.option
    if config.args_source != pytest.Config.ArgsSource.TESTPATHS or o.keyword or o.markexpr or o.collectonly \
            or getattr(o, "lf", False) or getattr(o, "stepwise", False) or getattr(o, "deselect", None) \
            or getattr(o, "ignore", None):
        return
    import tempfile

    folder = tempfile.mkdtemp(prefix="redalgebra-ptx-")
    path = os.path.join(folder, "report.json")
    os.environ[test_ptx.EARLY] = path
    _EARLY.append((test_ptx.start(path), folder))


def pytest_unconfigure(config):
    import shutil
    import signal

    for proc, folder in _EARLY:  # a session that ended first (interrupted, or its tests failed early): its group
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:  # ended meanwhile
                pass
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)
