"""Tensor-core intrinsics for generated CUDA kernels (sm_80 and later; e4m3 widening sm_89 and later): the ``mma``,
``columns_mma`` and ``wgmma`` strategies.

``cp_async16`` copies 16 bytes from global to
shared memory without passing through registers (``cp.async.cg``; a source size of 0 fills zeros), grouped
by ``cp_commit`` and awaited by ``cp_wait0`` … ``cp_wait4`` (all but the newest 0 … 4 groups complete); ``ldsm_x4``/``ldsm_x4_t`` load four 8×8 matrices
of 16-bit values from shared memory into the warp's fragments (``ldmatrix``, plain or transposed; lane ``l``
gives the address of row ``l % 8`` of matrix ``l // 8``); ``mma_bf16``/``mma_f16`` multiply-accumulate a
16×16 by 16×8 tile into float32 (``mma.sync.aligned.m16n8k16.row.col``). With ``g = lane >> 2`` and
``t = lane & 3``, the A fragment's words hold ``(g, 2t)``, ``(g + 8, 2t)``, ``(g, 2t + 8)``, ``(g + 8, 2t + 8)``
(each with the next column in its upper half), the B fragment's ``k = 2t`` and ``2t + 8`` (with ``k + 1``) of
column ``g``, and the accumulators ``(g, 2t)``, ``(g, 2t + 1)``, ``(g + 8, 2t)``, ``(g + 8, 2t + 1)``.
``pack_*x2``/``unpack_*x2`` round two float32 into one such word and widen it back. ``ldsm_*`` and
``mma_*`` are warp-collective: every lane of the warp calls them together.

Fragments straight from global memory (``columns_mma``): ``ld_w4_at`` reads 16 bytes as 32-bit words from an
element offset (non-coherent), ``ld_w4_stream_at`` the same without keeping the line in L1 (data read
once), ``ld_w2_stream_at`` its 8 bytes, ``st_w2_at`` stores two words; ``e4m3_pairs`` and ``b16_pairs`` make the
operands' words (a column's rows ``k`` and ``k + 1``) from two rows' words, e4m3 bytes widened to float16 exactly.

Built on the helpers of :mod:`.lowering` (pointers, packing, the simulator switch); like those, each name is
an inlined intrinsic on CUDA and a Python stand-in under the simulator. The warp-collective stand-ins meet
their warp's other lanes at a barrier of 32 threads (the simulator runs a Python thread per CUDA thread) and
compute the warp's result from all lanes' operands, as the PTX ISA defines it. The ``cp.async`` stand-ins keep each
thread's copies pending (:mod:`.sim_async`, which also tracks ``wgmma``'s reads) until the ``cp_wait<n>`` that covers their group, so a kernel that reads a stage before
waiting for it reads stale data in the simulator too (a wait one group short fails the tests; it passed them when
copies landed at once). Hopper's warpgroup instructions
(``wgmma``) are in :mod:`.warpgroup`, built on the helpers here and exported from here as well.
"""

from __future__ import annotations

import threading

import numpy as np
from llvmlite import ir
from numba import types

from .formats import _f32, bf16_bits, e4m3_values, f16_bits
from .lowering import (SIMULATOR, _B16, _B16_TYPES, _F16, _U8, _asm, _bf16_pair, _check, _device, _elements, _number,
                       _pack, _pointer, _side_effect, _span, _vector)

from .sim_async import _shared_flat, _sim_check_write, _sim_stage

if not SIMULATOR:
    from .lowering import TypingError

__all__ = ["cp_async16", "cp_async16_at", "e4m3_pairs", "e4m3_halves", "b16_pairs", "ld_w4_at", "ld_w4_stream_at", "ld_w2_stream_at",
           "st_w2_at", "st_w4_at", "lds_w4", "sts_w4",
           "prefetch_l2_at", "grid_wait", "grid_launch", "cp_commit", "cp_wait0", "cp_wait1", "cp_wait2", "cp_wait3", "cp_wait4", "ldsm_x4", "ldsm_x4_t", "mma_bf16", "mma_f16",
           "pack_bf16x2", "pack_f16x2", "unpack_bf16x2", "unpack_f16x2", "swizzle_pad", "wgmma_desc", "wgmma_ss_bf16",
           "wgmma_ss_f16", "wgmma_sst_bf16", "wgmma_sst_f16", "wgmma_rs_bf16", "wgmma_rs_f16", "wgmma_rsk_bf16", "wgmma_rsk_f16", "wgmma_ss_e4m3", "wgmma_fence",
           "wgmma_commit", "wgmma_wait0", "wgmma_wait1", "wgmma_hold",
           "fence_async", "bar_sync", "bar_arrive", "bar_red_or", "regs_give", "regs_take", "regs_give40", "regs_take232", "warp_sync",
           "cluster_check", "cluster_sync", "ld_cluster_f32", "ld_cluster_f32x4", "sts_f32x2"]


