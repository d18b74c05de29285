"""The strategy registry and the statement tree: every list of strategies comes from one place."""

import re
from pathlib import Path

import pytest

from redalgebra import RedalgebraError
from redalgebra.codegen import REGISTRY, generate
from redalgebra.codegen.strategies import for_target, get, names
from redalgebra.codegen.tree import Assign, CpuPrinter, CudaPrinter, For, If, Load, SimPrinter, Shuffle, Store
from tests.catalogue import fused

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_lists_exactly_the_registered_strategies():
    table = re.findall(r"^\| `(\w+)` \| (cpu|cuda) \|", README.read_text(), re.M)
    assert dict(table) == {name: s.backend for name, s in REGISTRY.items()}


def test_every_simulator_twin_is_registered_and_used_under_the_simulator():
    for s in REGISTRY.values():
        if s.sim:
            assert REGISTRY[s.sim].backend == s.backend and REGISTRY[s.sim].sim is None
            assert for_target(s.name, "cudasim").name == s.sim and for_target(s.name, "cuda").name == s.name
    assert "tile_shared" not in names("cuda", real=True) and "rows" in names("cuda", real=True)


def test_an_unknown_or_misplaced_strategy_is_a_clear_error():
    with pytest.raises(RedalgebraError, match="not available on cpu; choose one of row"):
        get("rows", "cpu")
    with pytest.raises(RedalgebraError, match="or auto"):
        generate(fused("safe_softmax"), "cuda", "fastest")


def test_printers_spell_the_same_tree_per_back_end():
    tree = (For("i", "0", "4", (Load(("a", "b", "c", "d"), "x", "row", "4 * i"),
                                Store("y", "row", "4 * i", ("a", "b", "c", "d"), "float32"))),
            If("lane == 0", (Shuffle("o", "s", "16"),), (Assign("o", "s"),)))
    cuda = "\n".join(CudaPrinter().lines(tree))
    assert "a, b, c, d = ld_f32x4(x, row, 4 * i)" in cuda and "st_f32x4(y, row, 4 * i, a, b, c, d)" in cuda
    assert "o = cuda.shfl_xor_sync(0xFFFFFFFF, s, 16)" in cuda
    sim = "\n".join(SimPrinter().lines(tree))  # no shuffles in the simulator: an exchange through shared memory
    assert "shfl_f[0, tid] = s" in sim and "o = shfl_f[0, tid ^ (16)]" in sim and "shfl_xor" not in sim
    with pytest.raises(RedalgebraError, match="CPU back end has no shuffles"):
        CpuPrinter().lines(tree)
    with pytest.raises(RedalgebraError, match="no 3-wide load"):
        CudaPrinter().lines((Load(("a", "b", "c"), "x", "0", "0"),))


def test_bfloat16_chunks_load_and_store_in_one_instruction_each():
    from redalgebra.codegen import Spec

    spec = Spec(dtypes=(("x", "bfloat16"),), threads=64, group=64, tile=2, vec=8, out_dtypes=(("y", "bfloat16"),))
    src = generate(fused("safe_softmax"), "cuda", "rows", spec).source
    assert src.count("= ld_b16x8(x, rr_x, c0_") == 2 and src.count("st_b16x8(out_y, row, c0_") == 2
    assert "_K" in src and "0.5 *" not in src  # constants are named float32 values


def test_the_simulator_exchanges_independent_shuffles_together():
    from redalgebra.codegen.tree import Shuffle, SimPrinter

    tree = [Shuffle("om", "sm", "8"), Shuffle("ol", "sl", "8"), Shuffle("oi", "si", "8", "int32"),
            Shuffle("x", "om + 1", "4")]  # reads the first one's result: a second exchange
    sim = SimPrinter().lines(tree)
    assert sim.count("cuda.syncthreads()") == 4
    assert sim[:3] == ["shfl_f[0, tid] = sm", "shfl_f[1, tid] = sl", "shfl_i[0, tid] = si"]
    assert "ol = shfl_f[1, tid ^ (8)]" in sim and "x = shfl_f[0, tid ^ (4)]" in sim
