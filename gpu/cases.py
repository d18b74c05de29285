"""The benchmark's cases: each workload at the paper's shapes, with its PyTorch baselines (eager, ``torch.compile``,
the library kernel), its inputs for our kernels, its float64 reference and its candidate configurations
(``all_cases``: by group). ``bench.py`` validates, tunes and times them.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import copies_for  # noqa: E402

from redalgebra import parse, workloads  # noqa: E402
from redalgebra.derive import derive  # noqa: E402
from redalgebra.runtime import as_bfloat16, as_e4m3  # noqa: E402
from redalgebra.runtime.check import STORE_ROUNDING  # noqa: E402
from redalgebra.workloads.masks import CAUSAL_ATTENTION  # noqa: E402

FP8_QUANT = """\
# per-token FP8 (e4m3) quantisation alone: the scale from the row's abs-max, every element rounded
input x
reduce a = max(abs(x))
out q = fp8(x * 448 / max(a, 1e-12))
out s = max(a, 1e-12) / 448
"""

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
SIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass
class Case:
    """One workload at one shape: its inputs (several copies, for rotation), baselines and reference."""

    name: str
    shape: str
    dtype: str
    fused: object
    copies: list                      # [(inputs for our kernel, params, torch tensors for the baselines)]
    baselines: list                   # [(system, function of the torch tensors, bytes it moves)]
    reference: object                 # torch tensors -> {output: float64 tensor}
    ours_bytes: int                   # bytes our kernel moves (inputs in their dtype, float32 outputs): the rows of
    #                                   launches that fail (timed ones count Runner.moved, outputs as written)
    candidates: tuple                 # configurations: "strategy@threads[xTILE][sSEGMENTS]"
    flops: float = 0.0
    tol: float = 1e-4
    outputs: tuple = ("y",)
    reps: int = 10                    # timed batches (of ``batch`` calls each) per system
    batch: int = 10
    note: str = ""


def randn(shape, dtype, scale=1.0):
    return (torch.randn(*shape, device="cuda", dtype=torch.float32) * scale).to(TORCH_DTYPES[dtype])


@functools.lru_cache(maxsize=None)
def fused_of(name_or_text: str):
    """The derived cascade of a catalogue name or of cascade text (derived once per run)."""
    cascade = workloads.get(name_or_text).cascade if "\n" not in name_or_text else parse(name_or_text)
    return derive(cascade)


def ours_input(t: torch.Tensor):
    """A torch tensor as our kernels take it (bfloat16 as bit patterns, e4m3 as bytes)."""
    if t.dtype == torch.float8_e4m3fn:
        return as_e4m3(t.view(torch.uint8))
    return as_bfloat16(t.view(torch.int16)) if t.dtype == torch.bfloat16 else t


def as_tensors(inputs: dict) -> dict:
    """Inputs as a user passes them: the torch tensors behind ``ours_input``'s bit patterns."""
    kinds = {"bfloat16": torch.bfloat16, "e4m3": torch.float8_e4m3fn}
    return {k: v.bits.view(kinds[v.dtype]) if hasattr(v, "bits") else v for k, v in inputs.items()}


# -- cases ---------------------------------------------------------------------------------------------
def softmax_eager(x):
    m = x.amax(dim=-1, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(dim=-1, keepdim=True)


def case_softmax(rows, length, dtype, candidates, name="safe_softmax"):
    nbytes = rows * length * SIZE[dtype]
    copies = []
    for _ in range(copies_for(nbytes)):
        x = randn((rows, length), dtype, 3.0)
        copies.append(({"x": ours_input(x)}, {}, (x,)))
    compiled = compiled_fn("softmax", softmax_eager)
    base = [("torch.softmax", lambda x: torch.softmax(x, dim=-1), 2 * nbytes),
            ("eager", softmax_eager, 2 * nbytes), ("torch.compile", compiled, 2 * nbytes)]
    return Case(name, f"{rows}x{length}", dtype, fused_of("safe_softmax"), copies, base,
                lambda x: {"y": torch.softmax(x.double(), dim=-1)}, nbytes + rows * length * 4, candidates)


def lse_eager(x):
    m = x.amax(dim=-1, keepdim=True)
    return (m + torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))).squeeze(-1)


