"""``columns_wgmma``'s first kernel (its scalar reductions and its factors) in other shapes, swept on one case: each
variant checked against float64 and timed as ``bench.py`` times a configuration, and each kernel timed alone (CUDA
events, back to back), in one process.

    python3 gpu/rowfactors_sweep.py normgemm 2 auto 128 t256g128x4 t256g256x2   # GROUP INDEX as bench's
    python3 gpu/rowfactors_sweep.py normgemm 2 tiles auto tiles auto             # the factors in the tiles or not
    python3 gpu/rowfactors_sweep.py fp8gemm 5 auto t512g512x2m3 --config columns_wgmma+fp8@256g20

A variant is ``tiles`` (the factors computed in the product's tiles, where the cascade allows: no first kernel),
``auto`` (the rows kernel as the module makes it), ``tTgGxX[mM]`` (the rows kernel with T threads a block, G a
row, X chunks of 16 bytes a thread; its registers capped so that M blocks stay resident), or a number: ``columns``'
block-a-row kernel with that many threads (a second pass over the row for its factors). (Blocks walking the rows, ``...pP``, were swept at commit c78d6a0, which launched them.)

Prints a line per variant: the module's time, the error against the reference, each kernel's time alone, registers and local
memory.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import all_cases  # noqa: E402
from kernel_steps import variant_line  # noqa: E402

from redalgebra.codegen.strategies import columns_wgmma_policy, tile_factors  # noqa: E402


def rows_variant(text: str):
    """``rows_configure`` with the fields of ``tTgGxX`` set (None for ``auto``)."""
    if text == "auto":
        return None
    m = re.fullmatch(r"t(\d+)g(\d+)x(\d+)(?:m(\d+))?", text)
    if m is None:
        raise SystemExit(f"a variant is auto, tTgGxX[mM] or a number of threads: {text!r}")
    threads, group, tile = map(int, m.groups()[:3])
    return dict(threads=threads, group=group, tile=tile, min_blocks=int(m.group(4) or 0))


def resident(row_spec, min_blocks: int):
    """``row_spec`` with its blocks' residency set to ``min_blocks`` (it sets its own after ``rows_configure``'s), where
    it builds a rows kernel at all."""
    def spec(fused, p):
        got = row_spec(fused, p)
        return tuple({**dict(got), "min_blocks": min_blocks}.items()) if got else got
    return spec


def main(argv) -> int:
    config = "columns_wgmma"
    if "--config" in argv:
        at = argv.index("--config")
        config, argv = argv[at + 1], argv[:at] + argv[at + 2:]
    group, index, variants = argv[0], int(argv[1]), argv[2:]
    case = all_cases(False)[group][index]()
    print(f"{case.name} {case.shape} {case.dtype}", flush=True)
    policy, row_spec = columns_wgmma_policy.rows_configure, columns_wgmma_policy.row_spec
    for variant in variants:
        # read when the module is configured
        tile_factors.TILE_FACTORS = variant == "tiles"
        columns_wgmma_policy.ROW_THREADS = int(variant) if variant.isdigit() else None
        fields = None if variant.isdigit() or variant == "tiles" else rows_variant(variant)
        columns_wgmma_policy.rows_configure = policy if fields is None else (
            lambda fused, p, fields=fields: {**policy(fused, p), **fields, "resident": True, "staged": True})
        columns_wgmma_policy.row_spec = row_spec if fields is None else resident(row_spec, fields["min_blocks"])
        try:
            line = variant_line(case, config)
        except Exception as e:  # (a shape the kernel refuses or fails to build: reported, the sweep goes on)
            line = f"failed: {type(e).__name__}: {str(e)[:300]}"
        print(f"  {variant}: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