# --------------------------------------------------------------------------------------------------
# Simulator stand-ins
# --------------------------------------------------------------------------------------------------
def _sim_cp_async16(s, sidx, a, row, col, nbytes):
    def source():
        if getattr(a, "_ary", a).dtype.itemsize == 1:  # 16 bytes: sixteen e4m3
            return _span(a, row, col, 16, _U8).view(np.uint16)
        return _span(a, row, col, 8, _B16 + _F16).view(np.uint16)
    _sim_stage("cp_async16", s, sidx, source, nbytes)


#: What the flat-offset accesses take (16-bit values, bytes, words): NumPy's names, numba's types.
_FLAT = _B16 + _F16 + _U8 + ("uint32",)
_FLAT_TYPES = _B16_TYPES + (types.float16, types.uint8, types.int8, types.uint32)


def _sim_flat(name, a, offset, size, kinds=_FLAT):
    """The ``size`` bytes from element ``offset`` of ``a`` (counted in row-major order) as a NumPy byte view, checking
    what the GPU does not: the array, the bounds and the alignment of the address to ``size``."""
    ary = getattr(a, "_ary", a)
    if not ary.flags.c_contiguous or ary.dtype.name not in kinds:
        raise TypeError(f"{name}: need a C-contiguous array of {'/'.join(kinds)}, got {ary.dtype} {ary.shape}")
    flat, at = ary.reshape(-1).view(np.uint8), int(offset) * ary.itemsize
    if (ary.ctypes.data + at) % size or not 0 <= at <= flat.size - size:
        raise IndexError(f"{name}: element {offset} is misaligned or outside an array of {ary.size}")
    return flat[at:at + size]


def _sim_ld_w4_at(a, offset):
    return tuple(np.uint32(w) for w in _sim_flat("ld_w4_at", a, offset, 16).view(np.uint32))


def _sim_ld_w2_at(a, offset):
    return tuple(np.uint32(w) for w in _sim_flat("ld_w2_stream_at", a, offset, 8).view(np.uint32))


def _sim_st_words(name):
    def store(a, offset, *words):
        _sim_flat(name, a, offset, 4 * len(words), _B16 + _F16 + _U8).view(np.uint32)[:] = [np.uint32(int(w))
                                                                                             for w in words]
    return store


def _sim_e4m3_pairs(lo, hi):
    a, b = np.array([lo], np.uint32).view(np.uint8), np.array([hi], np.uint32).view(np.uint8)
    wide = f16_bits(e4m3_values(np.stack([a, b], axis=1).reshape(-1)))  # (lo, hi) of byte 0, of byte 1, …
    return tuple(_words(wide[2 * c:2 * c + 2]) for c in range(4))


def _sim_e4m3_halves(word):
    wide = f16_bits(e4m3_values(np.array([word], np.uint32).view(np.uint8)))  # bytes 0 … 3 as float16
    return _words(wide[0:2]), _words(wide[2:4])


def _sim_b16_pairs(lo, hi):
    lo, hi = int(lo), int(hi)
    return np.uint32((lo & 0xFFFF) | ((hi & 0xFFFF) << 16)), np.uint32((lo >> 16) | (hi & 0xFFFF0000))


def _sim_cp_async16_at(s, sidx, a, offset, nbytes):
    n = int(nbytes)
    if n in (0, 16):
        _sim_flat("cp_async16_at", a, offset, 16)  # (checked whether or not it reads)
        _sim_stage("cp_async16_at", s, sidx, lambda: _sim_flat("cp_async16_at", a, offset, 16).view(np.uint16), n)
        return
    if not 0 < n < 16 or n % 2:
        raise ValueError(f"cp_async16_at: {n} bytes to copy (0 to 16, whole 16-bit values)")
    # the first n bytes copied, the rest of the 16 zeros (the instruction's source size); only those n read
    ary = getattr(a, "_ary", a)
    _sim_flat("cp_async16_at", a, offset, 2)  # (the array, and its first value inside it)
    at = int(offset) * ary.itemsize
    if (ary.ctypes.data + at) % 16 or at + n > ary.nbytes:
        raise IndexError(f"cp_async16_at: element {offset} is misaligned, or {n} bytes from it leave the array")
    chunk = np.zeros(16, np.uint8)
    chunk[:n] = ary.reshape(-1).view(np.uint8)[at:at + n]
    _sim_stage("cp_async16_at", s, sidx, lambda: chunk.view(np.uint16), 16)


def _sim_shared_chunk(name, s, idx):
    flat = _shared_flat(s).view(np.uint16)
    if int(idx) % 8 or not 0 <= int(idx) <= flat.size - 8:
        raise IndexError(f"{name}: shared index {idx} is misaligned or outside {flat.size} 16-bit values")
    return flat[int(idx):int(idx) + 8].view(np.uint32)


