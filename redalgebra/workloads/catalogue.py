"""Cascade texts and shapes of the catalogue (data only).

Shapes are dicts: ``rows`` independent cascades, ``L`` the reduction axis, and
the vector sizes the text names; ``model`` says where the shape comes from.
Integer params (a label, a query's position) are one integer per row:
:mod:`.masks` makes them for the attention layouts.
"""

SAFE_SOFTMAX = """\
# softmax(x) over the axis, computed safely: a max, then a sum of exp(x - max)
input x
reduce m = max(x)
reduce l = sum(exp(x - m))
out y = exp(x - m) / l        # per-element output
"""

LOGSUMEXP = """\
input x
reduce m = max(x)
reduce s = sum(exp(x - m))
out y = m + log(s)
"""

CROSS_ENTROPY = """\
# softmax cross-entropy of one row of logits; the label is one integer per row (no one-hot row in memory)
input x                        # logit
param label int                # the target class, 0 <= label < L
reduce m = max(x)
reduce s = sum(exp(x - m))
reduce t = sum(x * (pos == label))   # the target's logit: pos is the element's index along the axis
out loss = log(s) + m - t
"""

CROSS_ENTROPY_ONEHOT = """\
# loss of one row of logits against a one-hot label row
input x                        # logit
input t                        # one-hot label (1 at the target class)
reduce m = max(x)
reduce s = sum(exp(x - m))
reduce xt = sum(x * t)         # the target's logit
out loss = m + log(s) - xt
"""

ATTENTION = """\
# one query row of scaled dot-product attention over the keys
input k[d]                     # key row
input v[d]                     # value row
param q[d]                     # the query
param scale > 0                # 1/sqrt(d)
let s = dot(q, k) * scale
reduce m = max(s)
reduce l = sum(exp(s - m))
reduce o = sum(exp(s - m) * v)
out y = o / l
"""

ALIBI_ATTENTION = """\
# one query row of causal attention with ALiBi biases (Press et al., ICLR 2022), mask and bias written with pos
input k[d]                     # key row
input v[d]                     # value row
param q[d]                     # the query
param scale > 0                # 1/sqrt(d)
param slope > 0                # the head's ALiBi slope
param qpos int                 # the query's position: it sees the keys at pos <= qpos
let s = dot(q, k) * scale - slope * (qpos - pos)
let sc = where(pos <= qpos, s, -inf)
reduce m = max(sc)
reduce l = sum(exp(sc - m))
reduce o = sum(exp(sc - m) * v)
out y = o / l
"""

MLA_DECODE = """\
# DeepSeek multi-head latent attention, decode: every head reads one shared latent KV
input c[r]                     # latent KV row (rank 512), also the value
input kr[e]                    # decoupled rope key (64 wide)
param qc[r]                    # query absorbed into the latent space
param qr[e]                    # rope part of the query
param scale > 0
let s = (dot(qc, c) + dot(qr, kr)) * scale
reduce m = max(s)
reduce l = sum(exp(s - m))
reduce o = sum(exp(s - m) * c)
out y = o / l
"""

MOE_ROUTING = """\
# router: softmax over the experts, the top 8, weights renormalised over them
input g                        # gate logit of one expert
reduce m = max(g)
reduce s = sum(exp(g - m))
reduce t = topk(8, exp(g - m) / s)
out w = t / sum(t)
"""

FP8_QUANT_GEMM = """\
# per-token FP8 (e4m3) quantisation feeding a GEMM: the axis is the hidden dimension
input x                        # activation
input w[n]                     # weight row of this hidden index (n output columns)
reduce a = max(abs(x))
reduce acc = sum(fp8(x * 448 / max(a, 1e-12)) * w)   # amax clamped, as quantisers do: an all-zero row is 0
out y = acc * max(a, 1e-12) / 448
"""

RMSNORM_GEMM = """\
# RMSNorm then a GEMM, written the way it is defined (normalise, then multiply)
input x                        # activation
input g                        # RMSNorm weight of this hidden index
input w[n]                     # weight row (n output columns)
param h > 0                    # hidden size
param eps > 0
reduce ss = sum(x**2)
reduce acc = sum(x / sqrt(ss / h + eps) * g * w)
out y = acc
"""

LAYERNORM = """\
# LayerNorm of a row: its statistics written with mean, then the normalised, scaled and shifted row
input x
input g                        # the LayerNorm weight of this hidden index
input b                        # and its bias
param eps > 0
reduce mu = mean(x)
reduce var = mean((x - mu)**2)   # three terms; x**2 kept centred (Chan's merge)
out y = (x - mu) / sqrt(var + eps) * g + b
"""

