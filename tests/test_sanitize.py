"""gpu/sanitize.py without a GPU: its cases, the plan's grouping, the reference check, the sanitizer-log parser
and the attribution of reports to cases. (The kernels themselves run in ``gpu/sanitize.py --dry-run``.)"""

from types import SimpleNamespace

import numpy as np
import pytest

from redalgebra import workloads
from redalgebra.codegen.strategies import names
from redalgebra.ir import evaluate
from tests.gpu_scripts import loaded

@pytest.fixture(scope="module")
def S():
    yield from loaded("sanitize")


def test_cases_cover_every_real_strategy_and_distinct_cascade_at_every_length(S):
    cascades = S.distinct_workloads(workloads.names(fusable=True))
    assert "attention" in cascades and "decode_attention" not in cascades  # the same text
    assert len({workloads.get(n).text for n in cascades}) == len(cascades)
    strategies = names("cuda", real=True) + ("auto",)
    cases = S.enumerate_cases(cascades, strategies, S.LENGTHS)
    assert {c.strategy for c in cases} == set(strategies) and {c.workload for c in cases} == set(cascades)
    for w in cascades:
        for s in strategies:
            first = "bfloat16" if s in S.ONLY16 else "float32"  # (16-bit inputs only: the tensor cores)
            plain = {(c.masked, c.length) for c in cases
                     if (c.workload, c.strategy, c.variant, c.dtype) == (w, s, "", first)}
            assert plain == {(m, n) for m in (False, True) for n in S.LENGTHS}
    bf16 = [c for c in cases if c.dtype == "bfloat16" and c.strategy not in S.ONLY16]
    assert {c.strategy for c in bf16} == {"rows", "vrows", "auto"} and all(c.masked and not c.variant for c in bf16)
    assert {c.variant for c in cases if c.strategy == "columns_mma"} == {"", "segments=3"}
    assert {c.dtype for c in cases if c.strategy == "columns_mma"} == {"bfloat16", "e4m3"}
    assert {c.variant for c in cases if c.strategy == "rows"} == {"", "group=4+tile=1", "group=128"}
    assert {c.variant for c in cases if c.strategy == "vrows"} == {"", "segments=3", "segments=1+threads=256"}
    assert len({c.cid for c in cases}) == len(cases)  # ids are unique
    assert all(c.rows == 5 for c in cases)


def test_masked_problems_have_fully_masked_rows_and_are_reproducible(S):
    case = S.Case("moe_routing", "rows", "", "float32", True, 5, 33)
    inputs, params, keep = S.problem(case)
    assert not keep[1].any() and not keep[4].any() and keep[0].any() and not keep[0].all()
    again = S.problem(case)
    assert np.array_equal(again[0]["g"], inputs["g"]) and np.array_equal(again[2], keep)
    assert S.problem(S.Case("moe_routing", "rows", "", "float32", False, 5, 33))[2] is None


def test_the_plan_groups_cases_by_kernel_and_keeps_refusals(S):
    cases = [S.Case(w, s, "", "float32", m, 5, n) for w in ("safe_softmax", "attention") for s in ("thread", "rows")
             for m in (False, True) for n in (7, 33)]
    groups, refused = S.plan(cases, "cuda")
    thread = [g for g in groups if g.strategy == "thread"]
    assert len(thread) == 4 and all(len(g.cases) == 2 for g in thread)  # the lengths share a kernel; masks do not
    assert not any(g.shared or g.sync for g in thread)                   # nothing for racecheck or synccheck
    assert not S.runs_under(thread[0], "racecheck", False) and S.runs_under(thread[0], "memcheck", False)
    rows = [g for g in groups if g.strategy == "rows"]
    assert rows and all(g.sync for g in rows)                            # the shuffle butterfly
    assert {cid.split("/")[1] for cid in refused} == {"rows"} and all("attention" in cid for cid in refused)
    assert all("per-element vectors" in why for why in refused.values())


def test_verify_reports_garbage_also_in_fully_masked_rows(S):
    case = S.Case("logsumexp", "rows", "", "float32", True, 5, 7)
    fused = S.fused_of("logsumexp")
    inputs, params, keep = S.problem(case)
    want = evaluate(fused.cascade, {k: v.astype(np.float64) for k, v in inputs.items()}, params, keep=keep)
    kernel = SimpleNamespace(fused=fused, user=None)
    raw = {k: np.asarray(v, np.float32) for k, v in want.items()}
    assert S.verify(case, kernel, "rows", inputs, params, keep, raw)[0]
    assert np.isneginf(raw["y"][1]).all()                       # an empty row's log-sum-exp
    masked_garbage = {"y": raw["y"].copy()}
    masked_garbage["y"][1] = 0.0
    passed, errors, _ = S.verify(case, kernel, "rows", inputs, params, keep, masked_garbage)
    assert not passed and errors["y"] == "inf mismatch"
    garbage = {"y": raw["y"].copy()}
    garbage["y"][2] += 1.0
    assert not S.verify(case, kernel, "rows", inputs, params, keep, garbage)[0]


