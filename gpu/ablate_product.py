"""What bounds a warp-specialized ``columns_wgmma`` product: the kernel timed with one part of its generated source
taken out at a time.

    python3 gpu/ablate_product.py fp8gemm 5 columns_wgmma+fp8@256g20

GROUP INDEX CONFIG as for ``kernel_steps.py`` (a configuration whose product has a producer warpgroup: the FP8
products). Variants of the product kernel (``tiles``), each compiled from the patched source and timed alone
(``kernel_steps.time_launches``), in turn, twice:

- ``built``: as generated (checked against float64 first);
- ``no copies``: the producer issues no ``cp.async`` (it still commits, waits and signals): the consumers' bound;
- ``no products``: every ``wgmma`` replaced by holding its accumulators: the producer's and the barriers' bound;
- ``no promotion``: the consumers do not add a tile's FP8 sums into their float32 sums (the wait for them stays);
- ``skeleton``: neither copies nor products — the named barriers' ring alone.

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


VARIANTS = {"built": lambda t: t, "no copies": no_copies, "no products": no_products, "no promotion": no_promotion,
            "skeleton": lambda t: no_products(no_copies(t))}


def main(argv) -> int:
    group, index, config = argv[0], int(argv[1]), argv[2]
    case, runner, kernel, launch = prepared_case(group, index, config)
    print(f"{case.name} {case.shape} {config}: err {runner.validate(case, launch):.3g}")
    (key, (src, _)), = [(k, v) for k, v in kernel._compiled.items()]
    at = [name for name, *_ in (src.entries or ())].index("tiles")
    inputs, params, _ = case.copies[0]
    prepared = {}
    for name, patch in VARIANTS.items():
        text = patch(src.source)
        if name != "built" and text == src.source:
            print(f"{name}: the patch changed nothing; skipped")
            continue
        kernel._compiled[key] = (src, load(text))
        prepared[name] = kernel.prepare(inputs, params)
    for round_ in range(2):
        for name, variant in prepared.items():
            us = time_launches(lambda v=variant: v.driver[at].launch(0))
            print(f"round {round_}: {name:>13}: product {us:7.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
