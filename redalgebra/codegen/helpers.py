"""Device helpers shared by every generated module (source text, decorated per back end)."""

import os

#: A module's kernels kept compiled by numba's disk cache beside the module's file, where that folder is the user's
#: own (``runtime.cache.numba_cache``): a restarted process loads them instead of compiling them again (a CUDA
#: module's for 10-25 s, a CPU one's ``njit(parallel=True)`` for seconds). The simulator's kernels take no options.
CACHE_LINE = ("from redalgebra.runtime.cache import numba_cache\n"
              "CACHE = numba_cache(globals().get('__file__'))")


def cpu_header() -> tuple[list, str, str]:
    """A CPU module's header lines, its device functions' decorator and its kernels' decorator. The kernels are
    ``njit(parallel=True)``, their rows spread over the cores by ``prange``; ``REDALGEBRA_CPU_PARALLEL=0`` compiles
    them serial instead (``prange`` runs as ``range``: the same code a row, on one core), which compiles in about a
    third of the time (1.25 s against 0.35-0.5 s a catalogue kernel on a 2-core machine). The choice is in the
    source text, so the two builds are two cached modules."""
    parallel = os.environ.get("REDALGEBRA_CPU_PARALLEL", "1") != "0"
    # IEEE division everywhere (x / 0 is inf or nan, as on the GPU): numba's parallel loops are built so, its other
    # code raises ZeroDivisionError unless told
    return (["from numba import njit, prange, float32, int32", CACHE_LINE], "njit(cache=False, error_model='numpy')",
            f"njit(parallel={parallel}, fastmath=False, error_model='numpy', cache=CACHE)")


#: CUDA modules under the simulator: ``math.exp`` past float64's range gives inf, as float32's does on the GPU, rather
#: than raising (``runtime.lowering.SIM_MATH``).
SIM_MATH_LINES = ["if config.ENABLE_CUDASIM:",
                  "    from redalgebra.runtime.lowering import SIM_MATH as math  # noqa: F811"]

