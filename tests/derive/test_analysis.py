import pytest
import sympy as sp

from redalgebra import NotFusableError, RedalgebraError, parse, workloads
from redalgebra.derive import analyze, derive
from tests.catalogue import FUSABLE, NOT_FUSABLE


def sym(name, **flags):
    return sp.Symbol(name, real=True, **flags)


@pytest.mark.parametrize("name", FUSABLE)
def test_catalogue_cascades_fuse_with_every_proof_proved(name):
    a = analyze(workloads.get(name).cascade)
    assert a.fusable
    for r in a.reductions:
        assert r.fusable and all(p.proved for p in r.proofs)
        if r.terms is not None:  # a multi-term sum: every term with dependencies is a single separable term
            assert all(t.analysis is None or (t.analysis.otimes is not None and all(p.proved for p in t.analysis.proofs))
                       for t in r.terms.terms)
        elif r.route:  # a ⊗ of routes.ROUTES (power: a product of powers): no monoid ⊗, G and H as found
            assert r.otimes is None and r.G is not None and r.H is not None
        elif r.deps:
            assert r.otimes is not None and r.G is not None and r.H is not None


def test_attention_chooses_times_with_G_exp_s_and_H_exp_minus_m():
    a = analyze(workloads.get("attention").cascade)
    m, s, v = sym("m"), sym("s"), sym("v")
    assert a["l"].otimes.name == "mul" and a["l"].G == sp.exp(s) and a["l"].H == sp.exp(-m)
    assert a["o"].G == v * sp.exp(s) and a["o"].deps == ("m",)
    assert a["m"].deps == () and a["m"].otimes is None
    assert sp.simplify(a["l"].H_inverse - sp.exp(m)) == 0


def test_moe_top_k_is_fused_with_times_over_top_k_because_H_is_positive():
    a = analyze(workloads.get("moe_routing").cascade)
    t = a["t"]
    assert t.otimes.name == "mul" and t.deps == ("m", "s")
    assert sp.simplify(t.H - sp.exp(-sym("m")) / sym("s")) == 0
    dist, sep, rng = t.proofs
    assert "distributes over top8" in dist.claim and rng.method == "sign inference"
    assert any("sum of positive terms" in step for step in rng.steps)


def test_fp8_quantisation_is_exact_in_reals_only():
    a = analyze(workloads.get("fp8_quant_gemm").cascade)
    assert a.fusable and a.exact_in_reals_only
    assert a["acc"].G == sym("w") * sym("x")


def test_max_of_x_over_sum_of_exp_fuses_beyond_the_papers_table():
    """max(x / s): × distributes over max only for c >= 0, and H = 1/s > 0 by sign inference."""
    a = analyze(parse("input x\nreduce s = sum(exp(x))\nreduce m = max(x / s)"))
    r = a["m"]
    assert r.fusable and r.otimes.name == "mul" and r.H == 1 / sym("s")
    assert r.proofs[0].assumptions == ("c >= 0",)


def test_max_with_a_sign_changing_H_is_not_fused():
    # H = s = sum(x) has no known sign, and × distributes over max only when H >= 0
    a = analyze(parse("input x\nreduce s = sum(x)\nreduce m = max(x * s)"))
    assert not a["m"].fusable
    assert "range of H" in [t.failed for t in a["m"].attempts]


@pytest.mark.parametrize("name", NOT_FUSABLE)
def test_not_fusable_cascades_get_their_expected_diagnosis(name):
    w = workloads.get(name)
    with pytest.raises(NotFusableError) as info:
        derive(w.cascade)
    a = info.value.analysis
    assert a is not None and not a.fusable
    r = a[w.expect["reduction"]]
    assert not r.fusable
    assert {t.otimes: t.failed for t in r.attempts} == w.expect["failed"]
    assert f"{r.name}: " in str(info.value)


@pytest.mark.parametrize("name", NOT_FUSABLE)
def test_the_counterexample_really_breaks_the_failed_condition(name):
    w = workloads.get(name)
    r = analyze(w.cascade)[w.expect["reduction"]]
    proof, cx = r.refuted, r.counterexample
    assert proof is not None and proof.status == "refuted"
    at = {s: sp.sympify(cx.values[s.name]) for s in (proof.lhs.free_symbols | proof.rhs.free_symbols)}
    lhs, rhs = proof.lhs.xreplace(at), proof.rhs.xreplace(at)
    assert abs(complex(sp.N(lhs - rhs, 30))) > 1e-20