SOFTCAP_ATTENTION = """\
# one query row of attention with Gemma-2's logit soft-capping: cap * tanh(s / cap) bounds every score
input k[d]                     # key row
input v[d]                     # value row
param q[d]                     # the query
param scale > 0                # 1/sqrt(d)
param cap > 0                  # 50 in Gemma-2
let s = cap * tanh(dot(q, k) * scale / cap)
reduce m = max(s)
reduce l = sum(exp(s - m))
reduce o = sum(exp(s - m) * v)
out y = o / l
"""

CROSS_ENTROPY_SMOOTHED = """\
# cross-entropy with label smoothing: eps of the target's weight spread over the n classes,
# loss = logsumexp(x) - (1 - eps) x[label] - eps * mean(x)
input x
param label int                # the target class, 0 <= label < L
param eps >= 0                 # the smoothing (0.1 is common)
param n > 0                    # the classes (the row length)
reduce m = max(x)
reduce l = sum(exp(x - m))
reduce t = sum(x * (pos == label))
reduce s = sum(x)
out loss = m + log(l) - (1 - eps) * t - eps * s / n
"""

INT8_QUANT_GEMM = """\
# int8 absmax quantisation of an activation row feeding a GEMM (W8A8-style), the scale in the epilogue:
# round(x * 127 / a) is no product or sum of G(x) and H(a), so it does not fuse; the level order (columns)
# still runs it in two passes, the absmax first, the weights read once
input x                        # activation
input w[n]                     # weight row of this hidden index
reduce a = max(abs(x))
reduce acc = sum(round(x * 127 / max(a, 1e-12)) * w)
out y = acc * max(a, 1e-12) / 127
"""

ENTRIES = [
    dict(name="safe_softmax", text=SAFE_SOFTMAX, description="softmax with max subtraction (two reductions)",
         shapes=(dict(rows=8192, L=32768), dict(rows=32768, L=8192))),
    dict(name="logsumexp", text=LOGSUMEXP, description="log-sum-exp of a row",
         shapes=(dict(rows=16384, L=16384),)),
    dict(name="cross_entropy", text=CROSS_ENTROPY, description="softmax cross-entropy, the label an integer per row",
         paper=False, shapes=(dict(rows=8192, L=32000, model="LLaMA-2 vocabulary"),
                              dict(rows=8192, L=128256, model="LLaMA-3 vocabulary"))),
    dict(name="cross_entropy_onehot", text=CROSS_ENTROPY_ONEHOT,
         description="softmax cross-entropy against a one-hot label row (reads a second row)",
         paper=False, shapes=(dict(rows=8192, L=32000, model="LLaMA-2 vocabulary"),)),
    dict(name="cross_entropy_smoothed", text=CROSS_ENTROPY_SMOOTHED, paper=False,
         description="softmax cross-entropy with label smoothing, the label an integer per row",
         shapes=(dict(rows=8192, L=128256, model="LLaMA-3 vocabulary"),)),
    dict(name="attention", text=ATTENTION, description="multi-head attention, one query row per cascade",
         shapes=(dict(rows=12 * 512, L=512, d=64, model="BERT-base"),
                 dict(rows=16 * 257, L=257, d=64, model="ViT-L"),
                 dict(rows=64 * 4096, L=4096, d=128, model="LLaMA-65B"))),
    dict(name="decode_attention", text=ATTENTION, description="decode attention: one query, a long KV cache",
         shapes=(dict(rows=16 * 32, L=4096, d=128, model="B16 H32"),
                 dict(rows=1 * 32, L=65536, d=128, model="B1 H32 KV64K"))),
    dict(name="alibi_attention", text=ALIBI_ATTENTION,
         description="causal attention with ALiBi biases, the mask and bias in the cascade (pos, qpos)",
         paper=False, shapes=(dict(rows=32 * 2048, L=2048, d=128, model="MPT-7B prefill"),
                              dict(rows=16 * 32, L=4096, d=128, model="MPT-7B decode B16"))),
    dict(name="softcap_attention", text=SOFTCAP_ATTENTION, paper=False,
         description="Gemma-2 decode attention with logit soft-capping (cap * tanh(s / cap))",
         shapes=(dict(rows=8 * 16, L=8192, d=256, model="Gemma-2-27B decode B8"),)),
    dict(name="mla_decode", text=MLA_DECODE, description="DeepSeek MLA decode over a shared latent KV",
         shapes=(dict(rows=128, L=4096, r=512, e=64, model="DeepSeek-R1"),)),
    dict(name="moe_routing", text=MOE_ROUTING, description="softmax over experts, top-8, renormalised",
         shapes=(dict(rows=16384, L=128, model="Qwen3"), dict(rows=4096, L=4096))),
    dict(name="fp8_quant_gemm", text=FP8_QUANT_GEMM, description="per-token e4m3 quantisation + GEMM",
         shapes=(dict(rows=16, L=7168, n=7168, model="DeepSeek-R1"),)),
    dict(name="rmsnorm_gemm", text=RMSNORM_GEMM, description="RMSNorm followed by a GEMM",
         shapes=(dict(rows=16, L=4096, n=4096, model="LLaMA-7B"),)),
]

