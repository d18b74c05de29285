"""One benchmark case with one configuration, launched a few times: for ``ncu`` and the kernel's resources.

    python3 gpu/kernel_profile.py GROUP INDEX CONFIG [--runs 3] [--sass DIR]
    ncu --kernel-name-base mangled -k regex:ZN[0-9]+ra_ -c 1 --section SpeedOfLight --section Occupancy \
        --section WarpStateStats python3 gpu/kernel_profile.py softmax 1 rows

(``-k``: the generated kernels' *mangled* names start with their module, ``_ZN<n>ra_<hash>``; their demangled names
are ``kernel[...]``, and a pattern such as ``kernel`` matches PyTorch's kernels that build the inputs first.)

GROUP and INDEX pick a case of ``bench.py`` (``softmax 1`` is the bfloat16 softmax), CONFIG is bench's
configuration syntax. Prints each kernel's registers, local and shared memory per thread; with
``--sass`` writes the kernels' PTX and SASS there (SASS needs ``nvdisasm``, on the GPU machine).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import prepared_case  # noqa: E402


def resources(dispatcher) -> dict:
    """Registers, local and shared bytes per thread of a compiled numba kernel (its one signature)."""
    out = {}
    for name in ("regs_per_thread", "local_mem_per_thread", "shared_mem_per_block", "const_mem_size"):
        getter = getattr(dispatcher, f"get_{name}", None)
        try:
            value = getter() if getter else None
        except Exception as err:  # noqa: BLE001 - an attribute numba does not expose is reported, not fatal
            value = f"n/a ({type(err).__name__})"
        out[name] = list(value.values())[0] if isinstance(value, dict) and len(value) == 1 else value
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("group")
    ap.add_argument("index", type=int)
    ap.add_argument("config")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sass", help="folder for the kernels' PTX and SASS")
    args = ap.parse_args(argv)
    case, runner, kernel, launch = prepared_case(args.group, args.index, args.config)
    err = runner.validate(case, launch)
    for _ in range(args.runs):
        launch.run()
    torch.cuda.synchronize()
    src = next(iter(kernel._compiled.values()))[0]
    print(f"{case.name} {case.shape} {case.dtype} {args.config}: strategy {src.strategy}, spec {src.spec}, "
          f"max rel err {err:.2e}")
    for i, (configured, _, _) in enumerate(launch.steps):
        dispatcher = getattr(configured, "dispatcher", configured)
        print(f"  kernel {i}: {resources(dispatcher)}")
        if args.sass:
            folder = Path(args.sass)
            folder.mkdir(parents=True, exist_ok=True)
            stem = f"{case.name}_{args.config.replace('@', '_')}_{i}"
            (folder / f"{stem}.ptx").write_text("\n".join(dispatcher.inspect_asm().values()))
            try:
                (folder / f"{stem}.sass").write_text("\n".join(dispatcher.inspect_sass().values()))
            except Exception as err:  # noqa: BLE001 - nvdisasm missing: the PTX is still written
                print(f"  no SASS: {type(err).__name__}: {err}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