def _sim_lds_w4(s, idx):
    return tuple(np.uint32(w) for w in _sim_shared_chunk("lds_w4", s, idx))


def _sim_sts_w4(s, idx, w0, w1, w2, w3):
    chunk = _sim_shared_chunk("sts_w4", s, idx)
    _sim_check_write("sts_w4", _shared_flat(s), 2 * int(idx))
    chunk[:] = [np.uint32(int(w)) for w in (w0, w1, w2, w3)]


def _words(halves) -> np.uint32:
    return np.uint32(int(halves[0]) | (int(halves[1]) << 16))


def _sim_pack(bits):
    def pack(lo, hi):
        return _words(bits(_f32([lo, hi])))
    return pack


def _sim_unpack(kind):
    def unpack(w):
        halves = np.array([int(w) & 0xFFFF, int(w) >> 16], np.uint16)
        if kind == "bf16":
            return tuple((halves.astype(np.uint32) << 16).view(np.float32))
        return tuple(halves.view(np.float16).astype(np.float32))
    return unpack


_WARPS: dict = {}
_WARPS_LOCK = threading.Lock()


class _CombineFailed:
    """A warp collective's ``combine`` that raised: each lane raises its error."""

    def __init__(self, error: BaseException):
        self.error = error


class _LaneBarrier:
    """A barrier of ``n`` lanes whose last arrival runs ``action`` before any lane leaves. Each waiting lane blocks on
    a lock of its own, released by the last arrival: the lanes wake at once, where ``threading.Barrier``'s wake one
    after another through its condition's lock (a simulated ``mma`` of four warps: 4.3 -> 2.6 ms a warp; three of the
    tensor-core tests: 30.7 -> 27.1 s). ``timeout`` seconds without the last lane: the barrier is broken, and every
    waiting lane raises."""

    def __init__(self, n: int, action, timeout: float):
        self.n, self.action, self.timeout = n, action, timeout
        self.lock = threading.Lock()
        self.waiting: list = []
        self.broken = False

    def wait(self) -> None:
        with self.lock:
            if self.broken:
                raise threading.BrokenBarrierError
            if len(self.waiting) == self.n - 1:  # the last lane: the action, then every lane released
                lanes, self.waiting = self.waiting, []
                try:
                    self.action()
                finally:
                    for lane in lanes:
                        lane.release()
                return
            mine = threading.Lock()
            mine.acquire()
            self.waiting.append(mine)
        if not mine.acquire(timeout=self.timeout):
            with self.lock:
                self.broken = True
                for lane in self.waiting:
                    lane.release()
                self.waiting = []
            raise threading.BrokenBarrierError
        if self.broken:
            raise threading.BrokenBarrierError


def _warp_meeting():
    """A warp's meeting point: a barrier of its 32 lanes whose last arrival computes lane 0's ``combine`` of the
    lanes' values before any lane leaves (one wait a collective; a lane reads the result before it can arrive at the
    next collective, whose combine runs only once every lane has)."""
    slots, result, pending = [None] * 32, [None], [None]

    def combine():
        try:
            result[0] = pending[0](list(slots))
        except Exception as err:  # noqa: BLE001 - raised by every lane below
            result[0] = _CombineFailed(err)
    return _LaneBarrier(32, combine, 120), slots, result, pending