def case_logsumexp(rows, length, dtype, candidates):
    nbytes = rows * length * SIZE[dtype]
    copies = []
    for _ in range(copies_for(nbytes)):
        x = randn((rows, length), dtype, 3.0)
        copies.append(({"x": ours_input(x)}, {}, (x,)))
    base = [("torch.logsumexp", lambda x: torch.logsumexp(x, dim=-1), nbytes),
            ("eager", lse_eager, nbytes), ("torch.compile", compiled_fn("lse", lse_eager), nbytes)]
    return Case("logsumexp", f"{rows}x{length}", dtype, fused_of("logsumexp"), copies, base,
                lambda x: {"y": torch.logsumexp(x.double(), dim=-1)}, nbytes + rows * 4, candidates)


def attention_eager(q, k, v, scale):
    return torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1) @ v


def causal_eager(q, k, v, scale):
    s = (q @ k.transpose(-1, -2)) * scale
    above = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1)
    return torch.softmax(s.masked_fill(above, float("-inf")), dim=-1) @ v


def sdpa_with(backend, causal=False):
    from torch.nn.attention import sdpa_kernel

    def run(q, k, v, scale):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=causal)
    return run


def case_attention(batch, heads, queries, length, dim, candidates, name, label, dtype="float16", causal=False,
                   query16=None):
    """Attention with ``queries`` query rows per head (1: decode). Tensors (B, H, ·, D) in ``dtype``; ``causal``:
    the last ``queries`` positions of ``length`` (prefill: all), each seeing the keys up to its own. ``query16``: our
    kernel given the query in ``dtype`` as the model holds it, as SDPA is (``wgmma`` stages it as it is; ``prepare``
    widens it for the other strategies, as a torch call does), else in float32 (widened once, outside the timing);
    by default for prefill (``queries > 1``)."""
    query16 = queries > 1 if query16 is None else query16
    from torch.nn.attention import SDPBackend

    rows = batch * heads * queries
    kv_bytes = 2 * batch * heads * length * dim * 2
    scale = dim ** -0.5
    copies = []
    for _ in range(copies_for(kv_bytes)):
        q = randn((batch, heads, queries, dim), dtype)
        k = randn((batch, heads, length, dim), dtype)
        v = randn((batch, heads, length, dim), dtype)
        inputs = {"k": ours_input(k.view(batch * heads, length, dim)), "v": ours_input(v.view(batch * heads, length, dim))}
        # the query as a model has it, on the device (a host array would be copied on every call)
        query = q.reshape(rows, dim) if query16 else q.float().reshape(rows, dim)
        params = {"q": ours_input(query) if query16 else query, "scale": np.float32(scale)}
        if causal:  # rows in the order (batch, head, query): query i sits at position length - queries + i
            qpos = torch.arange(length - queries, length, device="cuda", dtype=torch.float32)
            params["qpos"] = qpos.repeat(batch * heads)
        copies.append((inputs, params, (q, k, v, scale)))
    io = kv_bytes + rows * dim * 2 * 2
    eager = causal_eager if causal else attention_eager
    base = [("sdpa flash", sdpa_with(SDPBackend.FLASH_ATTENTION, causal), io),
            ("sdpa cudnn", sdpa_with(SDPBackend.CUDNN_ATTENTION, causal), io),
            ("eager", eager, io), ("torch.compile", compiled_fn("causal" if causal else "attention", eager), io)]

    def reference(q, k, v, scale):
        s = (q.double() @ k.double().transpose(-1, -2)) * scale
        if causal:
            above = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1 + length - queries)
            s = s.masked_fill(above, float("-inf"))
        return {"y": (torch.softmax(s, dim=-1) @ v.double()).reshape(rows, dim)}
    flops = 4.0 * rows * length * dim / (2 if causal else 1)
    shape = f"{label} B{batch} H{heads} L{length} D{dim}" + (f" Q{queries}" if queries > 1 else "") + \
        (" q32" if queries > 1 and not query16 else "")
    wl = CAUSAL_ATTENTION if causal else "decode_attention" if queries == 1 else "attention"
    return Case(name, shape, dtype, fused_of(wl), copies, base, reference,
                kv_bytes + rows * dim * 4 + rows * dim * 4, candidates, flops=flops,
                reps=10 if queries == 1 else 3, batch=10 if queries == 1 else 2,
                # prefill runs on the tensor cores, which take the softmax factors in float16 (as SDPA does): one
                # more rounding of 2^-11 relative per factor (check.STORE_ROUNDING), allowed as ``check`` does
                tol=1e-4 if queries == 1 else 1e-4 + (2.0 ** -8 if dtype == "bfloat16" else 2.0 ** -11))


