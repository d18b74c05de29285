"""``strategy="auto"``: which registered strategy runs a call, from its shape, dtypes, layout and GPU
(:func:`choose`; :class:`~.compile.Kernel` asks it once per call signature)."""

from __future__ import annotations

from ..codegen import Problem
from ..codegen.lanes import lanes_refusal
from ..codegen.strategies.columns import refusal as columns_refusal
from ..codegen.strategies.columns_mma import applicable as columns_mma_applicable
from ..codegen.strategies.columns_mma import exact_factors as columns_exact
from ..codegen.strategies.columns_wgmma_policy import applicable as columns_wgmma_applicable
from ..codegen.strategies.mma_policy import applicable as mma_applicable
from ..codegen.strategies.wgmma_policy import applicable as wgmma_applicable
from ..codegen.strategies.vrows import refusal as vrows_refusal
from ..codegen.strategies.vrows import too_wide as vrows_too_wide
from ..derive import FusedCascade


#: Rows that must share a vector row for ``auto`` to take the tensor cores (a warp's 16 rows of its tile).
MMA_ROWS = 16
#: Rows from which a product of shared weights is a GEMM on Hopper's ``wgmma`` (``columns_wgmma``: 128-row blocks):
#: two blocks of rows. Measured on the H200 (FP8 quantisation + GEMM, K = N = 7168, e4m3 weights, gpu/README.md):
#: ``columns_mma`` 0.0430, 0.0828, 0.1615 ms at 64, 128, 256 rows; ``columns_wgmma`` 0.0984 at 128, 0.1143 at 256
#: and 0.634 at 4096 (``columns_mma`` about 7x slower there); at 1024, 0.594 against 0.216.
GEMM_ROWS = 256


#: What the rounded factors of :func:`rounded_alternative` cost and gain, measured on the H200 (RMSNorm + GEMM, LLaMA-7B
#: K = N = 4096, bfloat16, gpu/README.md): at 4096 tokens ``columns`` (float32 factors, CUDA cores) 12.35 ms,
#: ``columns_wgmma`` 0.22 ms, ``torch.compile`` 0.21 ms; at 16 tokens ``columns`` 0.097 ms, ``columns_mma`` 0.021 ms.
#: The rounding: a factor's relative error at most 2^-9 in bfloat16 (2^-12 in float16), as PyTorch rounds the
#: normalised row to the input's type before its GEMM.
ROUNDED_NOTE = ("strategy='auto' keeps factors that the tensor cores would round ({factor}) exact in float32, on CUDA "
                "cores ('columns'); strategy='{alt}' runs the product on the tensor cores with each factor rounded to "
                "the weights' 16-bit type (at most 2^-9 relative in bfloat16, as PyTorch rounds a normalised row "
                "before its GEMM): for RMSNorm + GEMM (LLaMA-7B) on an H200, {gain}")
#: What :data:`ROUNDED_NOTE` quotes for each alternative.
ROUNDED_GAIN = {"columns_wgmma": "0.22 against 12.35 ms at 4096 tokens (56x)",
                "columns_mma": "0.021 against 0.097 ms at 16 tokens (4.6x)"}


def rounded_alternative(fused: FusedCascade, rows: int, reps: dict | None, problem: Problem | None) -> str | None:
    """The tensor-core strategy a call :func:`choose` keeps on ``columns`` would take if its factors could be rounded
    to the weights' 16-bit type — ``columns_wgmma`` from :data:`GEMM_ROWS` rows on an sm_90 GPU, else ``columns_mma``
    — where they are not exact there (RMSNorm's ``x · r · g``; FP8 values are, and take the tensor cores anyway) and
    the call suits it; None otherwise. ``auto`` does not round a factor the cascade does not round: naming the
    strategy does (:data:`ROUNDED_NOTE`, the call's :class:`~redalgebra.errors.PerformanceHint`)."""
    vectors = [s for s in fused.cascade.inputs if s.size is not None]
    if problem is None or not vectors or columns_exact(fused) or columns_refusal(fused) is not None:
        return None
    if min((reps or {}).get(s.name, 1) for s in vectors) < MMA_ROWS:
        return None
    if columns_mma_applicable(fused, problem) is not None:
        return None
    hopper = tuple(problem.option("cc") or ())[:2] == (9, 0)
    if hopper and rows >= GEMM_ROWS and columns_wgmma_applicable(fused, problem) is None:
        return "columns_wgmma"
    return "columns_mma"


