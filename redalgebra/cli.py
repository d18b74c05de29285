"""The ``redalgebra`` command (also ``python -m redalgebra``).

Exit status: 0 on success, 1 when a check fails, 2 on bad input (with a
message, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys

from . import workloads
from .algebra import lookup, prove_monoid
from .errors import RedalgebraError
from .report import report


def _cmd_list(args) -> int:
    rows = [(w.name, "paper" if w.paper else "extra", len(w.cascade.reductions), w.description)
            for w in workloads.CATALOGUE.values()]
    if args.json:
        print(json.dumps([dict(name=n, origin=o, reductions=r, description=d) for n, o, r, d in rows], indent=2))
        return 0
    width = max(len(r[0]) for r in rows)
    for name, origin, nred, desc in rows:
        print(f"{name:<{width}}  {origin:<5}  {nred} reductions  {desc}")
    return 0


def _cmd_analyze(args) -> int:
    rep = report(workloads.load(args.target))
    print(json.dumps(rep.as_dict(), indent=2) if args.json else rep.text(verbose=args.verbose))
    return 0


def _cmd_laws(args) -> int:
    proof = prove_monoid(lookup(args.monoid))
    print(json.dumps(proof.as_dict(), indent=2) if args.json else proof)
    return 0


def _cmd_demo(args) -> int:
    names = workloads.names()
    print(f"redalgebra demo: the structure of {len(names)} catalogue cascades and the laws of their monoids\n")
    for i, name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] " + report(workloads.get(name).cascade).text())
        print()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="redalgebra", description="Fuse cascaded reductions, with proofs.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("list", help="the workload catalogue")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=_cmd_list)
    p = sub.add_parser("analyze", help="graph, reductions and monoid laws of a cascade")
    p.add_argument("target", metavar="NAME|FILE", help="a catalogue name or a cascade text file")
    p.add_argument("--json", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true", help="print every proof in full")
    p.set_defaults(run=_cmd_analyze)
    p = sub.add_parser("laws", help="prove a monoid's laws (associativity, commutativity, identity)")
    p.add_argument("monoid", metavar="MONOID", help="add|sum, mul|prod, max, min, logaddexp, topk(K)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=_cmd_laws)
    p = sub.add_parser("demo", help="the main job: analyze the catalogue")
    p.set_defaults(run=_cmd_demo)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except RedalgebraError as err:
        print(f"redalgebra: error: {err}", file=sys.stderr)
        return 2
    except (OSError, UnicodeDecodeError) as err:
        print(f"redalgebra: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. piped into head
        return 0


if __name__ == "__main__":
    sys.exit(main())
