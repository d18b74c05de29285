"""compute-sanitizer (memcheck, racecheck, synccheck) over every real CUDA strategy × every fusable cascade.

Every case runs one generated kernel at a small, hostile shape — 5 rows (not a multiple of any block's rows),
rows of 1, 7, 33, 257 and 1001 elements, small vectors (d = 16, a partial lane slot; ALiBi's d = 32, the
guard-free one), with and without a ``keep`` mask in which rows 1 and 4 are fully masked, bfloat16 inputs
for ``rows`` and ``auto`` — and checks its outputs against the float64 reference as
:func:`redalgebra.runtime.check.check` does, so a kernel that computes garbage without touching bad memory
is reported too. Variants reach paths the default policy does not take at these lengths: ``rows`` with
4 threads of 1 chunk per row (the row walked in passes, read twice) and with 128 threads per row (the warps
merge through shared memory); ``split`` and ``split_lanes`` with 3 segments per row.

Compiling costs up to about 10 s per kernel on the GPU machine, so the cases are grouped by the kernel they run
(the strategy and compile-time ``Spec``, computed here without a GPU): one group is compiled once per tool.
Groups are queued per tool as files; worker processes, each one ``python3 gpu/sanitize.py --worker`` under
``compute-sanitizer --tool T --log-file F``, claim groups (an atomic rename) until the queue is empty or the
time is up, so the ~13 workers stay busy whatever each group costs. racecheck runs only kernels that declare
shared memory and synccheck only kernels with barriers or warp shuffles (``--all-kernels``: every kernel).
A worker whose CUDA context dies (memcheck's invalid access) or that crashes is replaced, its case recorded
with the error and the rest of its group queued again. Each sanitizer report names the kernel's module
(``ra_<hash>``) and lies at a place in the log that the worker records after every case: that attributes it.

GPU machine (the numpy wheel preamble: gpu/README.md)::

    python3 gpu/sanitize.py                         # every tool, at most 8 minutes (--budget 480)
    python3 gpu/sanitize.py --plan                  # cases and kernels per tool, the time estimate; runs nothing

Here, without a GPU (the worker in-process under the CUDA simulator, tiny shapes, no sanitizer)::

    python3 gpu/sanitize.py --dry-run --strategies rows,warp,split --workloads safe_softmax,attention

Writes ``sanitize.csv`` (tool, strategy, workload, shape, dtype, masked, errors, hazards, status, note),
``sanitize.md`` (the summary) and ``sanitize_reports.txt`` (every sanitizer report and crash) under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from redalgebra import RedalgebraError, workloads  # noqa: E402
from redalgebra.codegen.strategies import names as strategy_names  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sanitize_cases import (  # noqa: E402
    ONLY16, ROWS, SIZES, Case, compile_cost, cost, distinct_workloads, enumerate_cases, fused_of, kernel_of, plan, priority,
    problem, runs_under, schedule)
from sanitize_report import (  # noqa: E402
    Log, PREFIX, Report, TOOLS, attribute, parse_log, result_rows, skipped_rows, summary_table, write_outputs)

LENGTHS = (1, 7, 33, 257, 1001)          # one element, under a warp, a warp and one, odd past a block, 1000 + 1
QUICK_LENGTHS = (7, 1001)
DRY_LENGTHS = (1, 7, 33)                 # the simulator runs a thread per OS thread
SANITIZER_PATHS = ("/usr/local/cuda/bin/compute-sanitizer", "/usr/local/cuda/compute-sanitizer/compute-sanitizer")
REPORTS_CHARS = 12_000_000                        # sanitize_reports.txt at most (files come back up to 16 MiB)
STARTUP_S = 15.0                                  # estimated seconds to start a sanitized worker
OUTPUTS = ("sanitize.csv", "sanitize.md", "sanitize_reports.txt")


# -- one case -------------------------------------------------------------------------------------------------
def run_case(case: Case, backend: str) -> dict:
    """Run the case's kernel and compare with the float64 reference (as ``check.check`` does)."""
    kernel = kernel_of(case, backend)
    inputs, params, keep = problem(case)
    t0 = time.time()
    try:
        spec, *_, resolved, _extra = kernel.layout(inputs, params, keep)
        fresh = (resolved, spec) not in kernel._compiled
        raw = kernel(inputs, params, keep=keep)
    except RedalgebraError as err:
        return dict(status="n/a", note=str(err))
    except Exception as err:  # noqa: BLE001 - a failing kernel is a result; a dead CUDA context ends the worker
        status = "cuda-error" if _cuda_failure(err) else "error"
        return dict(status=status, note=f"{type(err).__name__}: {err}"[:400],
                    modules=_modules(kernel), seconds=round(time.time() - t0, 2))
    seconds = round(time.time() - t0, 2)
    module = kernel._compiled[(resolved, spec)][1].__name__
    passed, errors, tol = verify(case, kernel, resolved, inputs, params, keep, raw)
    note = "" if passed else "reference: " + ", ".join(
        f"{k} {v:.2e}" if isinstance(v, float) else f"{k} {v}" for k, v in errors.items()) + f" (tol {tol:g})"
    return dict(status="ok" if passed else "wrong", note=note, resolved=resolved, modules=[module],
                seconds=seconds, compiled=fresh)


