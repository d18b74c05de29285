import json
import re
import subprocess
import sys

import pytest

from redalgebra import workloads
from redalgebra.cli import main
from tests.catalogue import fused


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
    (["check", "fp8_quant_gemm", "--dtype", "bf16"], "'bf16' is not one of float32, float16, bfloat16, e4m3"),
    (["check", "fp8_quant_gemm", "--dtype", "bfloat16,z=e4m3"], "no input named 'z' (the inputs: x, w)"),
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
    code, out, _ = run(capsys, "analyze", "abs_deviation", "--json")
    data = json.loads(out)
    assert code == 0 and data["fusable"] is False  # exit 0 whether fusable or not
    v = next(r for r in data["reductions"] if r["name"] == "d")
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


def test_demo_prints_verdicts_and_incremental_forms(capsys, monkeypatch):
    # on a sample of the catalogue (the whole of it is derived and run by the kernel tests): a vector cascade, a
    # multi-term one, one that does not fuse
    sample = ["attention", "softmax_entropy", "softplus_sum"]
    everything = workloads.names
    monkeypatch.setattr(workloads, "names", lambda fusable=None: [n for n in everything(fusable) if n in sample])
    code, out, _ = run(capsys, "demo")
    assert code == 0
    assert "attention: fusable" in out and "softplus_sum: NOT fusable" in out and "o_n = " in out
    assert out.count("  kernel: ok") == 2 and "of 3 catalogue cascades" in out


def _without_simulator() -> dict:
    """The environment of a subprocess that may compile real CUDA (this process runs the simulator)."""
    import os
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    return env


def test_ptx_without_a_gpu_plans_for_the_hopper_it_compiles_for():
    # auto takes Hopper's instructions where the device is one: planned for none, a head's shared keys went to mma
    # (and wide heads to vrows) in the summary of a PTX compiled for sm_90
    from redalgebra import compile as compile_kernel
    from redalgebra.cli import HOPPER, HOPPER_SMS

    kernel = compile_kernel(fused("attention"), "cuda")
    dtypes = {"k": "bfloat16", "v": "bfloat16"}
    for d in (64, 256):
        planned = kernel.spec_for(777, 4097, dtypes, {"d": d}, reps={"k": 777, "v": 777}, device=(HOPPER, HOPPER_SMS))
        assert planned[0] == "wgmma", (d, planned[0])
    from redalgebra.runtime.backends import device_capability

    if device_capability("cuda") is None:  # planned for the device present: none, so no Hopper's instructions
        assert kernel.spec_for(777, 4097, dtypes, {"d": 64}, reps={"k": 777, "v": 777})[0] != "wgmma"


@pytest.mark.slow
def test_ptx_prints_the_summary_and_writes_the_ptx(tmp_path):
    from redalgebra.runtime.ptx import facts_text, ptx_facts

    out = tmp_path / "softmax.ptx"
    done = subprocess.run([sys.executable, "-m", "redalgebra", "ptx", "safe_softmax", "--dtype", "bfloat16",
                           "--out", str(out), "--fp8-products"], capture_output=True, text=True,
                          env=_without_simulator())
    assert done.returncode == 0, done.stderr[-3000:]
    summary = done.stdout.splitlines()
    text = out.read_text()
    assert summary[0] == ("// redalgebra ptx safe_softmax: 1024 rows × length 4096, bfloat16 inputs, sm_90, "
                          "planned for sm_90 with 132 multiprocessors (no GPU here)")
    assert summary[1].startswith("// strategy rows (auto), threads ") and "vec 8" in summary[1]
    assert summary[1].endswith("FP8 products not applied (the exact product runs)")  # (asked, and said where not)
    assert summary[-1] == f"// wrote {out}" and text.startswith("\n".join(summary[:-1]))
    assert ".target sm_90" in text and ".visible .entry" in text
    # the counts printed are ptx_facts of the PTX written (its comment lines count for nothing)
    assert summary[2:-1] == [f"// {line}" for line in facts_text(ptx_facts(text))]
    assert ptx_facts(text)["ld_global_128"] > 0