HELPERS = '''
@{device}
def rt_max(a, b):
    """The larger of a and b, NaN when either is NaN (as NumPy's maximum; Python's max drops a NaN)."""
    return a if a > b or a != a else b


@{device}
def rt_min(a, b):
    """The smaller of a and b, NaN when either is NaN."""
    return a if a < b or a != a else b


@{device}
def rt_log(x):
    """log with IEEE results at the edges (log 0 = -inf, log of a negative = nan) on every target."""
    if x > _FP8_ZERO:
        return math.log(x)
    return NEG_INF if x == _FP8_ZERO else NAN


@{device}
def rt_sqrt(x):
    """sqrt with sqrt of a negative = nan on every target (the simulator's math.sqrt raises)."""
    return math.sqrt(x) if x >= _FP8_ZERO else NAN


@{device}
def rt_log1p(x):
    """log1p with IEEE results at the edges (log1p(-1) = -inf, below -1 nan) on every target (the simulator's
    math.log1p raises)."""
    if x > -_FP8_ONE:
        return math.log1p(x)
    return NEG_INF if x == -_FP8_ONE else NAN


@{device}
def rt_logaddexp(a, b):
    """log(exp(a) + exp(b)) without forming exp(a) or exp(b) (each overflows float32 past 88): max(a, b) +
    log1p(exp(-|a - b|)); ±inf when the larger is (both -inf, or both inf: their difference would be nan), nan
    when either is."""
    m = a if a > b or a != a else b
    if m == NEG_INF or m == -NEG_INF:
        return m
    return m + math.log1p(math.exp(-abs(a - b)))


@{device}
def rt_floor(x):
    """floor as a float32 (numba's math.floor returns an integer), -0 kept as in NumPy; nan and ±inf stay
    (the simulator's math.floor raises on them)."""
    if not abs(x) < _INTEGRAL:  # nan, ±inf, or so large that it is an integer already
        return x
    return math.copysign(float32(math.floor(x)), x)


@{device}
def rt_round(x):
    """x rounded to the nearest integer, ties to even (NumPy's rint), as a float32 with the sign of x (a
    negative x rounds to -0, not 0); nan and ±inf stay."""
    # from floor(x) and the fraction x - floor(x), both exact: floor(x + 1/2) would round the largest
    # float32 below 1/2 up, as x + 1/2 rounds to 1
    if not abs(x) < _INTEGRAL:
        return x
    f = float32(math.floor(x))
    d = x - f
    if d > _FP8_HALF or (d == _FP8_HALF and f - _FP8_TWO * float32(math.floor(f * _FP8_HALF)) != _FP8_ZERO):
        f += _FP8_ONE
    return math.copysign(f, x)


@{device}
def rt_bf16(u):
    """The float32 value of bfloat16 bits (a uint16 or int16 element), decoded arithmetically."""
    b = int32(u) & 0xFFFF
    sign = -_FP8_ONE if b >= 0x8000 else _FP8_ONE
    e = (b >> 7) & 0xFF
    m = float32(b & 0x7F)
    if e == 0xFF:
        return sign * POS_INF if m == _FP8_ZERO else NAN
    if e == 0:
        return sign * m * _BF16_TINY
    return sign * (_FP8_ONE + m * _BF16_MANT) * math.pow(_FP8_TWO, float32(e - 127))


@{device}
def rt_e4m3(u):
    """The float32 value of an FP8 e4m3 byte (a uint8 or int8 element), decoded arithmetically: exact."""
    b = int32(u) & 0xFF
    sign = -_FP8_ONE if b >= 0x80 else _FP8_ONE
    e = (b >> 3) & 0xF
    m = float32(b & 7)
    if b & 0x7F == 0x7F:
        return NAN
    if e == 0:
        return sign * m * _E4M3_TINY
    return sign * (_FP8_ONE + m * _E4M3_MANT) * math.pow(_FP8_TWO, float32(e - 7))


@{device}
def rt_fp8(x):
    """Round a float32 to the nearest e4m3 value, ties to even, saturating at ±448 (nan stays nan)."""
    if x != x:
        return x
    y = min(max(x, -_FP8_MAX), _FP8_MAX)
    mag = abs(y)
    if mag == _FP8_ZERO:
        return y
    _, e = math.frexp(mag)  # mag = f 2^e with 1/2 <= f < 1: exact, no log2 or pow
    shift = min(1 - e, 6) + 3  # 1/quantum is 2^shift, shift in [-5, 9] (subnormals: the quantum is 2^-9)
    t = y * _FP8_SCALE[shift + 5]  # exact: a power of two
    r = math.floor(t + _FP8_HALF)
    if r - t == _FP8_HALF and r - _FP8_TWO * math.floor(r * _FP8_HALF) != _FP8_ZERO:
        r -= _FP8_ONE
    return r * _FP8_UNSCALE[shift + 5]


@{device}
def rt_topk_insert(vals, idx, v, i):
    """Insert (v, i) into a descending top-k list; ties go to the lower index; -inf means empty.
    NaN ranks above every number, NaNs by index (the reference's order).

    Bubbles the newcomer down with a compare-and-swap at every position: the positions are
    constants once the loop is unrolled, so the list can live in registers (a search for the
    position and a shift by it would index the list at run time, which puts it in local memory).
    """
    if v == NEG_INF:
        return
    for j in range(vals.shape[0]):
        # (v, i) goes before (w, idx[j]): larger; a NaN before a number; equal (or both NaN) and a smaller index.
        # An empty slot (-inf, -1) never equals a newcomer (not -inf), so -1 needs no test. Written with & and |
        # (no short circuit): 215 registers for the router's forced lanes kernel, 255 with 268 bytes spilled
        # written with and/or
        w = vals[j]
        if (v > w) | ((v != v) & (w == w)) | ((i < idx[j]) & ((v == w) | (v != v))):
            tv = vals[j]
            ti = idx[j]
            vals[j] = v
            idx[j] = i
            v = tv
            i = ti


@{device}
def rt_topk_merge(vals, idx, ovals, oidx):
    """Merge another top-k list into (vals, idx)."""
    for j in range(ovals.shape[0]):
        if oidx[j] >= 0:
            rt_topk_insert(vals, idx, ovals[j], oidx[j])
'''