def choose(fused: FusedCascade, rows: int, length: int, sizes: dict | None = None, reps: dict | None = None,
           problem: Problem | None = None) -> str:
    """``strategy="auto"``: the strategy for a shape.

    Elements with 16-bit vector inputs that at least :data:`MMA_ROWS` rows share (prefill attention's keys and
    values, shared by a head's queries), whose dot products multiply a vector param by a vector input and whose
    vector sums are a factor times a vector input: ``mma`` (the products on the tensor cores; ``problem`` gives
    the dtypes and alignment it needs), ``wgmma`` on an sm_90 GPU (Hopper's warpgroup instructions; it also takes
    vector sums up to 512 wide, split across two warpgroups: MLA decode's latent values).

    Elements that are scalars: ``rows`` (the row in registers, 128-bit loads). Elements with vector inputs that
    rows share (a weight matrix given once for all tokens: ``reps``), that are too wide for a lane's
    registers, or that meet a cast (fp8), and whose components are independent (no dot product): ``columns`` (the scalar reductions
    first, then column tiles of a batch of rows reading each weight once, FP8 rounded at the final scale);
    ``columns_mma`` (the same level order, the products on the tensor cores) where the factors are FP8 values (exact
    in the weights' 16-bit type) and the call suits it — a factor it would round (RMSNorm's) stays on ``columns``
    unless asked for; ``columns_wgmma`` (the product as a GEMM on ``wgmma``; e4m3 weights widened to float16 first) instead
    from :data:`GEMM_ROWS` rows on an sm_90 GPU. (Both read weights given K-major as they lie where ``columns_mma`` can:
    ``auto`` once kept ``columns_mma`` up to 1024 rows where ``columns_wgmma`` copied them on every call.)
    Other elements with vectors (attention's keys and values): ``vrows`` (a group of lanes per element, 128-bit loads, segments across
    blocks when the rows are few; its launch policy chooses from the shape), which ran every decode shape of
    the H200 bench at 94-106 % of copy bandwidth; where it cannot (a top-k, per-element outputs, vectors too
    wide for a lane's registers such as a 7168-wide weight row) segments
    across blocks (``split_lanes``) for long rows that are few enough, else a warp per element (``lanes``); where
    those cannot either (per-element outputs of elements with dot products), a block per row (``tile``).
    """
    vectors = [s for s in fused.cascade.inputs if s.size is not None]
    if not vectors:
        return "rows"
    shared = min((reps or {}).get(s.name, 1) for s in vectors)
    level_order = columns_refusal(fused) is None  # (the columns' level order takes the cascade)
    # (only elements with dot products: where the columns' level order takes the cascade — its components
    # independent, a weight matrix's rows scaled — it keeps an FP8 cast's scale final and a factor unrounded, which
    # mma's one-pass tiles do not: FP8 quant + GEMM's 16-bit weights went there from 16 rows, 3 % off)
    if problem is not None and shared >= MMA_ROWS and not level_order:
        # (wgmma also takes vector sums wider than mma's 128 columns: MLA's 512-wide latent values)
        if tuple(problem.option("cc") or ())[:2] == (9, 0) and wgmma_applicable(fused, problem) is None:
            return "wgmma"
        if mma_applicable(fused, problem) is None:
            return "mma"
    wide = vrows_too_wide(fused, sizes or {})
    # a cast (fp8) rounds at a running scale in a one-pass kernel: the level order rounds at the final one
    if level_order and (shared > 1 or wide or fused.exact_in_reals_only):
        # the products on the tensor cores where the factors are exact in the weights' 16-bit type (FP8) and the
        # call suits them (its applicability asks the weights shared by whole blocks of rows)
        exact = problem is not None and columns_exact(fused) and columns_mma_applicable(fused, problem) is None
        hopper = problem is not None and tuple(problem.option("cc") or ())[:2] == (9, 0)
        if exact and hopper and rows >= GEMM_ROWS and columns_wgmma_applicable(fused, problem) is None:
            return "columns_wgmma"
        return "columns_mma" if exact else "columns"
    if vrows_refusal(fused) is None and not wide:
        return "vrows"
    if lanes_refusal(fused) is not None:  # per-element outputs of elements with dot products
        return "tile"
    widest = max((sizes or {}).get(s.size, s.size if isinstance(s.size, int) else 0) for s in vectors)
    return "split_lanes" if length >= 1024 and rows <= 4096 and widest <= 256 else "lanes"
