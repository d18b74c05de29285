"""wgmma's launch policy and ``auto``'s choice of it, without running a kernel: which GPUs and calls it takes, the
block it gives long prefill rows by width and length (the producer block, measured on the H200), where that block
gives way, and the messages where it refuses."""

import numpy as np
import pytest

from redalgebra import RedalgebraError
from redalgebra.codegen import Problem
from redalgebra.runtime import compile
from redalgebra.runtime.choice import choose
from tests.catalogue import fused
from tests.runtime.test_mma import CAUSAL
from tests.runtime.test_wgmma import RECENT


def _attention_problem(cc, **options):
    sizes, dtypes = (("d", 128),), (("k", "float16"), ("v", "float16"))
    base = dict(threads=None, tile=None, segments=None, group=None, batch=None, simulator=False, cc=cc)
    return Problem(4096, 2048, sizes, dtypes, False, True, True, True, (("k", 64), ("v", 64)),
                   tuple({**base, **options}.items()))


def test_auto_takes_wgmma_on_hopper_only_and_mma_where_its_options_do_not_apply():
    f = fused("attention")
    reps = {"k": 64, "v": 64}
    assert choose(f, 4096, 2048, {"d": 128}, reps, _attention_problem((9, 0))) == "wgmma"
    assert choose(f, 4096, 2048, {"d": 128}, reps, _attention_problem((8, 0))) == "mma"
    assert choose(f, 4096, 2048, {"d": 128}, reps, _attention_problem((10, 0))) == "mma"  # no wgmma after sm_90
    assert choose(f, 4096, 2048, {"d": 128}, reps, _attention_problem((9, 0), group=32)) == "mma"


def test_wgmma_refuses_with_a_message():
    from redalgebra.codegen.strategies.wgmma_policy import configure

    with pytest.raises(RedalgebraError, match="need an sm_90 GPU; this one is sm_80: use mma"):
        configure(fused("attention"), _attention_problem((8, 0)))
    with pytest.raises(RedalgebraError, match="whole warpgroups"):
        configure(fused("attention"), _attention_problem((9, 0), threads=64))
    with pytest.raises(RedalgebraError, match="the tensor cores take bfloat16 or float16"):
        compile(fused("attention"), "cudasim", "wgmma")(*_float32_call())


def _float32_call():
    rng = np.random.default_rng(1)
    return ({"k": rng.normal(size=(1, 64, 16)).astype(np.float32), "v": rng.normal(size=(1, 64, 16)).astype(np.float32)},
            {"q": rng.normal(size=(16, 16)).astype(np.float32), "scale": np.float32(0.25)})


def test_auto_takes_wgmma_for_mla_on_hopper():
    f = fused("mla_decode")
    sizes = {"r": 512, "e": 64}

    def problem(cc, r=512):
        base = dict(threads=None, tile=None, segments=None, group=None, batch=None, simulator=False, cc=cc)
        return Problem(512, 4096, (("e", 64), ("r", r)), (("c", "float16"), ("kr", "float16")), False, True, True,
                       True, (("c", 128), ("kr", 128)), tuple(base.items()))
    reps = {"c": 128, "kr": 128}
    assert choose(f, 512, 4096, sizes, reps, problem((9, 0))) == "wgmma"
    assert choose(f, 512, 4096, sizes, reps, problem((8, 0))) == "vrows"  # mma's accumulators hold 128 columns
    # 320 columns: not two warpgroups' whole 64-column blocks
    assert choose(f, 512, 4096, {"r": 320, "e": 64}, reps, problem((9, 0), 320)) == "vrows"
    from dataclasses import replace

    from redalgebra.codegen.strategies.wgmma_policy import configure

    spec = configure(f, problem((9, 0)))
    # four tokens' 128 heads are 8 blocks of 64 rows: split into 16 segments of 4 tiles, 128 blocks filling the 132
    # multiprocessors (measured on the H100: 12 % faster than 8 segments of 8 tiles; 24, two waves, slower)
    assert (spec["threads"], spec["batch"], spec["nseg"], spec["segments"]) == (256, 64, 16, 2)
    assert configure(f, replace(problem((9, 0)), length=1024))["nseg"] == 4  # (segments of 4 tiles of 64 at most)
    assert configure(f, replace(problem((9, 0)), rows=2048))["nseg"] == 4  # sixteen tokens: 32 blocks, 4 segments


