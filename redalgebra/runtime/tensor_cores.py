"""Tensor-core intrinsics for generated CUDA kernels (sm_80 and later; the ``mma`` strategy).

``cp_async16`` copies 16 bytes from global to
shared memory without passing through registers (``cp.async.cg``; a source size of 0 fills zeros), grouped
by ``cp_commit`` and awaited by ``cp_wait0``/``cp_wait1``; ``ldsm_x4``/``ldsm_x4_t`` load four 8×8 matrices
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

import numpy as np
from llvmlite import ir
from numba import types

from .intrinsics import (SIMULATOR, _B16, _B16_TYPES, _F16, _bf16_pair, _check, _device, _elements, _f32, _number,
                         _pack, _pointer, _span, bf16_bits, f16_bits)

if not SIMULATOR:
    from .intrinsics import TypingError

__all__ = ["cp_async16", "cp_commit", "cp_wait0", "cp_wait1", "ldsm_x4", "ldsm_x4_t", "mma_bf16", "mma_f16",
           "pack_bf16x2", "pack_f16x2", "unpack_bf16x2", "unpack_f16x2"]


# --------------------------------------------------------------------------------------------------
# Simulator stand-ins
# --------------------------------------------------------------------------------------------------
def _shared_flat(s):
    return np.asarray(getattr(s, "_ary", s)).reshape(-1)


def _sim_cp_async16(s, sidx, a, row, col, nbytes):
    dst = _shared_flat(s).view(np.uint16)
    if int(sidx) % 8 or not 0 <= int(sidx) <= dst.size - 8:
        raise IndexError(f"cp_async16: shared index {sidx} is misaligned or outside {dst.size} 16-bit values")
    src = _span(a, row, col, 8, _B16 + _F16).view(np.uint16)
    dst[int(sidx):int(sidx) + 8] = src if int(nbytes) == 16 else 0


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
    """Copy the 16 bytes at ``a[row, col]`` (16-bit values) to ``s[sidx:sidx+8]`` (``cp.async.cg.shared.global``;
    ``nbytes`` 16, or 0 to fill zeros without reading). Both addresses 16-byte aligned; complete after
    ``cp_commit`` and a ``cp_wait*`` that covers its group (and a barrier, for the other threads' copies)."""
    _check_shared("cp_async16", s, sidx)
    _check("cp_async16", a, _B16_TYPES + (types.float16,), row, col)
    if not isinstance(nbytes, types.Integer):
        raise TypingError(f"cp_async16: the source size must be an integer, got {nbytes}")

    def codegen(context, builder, sig, args):
        dst = _shared_address(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        src = _pointer(context, builder, _Sig(sig.args[2:5]), args[2:5], ir.IntType(16))
        size = context.cast(builder, args[5], sig.args[5], types.int32)
        _side_effect(builder, "cp.async.cg.shared.global [$0], [$1], 16, $2;", "r,l,r", [dst, src, size])
        return context.get_dummy_value()
    return types.void(s, sidx, a, row, col, nbytes), codegen


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
