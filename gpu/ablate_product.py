"""What bounds a warp-specialized ``columns_wgmma`` product, or an attention-like tile kernel: the kernel timed with one
part of its generated source taken out at a time.

    python3 gpu/ablate_product.py fp8gemm 5 columns_wgmma+fp8@256g20 ["built,no turns"]
    python3 gpu/ablate_product.py mla 1 wgmma "built,no loop copies,no scores,no values,no tile products" --entry partial

GROUP INDEX CONFIG as for ``kernel_steps.py`` (a configuration whose product has a producer warpgroup: the FP8
products). Variants of the product kernel (``tiles``), each compiled from the patched source and timed alone
(``kernel_steps.time_launches``), in turn, twice:

- ``built``: as generated (checked against float64 first);
- ``no turns``: the consumer warpgroups issue their products without taking turns (still right: checked too);
- ``no copies``: the producer issues no ``cp.async`` (it still commits, waits and signals): the consumers' bound;
- ``no products``: every ``wgmma`` replaced by holding its accumulators: the producer's and the barriers' bound;
- ``no promotion``: the consumers do not add a tile's FP8 sums into their float32 sums (the wait for them stays);
- ``no stores``: the epilogue's stores behind a test that never holds (the outputs still computed);
- ``skeleton``: neither copies nor products — the named barriers' ring, the promotions and the epilogue; then
  without the promotions, and without the stores.

For a tile kernel (``--entry partial``: MLA's or attention's kernel of row tiles over the keys, :mod:`wgmma`):

- ``no loop copies``: the copies the tiles' loop issues for the next tile as ``pass`` (the first tile's stay);
- ``no scores``: the scores' ``wgmma_ss`` as holding their accumulators (the update still runs on them);
- ``no values``: the vector sums' products (``wgmma_sst``/``wgmma_rs``) as holding theirs;
- ``no tile products``: both; ``tile skeleton``: both and no loop copies — the update, the barriers, the stores;
- ``no param loads``: the params' rows (the query) staged from a constant instead of global memory;
- ``no partial stores``: a segment's partial sums and states (``part_*``) not stored.

The ablated kernels compute wrong results on purpose; they are timed, never validated.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import prepared_case  # noqa: E402
from kernel_steps import time_launches  # noqa: E402

from redalgebra.runtime.cache import load  # noqa: E402


def no_copies(text: str) -> str:
    """The producer's copies (``cp_async16_at(sm, sd ...)``, its lines alone) as ``pass``."""
    return re.sub(r"(?m)^(\s*)cp_async16_at\(sm, sd .*$", r"\1pass", text)


def no_products(text: str) -> str:
    """``acc = wgmma_ss_...(...)`` as ``acc = wgmma_hold(acc)``."""
    return re.sub(r"(?m)^(\s*)(\(.*\)) = wgmma_ss_\w+\(.*$", r"\1\2 = wgmma_hold(\2)", text)


def no_promotion(text: str) -> str:
    """The loop's ``ac_j_i += tf_j_i`` (indented as the loop's body, 16 spaces) removed; the epilogue's kept."""
    return re.sub(r"(?m)^ {16}ac_\d+_\d+ \+= tf_\d+_\d+\n", "", text)


def no_stores(text: str) -> str:
    """The epilogue's ``st_f32x2(out_y, row, column, a, b)`` behind a test of ``a`` that never holds (its values still
    computed: the sums stay live)."""
    return re.sub(r"(?m)^(\s*)(st_f32x2\(out_\w+, [^,]+, [^,]+, (\w+), \w+\))$", r"\1if \3 == -1.2345e-37: \2", text)


def no_loop_copies(text: str) -> str:
    """The copies issued inside the tiles' loop (indented 16 spaces or more: under its test of a next tile) as
    ``pass``; those before the loop, of the first tile, kept."""
    return re.sub(r"(?m)^( {16,})cp_async16(_at)?\(.*$", r"\1pass", text)