def _warp_collective(value, combine):
    """``combine(values of lanes 0..31)[lane]``: the lanes of this thread's warp meet at a barrier."""
    me = threading.current_thread()  # the simulator's thread of this CUDA thread
    tid, block = me.thread_id, me.blockIdx
    key = (block.x, block.y, block.z, tid // 32)
    entry = _WARPS.get(key)
    if entry is None or entry[0].broken:
        with _WARPS_LOCK:  # (the warp's lanes arrive together: one meeting point for all of them)
            entry = _WARPS.get(key)
            if entry is None or entry[0].broken:
                entry = _WARPS[key] = _warp_meeting()
    barrier, slots, result, pending = entry
    slots[tid % 32] = value
    if tid % 32 == 0:
        pending[0] = combine
    barrier.wait()
    out = result[0]
    if isinstance(out, _CombineFailed):
        raise out.error
    return out[tid % 32]


def _sim_ldsm(transposed):
    def ldsm(s, idx):
        if int(idx) % 8:
            raise ValueError(f"ldmatrix: the row address (16-bit index {idx}) must be 16-byte aligned")
        if not 0 <= int(idx) <= _shared_flat(s).view(np.uint16).size - 8:
            raise IndexError(f"ldmatrix: the row at 16-bit index {idx} is outside the shared array")

        def combine(slots):
            out = []
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                regs = []
                for m in range(4):  # matrix m: row r's address from lane 8m + r
                    if transposed:  # rows 2t, 2t + 1 of column g
                        pair = [slots[8 * m + 2 * t + k][0][slots[8 * m + 2 * t + k][1] + g] for k in range(2)]
                    else:  # row g, columns 2t, 2t + 1
                        flat, at = slots[8 * m + g]
                        pair = [flat[at + 2 * t], flat[at + 2 * t + 1]]
                    regs.append(_words(pair))
                out.append(tuple(regs))
            return out
        return _warp_collective((_shared_flat(s).view(np.uint16), int(idx)), combine)
    return ldsm


def _sim_mma(kind):
    widen = _sim_unpack(kind)

    def mma(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        def combine(slots):
            A, B, C = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8))
            for lane, (a, b, c) in enumerate(slots):
                g, t = lane >> 2, lane & 3
                for r in range(4):
                    A[g + 8 * (r & 1), 2 * t + 8 * (r >> 1):2 * t + 8 * (r >> 1) + 2] = widen(a[r])
                for r in range(2):
                    B[2 * t + 8 * r:2 * t + 8 * r + 2, g] = widen(b[r])
                for r in range(4):
                    C[g + 8 * (r >> 1), 2 * t + (r & 1)] = c[r]
            D = _f32(A @ B + C)
            return [tuple(D[(lane >> 2) + 8 * (r >> 1), 2 * (lane & 3) + (r & 1)] for r in range(4))
                    for lane in range(32)]
        return _warp_collective(((a0, a1, a2, a3), (b0, b1), (c0, c1, c2, c3)), combine)
    return mma


# --------------------------------------------------------------------------------------------------
# CUDA: cp.async, ldmatrix, mma.sync (warp-collective) as inline PTX
# --------------------------------------------------------------------------------------------------
def _shared_address(context, builder, aty, aval, ity, idx):
    """The 32-bit shared-memory address of ``s[idx]`` (a 1-D shared array)."""
    ary = context.make_array(aty)(context, builder, aval)
    p = builder.gep(ary.data, [context.cast(builder, idx, ity, types.intp)], inbounds=True)
    return builder.ptrtoint(builder.addrspacecast(p, ir.PointerType(p.type.pointee, 3)), ir.IntType(32))


class _Sig:
    """The part of a signature that :func:`_pointer` reads (``args``: array, row, column)."""

    def __init__(self, args):
        self.args = args


def _check_shared(name, s, idx):
    if not (isinstance(s, types.Array) and s.ndim == 1 and s.dtype in _B16_TYPES + (types.float16,)
            and isinstance(idx, types.Integer)):
        raise TypingError(f"{name}: needs a 1-D shared array of 16-bit values and an integer index, got {s}, {idx}")


@_device(_sim_cp_async16)
def cp_async16(typingctx, s, sidx, a, row, col, nbytes):
    """Copy the 16 bytes at ``a[row, col]`` (eight 16-bit values, or sixteen bytes) to ``s[sidx:sidx+8]`` (``cp.async.cg.shared.global``;
    ``nbytes`` 16, or 0 to fill zeros without reading). Both addresses 16-byte aligned; complete after
    ``cp_commit`` and a ``cp_wait*`` that covers its group (and a barrier, for the other threads' copies)."""
    _check_shared("cp_async16", s, sidx)
    _check("cp_async16", a, _B16_TYPES + (types.float16, types.uint8, types.int8), row, col)
    if not isinstance(nbytes, types.Integer):
        raise TypingError(f"cp_async16: the source size must be an integer, got {nbytes}")

    def codegen(context, builder, sig, args):
        return _cp_async(context, builder, sig, args, _pointer(context, builder, _Sig(sig.args[2:5]), args[2:5],
                                                               ir.IntType(16)))
    return types.void(s, sidx, a, row, col, nbytes), codegen


def _cp_async(context, builder, sig, args, src):
    """``cp.async.cg`` of 16 bytes from global ``src`` to ``s[sidx]`` (the first two arguments), the source size the
    last."""
    dst = _shared_address(context, builder, sig.args[0], args[0], sig.args[1], args[1])
    size = context.cast(builder, args[-1], sig.args[-1], types.int32)
    _side_effect(builder, "cp.async.cg.shared.global [$0], [$1], 16, $2;", "r,l,r", [dst, src, size])
    return context.get_dummy_value()


@_device(_sim_cp_async16_at)
def cp_async16_at(typingctx, s, sidx, a, offset, nbytes):
    """``cp_async16`` from element ``offset`` of ``a`` (16-bit values, bytes or 32-bit words) counted in row-major order (any number
    of dimensions): the address is ``a``'s data plus ``offset`` elements, so successive copies a constant number of
    elements apart differ by a constant, which the instruction takes as an immediate offset (no index arithmetic per
    copy)."""
    _check_shared("cp_async16_at", s, sidx)
    _check_flat("cp_async16_at", a, offset=offset, **{"source size": nbytes})

    def codegen(context, builder, sig, args):
        return _cp_async(context, builder, sig, args, _flat_pointer(context, builder, sig, args, 2, ir.IntType(16)))
    return types.void(s, sidx, a, offset, nbytes), codegen


