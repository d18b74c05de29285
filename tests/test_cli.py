import json
import subprocess
import sys

import pytest

from redalgebra import workloads
from redalgebra.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_names_every_workload(capsys):
    code, out, _ = run(capsys, "list")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == workloads.names()
    code, out, _ = run(capsys, "list", "--json")
    assert [w["name"] for w in json.loads(out)] == workloads.names()


def test_analyze_text_and_json(capsys):
    code, out, _ = run(capsys, "analyze", "attention")
    assert code == 0 and "3 reductions in 2 dependent levels {m} -> {l, o}" in out
    code, out, _ = run(capsys, "analyze", "moe_routing", "--json")
    data = json.loads(out)
    assert code == 0 and data["cascade"] == "moe_routing"
    t = next(r for r in data["reductions"] if r["name"] == "t")
    assert t["depends_on"] == ["m", "s"] and t["laws"]["status"] == "proved" and t["reduction"].startswith("topk(8,")
    assert ["m"] in data["levels"]


def test_analyze_a_file(capsys, tmp_path):
    path = tmp_path / "mine.casc"
    path.write_text("input x\nreduce m = min(x)\nreduce s = sum(x - m)\nout y = s\n")
    code, out, _ = run(capsys, "analyze", str(path), "-v")
    assert code == 0 and out.startswith("mine: 2 reductions") and "[proved] min is associative" in out


def test_laws_prints_the_proofs(capsys):
    code, out, _ = run(capsys, "laws", "logaddexp")
    assert code == 0 and out.startswith("[proved] logaddexp is a commutative monoid")
    code, out, _ = run(capsys, "laws", "topk(4)", "--json")
    assert json.loads(out)["method"] == "lemma"


@pytest.mark.parametrize("argv, fragment", [
    (["analyze", "no_such_thing"], "neither a workload"),
    (["laws", "average"], "unknown monoid 'average'"),
])
def test_bad_input_exits_2_with_a_message(capsys, argv, fragment):
    code, out, err = run(capsys, *argv)
    assert code == 2 and fragment in err and "Traceback" not in err


def test_syntax_error_in_a_file_exits_2_naming_line_and_column(capsys, tmp_path):
    path = tmp_path / "bad.casc"
    path.write_text("input x\nreduce m = max(x\n")
    code, _, err = run(capsys, "analyze", str(path))
    assert code == 2 and err.startswith("redalgebra: error: line 2, column 17:") and "Traceback" not in err


def test_python_dash_m_and_usage_errors():
    ok = subprocess.run([sys.executable, "-m", "redalgebra", "list"], capture_output=True, text=True)
    assert ok.returncode == 0 and "safe_softmax" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "redalgebra", "frobnicate"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr and "Traceback" not in bad.stderr


def test_analyze_json_reports_fusability_with_the_contract_fields(capsys):
    code, out, _ = run(capsys, "analyze", "attention", "--json")
    data = json.loads(out)
    assert code == 0 and data["fusable"] is True
    l = next(r for r in data["reductions"] if r["name"] == "l")
    assert l["otimes"] == "mul" and l["G"] == "exp(s)" and l["H"] == "exp(-m)" and l["laws"]["status"] == "proved"
    code, out, _ = run(capsys, "analyze", "variance_two_pass", "--json")
    data = json.loads(out)
    assert code == 0 and data["fusable"] is False  # exit 0 whether fusable or not
    v = next(r for r in data["reductions"] if r["name"] == "v")
    assert v["fusable"] is False and v["reason"] and v["counterexample"]["values"]


def test_derive_prints_text_json_and_latex(capsys):
    code, out, _ = run(capsys, "derive", "safe_softmax")
    assert code == 0 and "l_n = " in out and "exp(m_a - m_n)" in out
    code, out, _ = run(capsys, "derive", "safe_softmax", "--json")
    data = json.loads(out)
    assert [s["name"] for s in data["merge"]][-1] == "l_n" and data["per_element_outputs"] == ["y"]
    code, out, _ = run(capsys, "derive", "safe_softmax", "--latex")
    assert code == 0 and r"\begin{aligned}" in out


def test_derive_of_a_non_fusable_cascade_exits_1_and_says_why(capsys):
    code, _, err = run(capsys, "derive", "softplus_sum")
    assert code == 1 and "not fusable" in err and "Traceback" not in err


def test_prove_writes_documents(capsys, tmp_path):
    code, _, err = run(capsys, "prove", "logsumexp", "--out", str(tmp_path))
    assert code == 0 and (tmp_path / "logsumexp.md").read_text().startswith("# logsumexp")
    code, _, err = run(capsys, "prove")
    assert code == 2 and "--all" in err


def test_demo_prints_verdicts_and_incremental_forms(capsys):
    code, out, _ = run(capsys, "demo")
    assert code == 0
    assert "attention: fusable" in out and "softplus_sum: NOT fusable" in out and "o_n = " in out
    assert out.count("  kernel: ok") == len(workloads.names(fusable=True))