def mla_eager(qc, qr, c, kr, scale):
    s = (qc @ c.transpose(-1, -2) + qr @ kr.transpose(-1, -2)) * scale
    return torch.softmax(s, dim=-1) @ c


def case_mla(batch, length, candidates, heads=128, rank=512, rope=64, query16=True):
    """DeepSeek-R1's MLA decode step; the query as the model holds it (float16, as eager reads it), or widened to
    float32 on the host (``query16=False``: the shape says ``q32``)."""
    rows = batch * heads
    kv_bytes = batch * length * (rank + rope) * 2
    scale = (rank + rope) ** -0.5
    copies = []
    for _ in range(copies_for(kv_bytes)):
        qc, qr = randn((batch, heads, rank), "float16", 0.2), randn((batch, heads, rope), "float16", 0.2)
        c, kr = randn((batch, length, rank), "float16"), randn((batch, length, rope), "float16")
        inputs = {"c": c, "kr": kr}
        widen = (lambda t: t) if query16 else (lambda t: t.float())
        params = {"qc": widen(qc).reshape(rows, rank), "qr": widen(qr).reshape(rows, rope), "scale": np.float32(scale)}
        copies.append((inputs, params, (qc, qr, c, kr, scale)))

    def reference(qc, qr, c, kr, scale):
        s = (qc.double() @ c.double().transpose(-1, -2) + qr.double() @ kr.double().transpose(-1, -2)) * scale
        return {"y": (torch.softmax(s, dim=-1) @ c.double()).reshape(rows, rank)}
    io = kv_bytes + rows * (rank + rope + rank) * 2
    base = [("eager", mla_eager, io), ("torch.compile", compiled_fn("mla", mla_eager), io)]
    flops = 2.0 * rows * length * (rank + rope + rank)
    # the tensor cores take the softmax factors in float16 (as FlashMLA does): one more rounding of 2^-11 relative
    tol = 1e-4 + (2.0 ** -11 if any(c.startswith(("wgmma", "mma")) for c in candidates) else 0.0)
    shape = f"DeepSeek-R1 B{batch} H{heads} L{length} r{rank}+{rope}" + ("" if query16 else " q32")
    return Case("mla_decode", shape, "float16", fused_of("mla_decode"),
                copies, base, reference, kv_bytes + rows * (rank + rope) * (2 if query16 else 4) + rows * rank * 4,
                candidates, flops=flops, tol=tol)


def moe_eager(g, k):
    p = torch.softmax(g.float(), dim=-1)
    w, i = torch.topk(p, k, dim=-1)
    return w / w.sum(dim=-1, keepdim=True), i


def case_moe(tokens, experts, k, candidates, label):
    text = workloads.get("moe_routing").text.replace("topk(8,", f"topk({k},")
    nbytes = tokens * experts * 2
    copies = []
    for _ in range(copies_for(nbytes)):
        g = randn((tokens, experts), "bfloat16", 2.0)
        copies.append(({"g": ours_input(g)}, {}, (g,)))
    out_bytes = tokens * k * 8
    compiled = compiled_fn(f"moe{k}", lambda g: moe_eager(g, k))
    base = [("eager (softmax, torch.topk)", lambda g: moe_eager(g, k), nbytes + out_bytes),
            ("torch.compile", compiled, nbytes + out_bytes)]
    return Case("moe_routing", f"{label} T{tokens} E{experts} top{k}", "bfloat16", fused_of(text), copies, base,
                lambda g: {"w": moe_eager(g.double(), k)[0]}, nbytes + out_bytes, candidates, outputs=("w",))


def fp8_quant_eager(x):
    s = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12) / 448.0
    return (x.float() / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), s


def fp8_quant_cascade(x):
    """The cascades' quantisation (``FP8_QUANT``, ``fp8_quant_gemm``): each element ``x · 448 / a`` in float32, then
    rounded to e4m3; and the scale ``a / 448``. The float64 references take it: PyTorch's eager quantiser divides by
    the rounded ``a / 448`` instead, which rounds about 0.02 % of the quotients to the other e4m3 neighbour (on the
    development machine: 894 of 3.7 M codes of normal bfloat16 rows; bench measured the FP8 product at M4096 K = N =
    7168 0.008–0.012 of the largest output from the eager form's reference, ``weights_check.py`` 1.1e-4 from this)."""
    a = x.float().abs().amax(dim=-1, keepdim=True).clamp(min=1e-12)
    return (x.float() * 448.0 / a).to(torch.float8_e4m3fn), a / 448.0


