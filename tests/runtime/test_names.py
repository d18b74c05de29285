"""Any name the text format accepts compiles: names the generated code could confuse with its own are
renamed in the kernels and mapped back at the call."""

import ast

import numpy as np
import pytest

import redalgebra as ra
from redalgebra.codegen.names import BARE, PREFIXES, generated_names, unsafe
from redalgebra.codegen.strategies import REGISTRY
from redalgebra.runtime import compile
from redalgebra.runtime.check import check
from tests.catalogue import fused

HOSTILE = """\
input lambda
input rep_x
input keep
param row
reduce m = max(lambda)
reduce m_a = sum(exp(lambda - m) * keep)
out out_y = m_a * row
out y = exp(lambda - m) * rep_x / m_a
"""


def test_names_that_collide_are_found_and_safe_ones_kept():
    c = ra.parse(HOSTILE)
    # a keyword; the broadcast factor's and the mask's argument names; the row index; a merge side's symbol
    assert unsafe(c) == ["lambda", "rep_x", "keep", "row", "m_a"]
    f, mapping = generated_names(fused("safe_softmax"))
    assert mapping == {} and f is fused("safe_softmax")  # catalogue names are used as they are


@pytest.mark.parametrize("backend,strategy", [("cpu", "row"), ("cudasim", "rows"), ("cudasim", "split"),
                                              ("cudasim", "tile")])
def test_a_cascade_of_colliding_names_compiles_and_matches_the_reference(backend, strategy):
    results = check(ra.derive(ra.parse(HOSTILE)), backend, strategy, shapes=((3, 37), (2, 1)))
    assert all(r.passed for r in results), "\n".join(r.line() for r in results)


