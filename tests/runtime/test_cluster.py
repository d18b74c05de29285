"""Thread-block clusters: the simulator's model (a cluster's blocks run together, each with shared memory of its own),
the driver's launch attribute, and the segments of ``wgmma`` merged in a cluster (:mod:`~redalgebra.codegen.strategies
.cluster_merge`) against the combine kernel and float64."""

import dataclasses

import numpy as np
import pytest

from redalgebra import compile
from redalgebra.errors import RedalgebraError
from tests.catalogue import fused
from tests.runtime.test_wgmma_groups import _assert_close, _mla

# (the simulator swaps the module a kernel's globals name ``cuda``: each kernel is defined with such globals)
EXCHANGE = ("def exchange(out):\n"
            "    smc = cuda.shared.array(0, float32)\n"
            "    me, tid = cuda.blockIdx.y, cuda.threadIdx.x\n"
            "    sts_f32x2(smc, 2 * tid, float32(100 * me + tid), float32(-tid))\n"
            "    cluster_sync()\n"
            "    other = (me + 1) % cuda.gridDim.y\n"
            "    a, b, c, d = ld_cluster_f32x4(smc, 4 * (tid // 2), other)\n"
            "    out[cuda.blockIdx.x, me, tid] = a + b + c + d + ld_cluster_f32(smc, 1, other)\n"
            "    cluster_sync()\n")


def _exchange():
    from numba import float32

    from redalgebra.runtime import cluster
    from redalgebra.runtime.backends import cuda_module

    space = {"cuda": cuda_module("cudasim"), "float32": float32, "sts_f32x2": cluster.sts_f32x2,
             "cluster_sync": cluster.cluster_sync, "ld_cluster_f32x4": cluster.ld_cluster_f32x4,
             "ld_cluster_f32": cluster.ld_cluster_f32}
    exec(EXCHANGE, space)
    return space["cuda"].jit(space["exchange"]), cluster