def _check_flat(name, a, dtypes=_FLAT_TYPES, **integers):
    """Refuse an array that is not C-contiguous of ``dtypes`` and arguments (by what they are) that are not integers."""
    if not (isinstance(a, types.Array) and a.layout == "C" and a.dtype in dtypes):
        raise TypingError(f"{name}: needs a C-contiguous array of {'/'.join(map(str, dtypes))}, got {a}")
    for what, v in integers.items():
        if not isinstance(v, types.Integer):
            raise TypingError(f"{name}: the {what} must be an integer, got {v}")


def _check_words(name, *words):
    if not all(isinstance(w, types.Integer) for w in words):
        raise TypingError(f"{name}: needs {len(words)} 32-bit words, got {', '.join(map(str, words))}")


def _flat_pointer(context, builder, sig, args, at, element):
    """``&a[offset]`` in the global space as a pointer to ``element``: ``a`` and its element offset (row-major, any
    number of dimensions) are arguments ``at`` and ``at + 1``."""
    ary = context.make_array(sig.args[at])(context, builder, args[at])
    p = builder.gep(ary.data, [context.cast(builder, args[at + 1], sig.args[at + 1], types.intp)], inbounds=True)
    return builder.addrspacecast(builder.bitcast(p, element.as_pointer()), element.as_pointer(1))


def _words_load(name, stream, words=4):
    """``name``: the ``4 words`` bytes from an element offset as ``words`` words, one non-coherent load; ``stream``:
    not kept in L1."""
    def typer(typingctx, a, offset):
        _check_flat(name, a, offset=offset)
        rt = types.UniTuple(types.uint32, words)

        def codegen(context, builder, sig, args):
            i32 = ir.IntType(32)
            if stream:  # (no side effect: the array does not change while the kernel runs: loads may move, merge)
                g = _flat_pointer(context, builder, sig, args, 0, ir.IntType(8))
                outs = ", ".join(f"${k}" for k in range(words))
                out = _asm(builder, ir.LiteralStructType([i32] * words),
                           f"ld.global.nc.L1::no_allocate.v{words}.u32 {{{outs}}}, [${words}];",
                           ",".join(["=r"] * words + ["l"]), [g])
                return context.make_tuple(builder, rt, [builder.extract_value(out, k) for k in range(words)])
            v = builder.load(_flat_pointer(context, builder, sig, args, 0, ir.VectorType(i32, words)), align=4 * words)
            v.set_metadata("invariant.load", builder.module.add_metadata([]))  # ld.global.nc
            return context.make_tuple(builder, rt, _elements(builder, v))
        return rt(a, offset), codegen
    typer.__name__ = typer.__qualname__ = name
    return typer


ld_w4_at = _device(_sim_ld_w4_at)(_words_load("ld_w4_at", False))
ld_w4_at.__doc__ = """The 16 bytes from element ``offset`` of ``a`` (16-bit values, bytes or words; counted in
row-major order over all its dimensions) as four 32-bit words, one non-coherent 128-bit load (``ld.global.nc.v4``;
the array must not change while the kernel runs). The address must be 16-byte aligned."""
ld_w4_stream_at = _device(_sim_ld_w4_at)(_words_load("ld_w4_stream_at", True))
ld_w4_stream_at.__doc__ = """``ld_w4_at`` for data read once: ``ld.global.nc.L1::no_allocate.v4`` (the line is not
kept in L1, where it would evict what the kernel reads again)."""
ld_w2_stream_at = _device(_sim_ld_w2_at)(_words_load("ld_w2_stream_at", True, 2))
ld_w2_stream_at.__doc__ = """``ld_w4_stream_at``'s 8 bytes: two words, ``ld.global.nc.L1::no_allocate.v2`` (the
address 8-byte aligned)."""


def _sim_prefetch_l2_at(a, offset):
    _sim_flat("prefetch_l2_at", a, offset, 1)  # (the bounds: the GPU does not fault on a prefetch, the simulator does)


@_device(_sim_prefetch_l2_at)
def prefetch_l2_at(typingctx, a, offset):
    """Bring the cache line of element ``offset`` of ``a`` (counted in row-major order) into L2 (``prefetch.global.L2``):
    a kernel waiting for the one before it (:func:`grid_wait`) streams the data it reads anyway meanwhile."""
    _check_flat("prefetch_l2_at", a, offset=offset)

    def codegen(context, builder, sig, args):
        _side_effect(builder, "prefetch.global.L2 [$0];", "l", [_flat_pointer(context, builder, sig, args, 0,
                                                                              ir.IntType(8))])
        return context.get_dummy_value()
    return types.void(a, offset), codegen