def verify(case, kernel, resolved, inputs, params, keep, raw):
    """(passed, per-output errors, tolerance) against the float64 reference on the same rounded inputs
    (``check.judge``: infinite reference values, such as a fully masked row's, must match exactly)."""
    from redalgebra.codegen.strategies import get
    from redalgebra.runtime.check import judge

    # as check judges: a cast at a running scale unless the strategy's scales are final; tensor-core products
    # with their factors rounded to the 16-bit type
    chosen = get(resolved, "cuda")
    running = kernel.fused.exact_in_reals_only and resolved != "nonincremental" and not chosen.final(kernel.fused)
    return judge(kernel.user or kernel.fused, raw, inputs, params, keep, case.dtype, running, chosen.rounds(kernel.fused))


def _cuda_failure(err: Exception) -> bool:
    """A CUDA driver error: after a sanitizer stops a kernel the context is unusable."""
    return type(err).__name__ in ("CudaAPIError", "CudaDriverError") or "CUDA_ERROR" in str(err)


def _modules(kernel) -> list[str]:
    return [module.__name__ for _, module in kernel._compiled.values()]


# -- the worker (under compute-sanitizer, or in-process for --dry-run) ------------------------------------------
def claim(queue: Path, me: str):
    """The first queued group file this worker manages to rename to itself (None when the queue is empty)."""
    for name in sorted(os.listdir(queue)):
        if not name.endswith(".json"):
            continue
        mine = queue / f"{name[:-5]}.{me}.claimed"
        try:
            os.rename(queue / name, mine)
        except OSError:
            continue  # another worker took it
        return json.loads(mine.read_text())
    return None


def log_size(path: str | None) -> int | None:
    """The sanitizer log's size once it stops growing (its reports of the case just run are in it)."""
    if not path:
        return None
    last = -1
    for _ in range(10):
        size = os.path.getsize(path) if os.path.exists(path) else 0
        if size == last:
            break
        last = size
        time.sleep(0.02)
    return last


def work(queue: Path, results: Path, backend: str, deadline: float, log: str | None = None,
         me: str | None = None) -> int:
    """Claim groups and run their cases, one JSON line per event; 3 when the CUDA context died."""
    me = me or str(os.getpid())
    with results.open("a") as out:
        def emit(record):
            out.write(json.dumps(record) + "\n")
            out.flush()
        while time.time() < deadline and (group := claim(queue, me)) is not None:
            for c in group["cases"]:
                case = Case(**c)
                if time.time() > deadline + 20:
                    break  # the rest stay un-begun: reported as not run
                emit({"event": "begin", "cid": case.cid, "t": time.time()})
                record = run_case(case, backend)
                emit({"event": "done", "cid": case.cid, "log_at": log_size(log), **record})
                if record["status"] == "cuda-error":
                    return 3
    return 0


# -- the driver -------------------------------------------------------------------------------------------------
@dataclass
class Worker:
    name: str
    tool: str
    proc: subprocess.Popen
    log: Path
    results: Path
    stderr: Path