def fp8_gemm_reference(x, w_kn):
    """``fp8_quant_gemm``'s outputs in float64: ``x`` quantised as the cascade does, times the (L, n) weights, scaled."""
    q, s = fp8_quant_cascade(x)
    return (q.double() @ w_kn.double()) * s.double()


def case_fp8_quant(rows, hidden, candidates):
    nbytes = rows * hidden * 2
    copies = []
    for _ in range(copies_for(nbytes)):
        x = randn((rows, hidden), "bfloat16")
        copies.append(({"x": ours_input(x)}, {}, (x,)))
    base = [("eager", fp8_quant_eager, nbytes + rows * hidden + rows * 4),
            ("torch.compile", compiled_fn("fp8q", fp8_quant_eager), nbytes + rows * hidden + rows * 4)]

    def reference(x):
        return {"q": fp8_quant_cascade(x)[0].double()}
    # the reference rounds the cascade's own float32 quotient: every e4m3 code equal (tol 0; the kernels' quotients
    # equal the float32 division's: gpu/quotient_check.py)
    return Case("fp8_quant", f"{rows}x{hidden}", "bfloat16", fused_of(FP8_QUANT), copies, base, reference,
                nbytes + rows * hidden * 4 + rows * 4, candidates, tol=0.0, outputs=("q",))


def ce_eager(x, label):
    return F.cross_entropy(x, label, reduction="none")


def ce_upcast(x, label):
    return F.cross_entropy(x.float(), label, reduction="none")


def case_cross_entropy(rows, vocab, dtype, candidates, label):
    """Softmax cross-entropy of ``rows`` rows of logits, the target an integer per row (no one-hot row)."""
    nbytes = rows * vocab * SIZE[dtype]
    copies = []
    for _ in range(copies_for(nbytes)):
        x = randn((rows, vocab), dtype, 2.0)
        target = torch.randint(0, vocab, (rows,), device="cuda")
        params = {"label": target.float()}  # on the device, one per row; exact: vocabularies are far below 2**24
        copies.append(({"x": ours_input(x)}, params, (x, target)))
    io = nbytes + rows * 8 + rows * SIZE[dtype]
    base = [("eager (F.cross_entropy)", ce_eager, io), ("torch.compile", compiled_fn("ce", ce_eager), io),
            ("torch.compile (float32 upcast)", compiled_fn("ce32", ce_upcast), io)]

    def reference(x, target):
        return {"loss": F.cross_entropy(x.double(), target, reduction="none")}
    return Case("cross_entropy", f"{label} {rows}x{vocab}", dtype, fused_of("cross_entropy"), copies, base, reference,
                nbytes + rows * 4 + rows * 4, candidates, outputs=("loss",), tol=1e-5)


def case_layernorm(rows, hidden, dtype, candidates, label):
    """LayerNorm of ``rows`` rows (the catalogue's: the mean, then the mean of the squared deviations, written so), its
    weight and bias shared by the rows; the output in the input's dtype. A resident row's kernel computes the cascade
    as written (its reductions one at a time), a row read in passes the derived partial sums."""
    nbytes = rows * hidden * SIZE[dtype]
    g, b = randn((hidden,), dtype), randn((hidden,), dtype)
    eps = 1e-5
    copies = []
    for _ in range(copies_for(nbytes)):
        x = randn((rows, hidden), dtype, 2.0) + 1.0
        copies.append(({"x": ours_input(x), "g": ours_input(g.view(1, hidden)), "b": ours_input(b.view(1, hidden))},
                       {"eps": np.float32(eps)}, (x,)))
    io = 2 * nbytes + 2 * hidden * SIZE[dtype]
    base = [("F.layer_norm", lambda x: F.layer_norm(x, (hidden,), g, b, eps), io),
            ("torch.compile", lambda x: compiled_fn("ln", F.layer_norm)(x, (hidden,), g, b, eps), io)]

    def reference(x):
        return {"y": F.layer_norm(x.double(), (hidden,), g.double(), b.double(), eps)}
    return Case("layernorm", f"{label} {rows}x{hidden}", dtype, fused_of("layernorm"), copies, base, reference,
                nbytes + rows * hidden * 4 + 2 * hidden * SIZE[dtype], candidates, tol=1e-4)