MODULE_A, MODULE_B = "ra_" + "a" * 32, "ra_" + "b" * 32
MEMCHECK_LOG = f"""\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at cudapy::{MODULE_A}::kernel[abi:v1,cw51cXTLSUwv1sDUaKthqqNgQsgCMhSiUgCUzuVjRA7YAA](Array<float, 2, C>)+0x70
=========     by thread (3,0,0) in block (1,0,0)
=========     Address 0x7f0000001000 is out of bounds
=========
========= Program hit CUDA_ERROR_LAUNCH_FAILED (error 719) due to "unspecified launch failure" on CUDA API call to cuMemcpyDtoH_v2.
=========
========= ERROR SUMMARY: 2 errors
"""
RACECHECK_LOG = f"""\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at {MODULE_B}::kernel+0x1a0
=========     and Read access at {MODULE_B}::kernel+0x2b0 [16 hazards]
=========
========= Warning: Race reported between Read access at cudapy::{MODULE_A}::kernel+0x10
=========     and Write access at cudapy::{MODULE_A}::kernel+0x20 [4 hazards]
=========
========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)
========= ERROR SUMMARY: 1 error
"""


def test_parse_log_reads_reports_their_kernels_and_the_summaries(S):
    log = S.parse_log(MEMCHECK_LOG)
    assert log.errors == 2 and log.race is None
    assert [r.module for r in log.reports] == [MODULE_A, None]
    assert [r.severity for r in log.reports] == ["error", "error"]
    assert log.reports[0].offset == len("========= COMPUTE-SANITIZER\n")
    assert "out of bounds" in log.reports[0].text and "ERROR SUMMARY" not in log.reports[1].text
    race = S.parse_log(RACECHECK_LOG)
    assert race.race == (2, 1, 1) and race.errors == 1
    assert [(r.severity, r.module) for r in race.reports] == [("error", MODULE_B), ("warning", MODULE_A)]
    empty = S.parse_log("========= COMPUTE-SANITIZER\n")  # a process that died before its summary
    assert empty.errors is None and empty.reports == []


def test_reports_go_to_the_case_that_ran_their_kernel_when_the_log_reached_them(S):
    done = [dict(cid="a", modules=[MODULE_A], log_at=100), dict(cid="b", modules=[MODULE_A], log_at=300),
            dict(cid="c", modules=[MODULE_B], log_at=300)]
    report = lambda offset, module: S.Report(offset, "error", module, "========= x\n")  # noqa: E731
    placed, loose = S.attribute([report(150, MODULE_A), report(100, MODULE_A), report(250, MODULE_B),
                                 report(900, MODULE_A), report(50, "ra_" + "c" * 32)], done)
    assert {k: len(v) for k, v in placed.items()} == {"b": 3, "c": 1} and len(loose) == 1
    died = done + [dict(cid="d", modules=None, log_at=None)]  # the case a worker crashed in: any kernel
    placed, loose = S.attribute([report(900, MODULE_A), report(50, "ra_" + "c" * 32)], died)
    assert {k: len(v) for k, v in placed.items()} == {"d": 2} and not loose


def test_result_rows_and_the_summary_count_reports_per_case(S):
    cases = [S.Case("safe_softmax", "warp", "", "float32", m, 5, 7) for m in (False, True)]
    records = {cases[0].cid: dict(status="ok", resolved="warp"), cases[1].cid: dict(status="wrong", note="y 1e-2")}
    reports = [S.Report(0, "error", MODULE_A, "========= Invalid __global__ read of size 4 bytes\n")]
    rows = S.result_rows("memcheck", cases, records, {cases[1].cid: reports}, {})
    assert [(r["status"], r["errors"]) for r in rows] == [("ok", 0), ("errors+wrong", 1)]
    assert rows[1]["note"].startswith("Invalid __global__ read")
    table = S.summary_table(rows)
    assert table[2] == "| memcheck | warp | 2 | 1 | 1 | 0 | 1 | 0 | 0 | 0 |"