class Driver:
    """Queues every tool's groups, keeps ``jobs`` workers busy under compute-sanitizer, collects their records."""

    def __init__(self, args, groups_by_tool: dict, work_dir: Path, deadline: float):
        self.args, self.dir, self.deadline = args, work_dir, deadline
        self.cost = {}         # queued file name -> estimated seconds
        self.records = defaultdict(dict)  # tool -> cid -> record
        self.ran = {}          # worker name -> its records in run order (a case it died in included)
        self.finished: list[tuple[Worker, Log]] = []
        self.startup_failures = Counter()
        self.not_run = {}      # tool -> why its queued cases did not run (workers that failed to start)
        self.running: list[Worker] = []
        self.sanitizer_flags = self._probe()
        for tool, groups in groups_by_tool.items():
            q = self.queue(tool)
            q.mkdir(parents=True)
            for rank, g in enumerate(sorted(groups, key=priority)):
                self._enqueue(tool, f"{rank:05d}_{g.gid}", g.cases, compile_cost(g, args.compile_s))

    def queue(self, tool: str) -> Path:
        return self.dir / "queue" / tool

    def _enqueue(self, tool, name, cases, compile_s: float):
        (self.queue(tool) / f"{name}.json").write_text(json.dumps({"cases": [asdict(c) for c in cases]}))
        self.cost[f"{name}.json"] = compile_s + len(cases) * self.args.case_s

    def _probe(self) -> dict:
        """Per tool, the optional flags this compute-sanitizer takes (named in its --help, and a sanitized
        ``python -c`` starts with them): padding after every allocation (memcheck), no host backtraces."""
        try:
            text = subprocess.run([self.args.sanitizer, "--help"], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired):
            text = ""
        wanted = {"memcheck": [("--padding", "256")], "*": [("--show-backtrace", "no")]}
        def probe(tool):
            mine = [x for opt, val in wanted.get(tool, []) + wanted["*"] if opt in text for x in (opt, val)]
            if mine and self._starts(tool, mine):
                return mine
            if not self._starts(tool, []):
                raise SystemExit(f"{self.args.sanitizer} --tool {tool} does not start python: see the output above")
            return []
        with ThreadPoolExecutor(len(self.args.tool_list)) as pool:  # each probe starts a sanitizer: seconds
            return dict(zip(self.args.tool_list, pool.map(probe, self.args.tool_list)))

    def _starts(self, tool: str, flags: list) -> bool:
        """A sanitized python with ``flags`` starts, reaches the GPU and copies an array there and back."""
        code = ("import numpy as np; from numba import cuda; "
                "print('sanitize-probe-ok', cuda.to_device(np.arange(4.0)).copy_to_host().sum())")
        cmd = [self.args.sanitizer, "--tool", tool, "--error-exitcode", "0", *flags, sys.executable, "-c", code]
        env = {**os.environ, **({"NUMBA_ENABLE_CUDASIM": "1"} if self.args.backend == "cudasim" else {})}
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
        except (OSError, subprocess.TimeoutExpired) as err:
            print(f"probe {' '.join(cmd)}: {err}", file=sys.stderr)
            return False
        if run.returncode or "sanitize-probe-ok 6.0" not in run.stdout:
            print(f"probe {' '.join(cmd)}: exit {run.returncode}\n{run.stdout[-1500:]}{run.stderr[-1500:]}",
                  file=sys.stderr)
            return False
        return True

    def remaining(self, tool: str) -> float:
        q = self.queue(tool)
        return sum(self.cost.get(n, 0.0) for n in os.listdir(q) if n.endswith(".json")) if q.exists() else 0.0

    def start(self, tool: str) -> None:
        name = f"w{len(self.finished) + len(self.running):03d}"
        log, results, err = (self.dir / f"{name}_{tool}.{ext}" for ext in ("log", "jsonl", "stderr"))
        flags = self.sanitizer_flags[tool]
        cmd = [self.args.sanitizer, "--tool", tool, "--error-exitcode", "0", "--print-limit", str(self.args.print_limit),
               "--log-file", str(log), *flags, sys.executable, str(Path(__file__).resolve()), "--worker",
               "--queue", str(self.queue(tool)), "--results", str(results), "--log", str(log),
               "--deadline", str(self.deadline), "--me", name, "--backend", self.args.backend]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        if self.args.backend == "cuda":
            env.pop("NUMBA_ENABLE_CUDASIM", None)
        with err.open("w") as fh:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=fh, env=env, start_new_session=True)
        self.running.append(Worker(name, tool, proc, log, results, err))

    def next_tool(self):
        """The tool whose queued work per running worker is largest (None: nothing left to start)."""
        best, most = None, 0.0
        for tool in self.args.tool_list:
            if self.startup_failures[tool] >= 3:
                continue
            left = self.remaining(tool) / (1 + sum(w.tool == tool for w in self.running))
            if left > most:
                best, most = tool, left
        return best

    def run(self) -> None:
        try:
            self._loop()
        except BaseException:  # an interrupted driver leaves no sanitized worker behind
            for w in list(self.running):
                self._kill(w)
            raise

    def _loop(self) -> None:
        stop = self.deadline + 45  # workers stop claiming at the deadline; then the stragglers are killed
        while True:
            now = time.time()
            for w in list(self.running):
                if w.proc.poll() is not None:
                    self.collect(w)
                elif now > stop or self._hung(w, now):
                    self._kill(w)
                    self.collect(w, killed="budget" if now > stop else "hang")
            while len(self.running) < self.args.jobs and time.time() < self.deadline - 15 and (t := self.next_tool()):
                self.start(t)
            if not self.running:
                return
            time.sleep(0.5)

    def _hung(self, w: Worker, now: float) -> bool:
        """The worker's last event began a case more than --case-timeout seconds ago."""
        last = _last_line(w.results)
        return bool(last) and last.get("event") == "begin" and now - last["t"] > self.args.case_timeout

    @staticmethod
    def _kill(w: Worker) -> None:
        try:
            os.killpg(w.proc.pid, 9)  # the sanitizer and its python, started in their own session by start()
        except ProcessLookupError:
            pass
        w.proc.wait()

    def collect(self, w: Worker, killed: str | None = None) -> None:
        """Records of a finished worker; its case in flight marked, the rest of its groups queued again."""
        self.running.remove(w)
        events = [json.loads(x) for x in w.results.read_text().splitlines()] if w.results.exists() else []
        done = {e["cid"]: e for e in events if e["event"] == "done"}
        begun = [e["cid"] for e in events if e["event"] == "begin"]
        tail = _tail(w.stderr)
        ran = [done.get(cid) or self._died(cid, w, killed, tail) for cid in begun]
        self.ran[w.name] = ran
        self.records[w.tool].update((r["cid"], r) for r in ran)
        if not done and w.proc.returncode not in (0, 3) and not killed:  # died before finishing one case
            self.startup_failures[w.tool] += 1
            self.not_run[w.tool] = f"workers did not start ({_exit(w.proc.returncode)}): {tail}"
        for claimed in self.queue(w.tool).glob(f"*.{w.name}.claimed"):
            self._requeue(w.tool, claimed)
        self.finished.append((w, parse_log(w.log.read_text(errors="replace")) if w.log.exists() else Log(None, None, [])))

    def _died(self, cid: str, w: Worker, killed: str | None, tail: str) -> dict:
        """The record of the case a worker was in when it died or was killed (any kernel's report may be its)."""
        status = {"budget": "not-run", "hang": "hang"}.get(killed, "crash")
        note = (f"killed after {self.args.case_timeout:.0f} s in this case" if killed == "hang" else
                "stopped at the time budget" if killed else f"worker died ({_exit(w.proc.returncode)}): {tail}")
        return {"cid": cid, "status": status, "note": note, "modules": None}

    def _requeue(self, tool: str, claimed: Path) -> None:
        """The cases of a claimed group its worker did not reach, queued after every first-round group."""
        cases = [Case(**c) for c in json.loads(claimed.read_text())["cases"]]
        left = [c for c in cases if c.cid not in self.records[tool]]
        claimed.unlink()
        if left and time.time() < self.deadline:
            self._enqueue(tool, "9" + claimed.name.split(".")[0], left, self.args.compile_s / 2)


