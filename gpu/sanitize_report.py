"""What compute-sanitizer reported, for ``sanitize.py``: its logs parsed and each report attributed to the
case that ran when it was written, and the result rows, summary table and output files."""

from __future__ import annotations

import csv
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

TOOLS = ("memcheck", "racecheck", "synccheck")
FIELDS = ("tool", "strategy", "workload", "shape", "dtype", "masked", "errors", "hazards", "status", "note")


# -- sanitizer logs ----------------------------------------------------------------------------------------------
ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")
RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")
MODULE = re.compile(r"ra_[0-9a-f]{32}")
PREFIX = "========= "
NOT_REPORTS = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY", "Target application")


@dataclass
class Report:
    offset: int        # byte offset of its first line in the log
    severity: str      # "error" | "warning"
    module: str | None  # the generated module of the kernel it names (ra_<hash>)
    text: str


@dataclass
class Log:
    errors: int | None                       # ERROR SUMMARY (None: the log has none: the process died first)
    race: tuple | None                       # (hazards displayed, errors, warnings) from racecheck
    reports: list


def parse_log(text: str) -> Log:
    """Reports (a line ``========= X`` with X not indented starts one; indented lines continue it) and summaries."""
    reports, offset, open_ = [], 0, False
    for line in text.splitlines(keepends=True):
        body = line[len(PREFIX):] if line.startswith(PREFIX) else ""
        if body[:1].strip() and not body.startswith(NOT_REPORTS):
            warn = body.lower().startswith(("warning", "warn:"))
            reports.append(Report(offset, "warning" if warn else "error", None, line))
            open_ = True
        elif body[:1] == " " and open_:
            reports[-1].text += line  # a continuation of the report just above
        else:
            open_ = False
        offset += len(line.encode())
    for r in reports:
        found = MODULE.search(r.text)
        r.module = found.group(0) if found else None
    errors = ERROR_SUMMARY.findall(text)
    race = RACE_SUMMARY.findall(text)
    return Log(int(errors[-1]) if errors else None, tuple(map(int, race[-1])) if race else None, reports)


def attribute(reports, done: list[dict]) -> tuple[dict, list]:
    """``{cid: [reports]}``: each report goes to the first case, in run order, that ran its kernel and by whose
    end the log had reached the report (else the last case that ran its kernel); a record without
    ``modules`` (the case a worker died in) may have run any kernel. Reports no case ran the kernel of: apart."""
    placed, loose = defaultdict(list), []
    for rep in reports:
        cands = [d for d in done if d.get("modules") is None or rep.module in d["modules"]] if rep.module else done
        if not cands:
            loose.append(rep)
            continue
        after = [d for d in cands if d.get("log_at") is not None and d["log_at"] > rep.offset]
        placed[(after or cands)[0 if after else -1]["cid"]].append(rep)
    return placed, loose



# -- results ------------------------------------------------------------------------------------------------------
def result_rows(tool: str, cases, records: dict, placed: dict, refused: dict, not_run: str = "") -> list[dict]:
    rows = []
    for c in cases:
        r = records.get(c.cid)
        reports = placed.get(c.cid, [])
        errors = sum(rep.severity == "error" for rep in reports)
        hazards = len(reports) if tool == "racecheck" else ""
        if c.cid in refused:
            status, note = "n/a", refused[c.cid]
        elif r is None:
            status, note = "not-run", not_run or "the time budget ran out before it"
        else:
            status, note = r["status"], r.get("note", "")
            if r.get("resolved") and r["resolved"] != c.strategy:
                note = f"ran as {r['resolved']}" + (f"; {note}" if note else "")
        if reports:
            note = reports[0].text.splitlines()[0][len(PREFIX):].strip() + (f"; {note}" if note else "")
            if errors:
                status = "errors" if status == "ok" else f"errors+{status}"
            elif status == "ok":
                status = "hazards"  # racecheck warnings only
        rows.append(dict(tool=tool, strategy=c.label, workload=c.workload, shape=c.shape, dtype=c.dtype,
                         masked=c.masked, errors=errors, hazards=hazards, status=status, note=" ".join(note.split())[:300]))
    return rows


def skipped_rows(tool: str, groups) -> list[dict]:
    """Cases a tool has nothing to check in (no shared memory for racecheck, no barrier for synccheck)."""
    why = "no shared memory in the kernel" if tool == "racecheck" else "no barrier or shuffle in the kernel"
    return [dict(tool=tool, strategy=c.label, workload=c.workload, shape=c.shape, dtype=c.dtype, masked=c.masked,
                 errors="", hazards="", status="skip", note=why) for g in groups for c in g.cases]


def summary_table(rows) -> list[str]:
    """Per tool × strategy (variants folded in): cases, ok, sanitizer errors, hazards, wrong results, the rest."""
    agg = defaultdict(Counter)
    for r in rows:
        a = agg[(r["tool"], r["strategy"].split("@")[0])]
        a["cases"] += r["status"] != "skip"
        a["skip"] += r["status"] == "skip"
        a["ok"] += r["status"] == "ok"
        a["errors"] += int(r["errors"] or 0)
        a["hazards"] += int(r["hazards"] or 0)
        a["wrong"] += "wrong" in r["status"]
        a["n/a"] += r["status"] == "n/a"
        a["other"] += r["status"].split("+")[-1] in ("crash", "hang", "cuda-error", "error", "not-run", "unattributed",
                                                     "unverified")
    head = ["tool", "strategy", "cases", "ok", "errors", "hazards", "wrong", "n/a", "crash/other", "skipped"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (tool, strategy), a in sorted(agg.items(), key=lambda kv: (TOOLS.index(kv[0][0]) if kv[0][0] in TOOLS else 9,
                                                                     kv[0][1])):
        lines.append(f"| {tool} | {strategy} | {a['cases']} | {a['ok']} | {a['errors']} | {a['hazards']} | "
                     f"{a['wrong']} | {a['n/a']} | {a['other']} | {a['skip']} |")
    return lines


def write_outputs(out: Path, rows, header: list[str], reports_text: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "sanitize.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    bad = [r for r in rows if r["status"] not in ("ok", "skip", "n/a")]
    md = header + ["", *summary_table(rows), "",
                   f"{len(bad)} case(s) not ok" + (":" if bad else "."), ""]
    md += [f"- {r['tool']} {r['strategy']} {r['workload']} {r['shape']} {r['dtype']}"
           f"{' masked' if r['masked'] else ''}: **{r['status']}** {r['note']}" for r in bad[:60]]
    if len(bad) > 60:
        md.append(f"- … and {len(bad) - 60} more in sanitize.csv")
    na = Counter(r["note"] for r in rows if r["status"] == "n/a")
    if na:
        md += ["", "Refused by the strategy (n/a):", ""] + [f"- {n} ({k} cases)" for n, k in na.most_common()]
    (out / "sanitize.md").write_text("\n".join(md) + "\n")
    (out / "sanitize_reports.txt").write_text(reports_text)
