"""Real CUDA variants compile to sm_90 PTX with float32 arithmetic only, and the default kernels move data
the way they claim to (no GPU needed).

Runs in subprocesses: this test process uses the CUDA simulator, which cannot compile PTX. Every variant
is configured by the launch policy a call on the GPU uses (``Kernel.spec_for``, ``auto`` resolved as
``compile(..., backend="cuda")`` does), with the CUDA default ``fast_exp``.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from redalgebra import workloads
from redalgebra.codegen.strategies import names
from redalgebra.codegen.strategies.columns_mma import UNROLL as UNROLL_MMA

#: The environment variable naming the report of the jobs started with the session (``conftest.py``).
EARLY = "REDALGEBRA_PTX_REPORT"

SCRIPT = r"""
import json, sys
from multiprocessing import get_context
from redalgebra import workloads
from redalgebra.derive import derive
from redalgebra.runtime.compile import compile
from redalgebra.runtime.ptx import compile_ptx, ptx_facts
SIZES = {"d": 128, "e": 64, "n": 64, "r": 512}
fused = {}

def run(job):
    key, name, strategy, rows, length, scalar_dtype, options = job
    f = fused.setdefault(name, derive(workloads.get(name).cascade))
    c = f.cascade
    vector_dtype = options.pop("vector_dtype", "float16")
    dtypes = {s.name: scalar_dtype if s.size is None else vector_dtype for s in c.inputs}
    sizes = {d: SIZES[d] for d in c.sizes.values() if isinstance(d, str)}
    sizes.update(options.pop("sizes", {}))
    shared = options.pop("shared", False)  # the vector inputs given once for all rows (a weight matrix)
    heads = options.pop("heads", rows if shared else None)  # or once per this many rows (a token's heads)
    reps = {s.name: heads for s in c.inputs if s.size is not None} if heads else None
    resolved, spec, _ = compile(f, "cuda", strategy, **options).spec_for(rows, length, dtypes, sizes, reps=reps)
    facts = ptx_facts(compile_ptx(f, resolved, spec))
    return key, dict(facts, strategy=resolved, tile=spec.tile, vec=spec.vec, resident=spec.resident,
                     shifted=spec.shifted, element_outputs=len(f.per_element_outputs), group=spec.group,
                     segments=spec.segments)

if __name__ == "__main__":
    with get_context("fork").Pool(2) as pool:  # the jobs in order, to whichever worker is free
        print(json.dumps(dict(pool.imap_unordered(run, json.loads(sys.argv[1])))))