def test_json_has_the_contract_fields():
    d = analyze(workloads.get("abs_deviation").cascade).as_dict()
    assert d["fusable"] is False
    for r in d["reductions"]:
        assert {"name", "fusable", "otimes", "G", "H", "reason", "counterexample"} <= set(r)
    bad = next(r for r in d["reductions"] if r["name"] == "d")
    assert bad["reason"] and bad["counterexample"]["values"] and bad["counterexample"]["claim"]


def test_a_temperature_divided_by_needs_no_declared_sign():
    # H = exp(-m/t) is positive for every t != 0, and where t = 0 the cascade itself divides by 0
    a = analyze(parse("input x\nparam t\nreduce m = max(x)\nreduce s = sum(exp((x - m) / t))\nout y = s"))
    assert a.fusable and str(a["s"].H) == "exp(-m/t)"
    # a factor of unknown sign that is not divided by is not assumed away from 0: H = t·m may vanish, so
    # the sum keeps sum(x) and is multiplied by t·m at the end, never corrected by a quotient of them
    f = derive(parse("input x\nparam t\nreduce m = max(x)\nreduce s = sum(x * t * m)\nout y = s"))
    assert "s" not in f.corrections and f.rewrite is not None


def test_a_refusal_that_a_declared_sign_would_lift_names_the_declaration():
    # max(exp(x - m) * t): × distributes over max only for t >= 0, which an undeclared t is not known to be
    a = analyze(parse("input x\nparam t\nreduce m = max(x)\nreduce s = max(exp(x - m) * t)\nout y = s"))
    assert not a.fusable and "`param t > 0`" in a["s"].reason
    assert analyze(parse("input x\nparam t > 0\nreduce m = max(x)\nreduce s = max(exp(x - m) * t)\nout y = s")).fusable
    # nothing to declare: no hint
    b = analyze(parse("input x\nreduce m = max(x)\nreduce p = sum(log(1 + exp(x - m)))\nout y = p"))
    assert "declared" not in b["p"].reason


def test_an_input_may_declare_its_sign_and_a_refusal_names_that_declaration():
    text = "input x{}\nreduce m = max(x)\nreduce s = max(x * m)\nout y = s"
    refused = analyze(parse(text.format("")))
    assert not refused.fusable and "`input x >= 0`" in refused["s"].reason  # × distributes over max for m >= 0
    c = parse(text.format(" >= 0"))
    assert analyze(c).fusable and str(c).startswith("input x >= 0\n") and parse(str(c)) == c
    with pytest.raises(RedalgebraError, match="a sign is declared for a scalar input"):
        parse("input k[4] >= 0\nreduce s = sum(k)\nout y = s")


def test_an_equal_cascade_is_analysed_once_and_a_cut_short_analysis_is_not_kept():
    # the analysis is a function of the (frozen) cascade: an equal cascade, parsed again, gets the kept verdicts at
    # once; another budget or hints setting is another entry; one the budget cut short is analysed afresh next time
    from redalgebra.derive import analysis

    kept = analysis._analyze.cache
    analysis._analyze.cache_clear()
    text = "input x\nreduce m = max(x)\nreduce s = sum(exp(x - m))\nout y = s\n"
    first = analyze(parse(text))
    assert analyze(parse(text)) is first and len(kept) == 1
    assert analyze(parse(text), hints=False).fusable and analyze(parse(text), budget_s=45).fusable and len(kept) == 3
    trap = "input x\nreduce m = max(x)\nreduce s = sum((x - m + 1)**1000)\n"
    cut = analyze(parse(trap), budget_s=0.3)
    assert cut["s"].reason.startswith("unknown") and len(kept) == 3 and analyze(parse(trap), budget_s=0.3) is not cut


def test_an_analysis_whose_proof_ran_out_of_time_is_not_kept(monkeypatch):
    # a proof past its own budget is "unknown" inside a verdict whose reason does not start so (the reduction is
    # refused by its attempts): such a refusal is not the cascade's, and an equal cascade is analysed afresh
    from redalgebra.algebra import prover
    from redalgebra.derive import analysis

    analysis._analyze.cache_clear()
    text = "input x\nreduce m = max(x)\nreduce s = sum(exp(x - m))\nout y = s\n"
    saved = prover.PROOF_SECONDS
    monkeypatch.setattr(prover, "PROOF_SECONDS", 1e-4)  # a proof that runs past its time on a busy machine
    cut = analyze(parse(text))
    monkeypatch.setattr(prover, "PROOF_SECONDS", saved)
    assert not cut.fusable and any(p.exhausted for r in cut.reductions for p in r.proofs)
    assert len(analysis._analyze.cache) == 0 and analyze(parse(text)).fusable
