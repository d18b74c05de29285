"""Validate, autotune and time the generated fused kernels against PyTorch on the GPU machine.

    python3 gpu/bench.py [--cases softmax,decode,...] [--quick] [--out gpu/results/h200/bench.csv]
    redalgebra bench [same options]          # runs this script
    python3 gpu/bench.py --targets --out gpu/results/h200/targets.csv   # the tensor-core targets' cases and table

For every case (workload × shape × dtype, from the paper's model families): the baselines — PyTorch
eager (the unfused sequence of ops), ``torch.compile`` of the same function, the library kernel where
one exists — and our generated kernels. Each of our candidate configurations (strategy, block size,
tile, segments) is validated against a float64 reference on the GPU, then timed; the fastest valid
one is the autotuner's choice, re-timed next to the baselines and written to ``autotune.json``
(keyed by workload, shape, dtype and device). All times are medians of CUDA-event timed batches of back-to-back
calls (``harness.median_ms``), in this one process, with the device-to-device copy bandwidth measured first; the CSV is rewritten after every case.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import Progress, Row, copy_bandwidth, environment, median_ms, rotating, write_csv  # noqa: E402
import targets  # noqa: E402

from redalgebra.runtime import compile  # noqa: E402
from redalgebra.runtime.compile import KMajorUnread, Params16Unread  # noqa: E402
from redalgebra.runtime.formats import Encoded  # noqa: E402
from redalgebra.runtime.check import STORE_ROUNDING  # noqa: E402

from cases import Case, all_cases, as_tensors, compiled_fn, fused_of, softmax_eager  # noqa: E402


def worst_error(case: Case, outputs: dict, want: dict) -> float:
    """The worst error of ``outputs`` (as a launch or a call returns them: 16-bit ones maybe as bit patterns) relative
    to the largest value of their float64 references ``want``, less the rounding of storing an output in a narrower
    type (``check.STORE_ROUNDING``): at most ``case.tol`` passes. A NaN where the reference has none (or none where it
    has one) is an infinite error: ``max`` would drop a NaN."""
    worst = 0.0
    for name in case.outputs:
        got = torch.as_tensor(outputs[name], device="cuda")
        stored = {torch.uint16: "bfloat16", torch.int16: "bfloat16", torch.uint8: "e4m3"}.get(got.dtype)
        got = got.view({"bfloat16": torch.bfloat16, "e4m3": torch.float8_e4m3fn}[stored]) if stored else got
        slack = STORE_ROUNDING.get(stored or str(got.dtype).replace("torch.", ""), 0.0)
        got = got.double()
        ref = want[name].reshape(got.shape).double()
        if not torch.equal(torch.isnan(got), torch.isnan(ref)):
            return float("inf")
        seen = ~torch.isnan(ref)
        if not seen.any():  # (NaN everywhere, in both)
            continue
        diff = torch.where(got == ref, 0.0, got - ref)  # (equal infinities: no error)
        error = float((diff[seen].abs().max() / ref[seen].abs().max().clamp(min=1e-30)).item()) - slack
        if error != error:  # (inf - inf: an infinity where the reference has another)
            return float("inf")
        worst = max(worst, error)
    return worst


def prepared_case(group: str, index: int, config: str):
    """``(case, runner, kernel, launch)``: bench's case ``index`` of ``group``, its kernel under ``config`` (bench's
    configuration syntax, not tuned) and a launch prepared on its first input copy — what the single-case scripts
    (``call_cost``, ``launch_cost``, ``kernel_profile``, ``kernel_steps``) start from."""
    case = all_cases(False)[group][index]()
    runner = Runner(1.0, Path("/nonexistent/autotune.json"), True)
    kernel = runner.kernel(case, config)
    inputs, params, _ = case.copies[0]
    return case, runner, kernel, prepare(kernel, inputs, params)


def prepare(kernel, inputs: dict, params: dict):
    """``kernel.prepare``; K-major weights a configuration does not read as they lie given as a contiguous copy (as a
    user's torch call copies them), and a 16-bit query a configuration does not stage as it is widened to float32 (as
    a user's torch call widens it), made here, before any timing."""
    try:
        try:
            return kernel.prepare(inputs, params)
        except Params16Unread:
            params = {k: v.float() if isinstance(v, torch.Tensor) and v.dtype == torch.float16 else
                      v.bits.view(torch.bfloat16).float() if isinstance(v, Encoded) else v for k, v in params.items()}
            return kernel.prepare(inputs, params)
    except KMajorUnread:
        return kernel.prepare({k: type(v)(v.bits.contiguous()) if isinstance(v, Encoded) else
                               v.contiguous() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}, params)


def parse_config(text: str) -> dict:
    """``strategy[+fp8][+cluster|+nocluster][@threads[xTILE][sSEGMENTS][gGROUP][mBLOCKS][bBATCH][p]][:OUT]``
    (``+fp8``: the product on the FP8 instruction, ``fp8_products``; ``+cluster``/``+nocluster``: a row's segments
    merged in a thread-block cluster or by the combine kernel, ``cluster``; ``p``: persistent blocks; ``OUT``: the
    outputs' ``out_dtype``, e.g. ``columns_wgmma:bfloat16``); ``rows`` and ``auto`` alone choose from the shape."""
    text, _, out_dtype = text.partition(":")
    strategy, _, rest = text.partition("@")
    strategy, *flags = strategy.split("+")
    out = {"strategy": strategy}
    for flag in flags:
        if flag not in ("fp8", "cluster", "nocluster"):
            raise ValueError(f"unknown flag +{flag} in {text!r} (+fp8, +cluster, +nocluster)")
        if flag == "fp8":
            out["fp8_products"] = True
        else:
            out["cluster"] = flag == "cluster"
    if out_dtype:
        out["out_dtype"] = out_dtype
    if rest.endswith("p"):
        rest, out["persistent"] = rest[:-1], True
    if "b" in rest:  # columns: rows per block, e.g. columns@128x16b8
        rest, batch = rest.split("b")
        out["batch"] = int(batch)
    if "m" in rest:  # launch bounds: blocks per multiprocessor, e.g. rows@256x4g256m4
        rest, blocks = rest.split("m")
        out["min_blocks"] = int(blocks)
    if "g" in rest:
        rest, group = rest.split("g")
        out["group"] = int(group)
    if rest:
        seg = None
        if "s" in rest:
            rest, seg = rest.split("s")
        threads, _, tile = rest.partition("x")
        out["threads"] = int(threads)
        if tile:
            out["tile"] = int(tile)
        if seg:
            out["segments"] = int(seg)
    return out


def call_overhead(copy_gbps: float, calls: int = 2000) -> list[Row]:
    """Host cost of one call on a small problem (softmax 64×1024 fp32): the wall clock of ``calls`` calls
    back to back, per call, for our public call, ``torch.softmax`` and a compiled PyTorch function. The
    kernels take a few microseconds, so the time is the host's (``ms`` holds it)."""
    x = torch.randn(64, 1024, device="cuda")
    kernel = compile(fused_of("safe_softmax"), "cuda")
    compiled = compiled_fn("softmax", softmax_eager)
    systems = [("redalgebra per call", lambda: kernel({"x": x})), ("redalgebra prepared launch", kernel.prepare({"x": x}).run),
               ("torch.softmax", lambda: torch.softmax(x, dim=-1)), ("torch.compile", lambda: compiled(x))]
    rows = []
    for system, fn in systems:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) / calls * 1e3
        rows.append(Row("call_overhead", system, "64x1024", "float32", ms, 2 * 64 * 1024 * 4,
                        note="host wall clock per call, back to back").finish(copy_gbps))
    return rows


