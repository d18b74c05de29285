"""Variants of the generator's module-level settings swept on bench's cases in one process: each variant checked
against float64 and timed as ``bench.py`` times a configuration (the module), each of its kernels timed alone, in rounds
that alternate the variants (the GPU's clock drifts between rounds), beside the case's baselines.

    python3 gpu/sweep.py fp8gemm:7,normgemm:3 4:columns_mma,8:columns_mma@128m3 --rounds 2
    python3 gpu/sweep.py fp8gemm:7 4:columns_mma,UNROLL=4+FRAGMENT=0:columns_mma,NT=1:columns_mma
    python3 gpu/sweep.py prefill:2,prefill:3 built:wgmma,tile_producer.PERSISTENT=0:wgmma,tile_copies.CHAIN=8:wgmma

A variant is ``SETTINGS:CONFIG``: CONFIG as bench's ``--configs`` (``m3`` three blocks a multiprocessor, ``g16`` a
lane's 16-byte loads); SETTINGS ``built`` (as built), a number (``columns_mma.UNROLL``: the steps a warp loads before their
products, ``Spec.unroll``) or ``NAME=VALUE+...``, each NAME a module-level setting of
``redalgebra.codegen.strategies`` — ``module.NAME``, or a bare NAME of ``columns_mma``: ``FRAGMENT=0`` times the products
with every block reading the same factors (wrong sums, a bound on what the factors' reads cost); ``NT=1`` the products of
the first n8 tile of rows alone at 16 rows (wrong sums for rows 8 … 15, a bound on what the second tile's ``mma.sync``
cost); ``tile_producer.ABLATE=N`` times the walking attention block without a part of a row tile's work (wrong
outputs, a bound on what it costs: 1 the query's staging after the first row tile, 2 the outputs, 4 the mask). Settings not named in a variant are as built. Prints a line per case, variant and round: the module's time, its
error, each kernel alone with its registers and local memory; then the baselines' times.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import Runner  # noqa: E402
from cases import all_cases  # noqa: E402
from kernel_steps import variant_line  # noqa: E402

from redalgebra.codegen.strategies import columns_mma  # noqa: E402


_CHECK = columns_mma.ColumnsMmaKernel.check_launch


def _tiles_at_most(nt: int):
    """``ColumnsMmaKernel.check_launch`` with at most ``nt`` n8 tiles of rows multiplied (0: as built)."""
    def check_launch(self):
        _CHECK(self)
        if nt:
            self.nt = min(self.nt, nt)
    return check_launch


def _settings(text: str) -> dict:
    """``8`` -> {(columns_mma, UNROLL): 8}; ``UNROLL=8+tile_update.SKIP_UNIT=0`` -> both; ``built`` -> none."""
    if text == "built":
        return {}
    if text.isdigit():
        return {("columns_mma", "UNROLL"): int(text)}
    out = {}
    for item in text.split("+"):
        name, value = item.split("=")
        module, _, attr = name.rpartition(".")
        out[module or "columns_mma", attr] = int(value)
    return out


def _module(name: str):
    return importlib.import_module(f"redalgebra.codegen.strategies.{name}")


def main(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", help="GROUP:INDEX,... (bench's groups and indices)")
    ap.add_argument("variants", help="UNROLL:CONFIG,... e.g. 4:columns_mma,8:columns_mma@128m3")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    variants = [(_settings(settings), settings, config)
                for settings, config in (v.split(":", 1) for v in args.variants.split(","))]
    named = {key for chosen, _, _ in variants for key in chosen if key[1] != "NT"}
    defaults = {key: getattr(_module(key[0]), key[1]) for key in named}  # as built, restored between variants
    every = all_cases(False)
    for text in args.cases.split(","):
        group, index = text.split(":")
        case = every[group][int(index)]()
        print(f"{case.name} {case.shape} {case.dtype}", flush=True)
        for r in range(args.rounds):
            for chosen, settings, config in variants:
                chosen = {**defaults, **chosen}
                columns_mma.ColumnsMmaKernel.check_launch = _tiles_at_most(chosen.pop(("columns_mma", "NT"), 0))
                for (module, name), value in chosen.items():  # read when the module is built
                    setattr(_module(module), name, value)
                try:
                    line = variant_line(case, config)
                except Exception as e:  # a variant the policy refuses, or that fails to build: say so, go on
                    line = f"failed: {type(e).__name__}: {str(e)[:200]}"
                print(f"  round {r} {settings} {config}: {line}", flush=True)
        for b in Runner(1.0, Path("/nonexistent/autotune.json"), True).baselines(case):
            print(f"  {b.system}: {b.ms:.4f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