def _exit(code: int) -> str:
    """An exit status as words (the sanitizer passes a signal on as 128 + its number)."""
    signal = -code if code < 0 else code - 128 if code > 128 else 0
    return f"signal {signal}" if signal else f"exit {code}"


def _last_line(path: Path) -> dict | None:
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - 4096))
            lines = fh.read().decode(errors="replace").strip().splitlines()
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def _tail(path: Path, n: int = 400) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-6:])[-n:]
    except OSError:
        return ""


# -- main ---------------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    real = strategy_names("cuda", real=True)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="output folder (default gpu/results/h200; --dry-run: a temp folder)")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--strategies", default=",".join(real + ("auto",)))
    ap.add_argument("--workloads", default="", help="catalogue names (default: every fusable one, distinct texts)")
    ap.add_argument("--lengths", default="", help=f"row lengths (default {LENGTHS}; --quick {QUICK_LENGTHS})")
    ap.add_argument("--quick", action="store_true", help=f"lengths {QUICK_LENGTHS} only")
    ap.add_argument("--budget", type=float, default=None, help="wall seconds for the whole run (default 480; "
                    "--dry-run: none)")
    ap.add_argument("--jobs", type=int, default=13, help="workers at a time")
    ap.add_argument("--compile-s", type=float, default=10.0, help="estimated seconds to compile 900 lines of kernel")
    ap.add_argument("--case-s", type=float, default=0.3, help="estimated seconds per case once compiled")
    ap.add_argument("--case-timeout", type=float, default=240.0, help="a case running longer is killed as a hang")
    ap.add_argument("--all-kernels", action="store_true", help="racecheck/synccheck also kernels with nothing to check")
    ap.add_argument("--sanitizer", default="compute-sanitizer")
    ap.add_argument("--print-limit", type=int, default=500, help="reports printed per worker")
    ap.add_argument("--plan", action="store_true", help="print cases, kernels and the time estimate; run nothing")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: the worker in-process under the CUDA simulator")
    # the worker, started by the driver under compute-sanitizer
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--queue", help=argparse.SUPPRESS)
    ap.add_argument("--results", help=argparse.SUPPRESS)
    ap.add_argument("--log", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--me", help=argparse.SUPPRESS)
    ap.add_argument("--backend", default="cuda", help=argparse.SUPPRESS)  # cudasim: the driver tested without a GPU
    args = ap.parse_args(argv)
    args.tool_list = [t for t in args.tools.split(",") if t]
    args.budget = args.budget or (float("inf") if args.dry_run else 480.0)
    lengths = args.lengths or (",".join(map(str, DRY_LENGTHS if args.dry_run else QUICK_LENGTHS if args.quick
                                                 else LENGTHS)))
    args.length_list = tuple(int(x) for x in lengths.split(","))
    return args


def build(args, backend: str):
    names = distinct_workloads([n for n in args.workloads.split(",") if n] or workloads.names(fusable=True))
    cases = enumerate_cases(names, [s for s in args.strategies.split(",") if s], args.length_list)
    groups, refused = plan(cases, backend)
    return cases, groups, refused


def show_plan(args, cases, groups, refused, tools) -> float:
    """Print cases and kernels per tool and the estimated wall time; returns the estimate."""
    costs = []
    print(f"{len(cases)} cases ({len(refused)} refused by their strategy), {len(groups)} kernels")
    for tool in tools:
        mine = [g for g in groups if runs_under(g, tool, args.all_kernels)]
        n = sum(len(g.cases) for g in mine)
        costs += [cost(g, args.compile_s, args.case_s) for g in mine]
        est = sum(costs[-len(mine):]) if mine else 0.0
        print(f"  {tool:<10} {n:4d} cases, {len(mine):3d} kernel groups ({sum(g.kernels for g in mine)} kernels), "
              f"~{est:5.0f} s of worker time")
    # + the probes and a worker's start (python, numba, the sanitized CUDA context), twice: a slot whose tool
    # runs out of work starts a worker of another tool
    wall = schedule(costs, args.jobs) + 20 + 2 * STARTUP_S
    print(f"estimated wall time with {args.jobs} workers: ~{wall:.0f} s (budget {args.budget:.0f} s; "
          f"{args.compile_s:g} s per 900 lines of kernel, {args.case_s:g} s per case)")
    return wall


def dry_run(args) -> int:
    """The real run's plan, then every case in this process under the CUDA simulator, no sanitizer."""
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    print("plan of the GPU run with these filters and the default lengths:")
    real = parse_args(["--strategies", args.strategies, "--workloads", args.workloads, "--tools", args.tools]
                      + (["--quick"] if args.quick else []))
    show_plan(real, *build(real, "cuda"), real.tool_list)
    cases, groups, refused = build(args, "cudasim")
    print(f"\ndry run under the simulator: {len(cases)} cases, lengths {args.length_list}, {len(groups)} kernels")
    work_dir = Path(tempfile.mkdtemp(prefix="sanitize-dry-"))
    queue, results = work_dir / "queue", work_dir / "dry.jsonl"
    queue.mkdir()
    for rank, g in enumerate(sorted(groups, key=priority)):
        (queue / f"{rank:05d}_{g.gid}.json").write_text(json.dumps({"cases": [asdict(c) for c in g.cases]}))
    t0 = time.time()
    work(queue, results, "cudasim", deadline=t0 + args.budget)
    records = {e["cid"]: e for e in map(json.loads, results.read_text().splitlines()) if e["event"] == "done"}
    rows = result_rows("dry-run", cases, records, {}, refused)
    out = Path(args.out or work_dir)
    header = [f"# compute-sanitizer dry run (CUDA simulator, no sanitizer), {time.strftime('%Y-%m-%d')}", "",
              f"{len(cases)} cases, lengths {args.length_list}, {time.time() - t0:.0f} s."]
    write_outputs(out, rows, header, "")
    print("\n".join(summary_table(rows)))
    print(f"wrote {out}/sanitize.csv and sanitize.md")
    return int(any(r["status"] not in ("ok", "n/a") for r in rows))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        return work(Path(args.queue), Path(args.results), args.backend, args.deadline, args.log, args.me)
    if args.dry_run:
        return dry_run(args)
    t0 = time.time()
    cases, groups, refused = build(args, args.backend)
    show_plan(args, cases, groups, refused, args.tool_list)
    if args.plan:
        return 0
    found = shutil.which(args.sanitizer) or next((p for p in SANITIZER_PATHS if os.access(p, os.X_OK)), None)
    if found is None:
        print(f"{args.sanitizer} is not on PATH nor in {', '.join(SANITIZER_PATHS)} (it comes with the CUDA "
              "toolkit): give --sanitizer", file=sys.stderr)
        return 2
    args.sanitizer = found
    by_tool = {t: [g for g in groups if runs_under(g, t, args.all_kernels)] for t in args.tool_list}
    work_dir = Path(tempfile.mkdtemp(prefix="sanitize-"))
    driver = Driver(args, by_tool, work_dir, deadline=t0 + args.budget - 60)
    print(f"sanitizer options: {flags_text(driver.sanitizer_flags)}; work files in {work_dir}",
          flush=True)
    driver.run()
    return finish(args, driver, cases, groups, refused, by_tool, time.time() - t0)


def flags_text(flags: dict) -> str:
    return "; ".join(f"{t}: {' '.join(f) or '-'}" for t, f in flags.items())


def finish(args, driver: Driver, cases, groups, refused, by_tool, wall: float) -> int:
    rows, texts = [], []
    for tool in args.tool_list:
        placed, loose = defaultdict(list), []
        for w, log in driver.finished:
            if w.tool == tool:
                p, lo = attribute(log.reports, driver.ran.get(w.name, []))
                for cid, reps in p.items():
                    placed[cid] += reps
                loose += lo
                texts += worker_text(w, log)
                if driver.ran.get(w.name) or not all(NO_CUDA in r.text for r in lo):
                    rows += unattributed_rows(tool, w, log, lo)
                # else: a worker that found the queue empty and exited before touching CUDA, which the tool reports
                unverified(log, driver.ran.get(w.name, []))
        mine = {c.cid for g in by_tool[tool] for c in g.cases}
        ran = [c for c in cases if c.cid in mine or c.cid in refused]
        rows += result_rows(tool, ran, driver.records[tool], placed, refused, driver.not_run.get(tool, ""))
        rows += skipped_rows(tool, [g for g in groups if g not in by_tool[tool]])
    first = [r["seconds"] for recs in driver.records.values() for r in recs.values() if r.get("compiled")]
    timing = (f" The first call of a kernel (compile, load, run under the tool) took {np.median(first):.1f} s "
              f"(median; max {max(first):.1f} s) over {len(first)} kernels." if first else "")
    header = [f"# compute-sanitizer over the generated kernels ({time.strftime('%Y-%m-%d')})", "",
              f"Command: `python3 gpu/sanitize.py {' '.join(sys.argv[1:])}`; {wall:.0f} s wall, {args.jobs} workers."
              f"{timing} {ROWS} rows × lengths {args.length_list}, sizes {SIZES} (ALiBi d = 32), masks with rows 1 "
              f"and 4 fully masked; sanitizer options {flags_text(driver.sanitizer_flags)}. Columns: cases run "
              "under the tool; ok = no report and the float64 reference matched; errors = reports (racecheck: "
              "error-level hazards); skipped = kernels with nothing for the tool to check."]
    out = Path(args.out or "gpu/results/h200")
    text = "\n".join(texts) + "\n"
    if len(text) > REPORTS_CHARS:
        text = text[:REPORTS_CHARS] + f"\n… cut at {REPORTS_CHARS} characters (the device returns files of 16 MiB)\n"
    write_outputs(out, rows, header, text)
    print("\n".join(summary_table(rows)))
    bad = [r for r in rows if r["status"] not in ("ok", "skip", "n/a")]
    print(f"{len(bad)} case(s) not ok; wrote {', '.join(str(out / n) for n in OUTPUTS)} ({wall:.0f} s)")
    return 1 if bad else 0


def unverified(log: Log, ran: list[dict]) -> None:
    """Cases a worker ran after its printed reports stopped (--print-limit reached): their errors, if any,
    were counted in the summary but not printed, so "ok" cannot be claimed for them."""
    printed = sum(r.severity == "error" for r in log.reports)
    if log.errors is None or log.errors <= printed or not log.reports:
        return
    last = log.reports[-1].offset
    for r in ran:
        if r["status"] == "ok" and r.get("log_at") is not None and r["log_at"] > last:
            r["status"], r["note"] = "unverified", "after the worker's print limit: reports not printed"


def worker_text(w: Worker, log: Log) -> list[str]:
    """A worker's reports and, when it failed, its stderr, for sanitize_reports.txt."""
    head = f"### {w.name} {w.tool} (exit {w.proc.returncode}; ERROR SUMMARY {log.errors}; racecheck {log.race})"
    return [head] + [r.text for r in log.reports] + ([f"stderr: {_tail(w.stderr, 3000)}"] if w.proc.returncode else [])


#: What the tool says of a process that ends without a CUDA call (a worker that found the queue empty).
NO_CUDA = "Target application terminated before first instrumented API call"


def unattributed_rows(tool: str, w: Worker, log: Log, loose) -> list[dict]:
    """Reports no case ran the kernel of, and errors the summary counts beyond those printed (--print-limit)."""
    row = dict(tool=tool, strategy="-", workload="-", shape="", dtype="", masked="", hazards="", status="unattributed")
    out = [dict(row, errors=1, note=f"{w.name}: " + r.text.splitlines()[0][len(PREFIX):][:250]) for r in loose]
    printed = sum(r.severity == "error" for r in log.reports)
    if log.errors is not None and log.errors > printed:
        out.append(dict(row, errors=log.errors - printed,
                        note=f"{w.name}: ERROR SUMMARY {log.errors}, {printed} error reports printed"))
    return out


if __name__ == "__main__":
    sys.exit(main())