"""

# the first generation's real CUDA strategies (codegen/strategies/legacy.py; their simulator twins block_shared
# and tile_shared run on GPUs too), each over a sample of cascades; rows (auto's choice for scalar elements) below
LEGACY = ("thread", "warp", "block", "block_shared", "tile", "tile_shared", "nonincremental", "split", "unfused",
          "lanes", "split_lanes")
# exp and a dot product over vector inputs (keys and values); top-k with exp (a router); vector input, fp8
# rounding and no exp (MLA's two vector inputs of different lengths: auto's vrows, VECTOR_AUTO below)
SAMPLE = ("decode_attention", "moe_routing", "fp8_quant_gemm")
# each legacy strategy on one of the three in turn (1-5 s of CPU each, and the suite's time is close to its limit):
# every cascade on 3 to 5 of the 11 strategies, and lanes and split_lanes each on the dot product and on a cascade
# without one
LEGACY_RUNS = [(SAMPLE[i % len(SAMPLE)], strategy) for i, strategy in enumerate(LEGACY)]
LEGACY_RUNS += [(name, strategy) for strategy in ("lanes", "split_lanes") for name in SAMPLE[:2]
                if (name, strategy) not in LEGACY_RUNS]
SCALAR = [n for n in workloads.names(fusable=True)
          if all(s.size is None for s in workloads.get(n).cascade.inputs)]
# auto (rows) on a sample of the scalar cascades, resident and aligned (rows kernels compile in 3-15 s
# each): softmax (per-element output), cross-entropy (row output, positions), the router (top-k
# selection), softmax entropy (a multi-term sum); safe_softmax also in float32
AUTO_SAMPLE = ("safe_softmax", "cross_entropy", "moe_routing", "softmax_entropy")
AUTO = [(name, 1024, 4096, "bfloat16") for name in AUTO_SAMPLE] + [("safe_softmax", 1024, 4096, "float32")]
# auto on the vector cascades (vrows): decode attention split into segments (a partial and a combine kernel), MLA's
# two vector inputs of different lengths (the 64-wide rope key held by 8 of the 32 lanes)
VECTOR_AUTO = [("decode_attention", 512, 2048, "bfloat16"), ("mla_decode", 64, 4096, "bfloat16")]
# rows over an odd row: off the 16-byte grid (a partial first chunk), walked in passes (read twice); a small
# group and tile make it a row of many passes (the default's 32 unrolled elements per thread compile slowly)
PASSES = {"safe_softmax": (64, 4095, "float32", {"group": 32, "tile": 2})}


def _key(name, strategy, rows=512, length=2048, dtype="bfloat16"):
    return f"{name}/{strategy}/{rows}x{length}/{dtype}"


def _jobs() -> list:
    """The slow ones (rows kernels: 3-15 s of CPU each, the legacy ones about 1 s) first, so that the two
    workers finish together."""
    jobs = [(_key(name, "auto", *shape), name, "auto", *shape, {}) for name, *shape in AUTO + VECTOR_AUTO]
    jobs += [(_key(name, "rows", *shape[:3]), name, "rows", *shape) for name, shape in PASSES.items()]
    jobs += [(_key("fp8_quant_gemm", "columns", 16, 4096), "fp8_quant_gemm", "columns", 16, 4096, "bfloat16", {})]
    jobs += [(_key("fp8_quant_gemm", "columns_mma", 16, 4096), "fp8_quant_gemm", "columns_mma", 16, 4096, "bfloat16",
              {"shared": True})]
    jobs += [(_key("fp8_quant_gemm", "columns_mma", 16, 4096, "e4m3"), "fp8_quant_gemm", "columns_mma", 16, 4096,
              "bfloat16", {"shared": True, "vector_dtype": "e4m3"})]
    jobs += [(_key("fp8_quant_gemm", "columns_wgmma", 256, 4096), "fp8_quant_gemm", "columns_wgmma", 256, 4096,
              "bfloat16", {"shared": True})]
    jobs += [(_key("fp8_quant_gemm", "columns_wgmma", 256, 4096, "e4m3"), "fp8_quant_gemm", "columns_wgmma", 256,
              4096, "bfloat16", {"shared": True, "vector_dtype": "e4m3"})]
    jobs += [(_key("fp8_quant_gemm", "columns_wgmma", 256, 4096, "fp8"), "fp8_quant_gemm", "columns_wgmma", 256,
              4096, "bfloat16", {"shared": True, "vector_dtype": "e4m3", "fp8_products": True})]
    jobs += [(_key("attention", "mma", 4096, 512), "attention", "mma", 4096, 512, "bfloat16", {})]
    jobs += [(_key("attention", "wgmma", 4096, 512), "attention", "wgmma", 4096, 512, "bfloat16", {})]
    # the producer block walking row tiles, as the policy builds it for long prefill rows
    jobs += [(_key("attention", "wgmma", 4096, 2048, "walking"), "attention", "wgmma", 4096, 2048, "bfloat16",
              {"heads": 2048, "threads": 384, "tile": 128, "persistent": True})]
    # ... and a causal mask's (ALiBi's gate), the policy's block there: each role's vote at its own named barrier
    jobs += [(_key("alibi_attention", "wgmma", 64 * 2048, 2048, "walking"), "alibi_attention", "wgmma", 64 * 2048,
              2048, "bfloat16", {"heads": 2048})]
    # MLA decode: four tokens' 128 heads over their latent rows (each shared by its token's heads: reps of 128), at
    # half MLA's widths (256 + 16: the same kernel's structure, compiled in a third of the time)
    jobs.insert(0, (_key("mla_decode", "wgmma", 512, 4096), "mla_decode", "wgmma", 512, 4096, "bfloat16",
                    {"heads": 128, "sizes": {"r": 256, "e": 16}}))
    # ... its segments merged in a thread-block cluster (four blocks a cluster: the policy's four segments)
    jobs.insert(1, (_key("mla_decode", "wgmma", 512, 4096, "cluster"), "mla_decode", "wgmma", 512, 4096, "bfloat16",
                    {"heads": 128, "sizes": {"r": 256, "e": 16}, "cluster": True}))
    return jobs + [(_key(name, strategy), name, strategy, 512, 2048, "bfloat16", {}) for name, strategy in LEGACY_RUNS]


#: Runs SCRIPT with the jobs and writes its exit status and output to a file, atomically, whatever happens; stops
#: it (its whole group: the compiling pool) when the process that started this one is gone (pytest killed).
WRAPPER = r"""
import json, os, signal, subprocess, sys, time
path, script, jobs, parent = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])  # parent: the starter's pid
os.nice(19)  # (and its pool): the simulator's threads, in the workers beside it, slow several-fold when they wait for a core
try:  # a session of its own is an autogroup of its own where Linux has them, whose share a nice value does not lower
    with open("/proc/self/autogroup", "w") as fh:
        fh.write("19")