def test_the_simulator_runs_a_clusters_blocks_together_each_reading_the_others_shared_memory():
    # two clusters of three blocks (grid (2, 3)): each block writes its pairs, meets its cluster, and reads its
    # neighbour's; numba's simulator alone runs the blocks one after the other on one buffer, where the first block
    # would wait at the cluster's barrier forever
    kernel, cluster = _exchange()
    out = np.zeros((2, 3, 4), np.float32)
    with cluster.clustered((1, 3, 1), 64):
        kernel[(2, 3), 4, 0, 64](out)
    for me in range(3):
        other, tid = (me + 1) % 3, np.arange(4)
        first = 2 * (tid // 2)  # the pairs of threads 2k and 2k + 1 read as one 16-byte chunk
        want = (100 * other + first) + (-first) + (100 * other + first + 1) + (-first - 1) + (-0.0)
        assert np.array_equal(out[:, me], np.broadcast_to(want, (2, 4)))


def test_a_cluster_intrinsic_outside_a_clustered_launch_is_refused_not_a_hang():
    kernel, _ = _exchange()
    with pytest.raises(RedalgebraError, match="outside a clustered launch"):
        kernel[(1, 2), 4, 0, 64](np.zeros((1, 2, 4), np.float32))


def test_reading_the_shared_memory_of_a_block_that_has_ended_is_refused():
    # without the cluster's second meeting, a block may end (its shared memory with it) while another still reads
    # it: the simulator refuses the read of an ended block's shared memory
    from numba import float32

    from redalgebra.runtime import cluster
    from redalgebra.runtime.backends import cuda_module

    import time

    # (a simulated kernel is Python: block 1 waits past block 0's end, its threads joined, by the clock)
    space = {"cuda": cuda_module("cudasim"), "float32": float32, "cluster_sync": cluster.cluster_sync,
             "ld_cluster_f32": cluster.ld_cluster_f32, "sleep": time.sleep}
    exec("def early(out):\n"
         "    smc = cuda.shared.array(0, float32)\n"
         "    smc[cuda.threadIdx.x] = float32(cuda.blockIdx.y)\n"
         "    cluster_sync()\n"
         "    if cuda.blockIdx.y == 1:\n"
         "        while out[0] == 0:\n"  # (block 1 reads only once block 0 has ended)
         "            pass\n"
         "        sleep(0.5)\n"
         "        out[1] = ld_cluster_f32(smc, 0, 0)\n"
         "    else:\n"
         "        out[0] = 1\n", space)
    early = space["cuda"].jit(space["early"])
    with pytest.raises(RedalgebraError, match="has ended"):
        with cluster.clustered((1, 2, 1), 64):
            early[(1, 2), 1, 0, 64](np.zeros(2, np.float32))


def test_a_grid_that_is_not_whole_clusters_is_refused():
    from redalgebra.runtime import cluster
    from redalgebra.runtime.backends import cuda_module

    space = {"cuda": cuda_module("cudasim"), "cluster_sync": cluster.cluster_sync}
    exec("def meet(out):\n    cluster_sync()\n    out[cuda.blockIdx.y] = 1\n", space)
    meet = space["cuda"].jit(space["meet"])
    out = np.zeros(3, np.int32)
    with pytest.raises(RedalgebraError, match="incomplete"):
        with cluster.clustered((1, 2, 1), 0):
            meet[(1, 3), 2](out)
    assert list(out) == [1, 1, 0]  # (the whole cluster ran; the third block, alone in its cluster, never did)


def test_the_driver_launches_clusters_with_their_shape_and_past_eight_blocks_allows_it(monkeypatch):
    # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION (4) with the shape in its first three 32-bit values, beside the programmatic
    # launch's (6); past the portable 8 blocks, the function's non-portable attribute (14) set first
    from redalgebra.runtime import driver

    asked, launched = [], []

    def get_function(out, kernel):
        out._obj.value = 13
        return 0

    def launch_ex(config, function, params, extra):
        c = config._obj
        launched.append([(c.attrs[k].id, list(c.attrs[k].value[:3])) for k in range(c.count)])
        return 0
    monkeypatch.setattr(driver, "_libcuda", lambda: (None, get_function, lambda code, text: 0,
                                                     lambda f, which, value: asked.append((f, which, value)) or 0))
    monkeypatch.setattr(driver, "_launch_ex", lambda: launch_ex)
    library = type("L", (), {"get_cufunc": lambda self: type("F", (), {"handle": 3})()})()
    dispatcher = type("D", (), {"py_func": staticmethod(lambda: None), "typeof_pyval": staticmethod(lambda a: a),
                                "compile": staticmethod(lambda t: type("O", (), {"_codelibrary": library})())})()
    configured = type("C", (), {"dispatcher": dispatcher, "griddim": (8, 16, 1), "blockdim": (256, 1, 1),
                                "sharedmem": 0})()
    step = driver.DriverStep(configured, (), (), dependent=True, cluster=(1, 16, 1))
    step.launch()
    assert asked == [(13, 14, 1)] and launched == [[(6, [1, 0, 0]), (4, [1, 16, 1])]]
    asked.clear()
    driver.DriverStep(configured, (), (), cluster=(1, 4, 1)).launch()
    assert asked == [] and launched[-1] == [(4, [1, 4, 1])]


@pytest.mark.parametrize("batch,heads,length,rank,rope,segments", [
    (1, 20, 70, 256, 24, 3),   # two column groups, a partial row tile, a rope staged as 32, three blocks a cluster
    (1, 70, 130, 128, 16, 2),  # one warpgroup, two row tiles (the second of 6 rows), two blocks a cluster
])
def test_segments_merged_in_a_cluster_give_the_combine_kernels_outputs(batch, heads, length, rank, rope, segments):
    # the merge is the combine kernel's, in the same order, from the cluster's shared memory instead of global memory:
    # the same bits (the simulator's division is exact either way), within the tolerance of float64, in float16 outputs
    inputs, params, ref = _mla(batch, heads, length, rank, rope, exact=True, seed=5)
    out = {}
    for cluster in (False, True):
        kernel = dataclasses.replace(compile(fused("mla_decode"), "cudasim", "wgmma", segments=segments,
                                             cluster=cluster, out_dtype="float16"), fast_exp=True)
        out[cluster] = kernel(inputs, params)["y"]
    _assert_close(out[True], ref)
    assert out[True].dtype == np.float16 and np.array_equal(out[True], out[False])
    sizes, reps = {"r": rank, "e": rope}, {"c": heads, "kr": heads}
    strategy, spec, extra = kernel.spec_for(batch * heads, length, {"c": "float16", "kr": "float16"}, sizes, reps=reps)
    src = kernel.source(spec, strategy)
    assert spec.cluster and src.entries == (("kernel", src.entries[0][1], "rows"),) and not src.scratch
    text = src.source
    assert "cluster_check(nseg)" in text and text.count("cluster_sync()") == 2 and "ld_cluster_f32x4(smc" in text
    assert "part_" not in text
    # what the simulator cannot see: every warp is done with the stages before the park overwrites them (a block
    # barrier), and the block's last act is the cluster's second meeting (no block leaves while another reads it)
    lines = [ln.strip() for ln in text.split("def kernel(")[1].splitlines() if ln.strip()]
    park = lines.index("smc = cuda.shared.array(0, float32)")
    assert lines[park - 1] == "cuda.syncthreads()" and lines[-1] == "cluster_sync()"


def test_cluster_asked_where_a_row_is_one_segment_runs_without_and_is_refused_where_it_cannot_apply():
    kernel = compile(fused("mla_decode"), "cudasim", "wgmma", segments=3, cluster=True)
    sizes, reps = {"r": 128, "e": 16}, {"c": 20, "kr": 20}
    dtypes = {"c": "float16", "kr": "float16"}
    assert not kernel.spec_for(20, 1, dtypes, sizes, reps=reps)[1].cluster  # (one tile: nothing to merge)
    assert kernel.spec_for(20, 200, dtypes, sizes, reps=reps)[1].cluster
    assert not compile(fused("mla_decode"), "cudasim", "wgmma", segments=3).spec_for(
        20, 200, dtypes, sizes, reps=reps)[1].cluster  # (off by default)
    many = compile(fused("mla_decode"), "cudasim", "wgmma", segments=20, cluster=True)
    with pytest.raises(RedalgebraError, match="20 segments, more than a cluster's 16 blocks"):
        many.spec_for(20, 64 * 20, dtypes, sizes, reps=reps)
    with pytest.raises(RedalgebraError, match="cluster must be True, False or None"):
        compile(fused("mla_decode"), "cudasim", "wgmma", cluster="yes")
    with pytest.raises(RedalgebraError, match="only the wgmma strategy does"):  # (not silently ignored)
        compile(fused("mla_decode"), "cudasim", "mma", cluster=True).spec_for(20, 200, dtypes, sizes, reps=reps)
