"""Tensor-core intrinsics for generated CUDA kernels (sm_80 and later; the ``mma`` strategy).

``cp_async16`` copies 16 bytes from global to
shared memory without passing through registers (``cp.async.cg``; a source size of 0 fills zeros), grouped
by ``cp_commit`` and awaited by ``cp_wait0`` … ``cp_wait4`` (all but the newest 0 … 4 groups complete); ``ldsm_x4``/``ldsm_x4_t`` load four 8×8 matrices
of 16-bit values from shared memory into the warp's fragments (``ldmatrix``, plain or transposed; lane ``l``
gives the address of row ``l % 8`` of matrix ``l // 8``); ``mma_bf16``/``mma_f16`` multiply-accumulate a
16×16 by 16×8 tile into float32 (``mma.sync.aligned.m16n8k16.row.col``). With ``g = lane >> 2`` and
``t = lane & 3``, the A fragment's words hold ``(g, 2t)``, ``(g + 8, 2t)``, ``(g, 2t + 8)``, ``(g + 8, 2t + 8)``
(each with the next column in its upper half), the B fragment's ``k = 2t`` and ``2t + 8`` (with ``k + 1``) of
column ``g``, and the accumulators ``(g, 2t)``, ``(g, 2t + 1)``, ``(g + 8, 2t)``, ``(g + 8, 2t + 1)``.
``pack_*x2``/``unpack_*x2`` round two float32 into one such word and widen it back. These are
warp-collective: every lane of the warp calls them together.

Built on the helpers of :mod:`.intrinsics` (pointers, packing, the simulator switch); like those, each name is
an inlined intrinsic on CUDA and a Python stand-in under the simulator. The warp-collective stand-ins meet
their warp's other lanes at a barrier of 32 threads (the simulator runs a Python thread per CUDA thread) and
compute the warp's result from all lanes' operands, as the PTX ISA defines it.
"""

from __future__ import annotations

import re

import numpy as np
from llvmlite import ir
from numba import types

from .intrinsics import (SIMULATOR, _B16, _B16_TYPES, _F16, _U8, _bf16_pair, _check, _device, _elements, _f32, _number,
                         _pack, _pointer, _span, bf16_bits, e4m3_values, f16_bits)

if not SIMULATOR:
    from .intrinsics import TypingError

__all__ = ["cp_async16", "cp_async16_at", "e4m3_b_frags", "cp_commit", "cp_wait0", "cp_wait1", "cp_wait2", "cp_wait3", "cp_wait4", "ldsm_x4", "ldsm_x4_t", "mma_bf16", "mma_f16",
           "pack_bf16x2", "pack_f16x2", "unpack_bf16x2", "unpack_f16x2", "swizzle_pad", "wgmma_desc", "wgmma_ss_bf16",
           "wgmma_ss_f16", "wgmma_ss_e4m3", "wgmma_sst_bf16", "wgmma_sst_f16", "wgmma_rs_bf16", "wgmma_rs_f16", "wgmma_fence", "wgmma_commit",
           "wgmma_wait0", "wgmma_wait1", "wgmma_hold",
           "fence_async"]


# --------------------------------------------------------------------------------------------------
# Simulator stand-ins
# --------------------------------------------------------------------------------------------------
def _shared_flat(s):
    return np.asarray(getattr(s, "_ary", s)).reshape(-1)


def _sim_stage(name, s, sidx, source, nbytes):
    """A copy's 8 16-bit values (``source()``, read only when ``nbytes`` is 16) into ``s[sidx:sidx+8]``, else zeros."""
    dst = _shared_flat(s).view(np.uint16)
    if int(sidx) % 8 or not 0 <= int(sidx) <= dst.size - 8:
        raise IndexError(f"{name}: shared index {sidx} is misaligned or outside {dst.size} 16-bit values")
    dst[int(sidx):int(sidx) + 8] = source() if int(nbytes) == 16 else 0