except OSError:  # (no autogroups here)
    pass
report, stop = {"returncode": -1, "stdout": "", "stderr": "the jobs did not finish"}, False
try:
    # in this process's group (its own session, start() makes it): a kill of the group stops the compiling pool too
    proc = subprocess.Popen([sys.executable, "-c", script, jobs], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 1800  # (at the lowest priority, beside a whole suite's workers: slow but not stuck)
    while True:
        try:
            out, err = proc.communicate(timeout=1)
            report = {"returncode": proc.returncode, "stdout": out, "stderr": err[-3000:]}
            break
        except subprocess.TimeoutExpired:
            if os.getppid() != parent or time.monotonic() > deadline:
                report["stderr"], stop = "stopped: " + ("1800 s passed" if os.getppid() == parent else "pytest is gone"), True
                break
except BaseException as err:  # noqa: BLE001 - said in the report
    report["stderr"], stop = repr(err), True
finally:
    with open(path + ".part", "w") as fh:
        json.dump(report, fh)
    os.replace(path + ".part", path)
    if stop:
        os.killpg(os.getpgrp(), signal.SIGKILL)
"""


def start(path: str) -> subprocess.Popen:
    """Compile every job in a subprocess (two compiling workers: the CI machine has two cores), its report to
    ``path``. The whole suite starts it when the session starts (``conftest.py``), so that its four minutes of
    CPU overlap the other tests instead of holding one worker when this module's turn comes."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return subprocess.Popen([sys.executable, "-c", WRAPPER, path, SCRIPT, json.dumps(_jobs()), str(os.getpid())], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = os.environ.get(EARLY)
    if not path:  # this module run on its own: compile now
        path = str(tmp_path_factory.mktemp("ptx") / "report.json")
        start(path).wait()
    deadline = time.monotonic() + 1860  # (the wrapper stops the jobs at 1800 s and writes its report whatever happens)
    while not os.path.exists(path):
        assert time.monotonic() < deadline, "the PTX jobs wrote no report"
        time.sleep(0.5)
    with open(path) as fh:
        proc = json.load(fh)
    assert proc["returncode"] == 0, proc["stderr"]
    out = json.loads(proc["stdout"].strip().splitlines()[-1])
    assert sorted(out) == sorted(key for key, *_ in _jobs())
    return out


def test_the_sample_covers_every_real_cuda_strategy_and_the_scalar_cascades_kinds():
    assert set(LEGACY) | {"rows", "vrows", "columns", "columns_mma", "columns_wgmma", "mma", "wgmma"} == \
        set(names("cuda", real=True)) | {"block_shared", "tile_shared"}
    assert set(AUTO_SAMPLE) <= set(SCALAR)
    texts = [workloads.get(n).text for n in SAMPLE]
    assert any("exp(" in t and "dot(" in t for t in texts) and any("topk(" in t for t in texts)
    assert any("exp(" not in t for t in texts)
    # the legacy sample: every strategy on a cascade, every cascade on three or more strategies, the shuffles' check on the
    # lanes strategies both ways (a dot product: butterflies; none: no butterflies)
    assert {s for _, s in LEGACY_RUNS} == set(LEGACY) and len(set(LEGACY_RUNS)) == len(LEGACY_RUNS)
    assert all([n for n, _ in LEGACY_RUNS].count(n) >= 3 for n in SAMPLE)
    for strategy in ("lanes", "split_lanes"):
        dots = {"dot(" in workloads.get(n).text for n, s in LEGACY_RUNS if s == strategy}
        assert dots == {True, False}, strategy


@pytest.mark.slow
def test_cuda_variants_compile_to_sm90_ptx_without_float64(report):
    for variant, facts in report.items():
        name, strategy = variant.split("/")[:2]
        text = workloads.get(name).text
        assert facts["sm_90"], variant
        assert facts["registers"] > 0, variant  # ptxas assembled it (the intrinsics' inline PTX included)
        assert facts["f64"] == 0, variant
        assert facts["ld_generic"] == facts["st_generic"] == 0, variant  # every access known global or shared
        # fast_exp is the CUDA default: ex2 exactly where the cascade has an exp
        assert (facts["ex2"] > 0) == ("exp(" in text), variant
        if strategy.endswith("lanes"):  # dot products completed by shuffles across the warp's lanes
            assert (facts["shfl_bfly"] > 0) == ("dot(" in text), variant


@pytest.mark.slow
def test_auto_is_rows_with_128_bit_chunks_on_the_scalar_cascades(report):
    runs = [(_key(name, "auto", *shape), name, *shape) for name, *shape in AUTO]
    runs += [(_key(name, "rows", *shape[:3]), name, *shape[:3]) for name, shape in PASSES.items()]
    for key, name, rows, length, dtype in runs:
        facts = report[key]
        c = workloads.get(name).cascade
        assert facts["strategy"] == "rows" and facts["vec"] == 16 // (4 if dtype == "float32" else 2), key
        assert facts["shifted"] == (length % 4 != 0) and facts["resident"] == ("/auto/" in key), key
        # per pass, a chunk of 16 bytes is one 128-bit load per input and one 128-bit store per element output
        passes = 1 if facts["resident"] or not facts["element_outputs"] else 2
        assert facts["ld_global_128"] == passes * len(c.inputs) * facts["tile"], (key, facts)
        assert facts["st_global_128"] == facts["element_outputs"] * facts["tile"], (key, facts)
        assert facts["ld_global_vector_narrow"] == facts["st_global_vector_narrow"] == 0, key
        # element by element: only the partial-chunk branch (one per element of a chunk) and the row's params
        held = passes * len(c.inputs) * facts["tile"] * facts["vec"]
        assert facts["ld_global_scalar"] <= held + len(c.params), (key, facts)
        # every state in registers, top-k's too (no arrays indexed at run time, no spills), by PTX and by ptxas
        assert facts["ld_local"] == facts["st_local"] == facts["local_bytes"] == 0, key
        assert facts["spill_stores"] == facts["spill_loads"] == facts["stack_bytes"] == 0, (key, facts)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_default_softmax_kernel_moves_its_data_128_bits_at_a_time(report, dtype):
    facts = report[_key("safe_softmax", "auto", 1024, 4096, dtype)]
    assert facts["strategy"] == "rows" and facts["resident"] and not facts["shifted"]
    chunk = facts["tile"] * facts["vec"]  # elements a thread holds: tile chunks of 16 bytes
    # one 128-bit load and one 128-bit store per chunk (ld.global.v4.f32|u32, st.global.v4.f32|u32)
    assert facts["ld_global_128"] == facts["st_global_128"] == facts["tile"] > 0
    assert facts["ld_global_vector_narrow"] == facts["st_global_vector_narrow"] == 0
    # element-by-element loads and stores: the partial-chunk branch (one per element of a chunk), nothing more
    assert facts["ld_global_scalar"] <= chunk and facts["st_global_scalar"] <= chunk
    assert facts["ld_local"] == facts["st_local"] == facts["local_bytes"] == 0
    assert facts["f64"] == 0 and facts["ex2"] > 0 and facts["sm_90"]


@pytest.mark.slow
def test_auto_on_vector_elements_is_vrows_reading_16_bytes_per_lane(report):
    for name, rows, length, dtype in VECTOR_AUTO:
        facts = report[_key(name, "auto", rows, length, dtype)]
        c = workloads.get(name).cascade
        assert facts["strategy"] == "vrows" and facts["vec"] == 8, facts
        # each lane reads its 16-byte chunks of every vector input of every element in flight: one 128-bit load
        # each (MLA's 512-wide latent row is two chunks per lane at 32 lanes, its rope key one), none narrower
        chunks = {n: -(-length_ // (8 * facts["group"])) for n, length_ in (("d", 128), ("r", 512), ("e", 64))}
        per_element = sum(chunks[s.size] for s in c.inputs if s.size is not None)
        assert facts["ld_global_128"] == per_element * facts["tile"], (name, facts)
        assert facts["ld_global_vector_narrow"] == 0 and facts["shfl_bfly"] > 0
        assert facts["ld_local"] == facts["st_local"] == facts["local_bytes"] == 0, name
        assert facts["spill_stores"] == facts["spill_loads"] == facts["stack_bytes"] == 0, (name, facts)
    assert report[_key("decode_attention", "auto", 512, 2048)]["segments"] == 2  # 512 rows: two blocks per row keep the GPU busy


@pytest.mark.slow
def test_columns_reads_each_weight_chunk_128_bits_at_a_time(report):
    facts = report[_key("fp8_quant_gemm", "columns", 16, 4096)]
    # the scalars' kernel (its aligned rows 16 bytes a load: PREPASS_TILE elements a thread per pass), the column
    # tiles (UNROLL elements' chunks in flight), the segments' sum
    from redalgebra.codegen.strategies.columns import PREPASS_TILE, UNROLL

    assert facts["strategy"] == "columns" and facts["vec"] == 8
    assert facts["ld_global_128"] == UNROLL + PREPASS_TILE // 8 and facts["ld_global_vector_narrow"] == 0
    assert facts["ld_local"] == facts["st_local"] == facts["local_bytes"] == 0
    assert facts["spill_stores"] == facts["spill_loads"] == facts["stack_bytes"] == 0, facts


@pytest.mark.slow
def test_mma_multiplies_on_the_tensor_cores_with_operands_staged_by_cp_async(report):
    facts = report[_key("attention", "mma", 4096, 512)]
    # d = 128 in tiles of 64: per k-step of 16, 8 products of 16x8 for the scores (and 8 for the query's residual,
    # behind a branch), per 16 keys 16 products of P·V; the operands by ldmatrix; each thread copies 8 chunks of
    # 16 bytes of the key tile and 8 of the value tile, for the first tile and in the loop, each in two forms (a
    # whole tile's from one address and constant steps, the row's last clamped and zero-filled)
    assert facts["strategy"] == "mma" and facts["mma"] == 8 * 8 * 2 + 4 * 16
    assert facts["ldmatrix"] > 0 and facts["cp_async"] == 2 * 2 * 8 * 2
    assert facts["ex2"] >= 32  # one exp per score, shared by the row sum and the product's factor
    assert facts["ld_local"] == facts["st_local"] == facts["local_bytes"] == 0
    assert facts["spill_stores"] == facts["spill_loads"] == facts["stack_bytes"] == 0, facts


def _columns_mma_steps(facts: dict, per_step: int, row_bytes: int = 16) -> int:
    """Steps of 16 elements in ``columns_mma``'s products kernel (the loop's four and the tail's, as many as LLVM
    unrolled), from the products: ``per_step`` a step. Each step loads ``row_bytes`` of four weight rows (not kept in
    L1; 16 or 8) and 16 bytes of factors (the fragments' order); the kernel of the scalars and the factors reads a row
    16 bytes at a time (4 chunks a thread) and its factors 8 elements at a time (one load)."""
    steps = facts["mma"] // per_step
    assert facts["strategy"] == "columns_mma" and facts["mma"] == per_step * steps and steps >= UNROLL_MMA + 1, facts
    weights_128 = 4 * steps if row_bytes == 16 else 0
    assert facts["ld_stream"] == 4 * steps and facts["ld_global_128"] == weights_128 + steps + 4 + 1, facts
    assert facts["ld_global_vector_narrow"] == 4 * steps - weights_128, facts  # 8-byte weight loads
    # straight into the fragments: no shared-memory stages
    assert facts["ldmatrix"] == facts["cp_async"] == 0
    assert facts["ld_local"] == facts["st_local"] == facts["local_bytes"] == 0
    assert facts["spill_stores"] == facts["spill_loads"] == facts["stack_bytes"] == 0, facts
    return steps


@pytest.mark.slow
def test_columns_mma_multiplies_the_factors_and_weights_on_the_tensor_cores(report):
    # per step of 16 elements 8 products of 16x8 (a lane's 8 columns of 16-bit weights)
    _columns_mma_steps(report[_key("fp8_quant_gemm", "columns_mma", 16, 4096)], 8)


@pytest.mark.slow
def test_columns_mma_widens_e4m3_weights_on_chip(report):
    # at 16 rows a lane loads 8 bytes of each weight row: per step 8 products of 16x8 (its 8 e4m3 columns, two n8
    # tiles of rows), their A words widened by cvt.rn.f16x2.e4m3x2: 2 words of 4 bytes for each of the two row pairs,
    # 4 columns each; and the factors kernel's fp8() of its 8 elements (rounded to e4m3 and widened back, exactly)
    facts = report[_key("fp8_quant_gemm", "columns_mma", 16, 4096, "e4m3")]
    steps = _columns_mma_steps(facts, 8, row_bytes=8)
    assert facts["e4m3_widen"] == 2 * 2 * 4 * steps + 8


@pytest.mark.slow
@pytest.mark.parametrize("weights", ["float16", "e4m3", "fp8"])
def test_columns_wgmma_is_a_gemm_on_warpgroups_without_serializing(report, weights):
    facts = report[_key("fp8_quant_gemm", "columns_wgmma", 256, 4096, *((weights,) if weights != "float16" else ()))]
    # per tile four products of 64 x 256 (k16 steps of 16-bit values; e4m3 weights widened to float16 first), or
    # with fp8_products four of 64 x 128 x 32 on the FP8 instruction (their fresh sums read only after a full wait:
    # reading them with a group in flight makes ptxas serialize), and nothing on mma.sync; no subroutine call (64-bit
    # or IEEE divisions) for ptxas to serialize them over
    assert facts["strategy"] == "columns_wgmma" and facts["wgmma"] == 4 and facts["mma"] == 0
    assert facts["wgmma_serialized"] == 0, facts
    assert facts["ld_local"] == facts["st_local"] == facts["local_bytes"] == 0
    assert facts["spill_stores"] == facts["spill_loads"] == facts["stack_bytes"] == 0, facts


@pytest.mark.slow
def test_wgmma_multiplies_by_warpgroups_without_serializing(report):
    facts = report[_key("attention", "wgmma", 4096, 512)]
    # d = 128: per tile 8 k-steps of Q·Kᵀ (and 8 for the query's residual, behind its own fence and wait), 4 key
    # steps of P·V; ptxas serializes every wgmma of a kernel that calls a subroutine (a 64-bit division, an IEEE
    # division's slow path) or where it had to add a fence: none of that here
    assert facts["strategy"] == "wgmma" and facts["wgmma"] == 8 + 8 + 4 and facts["mma"] == 0
    assert facts["wgmma_serialized"] == 0, facts
    assert facts["ld_local"] == facts["st_local"] == facts["local_bytes"] == 0
    assert facts["spill_stores"] == facts["spill_loads"] == facts["stack_bytes"] == 0, facts
    # the outputs: a thread's neighbouring components by one 8-byte store, 128 / 8 of them for each of its two rows
    assert facts["st_global_vector_narrow"] == 2 * 128 // 8 and facts["st_global_scalar"] == 0, facts
    # the thread's indices taken afresh each tile (fresh): 198 registers; with the per-thread addresses hoisted out
    # of the loop and held across it, 252 (and MLA's 128 accumulators a thread spilled 220 bytes). The next tile's
    # copies issued while the scores' products run hold their addresses beside the accumulators in flight: 233
    # (and 2.5-7 % faster at LLaMA-65B on the H200) — the bound is the hoisting's, with a margin below it
    assert facts["registers"] <= 240, facts


def test_the_walking_producer_block_meets_at_named_barriers_only(report):
    # blocks walking row tiles: the consumers vote on their query's residuals at a named barrier of their 256 threads
    # (bar.red.or with a thread count), never at the block's barrier 0, which the producer, copying on, would not
    # reach; ptxas accepts the vote's inline PTX (assembled here). Tiles of 128 keys: 8 steps of the scores, 8 of the
    # pending P·V in the loop and 8 in its drain
    facts = report[_key("attention", "wgmma", 4096, 2048, "walking")]
    assert facts["strategy"] == "wgmma" and facts["wgmma"] == 8 + 8 + 8, facts
    assert facts["block_barriers"] == 0 and facts["named_votes"] == 1, facts
    assert facts["ld_local"] == facts["st_local"] == facts["local_bytes"] == 0
    # under a causal mask (the policy's block, walking): the counts' votes at named barriers too (bit by bit, each
    # unrolled), still none at barrier 0
    gated = report[_key("alibi_attention", "wgmma", 64 * 2048, 2048, "walking")]
    assert gated["strategy"] == "wgmma" and gated["block_barriers"] == 0 and gated["named_votes"] > 3, gated


@pytest.mark.slow
def test_mla_decode_on_warpgroups_without_serializing(report):
    facts = report[_key("mla_decode", "wgmma", 512, 4096)]
    # both dot products (256 + 16 components) in one chain, 17 k16 steps of Q·Kᵀ over the tile's 64 keys by the first
    # warpgroup, and the float32 query's residual's 17 staged beside it (at MLA's 512 + 64 it does not fit and is
    # multiplied on mma.sync: gpu/mla_check.py); P·V in 4 key steps of 128 columns a warpgroup, the first's factors
    # from its registers, the second's from the factor tile it hands over; segments and their combine kernel
    assert facts["strategy"] == "wgmma" and facts["segments"] == 2 and facts["kernels"] == 2
    assert facts["wgmma"] == 2 * 17 + 2 * 4 and facts["mma"] == 0
    # the hand-over: one arrival and one wait at its named barrier; the block's barriers are the residuals' vote, the
    # loop's one a tile (its copies landed) and the final states handed to the second group
    assert facts["named_barriers"] == 2 and facts["block_barriers"] == 3, facts
    assert facts["wgmma_serialized"] == 0 and facts["f64"] == 0, facts
    # 64 accumulators of P·V and 32 of the scores a thread: no spills here (at 512 + 64, 128 accumulators: ptxas
    # spills about 200 bytes)
    assert facts["spill_stores"] == facts["spill_loads"] == 0, facts


def test_mla_decode_merging_its_segments_in_a_cluster_is_one_kernel_without_serializing(report):
    # the partial kernel's states parked in shared memory, read by the cluster's blocks (16-byte loads of the vector
    # states' components, a float each of the scalar states), two meetings of the cluster; its one-time index
    # arithmetic in 32 bits and its division by div.full, so no subroutine call to serialize the loop's wgmma
    facts = report[_key("mla_decode", "wgmma", 512, 4096, "cluster")]
    assert facts["strategy"] == "wgmma" and facts["kernels"] == 1 and facts["cluster_barriers"] == 2
    assert facts["ld_cluster"] > 0 and facts["ld_generic"] == facts["st_generic"] == 0
    assert facts["wgmma"] == 2 * 17 + 2 * 4 and facts["wgmma_serialized"] == 0 and facts["f64"] == 0, facts
    assert facts["spill_stores"] == facts["spill_loads"] == 0, facts


SETMAXNREG_PTX = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k()
.maxntid 384, 1, 1
{
	setmaxnreg.inc.sync.aligned.u32 224;
	ret;
}
"""


def test_ptxas_performance_losses_are_reported():
    # ptxas ignores setmaxnreg in code compiled for linking (numba-cuda's way, and this module's): said as a
    # "Potential Performance Loss", which `redalgebra ptx` prints
    from redalgebra.runtime.ptx import facts_text, ptx_facts

    facts = ptx_facts(SETMAXNREG_PTX)
    if "registers" not in facts:
        pytest.skip("no nvJitLink here to assemble the PTX")
    assert any("C7504" in loss and "setmaxnreg" in loss for loss in facts["performance_losses"]), facts
    assert any(line.startswith("ptxas: (C7504)") for line in facts_text(facts))
    # ... with what a call does about it (the driver launch loads such a kernel as a whole program)
    assert any("from its whole PTX, where setmaxnreg is honoured" in line for line in facts_text(facts))
    assert not any("whole PTX" in line for line in facts_text(dict(facts, performance_losses=())))
