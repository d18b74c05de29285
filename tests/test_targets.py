"""gpu/targets.py without a GPU: the targets' table from one run's rows (ratios to the fastest named baseline, fractions
of copy, missing cases and systems)."""

import sys
from types import SimpleNamespace

import pytest

from tests.gpu_scripts import GPU, loaded


@pytest.fixture(scope="module")
def T():
    yield from loaded("targets")


def row(system, ms, frac_copy=0.0, shape="S", dtype="float16"):
    return SimpleNamespace(system=system, ms=ms, frac_copy=frac_copy, shape=shape, dtype=dtype)


def test_a_target_is_a_ratio_to_the_fastest_of_its_baselines_in_the_same_run(T):
    best = T.Target("BERT", "prefill", 0, T.SDPA, 1.0)
    rows = [row("sdpa flash", 0.06), row("sdpa cudnn", 0.05), row("eager", 0.01),  # eager: not a named baseline
            row(T.OURS, 0.04), row(T.PER_CALL, 0.055)]
    m = T.measure(best, rows)
    assert m["base"] == 0.05 and m["kernel"] == pytest.approx(1.25) and m["per_call"] == pytest.approx(0.05 / 0.055)
    assert m["met"] is True
    assert T.measure(T.Target("x", "prefill", 0, ("sdpa flash",), 1.6), rows)["met"] is False  # 1.5 < 1.6


def test_a_copy_target_reads_our_fraction_of_copy_and_a_missing_number_is_not_a_verdict(T):
    copy = T.Target("MLA", "mla", 1, (), 0.7)
    m = T.measure(copy, [row("eager", 0.16), row(T.OURS, 0.07, frac_copy=0.269), row(T.PER_CALL, 0.075)])
    assert m["kernel"] == pytest.approx(0.269) and m["per_call"] == pytest.approx(0.269 * 0.07 / 0.075)
    assert m["met"] is False
    failed = T.measure(T.Target("x", "mla", 1, ("eager",), 2.0), [row("eager", 0.16), row(T.OURS, float("nan"))])
    assert failed["met"] is None  # ours did not run (or failed its check): neither met nor missed


def test_a_failed_baseline_is_skipped_and_missing_rows_give_no_verdict(T):
    vs_sdpa = T.Target("BERT", "prefill", 0, T.SDPA, 1.0)
    m = T.measure(vs_sdpa, [row("sdpa flash", float("nan")), row("sdpa cudnn", 0.05), row(T.OURS, 0.04)])
    assert m["base"] == 0.05 and m["met"] is True  # the flash backend refused the shape: cuDNN is the best left
    assert m["per_call"] != m["per_call"]  # no per-call row: no per-call ratio
    none = T.measure(vs_sdpa, [row("eager", 0.2), row(T.OURS, 0.04), row(T.PER_CALL, 0.05)])
    assert none["met"] is None  # none of the named baselines ran


LLAMA = "LLaMA-65B B1 H64 L2048 D128 Q2048"


def test_the_table_has_a_line_a_target_and_says_which_cases_did_not_run_or_are_not_the_targets(T):
    rows = [row("sdpa flash", 0.44, shape=LLAMA), row("sdpa cudnn", 0.24, shape=LLAMA),
            row(T.OURS, 0.35, shape=LLAMA), row(T.PER_CALL, 0.36, shape=LLAMA)]
    lines = T.table({("prefill", 2): rows, ("prefill", 3): rows}).splitlines()
    assert len(lines) == 2 + len(T.TARGETS)
    flash = next(line for line in lines if line.startswith("| prefill LLaMA-65B L2048 fp16, vs flash"))
    cudnn = next(line for line in lines if line.startswith("| prefill LLaMA-65B L2048 fp16, vs cuDNN"))
    assert "1.26×" in flash and "| yes |" in flash
    assert "0.69×" in cudnn and "**no**" in cudnn
    assert all("not run" in line for line in lines if line.startswith("| MLA"))
    # L2048's rows given for the L4096 case (a case list reordered): said, not read as L4096's numbers
    assert all("wrong case" in line and "1.26" not in line for line in lines if "L4096 fp16" in line)


def test_every_named_baseline_is_one_bench_times(T):
    # (the systems' names as gpu/cases.py writes them: a misspelt one would leave its target without a verdict)
    text = (GPU / "cases.py").read_text()
    names = {b for t in T.TARGETS for b in t.baselines}
    assert names and not [n for n in names if f'"{n}"' not in text]


def test_every_target_reads_a_case_bench_has(T):
    pytest.importorskip("torch")
    sys.path.insert(0, str(GPU))
    try:
        from cases import all_cases  # gpu/cases.py: builders only, nothing made on a device until one is called
    finally:
        sys.path.remove(str(GPU))
    groups = all_cases(False)
    for group, index in T.cases():
        assert index < len(groups[group]), (group, index)  # (the shapes are checked when the table is made)