def case_fp8_gemm(m, hidden, n, candidates, weights="float16", k_major=False):
    """FP8 per-token quantisation + GEMM; our weights ``float16`` or ``e4m3`` bytes (the baselines': e4m3 always);
    ``k_major``: the e4m3 weights given as the baseline's own (N, K) operand, ``wq.t()[None]`` (read as they lie by
    ``columns_wgmma+fp8``; a contiguous copy for configurations that do not, made before timing)."""
    x = randn((m, hidden), "bfloat16")
    w = randn((hidden, n), "float16", 0.05)
    if weights == "e4m3":  # the same values for us and for the baselines
        w = w.to(torch.float8_e4m3fn)
    wq = w.t().contiguous().to(torch.float8_e4m3fn)           # (N, K) for _scaled_mm's column-major operand
    sw = torch.ones(1, n, device="cuda", dtype=torch.float32)

    def quant_mm(x, quant):
        xq, sx = quant(x)
        return torch._scaled_mm(xq, wq.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16)
    compiled_quant = compiled_fn("fp8q", fp8_quant_eager)
    weight_bytes = hidden * n
    base = [("eager quant + torch._scaled_mm", lambda x: quant_mm(x, fp8_quant_eager), weight_bytes + m * hidden * 2),
            ("torch.compile quant + torch._scaled_mm", lambda x: quant_mm(x, compiled_quant), weight_bytes + m * hidden * 2)]
    if m >= 1024:  # the M4096 target is against the product alone, the activations quantised beforehand (untimed)
        xq0, sx0 = fp8_quant_eager(x)
        base.append(("torch._scaled_mm alone (x quantised beforehand)",
                     lambda x: torch._scaled_mm(xq0, wq.t(), scale_a=sx0, scale_b=sw, out_dtype=torch.bfloat16),
                     weight_bytes + m * hidden))
    inputs = {"x": ours_input(x), "w": ours_input(wq.t()[None] if k_major else w.view(1, hidden, n))}

    def reference(x):
        return {"y": fp8_gemm_reference(x, w)}
    item, label = (1, " e4m3 weights") if weights == "e4m3" else (2, "")
    label += " K-major" if k_major else ""  # (its own autotuning key: the contiguous case's choice may not read them)
    note = "" if weights == "e4m3" else "our weights are float16: twice the baseline's weight bytes"
    return Case("fp8_quant_gemm", f"M{m} K{hidden} N{n}{label}", "bfloat16", fused_of("fp8_quant_gemm"),
                [(inputs, {}, (x,))], base, reference, hidden * n * item + m * hidden * 2 + m * n * 4, candidates,
                # (the exact products: about 1e-7 of the largest output; the FP8 instruction's, its sums promoted to
                # float32 every 128 elements: 1.1e-4 … 1.9e-4, gpu/weights_check.py)
                flops=2.0 * m * hidden * n, tol=1e-3, note=note)