# -- running ---------------------------------------------------------------------------------------
#: The autotuner's committed choices (read where the output's folder has none yet).
TUNED = Path(__file__).resolve().parent / "results" / "h200" / "autotune.json"


class Runner:
    def __init__(self, copy_gbps: float, tune_path: Path, retune: bool):
        self.copy = copy_gbps
        self.kernels: dict = {}
        self.tune_path = tune_path
        # the choices beside the CSV, or (a new folder) the committed ones: a run into a new folder reuses them, not
        # a silent retune of every case (--retune asks for that)
        known = tune_path if tune_path.exists() else TUNED
        self.tuned = json.loads(known.read_text()) if known.exists() else {}
        self.retune = retune
        self.device = torch.cuda.get_device_name()

    def kernel(self, case: Case, config: str):
        key = (id(case.fused), config)  # fused_of returns one object per cascade: kernels compile once per run
        if key not in self.kernels:
            self.kernels[key] = compile(case.fused, "cuda", **parse_config(config))
        return self.kernels[key]

    def row(self, case, system, ms, nbytes, **kw) -> Row:
        return Row(case.name, system, case.shape, case.dtype, ms, nbytes, case.flops, **kw).finish(self.copy)

    def baselines(self, case: Case) -> list[Row]:
        rows = []
        for system, fn, nbytes in case.baselines:
            try:
                ms = median_ms(rotating([lambda t=t: fn(*t) for _, _, t in case.copies]), case.reps, batch=case.batch)
                rows.append(self.row(case, system, ms, nbytes))
            except Exception as err:  # noqa: BLE001 - a baseline that refuses the shape is reported, not fatal
                rows.append(self.row(case, system, float("nan"), nbytes, note=f"unavailable: {type(err).__name__}: "
                                     f"{str(err).splitlines()[0][:120] if str(err) else ''}"))
        return rows

    def validate(self, case: Case, launch) -> float:
        """The worst error of the outputs relative to their largest reference value, less the rounding of
        storing an output in a narrower type (``check.STORE_ROUNDING``): at most ``case.tol`` passes."""
        launch.run()
        torch.cuda.synchronize()
        want = case.reference(*case.copies[0][2])
        return worst_error(case, {name: launch.outputs[name] for name in case.outputs}, want)

    @staticmethod
    def moved(case: Case, launch) -> int:
        """Bytes one launch moves: its inputs as stored and its outputs as it writes them."""
        inputs = case.copies[0][0]
        total = sum(int(getattr(v, "bits", v).numel() * getattr(v, "bits", v).element_size()) for v in inputs.values())
        return total + sum(int(a.nbytes) for a in launch.outputs.values())

    def ours(self, case: Case, config: str, kind: str, reps: int) -> Row:
        system = f"redalgebra {config}" if kind == "candidate" else "redalgebra (tuned)"
        try:
            kernel = self.kernel(case, config)
            launches = [prepare(kernel, inputs, params) for inputs, params, _ in case.copies]
            err = self.validate(case, launches[0])
            if not err <= case.tol:
                return self.row(case, system, float("nan"), case.ours_bytes, kind=kind, config=config, valid="FAIL",
                                max_err=err, note=f"max rel err {err:.2e} > {case.tol:.1e}: not timed")
            ms = median_ms(rotating([l.run for l in launches]), reps, batch=case.batch)
            nbytes = self.moved(case, launches[0])  # (outputs as the launch writes them: 16-bit ones with :bfloat16)
            return self.row(case, system, ms, nbytes, kind=kind, config=config, valid="ok", max_err=err,
                            note=case.note)
        except Exception as err:  # noqa: BLE001 - a configuration that fails is a result, reported as such
            msg = str(err).strip().splitlines()[-1][:160] if str(err).strip() else type(err).__name__
            print(f"    {config}: {type(err).__name__}: {msg}", file=sys.stderr, flush=True)
            if "--traceback" in sys.argv:
                traceback.print_exc()
            return self.row(case, system, float("nan"), case.ours_bytes, kind=kind, config=config, valid="error",
                            note=f"{type(err).__name__}: {msg}")

    def per_call(self, case: Case, config: str, nbytes: int) -> Row:
        """The public call ``kernel(inputs, params)`` back to back — layout, outputs, launch: what a user pays."""
        system = "redalgebra per call"
        try:
            kernel = self.kernel(case, config)
            # as a user calls it: torch tensors as they are (bfloat16 included), params as given
            fns = [lambda i=as_tensors(i), p=as_tensors(p): kernel(i, p) for i, p, _ in case.copies]
            ms = median_ms(rotating(fns), max(3, case.reps // 2), batch=case.batch)
            return self.row(case, system, ms, nbytes, kind="call", config=config, valid="ok")
        except Exception as err:  # noqa: BLE001 - reported as a result
            return self.row(case, system, float("nan"), case.ours_bytes, kind="call", config=config, valid="error",
                            note=f"{type(err).__name__}: {str(err)[:160]}")

    def run(self, case: Case) -> list[Row]:
        rows = self.baselines(case)
        key = f"{case.name}|{case.shape}|{case.dtype}|{self.device}"
        known = self.tuned.get(key, {}).get("config")
        candidates = (known,) if known and not self.retune else case.candidates
        tried = [self.ours(case, cfg, "candidate", max(3, case.reps // 2)) for cfg in candidates]
        rows += tried
        good = [r for r in tried if r.valid == "ok" and r.ms == r.ms]
        if good:
            best = min(good, key=lambda r: r.ms)
            rows.append(self.ours(case, best.config, "tuned", case.reps))
            rows.append(self.per_call(case, best.config, best.bytes))  # the bytes the launch moves
            self.tuned[key] = {"config": best.config, "ms": round(best.ms, 5),
                               "candidates": {r.config: round(r.ms, 5) for r in tried if r.ms == r.ms}}
            self.tune_path.parent.mkdir(parents=True, exist_ok=True)
            self.tune_path.write_text(json.dumps(self.tuned, indent=1, sort_keys=True) + "\n")
        return rows


def main(argv=None) -> int:
    groups = list(all_cases(False))
    ap = argparse.ArgumentParser(prog="redalgebra bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="CSV written after every case (default gpu/results/h200/bench.csv; with --targets, "
                    "targets.csv there)")
    ap.add_argument("--cases", default=",".join(groups), help=f"comma-separated groups of: {', '.join(groups)}")
    ap.add_argument("--quick", action="store_true", help="the first shape of each group only")
    ap.add_argument("--retune", action="store_true", help="try every candidate even where autotune.json has a choice")
    ap.add_argument("--budget", type=float, default=560.0, help="seconds; cases past it are skipped")
    ap.add_argument("--overhead", action="store_true", help="also the host cost of one call (case call_overhead)")
    ap.add_argument("--pick", help="comma-separated indices of the shapes to run within each group, e.g. 0,2")
    ap.add_argument("--configs", help="comma-separated configurations to try instead of each case's candidates "
                    "(implies --retune), e.g. rows@256x4g256,rows@512x2g512")
    ap.add_argument("--traceback", action="store_true", help="print the traceback of failing configurations")
    ap.add_argument("--targets", action="store_true", help="the tensor-core targets' cases only (gpu/targets.py), then "
                    "their table, printed and written beside --out as targets.md")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("redalgebra bench needs a CUDA GPU (and PyTorch with CUDA); none is visible here.", file=sys.stderr)
        return 2
    if args.targets and (args.quick or args.pick or args.cases != ",".join(groups)):
        print("--targets runs the targets' own cases: --quick, --pick and --cases do not apply", file=sys.stderr)
        return 2
    cases = all_cases(args.quick)
    unknown = [g for g in args.cases.split(",") if g not in cases]
    if unknown:
        print(f"unknown case group(s) {unknown}; choose from {groups}", file=sys.stderr)
        return 2
    pick = None if args.pick is None else {int(i) for i in args.pick.split(",")}
    if args.targets:
        builders = [((g, i), cases[g][i]) for g, i in targets.cases()]
    else:
        builders = [((g, i), b) for g in args.cases.split(",") for i, b in enumerate(cases[g])
                    if pick is None or i in pick]
    if args.overhead:
        builders.append((("overhead", 0), None))
    t0 = time.time()
    out = Path(args.out or f"gpu/results/h200/{'targets' if args.targets else 'bench'}.csv")
    copy = copy_bandwidth()
    print(f"copy bandwidth {copy:.0f} GB/s (4 GiB device-to-device, read + write)", flush=True)
    meta = {**environment(), "copy_gbps": round(copy, 1)}
    runner = Runner(copy, out.parent / "autotune.json", args.retune or bool(args.configs))
    rows: list[Row] = []
    progress = Progress(len(builders))
    results = {}  # (group, index) -> the case's rows (the targets' table)
    for (group, index), build in builders:
        if time.time() - t0 > args.budget:
            print(f"skipped a {group} case: past the {args.budget:.0f}s budget", file=sys.stderr, flush=True)
            progress.step("skipped")
            continue
        if build is None:
            for r in call_overhead(copy):
                rows.append(r)
                print(f"{r.case:<20} {r.system:<40} {1e3 * r.ms:8.1f} us per call (host)", flush=True)
            write_csv(rows, out, meta)
            progress.step(group)
            continue
        case = build()
        if args.configs:
            case.candidates = tuple(args.configs.split(","))
        for r in runner.run(case):
            rows.append(r)
            results.setdefault((group, index), []).append(r)
            print(f"{r.case:<20} {r.shape:<36} {r.dtype:<8} {r.system:<40} {r.ms:9.4f} ms {r.gbps:7.0f} GB/s "
                  f"{100 * r.frac_copy:5.1f}% {r.tflops:6.1f} TF/s {r.valid:<5} {r.note}", flush=True)
        write_csv(rows, out, meta)
        del case
        torch.cuda.empty_cache()
        progress.step(group)
    progress.close()
    print(f"wrote {out} ({len(rows)} rows) in {time.time() - t0:.0f}s")
    if args.targets:
        text = targets.table(results)
        (out.parent / "targets.md").write_text(f"{meta}\n\n{text}\n")
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
