"""The wgmma strategy in the CUDA simulator: mma's tiles on Hopper's warpgroup instructions.

The stand-ins of ``wgmma`` decode the 128-byte-swizzled shared memory from the descriptors as the hardware does
(``gpu/wgmma_check.py`` checks the same layouts on exact integers on the GPU, and here in the simulator); a
simulated block is one warp (16 rows), whose accumulators each thread computes from its own rows.
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from redalgebra import RedalgebraError
from redalgebra.codegen import Problem
from redalgebra.runtime import compile
from redalgebra.runtime.compile import choose
from tests.catalogue import fused
from tests.runtime.test_mma import assert_matches_the_reference

CHECK = Path(__file__).resolve().parents[2] / "gpu" / "wgmma_check.py"


@pytest.mark.parametrize("name,R,L,d,dtype,masked,query16", [
    # three tiles (the last partial), a mask with a fully masked row, a float32 query (the residual's own chain)
    ("attention", 20, 130, 16, "float16", True, False),
    # the gate (a causal mask and ALiBi written with positions): tiles no row sees skipped; bfloat16
    ("alibi_attention", 20, 40, 16, "bfloat16", False, True),
    # 80 components: a second block of 64 columns, partly used, in every swizzled tile
    ("attention", 16, 70, 80, "bfloat16", False, False),
])
def test_wgmma_matches_the_reference(name, R, L, d, dtype, masked, query16):
    assert_matches_the_reference("wgmma", name, 1, R, L, d, dtype, masked, query16)


def test_wgmma_whole_tiles_of_two_groups():
    # two warps (copies 8 rows apart: a whole tile's copies by flat offsets and constant steps in the swizzled
    # layout), d = 64, two groups, one whole tile and a partial one
    assert_matches_the_reference("wgmma", "attention", 2, 20, 70, 64, "float16", False, True, threads=64)


def test_the_swizzled_layouts_give_exact_integer_products():
    spec = importlib.util.spec_from_file_location("gpu_wgmma_check", CHECK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for kind in ("bf16", "f16"):
        good, line = module.run(kind)
        assert good, line


def _attention_problem(cc, **options):
    sizes, dtypes = (("d", 128),), (("k", "float16"), ("v", "float16"))
    base = dict(threads=None, tile=None, segments=None, group=None, batch=None, simulator=False, cc=cc)
    return Problem(4096, 2048, sizes, dtypes, False, True, True, True, (("k", 64), ("v", 64)),
                   tuple({**base, **options}.items()))


def test_auto_takes_wgmma_on_hopper_only_and_mma_where_its_options_do_not_apply():
    f = fused("attention")
    reps = {"k": 64, "v": 64}
    assert choose(f, 4096, 2048, {"d": 128}, reps, _attention_problem((9, 0))) == "wgmma"
    assert choose(f, 4096, 2048, {"d": 128}, reps, _attention_problem((8, 0))) == "mma"
    assert choose(f, 4096, 2048, {"d": 128}, reps, _attention_problem((10, 0))) == "mma"  # no wgmma after sm_90
    assert choose(f, 4096, 2048, {"d": 128}, reps, _attention_problem((9, 0), group=32)) == "mma"


def test_wgmma_refuses_with_a_message():
    from redalgebra.codegen.strategies.wgmma import configure

    with pytest.raises(RedalgebraError, match="need an sm_90 GPU; this one is sm_80: use mma"):
        configure(fused("attention"), _attention_problem((8, 0)))
    with pytest.raises(RedalgebraError, match="whole warpgroups"):
        configure(fused("attention"), _attention_problem((9, 0), threads=64))
    with pytest.raises(RedalgebraError, match="the tensor cores take bfloat16 or float16"):
        compile(fused("attention"), "cudasim", "wgmma")(*_float32_call())


def _float32_call():
    rng = np.random.default_rng(1)
    return ({"k": rng.normal(size=(1, 64, 16)).astype(np.float32), "v": rng.normal(size=(1, 64, 16)).astype(np.float32)},
            {"q": rng.normal(size=(16, 16)).astype(np.float32), "scale": np.float32(0.25)})


@pytest.mark.parametrize("strategy", ["mma", "wgmma"])
def test_a_masked_key_far_above_the_others_changes_nothing(strategy):
    # its score is 960 above the row's maximum: the exponential of the element that does not count must not be taken
    # where it would raise (the simulator's math.exp) — on the GPU both sides of a select are computed, and it is inf
    R, L, d = 16, 40, 16
    k, v = np.zeros((1, L, d), np.float16), np.ones((1, L, d), np.float16)
    k[0, 5] = 60.0
    keep = np.ones((R, L), bool)
    keep[:, 5] = False
    params = {"q": np.ones((R, d), np.float32), "scale": np.float32(1.0)}
    out = compile(fused("attention"), "cudasim", strategy)({"k": k, "v": v}, params, keep)["y"]
    np.testing.assert_array_equal(out, np.ones((R, d), np.float32))