HELPER_CONSTANTS = '''
NEG_INF = np.float32(-np.inf)
POS_INF = np.float32(np.inf)
NAN = np.float32(np.nan)
_FP8_MAX = np.float32(448.0)
_FP8_ZERO = np.float32(0.0)
_FP8_ONE = np.float32(1.0)
_FP8_TWO = np.float32(2.0)
_FP8_HALF = np.float32(0.5)
_FP8_SCALE = np.ldexp(np.float32(1.0), np.arange(-5, 10)).astype(np.float32)  # 2^-5 .. 2^9
_FP8_UNSCALE = np.ldexp(np.float32(1.0), -np.arange(-5, 10)).astype(np.float32)
_INTEGRAL = np.float32(2.0 ** 23)  # from 2**23 on, every float32 is an integer
_BF16_TINY = np.float32(2.0 ** -133)
_BF16_MANT = np.float32(1.0 / 128.0)
_E4M3_TINY = np.float32(2.0 ** -9)
_E4M3_MANT = np.float32(1.0 / 8.0)
_E4M3_BIAS = np.float32(2.0 ** 120)
'''

LANE_HELPERS = '''
@{device}
def rt_lane_sum(v):
    """The sum of ``v`` over the 32 lanes of the warp, in every lane (butterfly of shuffles)."""
    v += cuda.shfl_xor_sync(0xFFFFFFFF, v, 16)
    v += cuda.shfl_xor_sync(0xFFFFFFFF, v, 8)
    v += cuda.shfl_xor_sync(0xFFFFFFFF, v, 4)
    v += cuda.shfl_xor_sync(0xFFFFFFFF, v, 2)
    v += cuda.shfl_xor_sync(0xFFFFFFFF, v, 1)
    return v


@{device}
def rt_lane_sum_shared(v, red, tid):
    """``rt_lane_sum`` through shared memory (no shuffles); every thread of the block must call it."""
    red[tid] = v
    cuda.syncthreads()
    first = tid - tid % 32
    total = red[first]
    for i in range(1, 32):
        total += red[first + i]
    cuda.syncthreads()
    return total
'''

CUDA_HELPERS = '''
if not config.ENABLE_CUDASIM:  # on the GPU, bfloat16 is the high half of a float32: a bit cast, no arithmetic
    _int_as_float = cuda.libdevice.int_as_float

    @cuda.jit(device=True)
    def rt_bf16(u):  # noqa: F811 - replaces the portable decoder above on real devices
        """The float32 value of bfloat16 bits: the bits shifted into the high half, reinterpreted."""
        return _int_as_float(int32((int32(u) & 0xFFFF) << 16))

    @cuda.jit(device=True)
    def rt_e4m3(u):  # noqa: F811 - replaces the portable decoder above on real devices
        """The float32 value of an e4m3 byte: its exponent and mantissa moved into a float32's (a subnormal
        becomes one too), scaled by 2^120 (the biases' difference), NaN for 0x7F/0xFF."""
        if int32(u) & 0x7F == 0x7F:
            return NAN
        return _int_as_float(int32(((int32(u) & 0x80) << 24) | ((int32(u) & 0x7F) << 20))) * _E4M3_BIAS
'''

