"""Every real CUDA variant compiles to sm_90 PTX with float32 arithmetic only (no GPU needed).

Runs in a subprocess: this test process uses the CUDA simulator, which cannot compile PTX.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r"""
import json, sys
from redalgebra import workloads
from redalgebra.codegen import Spec
from redalgebra.derive import derive
from redalgebra.runtime.ptx import compile_ptx, f64_instructions
sizes = (("d", 128), ("e", 64), ("n", 64), ("r", 512))
report = {}
distinct = {workloads.get(n).text: n for n in reversed(workloads.names(fusable=True))}  # decode = attention's text
for name in sorted(distinct.values()):
    f = derive(workloads.get(name).cascade)
    for strategy in sys.argv[1].split(","):
        lanes = "lanes" in strategy
        spec = Spec(sizes, tuple((s.name, "float16" if s.size else "bfloat16") for s in f.cascade.inputs), True,
                    32 if strategy == "tile_shared" else 128,
                    8 if strategy.startswith("tile") else 2048 if strategy == "nonincremental" else 4 if lanes else 1,
                    fast_exp=lanes)
        ptx = compile_ptx(f, strategy, spec)
        report[f"{name}/{strategy}"] = {"target": ".target sm_90" in ptx, "f64": f64_instructions(ptx)[:3],
                                        "ex2": "ex2.approx" in ptx, "butterfly": "shfl.sync.bfly" in ptx,
                                        "exp": "exp(" in workloads.get(name).text, "dot": "dot(" in workloads.get(name).text}
print(json.dumps(report))
"""


@pytest.mark.slow
def test_every_cuda_variant_compiles_to_sm90_ptx_without_float64():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    # two compilers at once (the CI machine has two cores), each with half of the strategies
    halves = ("thread,warp,block,block_shared,tile,tile_shared", "nonincremental,split,unfused,lanes,split_lanes")
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, half], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for half in halves]
    report = {}
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
        report.update(json.loads(out.strip().splitlines()[-1]))
    from redalgebra import workloads

    distinct = len({workloads.get(n).text for n in workloads.names(fusable=True)})
    assert len(report) == distinct * sum(len(h.split(",")) for h in halves)  # every distinct cascade × strategy
    for variant, facts in report.items():
        assert facts["target"], variant
        assert facts["f64"] == [], (variant, facts["f64"])
        if variant.endswith("lanes"):  # ex2 where the cascade has an exp; dot products completed by shuffles
            assert facts["ex2"] == facts["exp"], variant
            assert facts["butterfly"] == facts["dot"], variant