# Cascades this theory cannot fuse, each with the diagnosis the analysis must give:
# for every candidate ⊗, the condition that fails.
ABS_DEVIATION = """\
# mean absolute deviation: |x - mean| is neither a product nor a sum of G(x) and H(mean)
input x
param n > 0                    # row length
reduce s = sum(x)
reduce d = sum(abs(x - s / n))
out mad = d / n
"""

SOFTPLUS_SUM = """\
input x
reduce m = max(x)
reduce p = sum(log(1 + exp(x - m)))
out y = p
"""

VARIANCE_TWO_PASS = """\
# the textbook two-pass variance: (x - mean)**2 expands into three terms (x**2, x, 1), each a partial sum;
# x**2 is kept centred (deviations from the running mean, Chan's merge), so float32 does not cancel
input x
param n > 0                    # row length
reduce s = sum(x)
reduce v = sum((x - s / n)**2)
out var = v / n
"""

COVARIANCE = """\
# covariance of two rows, written as defined: the product of deviations from the means
input x
input y
param n > 0                    # row length
reduce sx = sum(x)
reduce sy = sum(y)
reduce c = sum((x - sx / n) * (y - sy / n))
out cov = c / n
"""

GEOMETRIC_MEAN = """\
# weighted geometric mean of positive values, as defined: prod(x^(w/W)) with W the total weight
input x >= 0
input w >= 0                   # the weights
reduce W = sum(w)
reduce g = prod(x ** (w / W))
out mean = g
"""

SOFTMAX_ENTROPY = """\
# entropy of softmax(x), written naturally: H = log(l) - sum(p * (x - m)) / l with p = exp(x - m)
input x
reduce m = max(x)
reduce l = sum(exp(x - m))
reduce t = sum(exp(x - m) * (x - m))   # two terms: x*exp(x - m) and exp(x - m), each rescaled by exp(-m)
out h = log(l) - t / l
"""

LAYERNORM_GEMM = """\
# LayerNorm statistics then a GEMM with the weight rows, written the way it is defined
input x                        # activation
input w[n]                     # weight row of this hidden index (n output columns)
param h > 0                    # hidden size
param eps > 0
reduce s = sum(x)
reduce v = sum((x - s / h)**2)
reduce acc = sum((x - s / h) / sqrt(v / h + eps) * w)
out y = acc
"""

# Sums of several separable terms (derive/multiterm.py), fused with one partial sum per term.
MULTI_TERM = [
    dict(name="variance_two_pass", text=VARIANCE_TWO_PASS, paper=False,
         description="two-pass variance: three terms, x**2 kept centred (Welford/Chan)",
         shapes=(dict(rows=4096, L=4096),)),
    dict(name="softmax_entropy", text=SOFTMAX_ENTROPY, paper=False,
         description="entropy of a softmax row, sum(p*(x - m)) as two rescaled terms",
         shapes=(dict(rows=8192, L=32000, model="LLaMA-2 vocabulary"),)),
    dict(name="layernorm_gemm", text=LAYERNORM_GEMM, paper=False,
         description="LayerNorm followed by a GEMM: variance and a centred x*w term",
         shapes=(dict(rows=16, L=4096, n=4096, model="LLaMA-7B width"),)),
    dict(name="covariance", text=COVARIANCE, paper=False,
         description="covariance of two rows: four terms, x*y kept centred (Chan's co-moment merge)",
         shapes=(dict(rows=4096, L=4096),)),
    dict(name="layernorm", text=LAYERNORM, paper=False,
         description="LayerNorm written with mean: the variance's three terms, the normalised row per element",
         shapes=(dict(rows=8192, L=4096, model="LLaMA-7B width"),)),
    dict(name="geometric_mean", text=GEOMETRIC_MEAN, paper=False,
         description="weighted geometric mean: a product of powers, fused as exp(H · sum(log G)) (⊗ = power)",
         shapes=(dict(rows=4096, L=4096),)),
]

NOT_FUSABLE = [
    dict(name="abs_deviation", text=ABS_DEVIATION, description="mean absolute deviation (not fusable)",
         paper=False, expect=dict(reduction="d", failed={"mul": "separability", "add": "distributivity"})),
    dict(name="softplus_sum", text=SOFTPLUS_SUM, description="sum of softplus(x - max) (not fusable)",
         paper=False, expect=dict(reduction="p", failed={"mul": "separability", "add": "distributivity"})),
    dict(name="int8_quant_gemm", text=INT8_QUANT_GEMM, paper=False,
         description="int8 absmax quantisation + GEMM (not fusable: rounding; runs in the level order)",
         shapes=(dict(rows=16, L=4096, n=4096, model="LLaMA-7B width"),),
         expect=dict(reduction="acc", failed={"mul": "separability", "add": "distributivity"})),
]