@pytest.mark.slow
def test_ptx_takes_a_query_in_16_bits_as_a_model_holds_it(tmp_path):
    # a vector param named in --dtype is given in that 16-bit type: wgmma stages its words as they are, so the
    # kernel loads no float32 query (ld.global.v4.f32) and has no residual products
    out = tmp_path / "attention.ptx"
    done = subprocess.run([sys.executable, "-m", "redalgebra", "ptx", "attention", "--strategy", "wgmma", "--dtype",
                           "float16,q=float16", "--rows", "256", "--length", "512", "--size", "d=64", "--out",
                           str(out)], capture_output=True, text=True, env=_without_simulator())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "float16,q=float16 inputs" in done.stdout.splitlines()[0]
    text = out.read_text()
    assert ".v4.f32" not in "".join(ln for ln in text.splitlines() if "ld.global" in ln)
    assert "mma.sync" not in text and "wgmma.mma_async" in text


@pytest.mark.parametrize("argv, fragment", [
    (["ptx", "no_such_thing"], "neither a workload"),
    (["ptx", "safe_softmax", "--strategy", "row"], "strategy 'row' is not available on cuda"),
    (["ptx", "safe_softmax", "--strategy", "fastest"], "choose one of thread"),
    (["ptx", "attention", "--size", "d=wide"], "--size takes NAME=VALUE"),
    (["ptx", "attention", "--size", "D=64"], "attention has no vector size 'D' (its sizes: d)"),
    (["ptx", "safe_softmax", "--size", "d=64"], "safe_softmax has no vector size 'd' (it has no vector sizes)"),
    (["ptx", "safe_softmax", "--rows", "0"], "--rows must be a positive integer"),
    (["ptx", "safe_softmax", "--rows", "99999999999999999999"], "--rows must be a positive integer below 2**31"),
    (["ptx", "safe_softmax", "--length", str(2 ** 31)], "--length must be a positive integer below 2**31"),
    (["ptx", "safe_softmax", "--group", "0"], "--group must be a positive integer"),
    (["ptx", "attention", "--dtype", "float16,q=e4m3"], "param q may be given in float16 or bfloat16"),
    (["ptx", "attention", "--dtype", "float16,z=float16"], "no input or vector param named 'z' (the inputs: k, v; "
                                                           "the vector params: q)"),
    (["ptx", "safe_softmax", "--cluster"], "only the wgmma strategy does (Hopper); this call runs rows"),
])
def test_ptx_bad_input_exits_2_with_a_message(capsys, argv, fragment):
    code, _, err = run(capsys, *argv)
    assert code == 2 and fragment in err and "Traceback" not in err


def test_ptx_in_a_simulator_process_exits_2_with_a_message(capsys):
    code, _, err = run(capsys, "ptx", "safe_softmax")  # this process has chosen (or will choose) the simulator
    assert code == 2 and ("NUMBA_ENABLE_CUDASIM=1 is set" in err or "already uses the CUDA simulator" in err)
    assert "Traceback" not in err


def test_ptx_names_a_missing_vector_size(capsys, tmp_path):
    path = tmp_path / "heads.casc"
    path.write_text("input k[h]\nparam q[h]\nreduce m = max(dot(q, k))\nreduce l = sum(exp(dot(q, k) - m))\n"
                    "out y = m + log(l)\n")
    code, _, err = run(capsys, "ptx", str(path))
    assert code == 2 and "give --size h=VALUE" in err


