"""Where a kernel's warps wait, instruction by instruction: a summary of ncu's source page (SASS, with the
``SourceCounters`` section's stall samples).

    ncu --clock-control none --kernel-name-base mangled -k regex:'ZN[0-9]+ra_' --launch-skip 1 -c 1 \
        --section SourceCounters --section WarpStateStats -o /tmp/prof python3 gpu/kernel_profile.py prefill 2 wgmma
    ncu -i /tmp/prof.ncu-rep --page source --csv --print-source sass > prof.csv
    python3 gpu/ncu_source.py prof.csv [--top 25] [--loop]

Prints the samples' stall reasons, the share of executed instructions and of samples by opcode, the instructions
with the most samples and, with ``--loop``, every instruction of the main loop (the count that executes the most
instructions), in address order, with its samples and its two main stall reasons. No GPU needed.
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def _num(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read(path: str) -> tuple[list[dict], list[str]]:
    """The source page's rows (one a SASS instruction) and its stall columns (issued or not)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    start = next(i for i, r in enumerate(rows) if "Address" in r and "Source" in r)
    header = rows[start]
    data = [dict(zip(header, r)) for r in rows[start + 1:] if len(r) == len(header)]
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    return data, stalls


def opcode(source: str) -> str:
    words = source.split()
    if words and words[0].startswith("@"):  # a predicate
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def summary(data: list[dict], stalls: list[str], top: int) -> list[str]:
    total = sum(_num(r[SAMPLES]) for r in data) or 1.0
    executed = sum(_num(r[EXECUTED]) for r in data) or 1.0
    out = [f"samples {total:.0f}, instructions executed {executed:.0f}, SASS lines {len(data)}"]
    reasons = collections.Counter({s[6:]: sum(_num(r[s]) for r in data) for s in stalls})
    out.append("stalls: " + ", ".join(f"{k} {v / total:.1%}" for k, v in reasons.most_common(10) if v))
    by_exec, by_samples = collections.Counter(), collections.Counter()
    for r in data:
        by_exec[opcode(r["Source"])] += _num(r[EXECUTED])
        by_samples[opcode(r["Source"])] += _num(r[SAMPLES])
    out.append("executed: " + ", ".join(f"{k} {v / executed:.1%}" for k, v in by_exec.most_common(16)))
    out.append("samples: " + ", ".join(f"{k} {v / total:.1%}" for k, v in by_samples.most_common(16)))
    out.append(f"the {top} instructions with the most samples:")
    out += [line(r, stalls, total) for r in sorted(data, key=lambda r: -_num(r[SAMPLES]))[:top]]
    return out


def line(r: dict, stalls: list[str], total: float) -> str:
    main = sorted(((_num(r[s]), s[6:]) for s in stalls), reverse=True)[:2]
    why = " ".join(f"{s} {v / total:.2%}" for v, s in main if v)
    return f"{r['Address'][-6:]} {_num(r[EXECUTED]):>10.0f} {_num(r[SAMPLES]) / total:6.2%}  {r['Source'][:80]:<80} {why}"


def loop(data: list[dict], stalls: list[str]) -> list[str]:
    """The instructions of the count that executes the most instructions (a main loop's: its trips times its
    instructions), and those executed at least 90 % of it (behind a branch taken by all but the last trips)."""
    total = sum(_num(r[SAMPLES]) for r in data) or 1.0
    counts = collections.Counter(_num(r[EXECUTED]) for r in data if _num(r[EXECUTED]))
    body = max(counts, key=lambda c: c * counts[c], default=0)
    chosen = [r for r in data if body and 0.9 * body <= _num(r[EXECUTED]) <= body]
    share = sum(_num(r[SAMPLES]) for r in chosen) / total
    return [f"loop: {len(chosen)} instructions executed {body:.0f} times (or at least 90 % of it), "
            f"{share:.1%} of the samples"] + [line(r, stalls, total) for r in chosen]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--loop", action="store_true", help="list the main loop's instructions")
    args = ap.parse_args(argv)
    data, stalls = read(args.csv)
    print("\n".join(summary(data, stalls, args.top) + (loop(data, stalls) if args.loop else [])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
