"""The ``redalgebra`` command (also ``python -m redalgebra``).

Exit status: 0 on success; 1 when a check fails or a cascade asked to be
derived is not fusable; 2 on bad input (with a message, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from . import workloads
from .codegen.strategies import names as strategy_names
from .algebra import budget, lookup, prove_monoid
from .derive import analyze, derive, unfused
from .derive.document import document
from .derive.report import fused_json, fused_latex
from .errors import NotFusableError, RedalgebraError
from .ir.lexer import decode_error
from .report import glossary, report


def _cmd_list(args) -> int:
    rows = [(w.name, "paper" if w.paper else "extra", "fuses" if w.fusable else "does not fuse",
             len(w.cascade.reductions), w.description) for w in workloads.CATALOGUE.values()]
    if args.json:
        print(json.dumps([dict(name=n, origin=o, expected=e, reductions=r, description=d)
                          for n, o, e, r, d in rows], indent=2))
        return 0
    width = max(len(r[0]) for r in rows)
    for name, origin, expected, nred, desc in rows:
        print(f"{name:<{width}}  {origin:<5}  {expected:<13}  {nred} reductions  {desc}")
    return 0


def _cmd_analyze(args) -> int:
    cascade = workloads.load(args.target)
    analysis, structure = analyze(cascade), report(cascade)
    if args.json:
        data, shape = analysis.as_dict(), structure.as_dict()
        data.update(levels=shape["levels"], graph=shape["graph"])
        for r, s in zip(data["reductions"], shape["reductions"]):
            r["laws"] = s["laws"]
        print(json.dumps(data, indent=2))
    else:
        print(structure.text(verbose=args.verbose))
        print()
        print(analysis.text(verbose=args.verbose))
    return 0


def _cmd_derive(args) -> int:
    fused = derive(workloads.load(args.target))
    if args.json:
        print(json.dumps(fused_json(fused), indent=2))
    elif args.latex:
        print(fused_latex(fused))
    else:
        print(fused.text())
    return 0


def _cmd_check(args) -> int:
    from .runtime.check import check

    cascade = workloads.load(args.target)
    # the unfused baseline runs any cascade, and so does the level order (levels on the CPU, columns where it applies
    # on CUDA): on a cascade that does not fuse, auto takes one (compile says which, or why none); the rest need
    # fused forms
    if args.strategy == "unfused":
        fused = unfused(cascade)
    else:
        try:
            fused = derive(cascade)
        except NotFusableError:
            if args.strategy not in (None, "auto", "columns", "levels"):
                raise
            fused = unfused(cascade)
    results = check(fused, args.backend, args.strategy, dtypes=tuple(args.dtype or ["float32"]))
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        for r in results:
            print(r.line())
    return 0 if all(r.passed for r in results) else 1


#: Vector sizes of ``redalgebra ptx`` where ``--size`` does not give one (attention's head, MLA's latent rows).
PTX_SIZES = {"d": 128, "e": 64, "n": 64, "r": 512}
#: The device ``redalgebra ptx`` plans for without a GPU: a Hopper (sm_90), an H200's multiprocessors.
HOPPER, HOPPER_SMS = (9, 0), 132


def _cmd_ptx(args) -> int:
    from .runtime.backends import device_capability
    from .runtime.check import input_dtypes
    from .runtime.compile import compile as compile_kernel
    from .runtime.ptx import compile_ptx, facts_text, ptx_facts

    fused = derive(workloads.load(args.target))
    c = fused.cascade
    for name, value in (("length", args.length), ("rows", args.rows)):
        if not 1 <= value < 2 ** 31:  # (a grid's blocks, and a row's elements a block walks, are counted in 32 bits)
            raise RedalgebraError(f"--{name} must be a positive integer below 2**31, got {value}")
    sizes = dict(PTX_SIZES)
    dims = sorted({d for d in c.sizes.values() if isinstance(d, str)})
    for item in args.size or []:
        name, _, value = item.partition("=")
        if not (value.isascii() and value.isdigit() and len(value) < 10 and int(value) > 0):
            raise RedalgebraError(f"--size takes NAME=VALUE with a positive integer value, got {item!r}")
        if name.strip() not in dims:  # (a misspelt size would plan silently for the default)
            raise RedalgebraError(f"--size {item!r}: {c.name} has no vector size {name.strip()!r}"
                                  + (f" (its sizes: {', '.join(dims)})" if dims else " (it has no vector sizes)"))
        sizes[name.strip()] = int(value)
    missing = [d for d in dims if d not in sizes]
    if missing:
        raise RedalgebraError(f"{c.name} has vector size{'s' * (len(missing) > 1)} {', '.join(missing)}: "
                              f"give {' '.join(f'--size {d}=VALUE' for d in missing)}")
    sizes = {d: sizes[d] for d in dims}
    for name in ("group", "threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise RedalgebraError(f"--{name} must be a positive integer, got {getattr(args, name)}")
    kernel = compile_kernel(fused, "cuda", args.strategy, fp8_products=args.fp8_products, threads=args.threads,
                            persistent=True if args.persistent else None, group=args.group,
                            cluster=True if args.cluster else None)  # needs no GPU
    reps = {s.name: args.rows for s in c.inputs if s.size is not None} if args.shared else None
    dtypes = input_dtypes(args.dtype, [s.name for s in c.inputs],
                          sorted(q.name for q in c.params if q.size is not None))
    # planned for the GPU here, or without one for a Hopper (an H200's 132 multiprocessors), whose sm_90 the PTX is
    # for: auto then picks what it picks there (wgmma, columns_wgmma), not the choices of a device it does not know
    present = device_capability("cuda")
    planned = None if present else (HOPPER, HOPPER_SMS)
    strategy, spec, extra = kernel.spec_for(args.rows, args.length, dtypes, sizes, reps=reps, device=planned)
    ptx = compile_ptx(kernel.fused, strategy, spec)  # the cascade under the generated code's names
    launch = [f"threads {spec.threads}", f"tile {spec.tile}"]
    if strategy == "vrows":  # lanes per element vector, components per load
        launch += [f"group {spec.group}", f"vec {spec.vec}"]
    elif strategy == "rows":  # the rows strategy's policy
        launch += [f"group {spec.group}", f"vec {spec.vec}", "resident" if spec.resident else "passes"]
        launch += ["shifted"] * spec.shifted + ["staged"] * spec.staged + ["persistent"] * spec.persistent
        launch += [f"{spec.min_blocks} blocks per SM"] * bool(spec.min_blocks)
    elif spec.group:  # (the tile strategies' rows a warp's products take, the columns strategies' columns a block / 8)
        launch += [f"group {spec.group}"]
    launch += [f"segments {n}" for n in [extra.get("nseg")] if n] + ["fast_exp"] * spec.fast_exp + \
        ["FP8 products"] * spec.fp8_products + ["FP8 products not applied (the exact product runs)"] * (
            bool(args.fp8_products) and not spec.fp8_products) + \
        ["segments merged in a thread-block cluster"] * spec.cluster + \
        ["kernels after the first launched dependent"] * spec.dependent
    # (columns_wgmma's module launched in chunks of rows, its product's registers capped: strategies/chunks.py)
    launch += [f"chunks of {spec.row_chunk} rows"] * bool(spec.row_chunk) + \
        [f"the product at most {spec.max_registers} registers"] * bool(spec.max_registers)
    shape = ", ".join([f"{args.rows} rows × length {args.length}", f"{args.dtype} inputs"] +
                      [f"{d}={v}" for d, v in sizes.items()])
    target = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, re.M)
    where = (f"planned for this GPU (sm_{present[0]}{present[1]})" if present else
             f"planned for sm_{HOPPER[0]}{HOPPER[1]} with {HOPPER_SMS} multiprocessors (no GPU here)")
    head = [f"redalgebra ptx {c.name}: {shape}, {target.group(1) if target else 'sm_90'}, {where}",
            f"strategy {strategy}{' (auto)' if args.strategy == 'auto' else ''}, {', '.join(launch)}",
            *facts_text(ptx_facts(ptx))]
    text = "".join(f"// {line}\n" for line in head) + ptx
    if args.out:
        Path(args.out).write_text(text)
        print("".join(f"// {line}\n" for line in head) + f"// wrote {args.out}", end="\n")
    else:
        print(text)
    return 0


def _cmd_prove(args) -> int:
    if args.all == bool(args.target):
        raise RedalgebraError("give one NAME|FILE, or --all for the whole catalogue")
    targets = workloads.names() if args.all else [args.target]
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(targets, 1):
        cascade = workloads.load(name)
        text = document(cascade)
        if out is None:
            print(text)
        else:
            path = out / f"{cascade.name}.md"
            path.write_text(text)
            print(f"[{i}/{len(targets)}] wrote {path}", file=sys.stderr)
    return 0


def _cmd_laws(args) -> int:
    proof = prove_monoid(lookup(args.monoid))
    print(json.dumps(proof.as_dict(), indent=2) if args.json else proof)
    return 0


def _cmd_demo(args) -> int:
    import shutil

    from .derive.report import program_text
    from .runtime.check import check

    names = workloads.names()
    backend = "cuda" if shutil.which("nvidia-smi") else "cudasim"
    print(f"redalgebra demo: fusion analysis, derived incremental forms and generated kernels ({backend}) "
          f"of {len(names)} catalogue cascades\n")
    print("The words used below:\n" + glossary(indent="  ") + "\n")
    failures = 0
    for i, name in enumerate(names, 1):
        w = workloads.get(name)
        print(f"[{i}/{len(names)}] " + analyze(w.cascade).text())
        if w.fusable:
            fused = derive(w.cascade)
            print("  incremental update (state _a and one more element -> state _n):")
            print(program_text(fused.update, "    ", cascade=w.cascade))
            results = check(fused, backend, "tile", shapes=((3, 37),))
            failures += sum(not r.passed for r in results)
            print("  kernel: " + results[0].line())
        print()
    if REPO.joinpath("paper_figures", "figures.py").exists():
        print("figures from the committed H200 results (gpu/results/h200/bench*.csv):")
        _script("paper_figures/figures.py").main(["--only", "speedup,levels,incremental,roofline"])
    print("\nproofs: proofs/*.md; more kernels: `redalgebra check NAME --backend cpu|cudasim|cuda`")
    print("notebooks: `.venv/bin/jupyter lab notebooks/` (01_safe_softmax ... 06_gpu_results)")
    return 1 if failures else 0


REPO = Path(__file__).resolve().parent.parent


def _script(relative: str):
    """A script of the repository checkout (``gpu/``, ``paper_figures/``), loaded as a module.

    They live beside the package, not in it: the benchmark imports PyTorch, which only ``gpu/``
    may, and both read and write the repository's result files.
    """
    import importlib.util

    path = REPO / relative
    if not path.exists():
        raise RedalgebraError(f"{relative} is not here ({path}); run this command from a checkout of the "
                              f"redalgebra repository (pip install -e .)")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cmd_bench(args) -> int:
    import importlib.util

    if importlib.util.find_spec("torch") is None:  # only gpu/ imports it; here we only say clearly what is missing
        raise RedalgebraError("redalgebra bench times against PyTorch on a CUDA GPU: install torch there")
    return _script("gpu/bench.py").main(args.rest)


def _cmd_figures(args) -> int:
    return _script("paper_figures/figures.py").main(args.rest)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e6:
        raise argparse.ArgumentTypeError(f"a positive number of seconds, got {text!r}")
    return value


def _budget_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget", type=_seconds, metavar="SECONDS",
                   help=f"time for the analysis and for the derivation (default {budget.DEFAULT_SECONDS:g} s each); "
                        f"a reduction not decided in time is reported not fusable, reason 'unknown'")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="redalgebra", description="Fuse cascaded reductions, with proofs.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("list", help="the workload catalogue")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=_cmd_list)
    p = sub.add_parser("analyze", help="fusion analysis: conditions, ⊗, G, H, proofs")
    p.add_argument("target", metavar="NAME|FILE", help="a catalogue name or a cascade text file")
    p.add_argument("--json", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true", help="print every proof in full")
    _budget_option(p)
    p.set_defaults(run=_cmd_analyze)
    p = sub.add_parser("derive", help="the fused, incremental and merge formulas of a cascade")
    p.add_argument("target", metavar="NAME|FILE")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--latex", action="store_true")
    _budget_option(p)
    p.set_defaults(run=_cmd_derive)
    p = sub.add_parser("check", help="generate, compile and run kernels; compare with the float64 reference")
    p.add_argument("target", metavar="NAME|FILE")
    p.add_argument("--backend", choices=("cpu", "cudasim", "cuda"), default="cpu")
    p.add_argument("--strategy", choices=(*strategy_names(), "auto"), metavar="S",
                   help=f"on cpu: {', '.join(strategy_names('cpu'))}; on cuda and cudasim: "
                        f"{', '.join(strategy_names('cuda'))} (the simulator runs the shuffle-free twin "
                        f"of one that has it); or auto (the default on cuda: chosen per shape)")
    p.add_argument("--dtype", action="append", default=None, metavar="T",
                   help="the inputs' dtype: float32, float16, bfloat16 or e4m3 for every input, or per input as "
                        "comma-separated name=dtype items with one bare dtype for the rest (bfloat16,w=e4m3); "
                        "repeat for several (default float32)")
    p.add_argument("--json", action="store_true")
    _budget_option(p)
    p.set_defaults(run=_cmd_check)
    p = sub.add_parser("ptx", help="the sm_90 PTX (sm_90a for wgmma) of the generated CUDA kernel(s), with a summary; no GPU needed")
    p.add_argument("target", metavar="NAME|FILE")
    p.add_argument("--strategy", default="auto", metavar="S",
                   help=f"one of: {', '.join(strategy_names('cuda'))}, auto (the default: chosen per shape, "
                        f"as compile(..., backend='cuda') does)")
    p.add_argument("--dtype", default="float32", metavar="T",
                   help="the inputs' dtype, as check takes it: float32, float16, bfloat16, e4m3, or per input "
                        "(bfloat16,w=e4m3); default float32. A vector param named too is given in that 16-bit type, "
                        "as a model holds it (float16,q=float16)")
    p.add_argument("--length", type=int, default=4096, metavar="L", help="elements per row (default 4096)")
    p.add_argument("--rows", type=int, default=1024, metavar="R", help="rows (default 1024)")
    p.add_argument("--size", action="append", metavar="NAME=VALUE",
                   help="a vector size (repeat; defaults " + ", ".join(f"{k}={v}" for k, v in PTX_SIZES.items()) + ")")
    p.add_argument("--shared", action="store_true",
                   help="the vector inputs are given once for all rows (a weight matrix every token reads)")
    p.add_argument("--fp8-products", action="store_true",
                   help="columns_wgmma: the product on the FP8 instruction (e4m3 weights; not exact: see compile())")
    p.add_argument("--persistent", action="store_true",
                   help="blocks that walk their work (rows, or columns_wgmma's output tiles) instead of a block each")
    p.add_argument("--cluster", action="store_true",
                   help="wgmma with segments: a row tile's segments merged in a thread-block cluster, one kernel "
                        "(see compile())")
    p.add_argument("--group", type=int, metavar="G",
                   help="the strategy's group (rows: threads a row; vrows: lanes an element; columns strategies: "
                        "columns a block / 8, e.g. 24 for columns_wgmma's FP8 blocks of 192); default: chosen per shape")
    p.add_argument("--threads", type=int, metavar="T",
                   help="threads a block (wgmma: 384 for two consumer warpgroups and a producer); default: chosen "
                        "per shape")
    p.add_argument("--out", metavar="FILE", help="write the PTX to FILE (the summary still printed)")
    p.set_defaults(run=_cmd_ptx)
    p = sub.add_parser("prove", help="write the proof document (Markdown) of a cascade or the catalogue")
    p.add_argument("target", metavar="NAME|FILE", nargs="?")
    p.add_argument("--all", action="store_true", help="every catalogue workload")
    p.add_argument("--out", metavar="DIR", help="write DIR/NAME.md instead of printing")
    p.set_defaults(run=_cmd_prove)
    p = sub.add_parser("laws", help="prove a monoid's laws (associativity, commutativity, identity)")
    p.add_argument("monoid", metavar="MONOID", help="add|sum, mul|prod, max, min, logaddexp, topk(K)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=_cmd_laws)
    p = sub.add_parser("demo", help="the main job: analyze and derive the catalogue")
    p.set_defaults(run=_cmd_demo)
    p = sub.add_parser("bench", help="validate, autotune and time the kernels against PyTorch (GPU machine); "
                       "options: `redalgebra bench --help`", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(run=_cmd_bench)
    p = sub.add_parser("figures", help="draw the paper's figures (PNG, PDF) from the committed GPU results; "
                       "options: `redalgebra figures --help`", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(run=_cmd_figures)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("bench", "figures"):  # their options belong to the scripts, which parse them
        args = argparse.Namespace(run=_cmd_bench if argv[0] == "bench" else _cmd_figures, rest=argv[1:])
    else:
        args = build_parser().parse_args(argv)
    default = budget.DEFAULT_SECONDS
    budget.DEFAULT_SECONDS = getattr(args, "budget", None) or default
    try:
        return args.run(args)
    except NotFusableError as err:
        print(f"redalgebra: {err}\n(see `redalgebra analyze` for the proofs and counterexamples)", file=sys.stderr)
        return 1
    except RedalgebraError as err:
        print(f"redalgebra: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. piped into head (before OSError, of which it is one)
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 0
    except UnicodeDecodeError as err:
        print(f"redalgebra: error: {decode_error(err)}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"redalgebra: error: {err}", file=sys.stderr)
        return 2
    finally:
        budget.DEFAULT_SECONDS = default


if __name__ == "__main__":
    sys.exit(main())