def test_long_rows_of_64_or_128_components_take_the_producer_block_by_default():
    # LLaMA-65B prefill (64 heads, L2048, d = 128): two consumer warpgroups and a producer on tiles of 128 keys, the
    # block measured fastest on the H200, its blocks walking row tiles, a causal mask's too; a caller's block, a gate
    # not true on a prefix of the row, a mask, short rows, other widths and too few row tiles to fill the GPU keep one
    # warpgroup on tiles of 64
    from dataclasses import replace

    from redalgebra.codegen.strategies.wgmma_policy import configure

    base = dict(threads=None, tile=None, segments=None, group=None, batch=None, simulator=False, cc=(9, 0))

    def spec(name="attention", rows=64 * 2048, length=2048, d=128, keep=False, rep=None, **options):
        rep = rep or length
        p = Problem(rows, length, (("d", d),), (("k", "float16"), ("v", "float16")), keep, True, True, True,
                    (("k", rep), ("v", rep)), tuple({**base, **options}.items()))
        out = configure(fused(name) if isinstance(name, str) else name, p)
        assert out["persistent"] == out["producer"]
        return out["threads"], out["tile"], out["producer"]

    assert spec() == (256, 128, True) and spec(length=4096, rows=64 * 4096) == (256, 128, True)
    assert spec(threads=128) == (128, 64, False) and spec(tile=64) == (128, 64, False)
    assert spec("alibi_attention") == (256, 128, True)  # where(pos <= qpos, ..., -inf): a gate on a prefix
    from redalgebra import derive
    from redalgebra.ir import parse

    assert spec(derive(parse(RECENT))) == (128, 64, False)  # pos > qpos - 64: on the row's last keys
    assert spec(derive(parse(CAUSAL.replace("where(pos <= qpos, s, -inf)", "where(pos <= qpos, -inf, s)")))) == \
        (128, 64, False)  # -inf on the prefix: no gate
    assert spec("alibi_attention", persistent=False) == (128, 64, False)  # (a gated block a row tile: slower)
    assert spec(keep=True) == (128, 64, False)
    assert spec(length=512, rows=12 * 512) == (128, 64, False)
    # the rows from which it is faster (PRODUCER_LENGTHS): at d = 128 from 1024 keys, under a causal mask from 1536;
    # at d = 64 from 2048; widths between them (Phi-2's 80, 96) as 128; narrower ones never
    assert spec(length=1024, rows=64 * 1024) == (256, 128, True)
    assert spec("alibi_attention", length=1024, rows=64 * 1024) == (128, 64, False)
    assert spec("alibi_attention", length=1536, rows=64 * 1536) == (256, 128, True)
    assert spec(d=64) == (256, 128, True) and spec(d=64, length=1024, rows=64 * 1024) == (128, 64, False)
    assert spec("alibi_attention", d=64) == (128, 64, False)  # (a causal mask at d = 64: from 4096 keys)
    assert spec(d=80) == (256, 128, True) and spec(d=96, length=1024, rows=64 * 1024) == (256, 128, True)
    assert spec("alibi_attention", d=80, length=1024, rows=64 * 1024) == (128, 64, False)
    assert spec(d=32) == (128, 64, False) and spec(d=32, length=8192, rows=64 * 8192) == (128, 64, False)
    # measured at the padded widths: SigLIP's d = 72 from 729 keys (128's band), Stable Diffusion's d = 40 as 64 (from
    # 2048 keys; at 1024 not), each where a row tile of 128 keys was faster than one warpgroup on the H200
    assert spec(d=72, length=729, rows=128 * 729) == (256, 128, True)
    assert spec(d=72, length=700, rows=128 * 700) == (128, 64, False)
    assert spec(d=40, length=4096, rows=16 * 4096) == (256, 128, True)
    assert spec(d=40, length=1024, rows=64 * 1024) == (128, 64, False)
    # wider (d = 129 … 256): the producer block whose consumers hold the sums whole, tiles of 64 or 32, at any length,
    # masked too (d = 192: no other block on the tensor cores holds it)
    assert spec(d=256) == spec(d=208, keep=True) == (256, 32, True)  # (more than three blocks of 64 columns)
    assert spec(d=192, length=256, rows=4 * 256) == spec(d=160, keep=True) == (256, 64, True)
    # (tiles of 32 where three stages of 64 would not fit beside the query's rows: keys of 256 beside values of 128
    # fit, 48 KB a stage, and keep 64; the simulator plans the GPU's)
    narrow = derive(parse("input k[a]\ninput v[b]\nparam q[a]\nlet s = dot(q, k)\nreduce m = max(s)\n"
                          "reduce l = sum(exp(s - m))\nreduce o = sum(exp(s - m) * v)\nout y = o / l\n"))
    p = Problem(64 * 2048, 2048, (("a", 256), ("b", 128)), (("k", "float16"), ("v", "float16")), False, True, True,
                True, (("k", 2048), ("v", 2048)), tuple({**base, "threads": 384}.items()))
    assert configure(narrow, p)["tile"] == 64 and configure(narrow, replace(p, sizes=(("a", 256), ("b", 256))))["tile"] == 32
    assert configure(fused("attention"), replace(p, sizes=(("d", 256),), options=tuple(
        {**base, "threads": 96, "simulator": True}.items())))["tile"] == 32
    # ... but where column groups hold them too (d = 256), only as d = 128's block is given: masked, or too few row
    # tiles to fill the GPU (a decode step's), the column groups
    assert spec(d=256, keep=True)[2] is False and spec(d=256, rows=8 * 2048)[2] is False
    assert spec(d=256, length=1000, rows=64 * 1000)[2] is False  # (from 1024 keys, not d = 72's 729: not measured)
    assert spec(rows=4 * 2048) == (128, 64, False)  # 64 row tiles of 128: under the 132 multiprocessors
    # groups of 64 rows sharing their keys (GQA): a 128-row tile would be half padding; 100 rows pad alike either way
    assert spec(rep=64) == (128, 64, False) and spec(rep=100, rows=100 * 1024) == (256, 128, True)
    assert spec(simulator=True)[2] is False
    # a cascade with no vector input at all (a softmax): the policy leaves the call as it is, and wgmma says why not
    from redalgebra.codegen.strategies.wgmma_policy import applicable, with_defaults

    plain = Problem(8192, 4096, (), (("x", "bfloat16"),), False, True, True, True, (), tuple(base.items()))
    assert with_defaults(fused("safe_softmax"), plain) is plain
    assert "wgmma" in applicable(fused("safe_softmax"), plain)
    sizes = {"d": 128}
    reps = {"k": 2048, "v": 2048}
    p = Problem(64 * 2048, 2048, (("d", 128),), (("k", "float16"), ("v", "float16")), False, True, True, True,
                tuple(reps.items()), tuple(base.items()))
    assert choose(fused("attention"), 64 * 2048, 2048, sizes, reps, p) == "wgmma"
    assert configure(fused("attention"), replace(p, rows=64 * 2048))["stages"] == 3


