"""Any name the text format accepts compiles: names the generated code could confuse with its own are
renamed in the kernels and mapped back at the call."""

import ast

import numpy as np
import pytest

import redalgebra as ra
from redalgebra.codegen.names import BARE, PREFIXES, generated_names, unsafe
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
    for backend, strategies in (("cpu", ("row",)), ("cuda", ("rows", "thread", "tile", "split", "unfused", "lanes",
                                                              "split_lanes", "nonincremental", "block_shared", "mma",
                                                              "wgmma", "columns_mma", "columns_wgmma"))):
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
        if not (ident.startswith("_") or (stem is not None and stem in PREFIXES) or ident in BARE):
            out.add((ident, strategy))
    return out