def test_calls_speak_the_users_names():
    kernel = compile(ra.derive(ra.parse(HOSTILE)), "cpu")
    assert set(kernel.rename) == {"lambda", "rep_x", "keep", "row", "m_a"}
    x = np.random.default_rng(0).normal(size=(2, 5)).astype(np.float32)
    out = kernel({"lambda": x, "rep_x": np.ones_like(x), "keep": np.ones_like(x)}, {"row": 2.0})
    assert set(out) == {"out_y", "y"}
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(out["y"], e / e.sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(out["out_y"], 2 * e.sum(1), rtol=1e-5)
    with pytest.raises(ra.RedalgebraError, match="no value given for .*'lambda'"):
        kernel({"rep_x": x, "keep": x}, {"row": 1.0})  # messages name the user's names too


def _identifiers(source: str, entries) -> set:
    """Module-level names and every name inside the kernels (helper functions' locals are their own)."""
    out = set()
    for top in ast.parse(source).body:
        if isinstance(top, ast.FunctionDef):
            out.add(top.name)
            if top.name not in entries:
                continue
        for node in ast.walk(top):
            if isinstance(node, ast.Name):
                out.add(node.id)
            elif isinstance(node, ast.arg):
                out.add(node.arg)
            elif isinstance(node, ast.FunctionDef):
                out.add(node.name)
            elif isinstance(node, ast.alias):
                out.add(node.asname or node.name.split(".")[0])
    return out


@pytest.mark.parametrize("name", ["safe_softmax", "moe_routing", "decode_attention", "fp8_quant_gemm", "alibi_attention",
                                  "rmsnorm_gemm"])  # (rmsnorm_gemm: columns_wgmma's factors in its tiles)
def test_the_generators_own_names_are_the_ones_listed(name, monkeypatch):
    """Every identifier of generated kernels that is not a user name is in BARE or starts with a prefix of
    PREFIXES: a generator change that adds a name fails here until the lists (and so the renaming) know it."""
    from redalgebra.codegen.strategies import tile_factors
    from redalgebra.runtime import backends

    monkeypatch.setattr(backends, "_capability", lambda: (9, 0))  # a Hopper GPU: the wgmma strategies build too
    monkeypatch.setattr(tile_factors, "TILE_FACTORS", True)  # (RMSNorm's factors in the product's tiles)
    f = fused(name)
    c = f.cascade
    declared = {s.name for s in c.statements if hasattr(s, "name")} | {d for d in c.sizes.values() if isinstance(d, str)}
    sizes = {d: 16 for d in c.sizes.values() if isinstance(d, str)}  # 16: the tensor cores take it too
    missing = set()
    for backend in ("cpu", "cuda"):  # every registered strategy: a new one is held to the lists from the start
        strategies = sorted(n for n, s in REGISTRY.items() if s.backend == backend)
        for strategy in strategies:
            for keep in (False, True):
                try:
                    k = compile(f, backend, strategy)
                    # columns_mma takes vector rows shared by the block's rows only: given once here
                    reps = {s.name: 4 for s in c.inputs if s.size is not None} if strategy.startswith("columns") else None
                    # (rows of 40 16-bit values are on the 16-byte grid: RMSNorm's factors computed in the tiles)
                    length = 40 if name == "rmsnorm_gemm" else 37
                    resolved, spec, _ = k.spec_for(4, length, {s.name: "bfloat16" for s in c.inputs}, sizes, keep,
                                                   reps=reps)
                    src = k.source(spec, resolved)
                except ra.RedalgebraError:  # a strategy that does not take this cascade
                    continue
                missing |= _unlisted(src, declared, strategy)
    missing |= _more_configurations(name, f, declared, sizes)
    if name == "fp8_quant_gemm":  # the product on the FP8 instruction: e4m3 weights, fp8_products
        k = compile(f, "cuda", "columns_wgmma", fp8_products=True)
        resolved, spec, _ = k.spec_for(256, 256, {"x": "bfloat16", "w": "e4m3"}, sizes, reps={"w": 256})
        assert spec.fp8_products
        missing |= _unlisted(k.source(spec, resolved), declared, "columns_wgmma+fp8")
        k = compile(f, "cuda", "columns_wgmma", fp8_products=True, persistent=True)  # the blocks walking the tiles
        resolved, spec, _ = k.spec_for(256, 256, {"x": "bfloat16", "w": "e4m3"}, sizes, reps={"w": 256})
        missing |= _unlisted(k.source(spec, resolved), declared, "columns_wgmma+fp8 persistent")
        for dtype in ("e4m3", "bfloat16"):  # K-major weights read as they lie
            k = compile(f, "cuda", "columns_mma")
            resolved, spec, _ = k.spec_for(4, 256, {"x": "bfloat16", "w": dtype}, sizes, reps={"w": 4},
                                           k_major=("w",))
            assert spec.k_major == ("w",)
            missing |= _unlisted(k.source(spec, resolved), declared, f"columns_mma K-major {dtype}")
    assert not missing, sorted(missing)


def _unlisted(src, declared, strategy) -> set:
    """(identifier, strategy) of the generated module's identifiers that are neither the user's nor listed."""
    out = set()
    for ident in _identifiers(src.source, {e[0] for e in src.entries} or {"kernel"}) - declared:
        stem = ident.split("_")[0] if "_" in ident.lstrip("_") else None
        # (a name made from a user's, ``a_acc`` of ``a``: a user name beginning ``a_`` is renamed as it is)
        if not (ident.startswith("_") or (stem is not None and (stem in PREFIXES or stem in declared))
                or ident in BARE):
            out.add((ident, strategy))
    return out


def _more_configurations(name, f, declared, sizes) -> set:
    """The unlisted identifiers of kernels the strategies build only for some shapes and options: the columns'
    staged e4m3 factors with a mask, K-major weights in columns_wgmma, the split kernels' combine (vrows, wgmma with
    segments, merged by a combine kernel or in a cluster), wgmma's producer warpgroup."""
    c = f.cascade
    vectors = [s.name for s in c.inputs if s.size is not None]
    missing = set()
    configs = []
    if name == "fp8_quant_gemm":
        e4m3 = {"x": "bfloat16", "w": "e4m3"}
        configs += [("columns", {}, 9, 256, e4m3, True, {"w": 9}, ()),
                    ("columns_wgmma", {}, 256, 256, e4m3, False, {"w": 256}, ("w",)),
                    ("columns_wgmma", {}, 256, 256, {"x": "bfloat16", "w": "bfloat16"}, True, {"w": 256}, ("w",))]
    if name in ("decode_attention", "alibi_attention"):
        b16 = {s.name: "bfloat16" for s in c.inputs}
        shared = {v: 16 for v in vectors}
        configs += [("wgmma", {"segments": 4}, 16, 4096, b16, True, shared, ()),
                    ("wgmma", {"segments": 4, "cluster": True}, 16, 4096, b16, True, shared, ()),
                    ("wgmma", {"threads": 384}, 4096, 512, b16, False, {v: 64 for v in vectors}, ()),

                    ("vrows", {}, 9, 256, b16, True, {v: 9 for v in vectors}, ())]
    for strategy, options, rows, length, dtypes, keep, reps, k_major in configs:
        k = compile(f, "cuda", strategy, **options)
        resolved, spec, _ = k.spec_for(rows, length, dtypes, sizes, keep, reps=reps, k_major=k_major)
        missing |= _unlisted(k.source(spec, resolved), declared, f"{strategy} {options}")
    if name == "alibi_attention":  # blocks walking causal row tiles in pairs, their consumer warpgroups each on its own
        from unittest import mock

        from redalgebra.codegen.strategies import mma_policy

        with mock.patch.object(mma_policy, "MOST_STAGES", 3):  # (a ring of 3 stages: the walk under a gate)
            k = compile(f, "cuda", "wgmma", threads=384, persistent=True)
            dtypes = {s.name: "bfloat16" for s in c.inputs}
            resolved, spec, _ = k.spec_for(4096, 512, dtypes, sizes, False, reps={v: 64 for v in vectors})
        assert spec.persistent
        missing |= _unlisted(k.source(spec, resolved), declared, "wgmma walking under a gate")
    return missing


FP8_GEMM = """
input x
input w[n]
param {p} > 0
reduce a = max(abs(x))
reduce acc = sum(fp8(x * 448 / max(a, 1e-12)) * w)
out y = acc * max(a, 1e-12) / 448 * {p}
"""

ATTENTION = """
input k[d]
input v[d]
param q[d]
param {p} > 0
let s = dot(q, k) * {p}
reduce m = max(s)
reduce l = sum(exp(s - m))
reduce o = sum(exp(s - m) * v)
out y = o / l
"""


def _gemm_inputs(rows, length, n, k_major):
    from redalgebra.runtime.formats import to_float

    rng = np.random.default_rng(0)
    x = ra.as_bfloat16(rng.normal(size=(rows, length)).astype(np.float32))
    w = ra.as_e4m3(rng.normal(size=(1, length, n)).astype(np.float32))
    wide = {"x": to_float(x).astype(np.float64), "w": np.repeat(to_float(w).astype(np.float64), rows, 0)}
    if k_major:
        w = type(w)(np.ascontiguousarray(w.bits[0].T).T[None])  # the same values, K-major
    return {"x": x, "w": w}, wide


@pytest.mark.parametrize("p,strategy,k_major,keep", [
    ("kt", "columns", False, True),  # columns' staged factors (e4m3 weights, a mask): its own kt, sk, col0, ...
    ("sk", "columns", False, True),
    ("k", "columns", False, True),   # the names its loops took (k, m, i) are the generator's own now, not renamed
    ("m", "columns", False, True),
    ("wr", "columns_wgmma", True, False),  # K-major weights' copies
    ("wc8", "columns_wgmma", True, False),
])
def test_a_param_named_as_a_generated_local_computes_what_the_reference_does(p, strategy, k_major, keep):
    # such a param was not renamed, and the kernel's own assignment overwrote the argument: a crash in the simulator
    f = ra.derive(ra.parse(FP8_GEMM.format(p=p)))
    rows, length, n = 3, 128, 64
    inputs, wide = _gemm_inputs(rows, length, n, k_major)
    mask = np.random.default_rng(1).random((rows, length)) > 0.3 if keep else None
    got = compile(f, "cudasim", strategy)(inputs, {p: np.float32(0.5)}, mask)["y"]
    want = ra.evaluate(f.cascade, wide, {p: 0.5}, mask)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert (p in unsafe(f.cascade)) == (p not in ("k", "m"))


@pytest.mark.parametrize("p,strategy,options", [("eg", "vrows", {}), ("gl", "vrows", {}),
                                                ("eg", "wgmma", {"segments": 4})])  # (the combine kernel's)
def test_an_attention_param_named_as_a_split_kernels_local_computes_what_the_reference_does(p, strategy, options):
    f = ra.derive(ra.parse(ATTENTION.format(p=p)))
    rng = np.random.default_rng(0)
    rows, length, d = 9, 65, 16
    dtype = np.float16 if strategy == "wgmma" else np.float32
    k, v = (rng.normal(size=(1, length, d)).astype(dtype) for _ in range(2))
    q = rng.normal(size=(rows, d)).astype(np.float32)
    got = compile(f, "cudasim", strategy, **options)({"k": k, "v": v}, {"q": q, p: np.float32(0.3)})["y"]
    wide = {"k": np.repeat(k.astype(np.float64), rows, 0), "v": np.repeat(v.astype(np.float64), rows, 0)}
    want = ra.evaluate(f.cascade, wide, {"q": q, p: 0.3})["y"]
    # (wgmma: the softmax factors rounded to float16 for P·V, one rounding more)
    tol = 2.0 ** -10 if strategy == "wgmma" else 1e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_a_generated_local_that_takes_an_argument_name_is_refused_not_run(monkeypatch):
    # the net under the lists: a name the lists miss (kt, taken out of them here) is refused with its name, where the
    # kernel would have overwritten the argument
    from redalgebra.codegen import names

    monkeypatch.setattr(names, "BARE", names.BARE - {"kt"})
    f = ra.derive(ra.parse(FP8_GEMM.format(p="kt")))
    assert "kt" not in unsafe(f.cascade)
    inputs, _ = _gemm_inputs(3, 128, 64, False)
    with pytest.raises(ra.RedalgebraError, match="uses the name 'kt' for its own variable"):
        compile(f, "cudasim", "columns")(inputs, {"kt": np.float32(0.5)})


def test_names_like_the_generators_registers_but_not_its_own_are_kept():
    # the generator's registers made from a user's name take the gen_ prefix (gen_w_x_0_0, gen_l_0), so a_scale,
    # w_gate, l_sum are the user's as written: no rename, no translation on every call
    c = ra.parse("input x\ninput w_gate[n]\nparam a_scale > 0\nreduce l_sum = sum(x * x)\n"
                 "reduce acc = sum(x / sqrt(l_sum) * w_gate)\nout y = acc * a_scale\n")
    assert unsafe(c) == []
    assert unsafe(ra.parse("input x\nparam gen_k > 0\nreduce s = sum(x * gen_k)\nout y = s\n")) == ["gen_k"]


def test_the_generated_codes_own_names_are_refused_at_a_call():
    # 'lambda' is 'u2' in the generated code: given as 'u2' it passed as the input, and a params dict holding both
    # 'row' and its generated name took the generated one's value
    k = compile(ra.derive(ra.parse(HOSTILE)), "cpu")
    x = np.zeros((2, 5), np.float32)
    good = {"lambda": x, "rep_x": x + 1, "keep": x + 1}
    inner = k.rename["lambda"]
    with pytest.raises(ra.RedalgebraError, match=f"'{inner}' is not a name of the cascade .*for 'lambda'"):
        k({inner: x, "rep_x": x + 1, "keep": x + 1}, {"row": 2.0})
    with pytest.raises(ra.RedalgebraError, match="is not a name of the cascade .*for 'row'"):
        k(good, {"row": 2.0, k.rename["row"]: 7.0})
    with pytest.raises(ra.RedalgebraError, match=r"no value given for \['keep'\]"):  # (the user's names, not u4)
        k.layout({"lambda": x, "rep_x": x + 1}, {"row": 2.0})