def test_the_policys_block_gives_way_where_it_does_not_fit(monkeypatch):
    # a GPU with less shared memory a block: the producer block's 225 KB do not fit, one warpgroup's do — wgmma
    # still takes the call, on the block that fits, rather than refusing it
    from redalgebra.codegen.strategies import products
    from redalgebra.codegen.strategies.wgmma_policy import applicable, configure

    monkeypatch.setattr(products, "SHARED_LIMIT", 150_000)
    base = dict(threads=None, tile=None, segments=None, group=None, batch=None, simulator=False, cc=(9, 0))
    p = Problem(64 * 2048, 2048, (("d", 128),), (("k", "float16"), ("v", "float16")), False, True, True, True,
                (("k", 2048), ("v", 2048)), tuple(base.items()))
    assert applicable(fused("attention"), p) is None
    spec = configure(fused("attention"), p)
    assert (spec["threads"], spec["tile"], spec["producer"]) == (128, 64, False)
    asked = replace_options(p, threads=384, tile=128)  # asked for, it is refused with the reason
    assert "more than a block has" in applicable(fused("attention"), asked)


def replace_options(p, **options):
    from dataclasses import replace

    return replace(p, options=tuple(dict(p.options, **options).items()))


@pytest.mark.parametrize("early", [0, 1])
def test_a_dependent_combine_of_a_rows_segments_waits_for_the_whole_partial_kernel(monkeypatch, early):
    # MLA's decode step on an H100's 132 multiprocessors, four segments a row tile: the combine launched while the
    # partial kernel runs waits for all of it (griddepcontrol.wait) before it reads the states, and the partial kernel
    # lets it launch at its start (griddepcontrol.launch_dependents) only where asked (measured slower), else as its
    # blocks end; merged in a cluster there is no combine, and the simulator launches nothing early
    from redalgebra.cli import HOPPER
    from redalgebra.codegen.strategies import tile_segments, wgmma_policy

    monkeypatch.setattr(wgmma_policy, "DEPENDENT_COMBINE", 1)
    monkeypatch.setattr(tile_segments, "EARLY_COMBINE", early)

    dtypes = {"c": "float16", "kr": "float16", "qc": "float16", "qr": "float16"}
    sizes, reps = {"r": 512, "e": 64}, {"c": 128, "kr": 128}
    kernel = compile(fused("mla_decode"), "cuda", "wgmma")
    strategy, spec, extra = kernel.spec_for(16 * 128, 4096, dtypes, sizes, reps=reps, device=(HOPPER, 132))
    assert spec.dependent and not spec.cluster and extra["nseg"] == 4
    src = kernel.source(spec, strategy)
    assert [name for name, *_ in src.entries] == ["partial", "combine"]
    bodies = src.source.split("def partial(")[1].split("def combine(")
    first = [[ln.strip() for ln in body.splitlines()[1:] if ln.strip() and not ln.strip().startswith('"')][0]
             for body in bodies]
    assert first[1] == "grid_wait()" and (first[0] == "grid_launch()") == bool(early)
    monkeypatch.setattr(wgmma_policy, "DEPENDENT_COMBINE", 0)
    assert not kernel.spec_for(16 * 128, 4096, dtypes, sizes, reps=reps, device=(HOPPER, 132))[1].dependent
    clustered = compile(fused("mla_decode"), "cuda", "wgmma", cluster=True)
    assert not clustered.spec_for(16 * 128, 4096, dtypes, sizes, reps=reps, device=(HOPPER, 132))[1].dependent
    simulated = compile(fused("mla_decode"), "cudasim", "wgmma", segments=4)
    assert not simulated.spec_for(16 * 128, 4096, dtypes, sizes, reps=reps)[1].dependent
