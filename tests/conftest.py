import os

# The test process runs CUDA kernels on numba's simulator (no GPU in CI); it must be chosen before
# anything imports numba.cuda. Real CUDA variants are compiled to PTX in a subprocess.
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
os.environ.setdefault("REDALGEBRA_CACHE", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "kernels"))

import matplotlib  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

matplotlib.use("Agg")

# Deterministic by default so CI is reproducible; HYPOTHESIS_PROFILE=explore for random runs.
settings.register_profile("ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", deadline=None, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(12345)


# numba-cuda's BlockManager.run, as this patch was written from (sha256 of its source, first 16 hex digits)
_BLOCK_MANAGER_RUN = "54626c6819f55d51"


@pytest.fixture(scope="session", autouse=True)
def _simulator_manager_yields_the_gil():
    """The CUDA simulator runs a Python thread per CUDA thread, and a manager thread that polls them in a loop
    (which are blocked at ``syncthreads``, which are alive) without ever waiting: the threads it runs wait up to
    the interpreter's switch interval (5 ms) for the GIL each time it holds it — most of the wall time of a
    block whose threads meet at barriers often (the tensor cores' stand-ins' warp barriers too). The same loop,
    giving the GIL up once a round (``time.sleep(0)``): the same threads, barriers, order of checks and errors,
    in a half to a fifth of the time. Applied only where numba-cuda's loop is the one it was copied from."""
    import hashlib
    import inspect
    import time

    import numpy as np
    from numba.cuda.simulator import kernel

    manager = kernel.BlockManager
    if hashlib.sha256(inspect.getsource(manager.run).encode()).hexdigest()[:16] != _BLOCK_MANAGER_RUN:
        yield  # another numba-cuda: its own loop, unchanged
        return

    def run(self, grid_point, *args):  # numba-cuda 0.30's BlockManager.run, plus the sleep(0)
        threads, livethreads, blockedthreads = set(), set(), set()
        for block_point in np.ndindex(*self._block_dim):

            def target():
                self._f(*args)

            t = kernel.BlockThread(target, self, grid_point, block_point, self._debug)
            t.start()
            threads.add(t)
            livethreads.add(t)
        while livethreads:
            for t in livethreads:
                if t.syncthreads_blocked:
                    blockedthreads.add(t)
                elif t.exception:
                    for t_other in threads:
                        t_other.abort = True
                        t_other.syncthreads_blocked = False
                        t_other.syncthreads_event.set()
                    raise t.exception[0].with_traceback(t.exception[1])
            if livethreads == blockedthreads:
                for t in blockedthreads:
                    t.syncthreads_blocked = False
                    t.syncthreads_event.set()
                blockedthreads = set()
            livethreads = set([t for t in livethreads if t.is_alive()])
            time.sleep(0)  # the GIL to the threads that wait for it
        for t in threads:
            if t.exception:
                raise t.exception[0].with_traceback(t.exception[1])

    original, manager.run = manager.run, run
    yield
    manager.run = original


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