def _words_store(name, words):
    """``name``: ``words`` 32-bit words into the ``4 words`` bytes from an element offset (16-bit values or bytes,
    counted in row-major order), one store (``st.global.v{words}``); the address aligned to its size."""
    def typer(typingctx, a, offset, *ws):
        _check_flat(name, a, _B16_TYPES + (types.float16, types.uint8), offset=offset)
        if len(ws) != words:
            raise TypingError(f"{name}: needs {words} words, got {len(ws)}")
        _check_words(name, *ws)

        def codegen(context, builder, sig, args):
            vec = _vector(builder, [context.cast(builder, v, t, types.uint32) for v, t in zip(args[2:], sig.args[2:])])
            builder.store(vec, _flat_pointer(context, builder, sig, args, 0, vec.type), align=4 * words)
            return context.get_dummy_value()
        return types.void(a, offset, *ws), codegen
    typer.__name__ = typer.__qualname__ = name
    return typer


def _st_w2_at(typingctx, a, offset, w0, w1):
    return _words_store("st_w2_at", 2)(typingctx, a, offset, w0, w1)


def _st_w4_at(typingctx, a, offset, w0, w1, w2, w3):
    return _words_store("st_w4_at", 4)(typingctx, a, offset, w0, w1, w2, w3)


_st_w2_at.__name__ = _st_w2_at.__qualname__ = "st_w2_at"
_st_w4_at.__name__ = _st_w4_at.__qualname__ = "st_w4_at"
st_w2_at = _device(_sim_st_words("st_w2_at"))(_st_w2_at)
st_w2_at.__doc__ = """Two 32-bit words into the 8 bytes from element ``offset`` of ``a`` (16-bit values or bytes, counted
in row-major order), one store (``st.global.v2``); the address 8-byte aligned."""
st_w4_at = _device(_sim_st_words("st_w4_at"))(_st_w4_at)
st_w4_at.__doc__ = """``st_w2_at``'s four words: 16 bytes, one store (``st.global.v4``), the address 16-byte aligned."""


#: ``e4m3_pairs``' PTX: the bytes of the two words interleaved by ``prmt`` (selector nibbles pick bytes 0-3 of the
#: first word, 4-7 of the second), each 16-bit half widened to a word of two float16.
E4M3_PAIRS_PTX = ("{.reg .b32 p<2>; .reg .b16 h<4>; "
                  "prmt.b32 p0, $4, $5, 0x5140; prmt.b32 p1, $4, $5, 0x7362; "
                  "mov.b32 {h0, h1}, p0; mov.b32 {h2, h3}, p1; "
                  + " ".join(f"cvt.rn.f16x2.e4m3x2 ${k}, h{k};" for k in range(4)) + "}")


@_device(_sim_e4m3_pairs)
def e4m3_pairs(typingctx, lo, hi):
    """Four columns' ``mma`` B words from two words of e4m3 bytes: ``lo`` holds row ``k``'s bytes of columns
    ``c … c + 3``, ``hi`` row ``k + 1``'s; word ``j`` is column ``c + j``'s pair as float16 (row ``k`` in the low
    half), interleaved by ``prmt`` and widened exactly by ``cvt.rn.f16x2.e4m3x2`` (sm_89 and later)."""
    _check_words("e4m3_pairs", lo, hi)
    rt = types.UniTuple(types.uint32, 4)

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        words = [context.cast(builder, v, t, types.uint32) for v, t in zip(args, sig.args)]
        out = _asm(builder, ir.LiteralStructType([i32] * 4), E4M3_PAIRS_PTX, ",".join(["=r"] * 4 + ["r"] * 2), words)
        return context.make_tuple(builder, rt, [builder.extract_value(out, k) for k in range(4)])
    return rt(lo, hi), codegen


#: ``e4m3_halves``' PTX: the word's two 16-bit halves, each widened to a word of two float16 (the low byte low).
E4M3_HALVES_PTX = ("{.reg .b16 h<2>; mov.b32 {h0, h1}, $2; "
                   "cvt.rn.f16x2.e4m3x2 $0, h0; cvt.rn.f16x2.e4m3x2 $1, h1;}")


@_device(_sim_e4m3_halves)
def e4m3_halves(typingctx, word):
    """A word of four e4m3 bytes as two words of two float16: bytes 0 and 1 (byte 0 in the low half), then bytes 2
    and 3, widened exactly by ``cvt.rn.f16x2.e4m3x2`` (sm_89 and later) — a column's four consecutive elements of K-major
    weights as its ``mma`` A words."""
    _check_words("e4m3_halves", word)
    rt = types.UniTuple(types.uint32, 2)

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        w = context.cast(builder, args[0], sig.args[0], types.uint32)
        out = _asm(builder, ir.LiteralStructType([i32] * 2), E4M3_HALVES_PTX, "=r,=r,r", [w])
        return context.make_tuple(builder, rt, [builder.extract_value(out, k) for k in range(2)])
    return rt(word), codegen