def _sim_cp_async16(s, sidx, a, row, col, nbytes):
    def source():
        if getattr(a, "_ary", a).dtype.itemsize == 1:  # 16 bytes: sixteen e4m3
            return _span(a, row, col, 16, _U8).view(np.uint16)
        return _span(a, row, col, 8, _B16 + _F16).view(np.uint16)
    _sim_stage("cp_async16", s, sidx, source, nbytes)


def _sim_e4m3_b_frags(s, idx, pitch):
    flat = _shared_flat(s).view(np.uint16)
    rows = [int(idx) + r * int(pitch) for r in (0, 1, 8, 9)]
    if int(idx) % 2 or int(pitch) % 2 or not (0 <= rows[0] and rows[-1] + 2 <= flat.size):
        raise IndexError(f"e4m3_b_frags: rows from {idx} {pitch} apart are misaligned or outside {flat.size} 16-bit values")
    b = [f16_bits(e4m3_values(flat[r:r + 2].copy().view(np.uint8))) for r in rows]  # 4 columns of each row
    return tuple(_words((b[2 * h][c], b[2 * h + 1][c])) for h in (0, 1) for c in range(4))


def _sim_cp_async16_at(s, sidx, a, offset, nbytes):
    ary = getattr(a, "_ary", a)
    if not ary.flags.c_contiguous or ary.dtype.name not in _B16 + _F16 + _U8 + ("uint32",):
        raise TypeError(f"cp_async16_at: need a C-contiguous array of 16-bit values, bytes or words, got {ary.dtype} "
                        f"{ary.shape}")
    flat, at, n = ary.reshape(-1), int(offset), 16 // ary.itemsize  # elements per 16 bytes

    def source():
        if at % n or not 0 <= at <= flat.size - n:
            raise IndexError(f"cp_async16_at: element {at} is misaligned or outside an array of {flat.size}")
        return flat[at:at + n].view(np.uint16)
    _sim_stage("cp_async16_at", s, sidx, source, nbytes)


def _sim_nothing():
    return None


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


def _warp_collective(value, combine):
    """``combine(values of lanes 0..31)[lane]``: the lanes of this thread's warp meet at a barrier."""
    import threading

    me = threading.current_thread()  # the simulator's thread of this CUDA thread
    tid, block = me.thread_id, me.blockIdx
    key = (block.x, block.y, block.z, tid // 32)
    entry = _WARPS.get(key)
    if entry is None or entry[0].broken:
        entry = _WARPS.setdefault(key, (threading.Barrier(32, timeout=120), [None] * 32, [None]))
    barrier, slots, result = entry
    slots[tid % 32] = value
    barrier.wait()
    if tid % 32 == 0:
        result[0] = combine(list(slots))
    barrier.wait()
    out = result[0][tid % 32]
    barrier.wait()
    return out


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


def _side_effect(builder, text, constraints, operands, result=None):
    """An inline PTX instruction that touches memory (never moved across others that do)."""
    fnty = ir.FunctionType(result or ir.VoidType(), [o.type for o in operands])
    constraints = ",".join(c for c in (constraints, "~{memory}") if c)
    return builder.call(ir.InlineAsm(fnty, text, constraints, side_effect=True), operands)


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
    if not (isinstance(a, types.Array) and a.layout == "C" and a.dtype in _B16_TYPES + (types.float16, types.uint8,
                                                                                         types.int8, types.uint32)):
        raise TypingError(f"cp_async16_at: needs a C-contiguous array of 16-bit values, bytes or words, got {a}")
    for v, what in ((offset, "element offset"), (nbytes, "source size")):
        if not isinstance(v, types.Integer):
            raise TypingError(f"cp_async16_at: the {what} must be an integer, got {v}")

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[2])(context, builder, args[2])
        p = builder.gep(ary.data, [context.cast(builder, args[3], sig.args[3], types.intp)], inbounds=True)
        src = builder.addrspacecast(builder.bitcast(p, ir.IntType(16).as_pointer()), ir.IntType(16).as_pointer(1))
        return _cp_async(context, builder, sig, args, src)
    return types.void(s, sidx, a, offset, nbytes), codegen


