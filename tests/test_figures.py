"""The paper figures draw from the committed GPU results, and show what the CSV says."""

import csv
import importlib.util
from pathlib import Path

import pytest

from redalgebra.cli import main

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "gpu" / "results" / "h200" / "bench.csv"


@pytest.fixture(scope="module")
def figures():
    spec = importlib.util.spec_from_file_location("figures", ROOT / "paper_figures" / "figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def raw():
    with CSV.open() as fh:
        return list(csv.DictReader(fh))


def test_the_committed_results_carry_what_a_reader_needs(raw):
    needed = {"device", "torch", "numba", "numba_cuda", "copy_gbps", "case", "system", "shape", "dtype", "ms", "bytes",
              "gbps", "frac_copy", "tflops", "valid", "max_err", "kind", "config"}
    assert needed <= set(raw[0])
    assert "H200" in raw[0]["device"]
    ours = [r for r in raw if r["kind"] == "tuned"]
    assert ours and all(r["valid"] == "ok" for r in ours)  # nothing timed that missed the float64 check
    for r in raw:  # GB/s is bytes over time, as the header says
        if r["ms"] not in ("nan", "") and float(r["ms"]) > 0:
            assert float(r["gbps"]) == pytest.approx(float(r["bytes"]) / float(r["ms"]) / 1e6, rel=1e-9)


def test_speedups_are_eager_time_over_each_systems_time(figures, raw):
    data = figures.speedups(figures.load(CSV))
    checked = 0
    for r in raw:
        if r["kind"] != "tuned" or r["case"] in (figures.ABLATION, figures.INCREMENTAL):
            continue
        eager = next(float(e["ms"]) for e in raw if e["case"] == r["case"] and e["shape"] == r["shape"]
                     and e["dtype"] == r["dtype"] and e["system"].startswith("eager"))
        label = f"{r['case']}\n{r['shape']} {r['dtype']}"
        assert data[label][figures.OURS] == pytest.approx(eager / float(r["ms"]))
        assert data[label]["eager"] == pytest.approx(1.0)
        checked += 1
    assert checked >= 20


def test_the_incremental_figure_marks_where_the_staged_row_stops_fitting(figures):
    data = figures.series(figures.load(CSV), figures.INCREMENTAL)
    staged = data["nonincremental@256"]
    refused = [length for length, _, valid in staged if valid == "error"]
    fits = [length for length, _, valid in staged if valid == "ok"]
    assert refused and fits and max(fits) < min(refused)  # it stops fitting once, and stays out
    assert {length for length, _, _ in data["tile@256"]} == {length for length, _, _ in staged}


def test_every_figure_is_written_as_png_and_pdf(figures, tmp_path):
    assert main(["figures", "--out", str(tmp_path)]) == 0
    for name in ("fig1_speedup", "fig2_fusion_levels", "fig3_incremental", "fig4_roofline"):
        for ext in ("png", "pdf"):
            path = tmp_path / f"{name}.{ext}"
            assert path.stat().st_size > 10_000, path


def test_bad_figure_requests_get_a_message_not_a_traceback(tmp_path, capsys):
    assert main(["figures", "--only", "pie"]) == 2
    assert main(["figures", "--csv", str(tmp_path / "none.csv")]) == 2
    err = capsys.readouterr().err
    assert "unknown figure" in err and "redalgebra bench" in err