#: ``fp8(n / d)`` by a row constant ``d`` (``codegen.quotients``' ``Quotient8``, printed by the ``rows`` kernels; the
#: tree modules of the CUDA back ends append these, the simulator's too, so that its tests run the same arithmetic):
#: the float32 quotient ``RN(n / d)`` from ``r = RN(1 / d)``, a row constant, by a product and two corrections with the
#: exact remainder, no division. Why it is exact (no sampling: the checks only confirm it):
#:
#: - ``q0 = RN(n r)`` is within 2^-23 of ``n / d`` relatively (two roundings of relative error below 2^-24);
#: - the remainder ``e0 = RN(n - d q0)`` (one FMA) has relative error at most 2^-24, so ``q1 = RN(q0 + e0 r)`` is
#:   ``RN(n/d + (n/d - q0) g)`` with ``|g| < 2^-22``: within 2^-45 of ``n / d`` before its rounding, so one of the two
#:   float32 neighbours of ``n / d`` (a faithful quotient). (Where ``e0`` is subnormal and off the grid — ``q0`` just
#:   below 2^-11 with ``|d|`` near 2^-92 — its error is at most 2^-150, which ``r`` scales to at most 2^-58: far below
#:   half of ``q1``'s step, so ``q1`` is faithful still.)
#: - Markstein's theorem (IBM J. Res. Develop. 34(1), 1990; the FMA division of the Handbook of Floating-Point
#:   Arithmetic): with ``q1`` faithful and ``r`` within 2^-24 of ``1/d`` relatively, ``e1 = RN(n - d q1)`` is exact and
#:   ``RN(q1 + e1 r)`` is ``RN(n / d)``.
#:
#: The ranges that argument needs: ``|d|`` in [2^-92, 2^100] (``rt_recip8``: ``r`` normal, and every remainder of a
#: quotient of 2^-11 or more on float32's grid, subnormal or not, so exact where the theorem says so); elsewhere ``r``
#: is NaN and the row divides (the ``rows`` kernel tests ``r`` once a row where the values are stored as e4m3
#: bytes, ``rt_q8c`` an element at a time where they are stored wider: each measured faster there). Quotients that
#: matter to e4m3 lie in [2^-11, 2^10): smaller ones round to an e4m3 zero either way (the corrections keep their
#: sign: their error is below half of any nonzero ``|n / d|``), and from ``|q0| >= 2^11`` on (infinities, NaN too)
#: ``q0`` is returned, which saturates to ±448 as the quotient does (every quotient below 2^10 has a ``q0`` below
#: 2^11, so is corrected); a zero ``q0`` is returned too, keeping the sign of
#: ``-0 / d``, which the corrections would lose. So every e4m3 byte is the division's, and the float32 value too
#: wherever the quotient is in [2^-11, 2^10). (``q0`` is not always faithful: it was not for 7 % of 200 M quotients
#: of significands near 2 or uniform; yet ``q1`` was the division for all of them, in an exact model
#: (``benchmarks/quotient_search.py``): a search, not a proof, so the second correction stays: two FMAs an element.)
QUOTIENT_HELPERS = """
_Q8_TINY = np.float32(2.0 ** -92)
_Q8_HUGE = np.float32(2.0 ** 100)
_Q8_BIG = np.float32(2048.0)
_Q8_ZERO = np.float32(0.0)


@cuda.jit(device=True)
def rt_recip8(d):
    \"\"\"1 / d correctly rounded, for rt_q8's quotients by d; NaN where |d| is outside [2^-92, 2^100], which sends them
    to the division.\"\"\"
    m = abs(d)
    if m >= _Q8_TINY and m <= _Q8_HUGE:
        return _FP8_ONE / d
    return NAN


@cuda.jit(device=True)
def rt_q8(n, d, r):
    \"\"\"A float32 that rounds to e4m3 as n / d does, r = rt_recip8(d) not NaN (the kernel divides a row where it is,
    testing r once a row): the product by the reciprocal corrected twice by the remainder.\"\"\"
    q = n * r
    q1 = fma32(fma32(-q, d, n), r, q)
    q2 = fma32(fma32(-q1, d, n), r, q1)
    return q2 if abs(q) < _Q8_BIG and q != _Q8_ZERO else q


@cuda.jit(device=True)
def rt_q8c(n, d, r):
    \"\"\"rt_q8 testing r itself: the division where it is NaN (for values stored wider, whose kernels test it an
    element at a time).\"\"\"
    if r != r:
        return n / d
    return rt_q8(n, d, r)
"""