@_device(_sim_b16_pairs)
def b16_pairs(typingctx, lo, hi):
    """Two columns' ``mma`` B words from two words of 16-bit values: ``lo`` holds row ``k``'s columns ``c`` and
    ``c + 1``, ``hi`` row ``k + 1``'s; word ``j`` is column ``c + j``'s pair (row ``k`` in the low half), by
    ``prmt``."""
    _check_words("b16_pairs", lo, hi)
    rt = types.UniTuple(types.uint32, 2)

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        a, b = (context.cast(builder, v, t, types.uint32) for v, t in zip(args, sig.args))
        pairs = [_asm(builder, i32, f"prmt.b32 $0, $1, $2, {sel};", "=r,r,r", [a, b]) for sel in ("0x5410", "0x7632")]
        return context.make_tuple(builder, rt, pairs)
    return rt(lo, hi), codegen


def _ldsm(name, transposed):
    suffix = ".trans" if transposed else ""

    def typer(typingctx, s, idx):
        _check_shared(name, s, idx)
        rt = types.UniTuple(types.uint32, 4)

        def codegen(context, builder, sig, args):
            address = _shared_address(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            words = ir.LiteralStructType([ir.IntType(32)] * 4)
            out = _side_effect(builder, f"ldmatrix.sync.aligned.m8n8.x4{suffix}.shared.b16 {{$0, $1, $2, $3}}, [$4];",
                               "=r,=r,=r,=r,r", [address], words)
            return context.make_tuple(builder, rt, [builder.extract_value(out, k) for k in range(4)])
        return rt(s, idx), codegen
    typer.__name__ = typer.__qualname__ = name
    return typer


@_device(_sim_lds_w4)
def lds_w4(typingctx, s, idx):
    """The 16 bytes at ``s[idx]`` (a 16-bit shared array; ``idx`` a multiple of 8) as four 32-bit words, one
    ``ld.shared.v4.u32`` (ordered with the other memory instructions: after a ``cp.async`` wait)."""
    _check_shared("lds_w4", s, idx)
    rt = types.UniTuple(types.uint32, 4)

    def codegen(context, builder, sig, args):
        address = _shared_address(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        words = ir.LiteralStructType([ir.IntType(32)] * 4)
        out = _side_effect(builder, "ld.shared.v4.u32 {$0, $1, $2, $3}, [$4];", "=r,=r,=r,=r,r", [address], words)
        return context.make_tuple(builder, rt, [builder.extract_value(out, k) for k in range(4)])
    return rt(s, idx), codegen


@_device(_sim_sts_w4)
def sts_w4(typingctx, s, idx, w0, w1, w2, w3):
    """Four 32-bit words into the 16 bytes at ``s[idx]`` (a 16-bit shared array; ``idx`` a multiple of 8), one
    ``st.shared.v4.u32`` (ordered with the other memory instructions: before a proxy fence)."""
    _check_shared("sts_w4", s, idx)
    _check_words("sts_w4", w0, w1, w2, w3)

    def codegen(context, builder, sig, args):
        address = _shared_address(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        words = [context.cast(builder, v, t, types.uint32) for v, t in zip(args[2:], sig.args[2:])]
        _side_effect(builder, "st.shared.v4.u32 [$0], {$1, $2, $3, $4};", "r,r,r,r,r", [address, *words])
        return context.get_dummy_value()
    return types.void(s, idx, w0, w1, w2, w3), codegen


ldsm_x4 = _device(_sim_ldsm(False))(_ldsm("ldsm_x4", False))
ldsm_x4.__doc__ = """Four 8×8 matrices of 16-bit values from shared memory (``ldmatrix.x4``): lane ``l`` gives the
address ``s[idx]`` of row ``l % 8`` of matrix ``l // 8`` (16-byte aligned) and receives, in word ``m``, row
``l >> 2``, columns ``2 (l & 3)`` and ``+ 1`` of matrix ``m``."""
ldsm_x4_t = _device(_sim_ldsm(True))(_ldsm("ldsm_x4_t", True))
ldsm_x4_t.__doc__ = """``ldsm_x4`` transposed (``ldmatrix.x4.trans``): word ``m`` holds rows ``2 (l & 3)`` and ``+ 1`` of
column ``l >> 2`` of matrix ``m`` — the B fragment of a row-major ``[k][n]`` operand."""


def _mma(name, kind):
    def typer(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        rt = types.UniTuple(types.float32, 4)

        def codegen(context, builder, sig, args):
            i32, f32 = ir.IntType(32), ir.FloatType()
            words = [context.cast(builder, v, t, types.uint32) for v, t in zip(args[:6], sig.args[:6])]
            accs = [context.cast(builder, v, t, types.float32) for v, t in zip(args[6:], sig.args[6:])]
            fnty = ir.FunctionType(ir.LiteralStructType([f32] * 4), [i32] * 6 + [f32] * 4)
            asm = ir.InlineAsm(fnty, f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 {{$0, $1, $2, $3}}, "
                                     "{$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
                               "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f")
            out = builder.call(asm, words + accs)
            return context.make_tuple(builder, rt, [builder.extract_value(out, k) for k in range(4)])
        return rt(types.uint32, types.uint32, types.uint32, types.uint32, types.uint32, types.uint32,
                  types.float32, types.float32, types.float32, types.float32), codegen
    typer.__name__ = typer.__qualname__ = name
    return typer


mma_bf16 = _device(_sim_mma("bf16"))(_mma("mma_bf16", "bf16"))
mma_bf16.__doc__ = """``(d0, d1, d2, d3) = A·B + C`` on bfloat16 fragments (``mma.sync.aligned.m16n8k16``, float32
accumulators); A in four words, B in two, C and D in the accumulator layout of the module's notes."""
mma_f16 = _device(_sim_mma("f16"))(_mma("mma_f16", "f16"))
mma_f16.__doc__ = """``mma_bf16`` on float16 fragments."""


def _packer(name, kind, bits):
    def typer(typingctx, lo, hi):
        _number(name, lo)
        _number(name, hi)

        def codegen(context, builder, sig, args):
            lo_, hi_ = (context.cast(builder, v, t, types.float32) for v, t in zip(args, sig.args))
            return _pack(builder, kind, lo_, hi_)
        return types.uint32(lo, hi), codegen
    typer.__name__ = typer.__qualname__ = name
    return _device(_sim_pack(bits))(typer)


pack_bf16x2 = _packer("pack_bf16x2", "bf16", bf16_bits)
pack_bf16x2.__doc__ = "Round two float32 to bfloat16 (nearest even) into one word, ``lo`` in the low half."
pack_f16x2 = _packer("pack_f16x2", "f16", lambda x: f16_bits(x))
pack_f16x2.__doc__ = "Round two float32 to float16 (nearest even) into one word, ``lo`` in the low half."


def _unpacker(name, kind):
    def typer(typingctx, w):
        if not isinstance(w, types.Integer):
            raise TypingError(f"{name}: needs a 32-bit word, got {w}")
        rt = types.UniTuple(types.float32, 2)

        def codegen(context, builder, sig, args):
            word = context.cast(builder, args[0], sig.args[0], types.uint32)
            if kind == "bf16":
                halves = _bf16_pair(builder, word)
            else:
                pair = builder.bitcast(word, ir.VectorType(ir.HalfType(), 2))
                halves = [builder.fpext(h, ir.FloatType()) for h in _elements(builder, pair)]
            return context.make_tuple(builder, rt, halves)
        return rt(w), codegen
    typer.__name__ = typer.__qualname__ = name
    return _device(_sim_unpack(kind))(typer)


unpack_bf16x2 = _unpacker("unpack_bf16x2", "bf16")
unpack_bf16x2.__doc__ = "The two bfloat16 of a word as float32 (low half first), exactly."
unpack_f16x2 = _unpacker("unpack_f16x2", "f16")
unpack_f16x2.__doc__ = "The two float16 of a word as float32 (low half first), exactly."


# waits, barriers and the register hand-over live in .sync, and are exported from here too
from .sync import (bar_arrive, bar_red_or, bar_sync, cp_commit, cp_wait0, cp_wait1, cp_wait2, cp_wait3, cp_wait4,  # noqa: E402
                   grid_launch, grid_wait, regs_give, regs_give40, regs_take, regs_take232, warp_sync)

# Hopper's warpgroup instructions live in .warpgroup (built on the helpers above) and are exported from here too
from .warpgroup import (fence_async, swizzle_pad, wgmma_commit, wgmma_desc, wgmma_fence, wgmma_hold,  # noqa: E402
                        wgmma_rs_bf16, wgmma_rs_f16, wgmma_rsk_bf16, wgmma_rsk_f16, wgmma_ss_bf16, wgmma_ss_e4m3,
                        wgmma_ss_f16, wgmma_sst_bf16, wgmma_sst_f16, wgmma_wait0, wgmma_wait1)

# thread-block clusters (their barrier, distributed shared memory) live in .cluster and are exported from here too
from .cluster import cluster_check, cluster_sync, ld_cluster_f32, ld_cluster_f32x4, sts_f32x2  # noqa: E402,F401