#: ``e4m3_b_frags``'s PTX: rows k, k+1, k+8, k+9 at ``$8 … $11``; bytes of rows k and k+1 interleaved by ``prmt``
#: (selector nibbles pick bytes 0-3 of the first word, 4-7 of the second), each 16-bit half widened to a word.
E4M3_FRAGS_PTX = ("{.reg .b32 w<4>, p<4>; .reg .b16 h<8>; "
                  + " ".join(f"ld.shared.b32 w{r}, [${8 + r}];" for r in range(4)) + " "
                  "prmt.b32 p0, w0, w1, 0x5140; prmt.b32 p1, w0, w1, 0x7362; "
                  "prmt.b32 p2, w2, w3, 0x5140; prmt.b32 p3, w2, w3, 0x7362; "
                  + " ".join(f"mov.b32 {{h{2 * k}, h{2 * k + 1}}}, p{k};" for k in range(4)) + " "
                  + " ".join(f"cvt.rn.f16x2.e4m3x2 ${k}, h{k};" for k in range(8)) + "}")


@_device(_sim_e4m3_b_frags)
def e4m3_b_frags(typingctx, s, idx, pitch):
    """``mma``'s B fragments (float16, ``k`` and ``k + 1`` in a word) of four columns from a tile of e4m3 bytes
    staged row-major ``[k][n]``: the four bytes at ``s[idx:idx+2]`` (columns ``c … c+3`` of row ``k``) and at rows
    ``k + 1``, ``k + 8``, ``k + 9`` (``pitch`` 16-bit values apart), interleaved by ``prmt`` and widened exactly by
    ``cvt.rn.f16x2.e4m3x2`` (sm_89 and later). Returns ``b0`` of columns ``c … c+3`` (rows ``k, k+1``), then ``b1``
    (rows ``k+8, k+9``): lane ``(g, t)`` reading ``k = 2t`` and ``c = 4g`` of a 32-column group gets, for each
    ``j < 4``, the fragment of an n8 tile whose column ``g`` is the group's column ``4g + j``."""
    _check_shared("e4m3_b_frags", s, idx)
    if not isinstance(pitch, types.Integer):
        raise TypingError(f"e4m3_b_frags: the row pitch must be an integer, got {pitch}")
    rt = types.UniTuple(types.uint32, 8)

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        a = _shared_address(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        step = builder.mul(context.cast(builder, args[2], sig.args[2], types.int32), i32(2))  # bytes per row
        rows = [a, builder.add(a, step), builder.add(a, builder.mul(step, i32(8))), builder.add(a, builder.mul(step, i32(9)))]
        words = ir.LiteralStructType([i32] * 8)
        out = _side_effect(builder, E4M3_FRAGS_PTX, ",".join(["=r"] * 8 + ["r"] * 4), rows, words)
        return context.make_tuple(builder, rt, [builder.extract_value(out, k) for k in range(8)])
    return rt(s, idx, pitch), codegen


def _wait(name, text):
    @_device(_sim_nothing)
    def waiter(typingctx):
        def codegen(context, builder, sig, args):
            _side_effect(builder, text, "", [])
            return context.get_dummy_value()
        return types.void(), codegen
    waiter.__name__ = waiter.__qualname__ = name
    return waiter


cp_commit = _wait("cp_commit", "cp.async.commit_group;")
cp_wait0 = _wait("cp_wait0", "cp.async.wait_group 0;")
cp_wait1 = _wait("cp_wait1", "cp.async.wait_group 1;")
cp_wait2 = _wait("cp_wait2", "cp.async.wait_group 2;")
cp_wait3 = _wait("cp_wait3", "cp.async.wait_group 3;")
cp_wait4 = _wait("cp_wait4", "cp.async.wait_group 4;")


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


# --------------------------------------------------------------------------------------------------
# Hopper (sm_90a): wgmma, operands in 128-byte-swizzled shared memory described by 64-bit descriptors
# --------------------------------------------------------------------------------------------------
#: The 128-byte swizzle: the 16-byte chunk ``c`` of the 128-byte row ``r`` of an 8-row atom (1024 bytes, 1024-aligned)
#: lies at chunk ``c ^ (r & 7)`` — a function of the shared-memory address alone (bits 4-6 xor bits 7-9).
SWIZZLE_ATOM = 1024


def swizzled(byte_address: int) -> int:
    """Where the 128-byte swizzle puts the byte at ``byte_address`` (of a 1024-aligned layout)."""
    return byte_address ^ ((byte_address >> 3) & 0x70)


def _sim_swizzle_pad(s):
    return 0  # the simulator's shared arrays start at address 0


class _SimDesc(tuple):
    """A descriptor in the simulator: ``(shared array, byte address, lbo, sbo)``. Adding ``n`` moves the address by
    ``n`` 16-byte units, as adding to a real descriptor's address field does."""

    def __add__(self, n):
        if not isinstance(n, (int, np.integer)):
            return NotImplemented
        flat, at, lbo, sbo = self
        return _SimDesc((flat, at + 16 * int(n), lbo, sbo))

    __radd__ = __add__


def _sim_wgmma_desc(s, idx, lbo, sbo):
    return _SimDesc((_shared_flat(s).view(np.uint16), 2 * int(idx), int(lbo), int(sbo)))


def _desc_read(desc, byte_address):
    flat, _, _, _ = desc
    at = swizzled(byte_address)
    if at % 2 or not 0 <= at // 2 < flat.size:
        raise IndexError(f"wgmma: operand byte {at} is outside the shared array ({flat.size} 16-bit values)")
    return flat[at // 2]


def _k_major(desc, rows, first=0, k=16):
    """Rows ``first ..`` of the ``k``-wide operand a K-major 128B-swizzled descriptor gives: row ``r`` at
    ``(r // 8) SBO + (r % 8) 128`` (a thread reads only its warp's rows: a simulated block may be one warp)."""
    _, start, _, sbo = desc
    return np.array([[_desc_read(desc, start + (r // 8) * sbo + (r % 8) * 128 + 2 * kk) for kk in range(k)]
                     for r in range(first, first + rows)], np.uint16)


def _mn_major(desc, n, k=16):
    """The ``k × n`` operand an MN-major (transposed) 128B-swizzled descriptor gives: ``n`` in 64-value blocks LBO
    apart, ``k`` in rows of 128 bytes, eight rows an atom, atoms SBO apart."""
    _, start, lbo, sbo = desc
    return np.array([[_desc_read(desc, start + (c // 64) * lbo + (kk // 8) * sbo + (kk % 8) * 128 + 2 * (c % 64))
                      for c in range(n)] for kk in range(k)], np.uint16)


def _k_major_bytes(desc, rows, first=0, k=32):
    """:func:`_k_major` for one-byte (e4m3) operands: row ``r``'s ``k`` bytes, decoded exactly."""
    flat, start, _, sbo = desc
    raw = flat.view(np.uint8)

    def byte(at):
        at = swizzled(at)
        if not 0 <= at < raw.size:
            raise IndexError(f"wgmma: operand byte {at} is outside the shared array ({raw.size} bytes)")
        return raw[at]
    codes = np.array([[byte(start + (r // 8) * sbo + (r % 8) * 128 + kk) for kk in range(k)]
                      for r in range(first, first + rows)], np.uint8)
    return e4m3_values(codes).astype(np.float64)


def _sim_wgmma_e4m3(acc, da, db, scale_d):
    w, g, t = _wgmma_place()
    d = _k_major_bytes(da, 16, 16 * w) @ _k_major_bytes(db, 8 * len(acc)).T
    return tuple(tuple(np.float32(d[g + 8 * (i >> 1), 8 * j + 2 * t + (i & 1)] + (float(c) if scale_d else 0.0))
                       for i, c in enumerate(tile)) for j, tile in enumerate(acc))


def _sim_halves(kind):
    if kind == "bf16":
        return lambda bits: (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return lambda bits: bits.view(np.float16).astype(np.float64)


def _wgmma_place():
    """``(warp of the warpgroup, g, t)`` of the calling simulated thread."""
    import threading

    tid = threading.current_thread().thread_id
    lane = tid % 32
    return (tid // 32) % 4, lane >> 2, lane & 3


def _sim_wgmma_ss(kind, transposed=False):
    widen = _sim_halves(kind)

    def wgmma(acc, da, db, scale_d):
        w, g, t = _wgmma_place()
        a = widen(_k_major(da, 16, 16 * w))
        d = a @ (widen(_mn_major(db, 8 * len(acc))) if transposed else widen(_k_major(db, 8 * len(acc))).T)
        return tuple(tuple(np.float32(d[g + 8 * (i >> 1), 8 * j + 2 * t + (i & 1)] + (float(c) if scale_d else 0.0))
                           for i, c in enumerate(tile)) for j, tile in enumerate(acc))
    return wgmma


def _sim_wgmma_rs(kind):
    widen = _sim_halves(kind)
    unpack = _sim_unpack(kind)

    def wgmma(acc, a0, a1, a2, a3, db):
        b = widen(_mn_major(db, 8 * len(acc)))

        def combine(slots):  # the warp's 16 rows: its A fragments (mma.sync's layout) times B
            A = np.zeros((16, 16))
            for lane, words in enumerate(slots):
                g, t = lane >> 2, lane & 3
                for r in range(4):
                    A[g + 8 * (r & 1), 2 * t + 8 * (r >> 1):2 * t + 8 * (r >> 1) + 2] = unpack(words[r])
            D = A @ b
            return [D] * 32
        d = _warp_collective((a0, a1, a2, a3), combine)
        _, g, t = _wgmma_place()
        return tuple(tuple(np.float32(d[g + 8 * (i >> 1), 8 * j + 2 * t + (i & 1)] + float(c)) for i, c in enumerate(tile))
                     for j, tile in enumerate(acc))
    return wgmma


@_device(_sim_swizzle_pad)
def swizzle_pad(typingctx, s):
    """The 16-bit values to skip from ``s[0]`` (dynamic shared memory) to the next 1024-byte boundary: where a
    128B-swizzled layout may start (the swizzle is a function of the address)."""
    _check_shared("swizzle_pad", s, types.int64)

    def codegen(context, builder, sig, args):
        address = _shared_address(context, builder, sig.args[0], args[0], types.int64, ir.Constant(ir.IntType(64), 0))
        i32 = ir.IntType(32)
        gap = builder.and_(builder.sub(i32(SWIZZLE_ATOM), builder.and_(address, i32(SWIZZLE_ATOM - 1))),
                           i32(SWIZZLE_ATOM - 1))
        return builder.sext(builder.lshr(gap, i32(1)), ir.IntType(64))
    return types.int64(s), codegen


@_device(_sim_wgmma_desc)
def wgmma_desc(typingctx, s, idx, lbo, sbo):
    """The 64-bit matrix descriptor of a 128B-swizzled operand starting at ``s[idx]``: start address, leading and
    stride byte offsets (``lbo``, ``sbo``), swizzle mode 1 (PTX ISA, "Matrix Descriptor Format"). Adding ``n`` to a
    descriptor moves its start ``16 n`` bytes (the address field's unit; shared addresses stay below its 256 KB). K-major operands
    (rows of 128 bytes along K, eight rows an atom ``sbo`` apart; a k16 step is 32 bytes further); MN-major ones
    (transposed: 64 values of N per 128-byte row, rows along K, atoms ``sbo`` apart, N blocks ``lbo`` apart)."""
    _check_shared("wgmma_desc", s, idx)
    for v in (lbo, sbo):
        if not isinstance(v, types.Integer):
            raise TypingError(f"wgmma_desc: byte offsets are integers, got {v}")

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        address = builder.zext(_shared_address(context, builder, sig.args[0], args[0], sig.args[1], args[1]), i64)
        lo, so = (context.cast(builder, v, t, types.int64) for v, t in zip(args[2:], sig.args[2:]))
        field = builder.lshr(builder.and_(address, i64(0x3FFFF)), i64(4))
        field = builder.or_(field, builder.shl(builder.lshr(builder.and_(lo, i64(0x3FFFF)), i64(4)), i64(16)))
        field = builder.or_(field, builder.shl(builder.lshr(builder.and_(so, i64(0x3FFFF)), i64(4)), i64(32)))
        return builder.or_(field, i64(1 << 62))
    return types.int64(s, idx, lbo, sbo), codegen


def _acc_type(name, acc):
    """Accumulators come in n8 tiles: a tuple of N / 8 tuples of 4 float32 (a flat tuple of more than 30 names is
    built through a list in Python 3.11's bytecode, which numba's interpreter does not always take back)."""
    ok = (isinstance(acc, types.UniTuple) and 1 <= acc.count <= 32 and isinstance(acc.dtype, types.UniTuple)
          and acc.dtype.count == 4 and acc.dtype.dtype == types.float32)
    if not ok:
        raise TypingError(f"{name}: the accumulators are a tuple of N / 8 tuples of 4 float32, got {acc}")
    return acc


def _flat(builder, value, count):
    return [builder.extract_value(builder.extract_value(value, j), i) for j in range(count) for i in range(4)]


def _tiles(context, builder, acc_t, values):
    tile = acc_t.dtype
    return context.make_tuple(builder, acc_t, [context.make_tuple(builder, tile, values[4 * j:4 * j + 4])
                                               for j in range(acc_t.count)])


def _wgmma_call(context, builder, sig, args, text, words):
    """The wgmma ``text`` with the accumulators as tied ``=f`` operands, then ``words`` (i32 A registers and scale,
    i64 descriptors) as operands."""
    acc_t = sig.args[0]
    n = 4 * acc_t.count
    f32, i32 = ir.FloatType(), ir.IntType(32)
    ops = _flat(builder, args[0], acc_t.count) + words
    cons = ["=f"] * n + [str(k) for k in range(n)] + ["r" if o.type == i32 else "l" for o in words]
    out = _side_effect(builder, text, ",".join(cons), ops, ir.LiteralStructType([f32] * n))
    return _tiles(context, builder, acc_t, [builder.extract_value(out, k) for k in range(n)])


def _wgmma_text(kind: str, n: int, a: str, b: str, scale: str, transposes: str, k: int = 16) -> str:
    """The inline PTX of a ``wgmma.mma_async.m64n{n}k16``: the ``n / 2`` accumulators as ``$0 …`` (tied to the inputs
    that follow them), then the operands; ``a``, ``b`` and ``scale`` name operands ``{k}`` counted after those (the
    A descriptor or registers, the B descriptor, the scale-d flag, set into a predicate), ``transposes`` the
    immediates after the two scales (``0, 0`` for two K-major descriptors; ``1`` for B transposed beside registers)."""
    at = n  # the operands' first number: after the outputs and their tied inputs
    op = lambda text: re.sub(r"\{(\d+)\}", lambda m: f"${at + int(m.group(1))}", text)  # noqa: E731
    regs = ", ".join(f"${k}" for k in range(n // 2))
    return ("{\n.reg .pred p;\n"
            f"setp.ne.b32 p, {op(scale)}, 0;\n"
            f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{kind}.{kind} {{{regs}}}, {op(a)}, {op(b)}, p, 1, 1"
            f"{', ' + transposes if transposes else ''};\n}}")


def _wgmma_ss(name, kind, transposed=False):
    def typer(typingctx, acc, da, db, scale_d):
        _acc_type(name, acc)

        def codegen(context, builder, sig, args):
            descs = [context.cast(builder, v, t, types.int64) for v, t in zip(args[1:3], sig.args[1:3])]
            scale = context.cast(builder, args[3], sig.args[3], types.int32)
            text = _wgmma_text(kind, 8 * sig.args[0].count, "{0}", "{1}", "{2}", "0, 1" if transposed else "0, 0")
            return _wgmma_call(context, builder, sig, args, text, descs + [scale])
        return acc(acc, types.int64, types.int64, types.int32), codegen
    typer.__name__ = typer.__qualname__ = name
    return _device(_sim_wgmma_ss(kind, transposed))(typer)


def _typer_e4m3(typingctx, acc, da, db, scale_d):
    _acc_type("wgmma_ss_e4m3", acc)

    def codegen(context, builder, sig, args):
        descs = [context.cast(builder, v, t, types.int64) for v, t in zip(args[1:3], sig.args[1:3])]
        scale = context.cast(builder, args[3], sig.args[3], types.int32)
        # FP8 operands are K-major only: the instruction has no transpose immediates
        text = _wgmma_text("e4m3", 8 * sig.args[0].count, "{0}", "{1}", "{2}", "", k=32)
        return _wgmma_call(context, builder, sig, args, text, descs + [scale])
    return acc(acc, types.int64, types.int64, types.int32), codegen


_typer_e4m3.__name__ = _typer_e4m3.__qualname__ = "wgmma_ss_e4m3"
wgmma_ss_e4m3 = _device(_sim_wgmma_e4m3)(_typer_e4m3)
wgmma_ss_e4m3.__doc__ = """``acc = A·Bᵀ (+ acc if scale_d)``: ``wgmma.mma_async.m64nNk32`` on FP8 e4m3 operands in shared
memory, both K-major (rows of 128 bytes: 128 values; a k32 step is 32 bytes further), float32 accumulators laid out
as :func:`wgmma_ss_bf16`'s. The products of e4m3 values are exact in float32."""


def _wgmma_rs(name, kind):
    def typer(typingctx, acc, a0, a1, a2, a3, db):
        _acc_type(name, acc)

        def codegen(context, builder, sig, args):
            words = [context.cast(builder, v, t, types.uint32) for v, t in zip(args[1:5], sig.args[1:5])]
            desc = context.cast(builder, args[5], sig.args[5], types.int64)
            text = _wgmma_text(kind, 8 * sig.args[0].count, "{{0}, {1}, {2}, {3}}", "{4}", "{5}", "1")
            return _wgmma_call(context, builder, sig, args, text, words + [desc, ir.Constant(ir.IntType(32), 1)])
        return acc(acc, types.uint32, types.uint32, types.uint32, types.uint32, types.int64), codegen
    typer.__name__ = typer.__qualname__ = name
    return _device(_sim_wgmma_rs(kind))(typer)


wgmma_ss_bf16 = _wgmma_ss("wgmma_ss_bf16", "bf16")
wgmma_ss_bf16.__doc__ = """``acc = A·Bᵀ (+ acc if scale_d)``: ``wgmma.mma_async.m64nNk16`` (N = 2 × the accumulators)
on bfloat16 operands in shared memory, both K-major (descriptors ``da``: 64 rows, ``db``: N rows). Warpgroup-wide and
asynchronous: between ``wgmma_fence`` and ``wgmma_commit``; read the accumulators after ``wgmma_wait0`` and
``wgmma_hold``. The accumulators are N / 8 tiles of 4: warp ``w``'s tile ``j``, value ``i`` is row
``16 w + g + 8 (i >> 1)``, column ``8 j + 2 t + (i & 1)`` (``mma.sync``'s accumulators, n8 tile by n8 tile)."""
wgmma_ss_f16 = _wgmma_ss("wgmma_ss_f16", "f16")
wgmma_ss_f16.__doc__ = "``wgmma_ss_bf16`` on float16 operands."
wgmma_sst_bf16 = _wgmma_ss("wgmma_sst_bf16", "bf16", transposed=True)
wgmma_sst_bf16.__doc__ = """``acc = A·B (+ acc if scale_d)``: ``wgmma_ss_bf16`` with B ``16 × N`` MN-major (transposed: a
row-major ``[k][n]`` tile such as a weight matrix's rows, 64 values of N per 128-byte row, N blocks ``lbo`` apart)."""
wgmma_sst_f16 = _wgmma_ss("wgmma_sst_f16", "f16", transposed=True)
wgmma_sst_f16.__doc__ = "``wgmma_sst_bf16`` on float16 operands."
wgmma_rs_bf16 = _wgmma_rs("wgmma_rs_bf16", "bf16")
wgmma_rs_bf16.__doc__ = """``acc += A·B``: ``wgmma.mma_async.m64nNk16`` with A in registers (each warp its 16 rows in
``mma.sync``'s A layout: four words) and B ``16 × N`` in shared memory, MN-major (transposed: a row-major ``[k][n]``
tile such as a value tile, descriptor ``db``)."""
wgmma_rs_f16 = _wgmma_rs("wgmma_rs_f16", "f16")
wgmma_rs_f16.__doc__ = "``wgmma_rs_bf16`` on float16 operands."


def _sim_hold(acc):
    return acc


def _void(name, text, doc):
    f = _wait(name, text)
    f.__doc__ = doc
    return f


wgmma_fence = _void("wgmma_fence", "wgmma.fence.sync.aligned;",
                    "Orders the registers' earlier writes before the wgmmas that read them (``wgmma.fence``).")
wgmma_commit = _void("wgmma_commit", "wgmma.commit_group.sync.aligned;", "Closes a group of wgmmas.")
wgmma_wait0 = _void("wgmma_wait0", "wgmma.wait_group.sync.aligned 0;", "Waits for every group of wgmmas.")
wgmma_wait1 = _void("wgmma_wait1", "wgmma.wait_group.sync.aligned 1;",
                    "Waits for every group of wgmmas but the last committed: one group stays in flight.")
fence_async = _void("fence_async", "fence.proxy.async.shared::cta;",
                    "Makes this thread's shared-memory writes (stores, cp.async) visible to wgmma's operand reads.")


@_device(_sim_hold)
def wgmma_hold(typingctx, acc):
    """The registers, through an empty instruction that reads and writes them, ordered with the other wgmma
    instructions: after ``wgmma_wait0`` it keeps the accumulators' uses from moving above the wait (their values are
    the wgmma's only once it completes); before ``wgmma_fence`` it keeps the writes of an operand (accumulators
    scaled, A fragments packed) from moving below the fence. Tiles of 4 float32 or of 4 words (uint32)."""
    words = (isinstance(acc, types.UniTuple) and isinstance(acc.dtype, types.UniTuple) and acc.dtype.count == 4
             and acc.dtype.dtype == types.uint32 and 1 <= acc.count <= 32)
    if not words:
        _acc_type("wgmma_hold", acc)

    def codegen(context, builder, sig, args):
        n = 4 * sig.args[0].count
        reg, letter = (ir.IntType(32), "r") if words else (ir.FloatType(), "f")
        cons = ",".join([f"={letter}"] * n + [str(k) for k in range(n)])
        out = builder.call(ir.InlineAsm(ir.FunctionType(ir.LiteralStructType([reg] * n), [reg] * n), "", cons,
                                        side_effect=True), _flat(builder, args[0], sig.args[0].count))
        return _tiles(context, builder, sig.args[0], [builder.extract_value(out, k) for k in range(n)])
    return acc(acc), codegen