def test_ptx_without_numba_cuda_exits_2_with_a_message():
    script = ("import sys; sys.modules['numba.cuda'] = None\n"  # as if numba-cuda were not installed
              "from redalgebra.cli import main; sys.exit(main(['ptx', 'safe_softmax']))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_without_simulator())
    assert done.returncode == 2 and "needs numba-cuda" in done.stderr and "Traceback" not in done.stderr


def test_check_help_lists_every_registered_strategy_by_back_end(capsys):
    from redalgebra.codegen.strategies import names

    with pytest.raises(SystemExit):
        main(["check", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "on cpu: " + ", ".join(names("cpu")) in text
    assert "on cuda and cudasim: " + ", ".join(names("cuda")) in text and "or auto" in text
    assert set(names()) == set(names("cpu")) | set(names("cuda"))


def test_derive_names_temporaries_apart_from_the_cascades_names(capsys):
    code, out, _ = run(capsys, "derive", "mla_decode")  # an input named c: temporaries are not c0, c1, ...
    assert code == 0 and "c*t1" in out and not re.search(r"\bc\d\b", out)
    assert "lift (the state of a segment of one element)" in out


def test_numbers_print_as_a_reader_writes_them_and_proofs_show_no_tautologies(capsys):
    code, out, _ = run(capsys, "derive", "fp8_quant_gemm")
    assert code == 0 and "max(1e-12, a)" in out and "1000000000000" not in out
    code, out, _ = run(capsys, "laws", "logaddexp")
    assert "both sides evaluate to log(exp(a) + exp(b) + exp(c))" in out and "simplify(lhs - rhs)" not in out
    for line in out.splitlines():  # no "X = X"
        claim = line.partition(":  ")[2]
        lhs, eq, rhs = claim.partition(" = ")
        assert not (eq and lhs.strip() == rhs.strip()), line


def test_a_state_side_that_reads_as_a_declared_name_is_written_apart():
    from redalgebra import derive, parse

    f = derive(parse("input x\nreduce m = max(x)\nreduce m_a = sum(exp(x - m))\nout y = exp(x - m) / m_a\n"))
    text = f.text()
    merge = text.split("merge (")[1].split("finalize:")[0]
    assert "m[a]" in merge and "max(m[a], m_b)" in merge  # m's side a, apart from the reduction m_a
    assert "m_a_a" in merge  # the reduction m_a's own side keeps its name
    assert "/m_a" in text.split("finalize:")[1]  # the finalize reads the user's m_a as written


def test_check_on_the_simulator_with_bfloat16_from_a_fresh_process():
    # the problems' bfloat16 rounding imports the intrinsics, which import numba.cuda: the simulator must be chosen
    # first, or the process is on real CUDA and the simulator refused ("already uses real CUDA")
    done = subprocess.run([sys.executable, "-m", "redalgebra", "check", "safe_softmax", "--backend", "cudasim",
                           "--dtype", "bfloat16"], capture_output=True, text=True, env=_without_simulator(), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("ok ") == 3 and "cudasim" in done.stdout


def test_check_takes_a_dtype_per_input(capsys):
    # bfloat16 activations and e4m3 weights (the FP8 GEMM's own types), on the CPU
    code, out, err = run(capsys, "check", "fp8_quant_gemm", "--dtype", "bfloat16,w=e4m3")
    assert code == 0 and out.count("ok ") == 3 and "bfloat16,w=e4m3" in out, err
    # (an empty item was taken as float32; a name given twice, or two bare dtypes, ran the last and printed both)
    for bad in (",,,", "bfloat16,", "float33", "bfloat16,x=e4m3,x=float16", "bfloat16,float16"):
        code, out, err = run(capsys, "check", "fp8_quant_gemm", "--dtype", bad)
        assert code == 2 and "dtype" in err and "Traceback" not in err, bad


def test_check_draws_a_vector_dimension_of_any_name(capsys, tmp_path):
    # only d, e, n and r had sizes: `input k[h]` ended in a TypeError from NumPy's generator
    path = tmp_path / "heads.txt"
    path.write_text("input k[h]\nparam q[h]\nreduce m = max(dot(q, k))\nreduce s = sum(exp(dot(q, k) - m))\nout y = s\n")
    code, out, err = run(capsys, "check", str(path), "--backend", "cpu")
    assert code == 0 and out.count("ok ") == 3, err
