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