def no_values(text: str) -> str:
    """A tile kernel's vector sums ``acc = wgmma_sst_...(...)`` or ``wgmma_rs_...`` as ``acc = wgmma_hold(acc)``."""
    return re.sub(r"(?m)^(\s*)(\(.*\)) = wgmma_(sst|rs)_\w+\(.*$", r"\1\2 = wgmma_hold(\2)", text)


def no_param_loads(text: str) -> str:
    """The params' element loads before the loop (``v0 = qc[...]``, ``v1 = ...``) as a constant."""
    return re.sub(r"(?m)^(\s*)(v[01]) = \w+\[rc_\d+, .*\]$", r"\1\2 = float32(0.25)", text)


def no_partial_stores(text: str) -> str:
    """A segment's stores of its partial sums and states (``st_f32x2(part_o, ...)``, ``part_m[...] = ...``) as
    ``pass``."""
    text = re.sub(r"(?m)^(\s*)st_f32x2\(part_\w+, .*$", r"\1pass", text)
    return re.sub(r"(?m)^(\s*)part_\w+\[.*\] = .*$", r"\1pass", text)


def no_turns(text: str) -> str:
    """The consumer warpgroups' turn barriers (named barriers 13 and 14: each issues its products after the other's)
    as ``pass``: each issues as soon as its tile is in. Still right (the turns only order the issues): validated."""
    return re.sub(r"(?m)^(\s*)bar_(sync|arrive)\(13 \+ .*$", r"\1pass", text)


#: The variants that still compute the product (validated against float64 before they are timed).
RIGHT = ("built", "no turns")
VARIANTS = {"built": lambda t: t, "no turns": no_turns, "no copies": no_copies, "no products": no_products, "no promotion": no_promotion,
            "no stores": no_stores, "skeleton": lambda t: no_products(no_copies(t)),
            "skeleton, no promotion": lambda t: no_promotion(no_products(no_copies(t))),
            "skeleton, no stores": lambda t: no_stores(no_products(no_copies(t))),
            "no loop copies": no_loop_copies, "no scores": no_products, "no values": no_values,
            "no tile products": lambda t: no_values(no_products(t)),
            "tile skeleton": lambda t: no_loop_copies(no_values(no_products(t))),
            "no param loads": no_param_loads, "no partial stores": no_partial_stores,
            "no param loads or partial stores": lambda t: no_partial_stores(no_param_loads(t))}


def main(argv) -> int:
    entry = "tiles"
    if "--entry" in argv:  # the kernel to take apart (a module's entry name): "partial" for a tile kernel
        at = argv.index("--entry")
        entry, argv = argv[at + 1], argv[:at] + argv[at + 2:]
    group, index, config = argv[0], int(argv[1]), argv[2]
    names = argv[3].split(",") if len(argv) > 3 else list(VARIANTS)  # (a subset: "built,no turns")
    case, runner, kernel, launch = prepared_case(group, index, config)
    print(f"{case.name} {case.shape} {config}: err {runner.validate(case, launch):.3g}")
    (key, (src, _)), = [(k, v) for k, v in kernel._compiled.items()]
    at = [name for name, *_ in (src.entries or ())].index(entry)
    inputs, params, _ = case.copies[0]
    prepared = {}
    for name, patch in ((n, VARIANTS[n]) for n in names):
        text = patch(src.source)
        if name != "built" and text == src.source:
            print(f"{name}: the patch changed nothing; skipped")
            continue
        kernel._compiled[key] = (src, load(text))
        prepared[name] = kernel.prepare(inputs, params)
        if name in RIGHT[1:]:
            print(f"{name}: err {runner.validate(case, prepared[name]):.3g}")
    for round_ in range(2):
        for name, variant in prepared.items():
            us = time_launches(lambda v=variant: v.driver[at].launch(0))
            print(f"round {round_}: {name:>22}: {entry} {us:7.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