def rmsnorm_gemm_eager(x, g, w, eps):
    xf = x.float()
    return ((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * g) @ w


def case_rmsnorm_gemm(m, hidden, n, candidates, k_major=False):
    """RMSNorm then a GEMM (LLaMA-7B's q projection: hidden 4096), bfloat16; the weights shared by the tokens;
    ``k_major``: ours given as a ``Linear`` layer holds them, ``W.t()[None]`` of an (n, K) matrix (the same values)."""
    x, g, w = randn((m, hidden), "bfloat16"), randn((hidden,), "bfloat16"), randn((hidden, n), "bfloat16", 0.02)
    eps = 1e-5
    io = hidden * n * 2 + m * hidden * 2 + m * n * 2
    base = [("eager", lambda x: rmsnorm_gemm_eager(x, g, w, eps), io),
            ("torch.compile", lambda x: compiled_fn("rmsnorm_gemm", rmsnorm_gemm_eager)(x, g, w, eps), io)]
    inputs = {"x": ours_input(x), "g": ours_input(g.view(1, hidden)),
              "w": ours_input(w.t().contiguous().t()[None] if k_major else w.view(1, hidden, n))}
    params = {"h": np.float32(hidden), "eps": np.float32(eps)}

    def reference(x):
        xd = x.double()
        return {"y": (xd / torch.sqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * g.double()) @ w.double()}
    # columns_mma and columns_wgmma round each normalised factor to bfloat16 before its product (as the eager baseline
    # rounds the normalised row): one more rounding of bfloat16 (2^-8) than columns' float32 factors, as the library's
    # check allows a product of rounded factors (check.judge). It is a statistic of the roundings, not a bound: each
    # factor moves by up to 2^-8 of itself, and at M16 the largest of 65536 outputs' errors reads about 2^-9 of the
    # largest output (1.6e-3 to 2.1e-3 measured on the H200): 2^-9, the tolerance before, failed in one run
    tol = 1e-4 + (STORE_ROUNDING["bfloat16"] if any(c.startswith(("columns_mma", "columns_wgmma", "auto"))
                                                    for c in candidates) else 0.0)
    return Case("rmsnorm_gemm", f"LLaMA-7B M{m} K{hidden} N{n}{' K-major' if k_major else ''}", "bfloat16",
                fused_of("rmsnorm_gemm"),
                [(inputs, params, (x,))], base, reference, hidden * n * 2 + m * hidden * 2 + m * n * 4, candidates,
                flops=2.0 * m * hidden * n, tol=tol)


_COMPILED: dict = {}


def compiled_fn(key, fn):
    if key not in _COMPILED:
        _COMPILED[key] = torch.compile(fn)
    return _COMPILED[key]


# -- the case list ---------------------------------------------------------------------------------
LONG = ("rows", "rows@512g512", "tile@512")
DECODE = ("vrows", "vrows@128x2", "vrows@256x4", "split_lanes@256x4")
#: wgmma: one or two warpgroups per block (Hopper); mma: 16 or 32 rows per warp (32: each key fragment serves two row tiles)
PREFILL = ("wgmma@128", "wgmma@256", "wgmma@384", "wgmma@384x128", "mma@128g16", "mma@128g32")


#: The ``rows`` launches the vocabulary cases try: the policy's (1024 threads holding 16 values a thread), 1024 threads
#: holding 32 (the policy's before: spills at 64 registers), blocks of 512 and 256 threads (128 registers: no spills).
VOCAB_ROWS = {"float32": ("rows", "rows@1024x8g1024", "rows@1024x4g1024", "rows@512x8g512", "rows@256x8g256"),
              "bfloat16": ("rows", "rows@1024x4g1024", "rows@1024x2g1024", "rows@512x4g512", "rows@256x4g256")}


def all_cases(quick: bool) -> dict:
    """Case groups by name; each value is a list of zero-argument builders."""
    ablation = ("thread@128", "warp@128", "block@256", "tile@256", "split@256", "unfused@256", "rows")
    c = {
        "softmax": [lambda: case_softmax(8192, 32768, "float32", LONG),
                    lambda: case_softmax(32768, 8192, "bfloat16", LONG)],
        "logsumexp": [lambda: case_logsumexp(16384, 16384, "float32", LONG)],
        "decode": [lambda b=b, l=l: case_attention(b, 32, 1, l, 128, DECODE, "decode_attention", "LLaMA")
                   for b, l in ((16, 4096), (1, 65536), (4, 16384), (64, 1024), (64, 8192))],
        "mla": [lambda b=b: case_mla(b, 4096, ("wgmma", "wgmma@256s8", "wgmma@256s32", "vrows@256x2")) for b in (4, 16)] +
               [lambda b=b: case_mla(b, 4096, ("wgmma",), query16=False) for b in (4, 16)],
        "prefill": [lambda: case_attention(8, 12, 512, 512, 64, PREFILL, "attention", "BERT-base"),
                    lambda: case_attention(8, 16, 197, 197, 64, PREFILL, "attention", "ViT-L"),
                    lambda: case_attention(1, 64, 2048, 2048, 128, PREFILL, "attention", "LLaMA-65B"),
                    lambda: case_attention(1, 64, 4096, 4096, 128, PREFILL, "attention", "LLaMA-65B")],
        "prefill_causal": [lambda L=L: case_attention(1, 64, L, L, 128, ("wgmma", "wgmma@384x128", "mma"), "causal_attention", "LLaMA-65B",
                                                      causal=True) for L in (2048, 4096)],
        "prefill_bf16": [lambda: case_attention(1, 64, 2048, 2048, 128, ("wgmma", "wgmma@384x128", "mma"), "attention", "LLaMA-65B",
                                                "bfloat16")],
        # the query given in float32 (widened once, outside the timing), as the prefill cases were timed before 2026-12-04
        "prefill_q32": [lambda c=c, L=L, dt=dt: case_attention(1, 64, L, L, 128, ("wgmma",), "causal_attention" if c else
                                                               "attention", "LLaMA-65B", dt, causal=c, query16=False)
                        for c, L, dt in ((True, 2048, "float16"), (False, 2048, "float16"), (True, 4096, "float16"),
                                         (False, 2048, "bfloat16"))],
        # shapes in no catalogue, as a user brings them (the call's `auto`): head dimensions other than 64 and 128
        # (Phi-2's 80, 96, Gemma's 256), a long row at d = 64, a length on no tile's grid
        "prefill_general": [lambda b=b, h=h, L=L, d=d, lab=lab, c=c: case_attention(
            b, h, L, L, d, ("auto",), "causal_attention" if c else "attention", lab, causal=c)
            for b, h, L, d, lab, c in ((1, 32, 2048, 80, "Phi-2", False), (1, 32, 2048, 96, "d96", False),
                                       (1, 16, 2048, 256, "Gemma-7B", False), (1, 32, 4096, 64, "d64", False),
                                       (1, 64, 1999, 128, "odd", False), (1, 64, 1999, 128, "odd", True),
                                       (1, 64, 1024, 128, "LLaMA-65B", False), (1, 64, 1024, 128, "LLaMA-65B", True),
                                       (1, 32, 2048, 64, "d64", False), (1, 64, 1536, 128, "LLaMA-65B", True),
                                       (1, 32, 4096, 64, "d64", True), (1, 32, 2048, 80, "Phi-2", True),
                                       (1, 32, 1024, 96, "d96", False), (1, 32, 1024, 80, "Phi-2", True),
                                       (1, 32, 2048, 192, "d192", False), (1, 16, 2048, 256, "Gemma-7B", True),
                                       # heads of a multiple of 8, not of 16 (staged as the next multiple of 16):
                                       # Stable Diffusion 1.5's d40 over a 64 × 64 latent, SigLIP's d72 over 27 × 27
                                       # patches, ViT-g's d88, a long d72
                                       (2, 8, 4096, 40, "SD-1.5", False), (8, 16, 729, 72, "SigLIP", False),
                                       (8, 16, 257, 88, "ViT-g", False), (1, 32, 2048, 72, "d72", False),
                                       (1, 32, 2048, 72, "d72", True))]
        # ... and Stable Diffusion 1.5's cross-attention: a 64 × 64 latent's queries over 77 text tokens (index 21)
        + [lambda: case_attention(2, 8, 4096, 77, 40, ("auto",), "attention", "SD-1.5 cross")],
        "moe": [lambda t=t, e=e, k=k, lab=lab: case_moe(t, e, k, ("rows", "rows@128g16", "warp@128"), lab)
                for t, e, k, lab in ((16384, 128, 8, "Qwen3"), (4096, 128, 8, "Qwen3"), (32768, 128, 8, "Qwen3"),
                                     (16384, 128, 1, "Switch"), (16384, 64, 6, "DeepSeek-V2-Lite"))]
        + [lambda: case_moe(4096, 4096, 8, ("rows", "rows@512g512", "rows@128x4g128"), "wide")]
        # a row longer than the registers hold (a vocabulary): read once a reduction, the level order (index 6)
        + [lambda: case_moe(1024, 50257, 8, ("rows", "rows@1024"), "vocab")],
        "fp8": [lambda: case_fp8_quant(16384, 7168, LONG)],
        # a resident row (4096 bf16: in registers) and one read in passes (65536 float32 in groups of 1024 threads).
        # The policy's persistent blocks capped registers at 32 (2048 threads a multiprocessor): ptxas spills 480/504
        # bytes a thread for LayerNorm's three inputs (softmax: 76/116) and it ran at 0.505 ms on an H100; at 64 (m4,
        # the policy's since for more inputs than one) 112/108 and 0.133 ms, 80 (m3) 4/4 and 0.152, a block a row
        # group (no cap, 128 threads of 4 chunks) 124 registers, none spilled, 0.167 (gpu/README.md, 2026-12-05)
        "layernorm": [lambda: case_layernorm(16384, 4096, "bfloat16", ("rows", "rows@256x2g256m4p", "rows@256x2g256m3p",
                                                                        "rows@128x4g128"), "LLaMA"),
                      lambda: case_layernorm(512, 65536, "float32", ("rows",), "long")],
        "ce": [lambda v=v, lab=lab: case_cross_entropy(8192, v, "bfloat16", ("rows", "rows@512g512"), lab)
               for v, lab in ((32000, "LLaMA-2"), (128256, "LLaMA-3"))],
        "fp8gemm": [lambda m=m: case_fp8_gemm(m, 7168, 7168, ("columns_mma", "columns_mma@256", "columns", "columns@128s38"))
                    for m in (1, 16)] + [lambda: case_fp8_gemm(4096, 7168, 7168, ("columns_wgmma", "columns_mma"))]
        + [lambda m=m: case_fp8_gemm(m, 7168, 7168, ("columns_mma", "columns_mma@64", "columns"), "e4m3")
           for m in (1, 16)] + [lambda: case_fp8_gemm(4096, 7168, 7168, ("columns_wgmma", "columns_wgmma+fp8", "columns_wgmma+fp8@256g20",
                                                   "columns_wgmma+fp8@256g24", "columns_wgmma+fp8@256g20:bfloat16"), "e4m3", k_major=True)]
        + [lambda m=m: case_fp8_gemm(m, 7168, 7168, ("columns_mma", "columns_mma@64"), "e4m3", k_major=True)
           for m in (1, 16)]  # (a Linear layer's weights as they lie, read so by columns_mma)
        # between the targets' token counts, where `auto` turns from columns_mma to columns_wgmma (GEMM_ROWS)
        + [lambda m=m: case_fp8_gemm(m, 7168, 7168, ("columns_mma", "columns_wgmma", "auto"), "e4m3", k_major=True)
           for m in (64, 128, 256, 1024)],
        # (at 4096 tokens also with bfloat16 outputs, as the baselines write theirs: half the bytes of float32's)
        "normgemm": [lambda m=m: case_rmsnorm_gemm(m, 4096, 4096, ("columns_mma", "columns", "columns@128s38"))
                     for m in (1, 16)] + [lambda: case_rmsnorm_gemm(4096, 4096, 4096, ("columns_wgmma", "columns_wgmma:bfloat16", "columns_mma"))]
        # (a Linear layer's weights as they lie: read along their rows by both products)
        + [lambda m=m: case_rmsnorm_gemm(m, 4096, 4096, ("columns_mma", "columns_wgmma", "auto"), k_major=True)
           for m in (16, 1024, 4096)],
        # rows a vocabulary long, walked in passes (past what a block's registers hold): the policy's block of 1024
        # threads (64 registers a thread) against 512 and 256 (gpu/README.md, "rows in passes")
        "vocab": [lambda L=L, dt=dt: case_softmax(2**25 // L, L, dt, VOCAB_ROWS[dt]) for L, dt in
                  ((50257, "float32"), (128256, "float32"), (50257, "bfloat16"), (151936, "bfloat16"))]
        + [lambda: case_moe(1024, 50257, 8, VOCAB_ROWS["bfloat16"], "vocab")]
        # resident rows whose registers spill at 1024 threads (ptxas: LayerNorm float32 L32768 328 B, float16 softmax
        # 24 B) against the same rows walked in passes of 16 values a thread (index 5, 6; `rows` is the policy's launch:
        # LayerNorm's in passes since 2026-12-06, its resident launch named beside it)
        + [lambda: case_layernorm(1024, 32768, "float32", ("rows", "rows@1024x8g1024", "rows@1024x4g1024",
                                                           "rows@512x8g512m1"), "wide"),
           lambda: case_softmax(1024, 32768, "float16", ("rows", "rows@1024x2g1024", "rows@512x4g512m1")),
           # the same with a second input in 16 bits, with one input in float32, and a float32 row of 24 values a
           # thread (index 7, 8, 9)
           lambda: case_layernorm(1024, 32768, "bfloat16", ("rows", "rows@1024x4g1024", "rows@1024x2g1024",
                                                            "rows@512x4g512m1"), "wide"),
           lambda: case_softmax(1024, 32768, "float32", ("rows", "rows@1024x4g1024", "rows@512x8g512m1")),
           lambda: case_layernorm(1024, 24576, "float32", ("rows", "rows@1024x6g1024", "rows@1024x4g1024",
                                                            "rows@512x6g512m1"), "wide")],
        "ablation": [lambda L=L: case_softmax(2**26 // L, L, "float32", ablation, "softmax_levels")
                     for L in (1024, 4096, 16384, 65536)],
        "incremental": [lambda L=L: case_softmax(2**25 // L, L, "float32", ("rows", "tile@256", "nonincremental@256"),
                                                 "softmax_incremental") for L in (512, 1024, 2048, 4096, 8192, 16384)],
    }
    if quick:
        c = {k: v[:1] for k, v in c.items()}
    return c
