"""The vrows strategy in the CUDA simulator: vector elements split over a group of lanes, 16 bytes per lane."""

import numpy as np
import pytest

from redalgebra import RedalgebraError, derive, parse
from redalgebra.runtime import compile
from redalgebra.runtime.check import check
from redalgebra.runtime.choice import choose
from tests.catalogue import fused

# a bias per key (a scalar input beside the vectors), a position, the value row summed in the finalize (a lane
# sum of the final state), a dot product of the state with the query, and a row output read by later outputs
USER = """\
input k[d]
input v[d]
input b
param q[d]
param t > 0
let s = (dot(q, k) + b - pos / 64) / t
reduce m = max(s)
reduce l = sum(exp(s - m))
reduce o = sum(exp(s - m) * v)
out inv = 1 / l
out y = o * inv
out total = sum(o) * inv
out agree = sum(o * q) / l
"""


def _spec(f, rows, length, dtype, sizes, **options):
    dtypes = {s.name: dtype for s in f.cascade.inputs}
    return compile(f, "cudasim", "vrows", **options).spec_for(rows, length, dtypes, sizes)[1]


@pytest.mark.parametrize("d,dtype,group,vec,segments", [
    (128, "bfloat16", 16, 8, 3),  # decode's shape: a 256-byte row over 16 lanes, two elements per warp
    (40, "float16", 8, 8, 2),     # 5 chunks over 8 lanes: lanes 5-7 hold nothing
    (12, "bfloat16", 16, 1, 3),   # rows of 24 bytes, off the 16-byte grid: element by element
    (8, "float32", 2, 4, 1),      # two lanes per element, 16 elements per warp: one step covers the row
])
def test_vrows_matches_the_reference_for_any_vector_length(d, dtype, group, vec, segments):
    # (the simulator runs a thread per OS thread and a shuffle as two barriers: small shapes keep this fast)
    f = fused("decode_attention")
    spec = _spec(f, 2, 37, dtype, {"d": d})
    # few rows: split into segments (a partial and a combine kernel), two block steps or more each
    assert (spec.group, spec.vec, spec.segments) == (group, vec, segments)
    # (one block per row, no combine kernel: the float32 case below, whose step covers its row)
    results = check(f, "cudasim", "vrows", shapes=((2, 37),), dtypes=(dtype,), sizes={"d": d})
    assert all(r.passed for r in results), "\n".join(r.line() for r in results)


def test_vrows_runs_two_vector_inputs_of_different_lengths_and_gemv_like_cascades():
    for name, sizes in (("mla_decode", {"r": 64, "e": 16}), ("rmsnorm_gemm", {"n": 40})):
        results = check(fused(name), "cudasim", "vrows", shapes=((2, 37),), dtypes=("bfloat16",), sizes=sizes)
        assert all(r.passed for r in results), "\n".join(r.line() for r in results)


def test_a_users_cascade_with_scalar_inputs_positions_and_lane_sums_in_the_outputs():
    f = derive(parse(USER))
    assert choose(f, 4, 100, {"d": 24}) == "vrows"
    results = check(f, "cudasim", "vrows", shapes=((2, 45),), dtypes=("float32", "bfloat16"), sizes={"d": 24})
    assert all(r.passed for r in results), "\n".join(r.line() for r in results)


def test_vrows_refuses_what_it_cannot_hold_by_name():
    with pytest.raises(RedalgebraError, match="none: use rows"):
        check(fused("safe_softmax"), "cudasim", "vrows", shapes=((2, 5),))
    per_element = derive(parse("input k[d]\nparam q[d]\nlet s = dot(q, k)\nreduce m = max(s)\nout p = exp(s - m)\n"))
    with pytest.raises(RedalgebraError, match="per-element outputs"):
        compile(per_element, "cudasim", "vrows")({"k": np.zeros((1, 4, 8), np.float32)}, {"q": np.zeros(8)})
    with pytest.raises(RedalgebraError, match="not available on cpu"):
        compile(fused("decode_attention"), "cpu", "vrows")


def test_auto_sends_vector_elements_to_vrows_unless_it_cannot_hold_them():
    assert choose(fused("decode_attention"), 512, 4096, {"d": 128}) == "vrows"
    assert choose(fused("mla_decode"), 2048, 4096, {"r": 512, "e": 64}) == "vrows"
    per_element = derive(parse("input k[d]\nparam q[d]\nlet s = dot(q, k)\nreduce m = max(s)\nout p = exp(s - m)\n"))
    # (nor can the lanes strategies, whose lanes hold parts of each product: a block per row)
    assert choose(per_element, 4096, 512, {"d": 64}) == "tile"
    summed = derive(parse("input k[d]\nparam q[d]\nlet s = dot(q, k)\nreduce m = max(s)\nreduce t = topk(2, s)\n"
                          "out y = m\nout z = t\n"))
    assert choose(summed, 4096, 512, {"d": 64}) == "lanes"  # a top-k: not vrows'; no per-element output


def test_vectors_too_wide_for_a_lanes_registers_are_refused_and_auto_goes_elsewhere():
    f = fused("fp8_quant_gemm")  # a 7168-wide weight row per element: 224 components per lane at 32 lanes
    with pytest.raises(RedalgebraError, match="would hold 224 components"):
        compile(f, "cudasim", "vrows").spec_for(16, 7168, {"x": "bfloat16", "w": "bfloat16"}, {"n": 7168})
    assert choose(f, 16, 7168, {"n": 7168}) != "vrows"
    assert choose(fused("rmsnorm_gemm"), 16, 7168, {"n": 64}) == "vrows"


@pytest.mark.parametrize("setting", [0, 1])
def test_a_dependent_combine_waits_for_the_whole_partial_kernel_and_is_a_setting(monkeypatch, setting):
    # decode attention split into segments on a Hopper: with the setting, the combine is launched dependent and its
    # first act is to wait for the partial kernel (griddepcontrol.wait); off by default, and never in the simulator
    from redalgebra.cli import HOPPER
    from redalgebra.codegen.strategies import vrows

    monkeypatch.setattr(vrows, "DEPENDENT_COMBINE", setting)
    f = fused("decode_attention")
    dtypes = {s.name: "bfloat16" for s in f.cascade.inputs}
    kernel = compile(f, "cuda", "vrows")
    strategy, spec, extra = kernel.spec_for(32, 65536, dtypes, {"d": 128}, reps={"k": 32, "v": 32},
                                            device=(HOPPER, 132))
    assert extra["nseg"] > 1 and spec.dependent == bool(setting)
    combine = kernel.source(spec, strategy).source.split("def combine(")[1]
    first = [ln.strip() for ln in combine.splitlines()[1:] if ln.strip() and not ln.strip().startswith('"')][0]
    assert (first == "grid_wait()") == bool(setting)
    simulated = compile(f, "cudasim", "vrows", segments=4)
    assert not simulated.spec_for(32, 4096, dtypes, {"d": 128}, reps={"k": 32, "v": 32})[1].dependent
