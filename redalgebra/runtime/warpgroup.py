"""Hopper's warpgroup instructions (sm_90a) for generated CUDA kernels: ``wgmma.mma_async`` with its operands in
128-byte-swizzled shared memory described by 64-bit descriptors, and the fences and waits around it (the ``wgmma`` and
``columns_wgmma`` strategies).

Built on :mod:`.tensor_cores`' helpers (shared addresses, inline PTX, the warp-collective stand-ins) and re-exported
there, so that a generated module imports every tensor-core intrinsic from one place. Under the simulator each name is
a Python stand-in that decodes the swizzled layout through the descriptors as the hardware does.
"""

from __future__ import annotations

import functools
import re

import numpy as np
from llvmlite import ir
from numba import types

from .lowering import SIMULATOR, _device, _side_effect
from .formats import e4m3_values
from .sim_async import _sim_wgmma_commit, _sim_wgmma_read, _sim_wgmma_wait
from .sync import _wait
from .tensor_cores import _check_shared, _shared_address, _shared_flat, _sim_unpack, _warp_collective

if not SIMULATOR:
    from .lowering import TypingError

__all__ = ["swizzle_pad", "wgmma_desc", "wgmma_ss_bf16", "wgmma_ss_f16", "wgmma_sst_bf16", "wgmma_sst_f16", "wgmma_rs_bf16", "wgmma_rs_f16", "wgmma_rsk_bf16", "wgmma_rsk_f16", "wgmma_ss_e4m3", "wgmma_fence", "wgmma_commit", "wgmma_wait0", "wgmma_wait1", "wgmma_hold", "fence_async"]


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


def _gather(desc, addresses: np.ndarray, size: int, layout=None) -> np.ndarray:
    """The values of ``size`` bytes (2: 16-bit patterns, little-endian; 1: e4m3 bytes) at the (unswizzled) byte
    ``addresses`` of a swizzled operand, in their shape; the first address outside the shared array (or a 16-bit one
    misaligned), in C order, is an error. ``layout``: the addresses' :func:`_layout`, when the caller has it."""
    raw = desc[0].view(np.uint8)
    at, low, high, odd = layout or _layout(addresses)
    if low < 0 or high > raw.size - size or (size == 2 and odd):  # (the first bad address, as the mask finds it)
        bad = (at < 0) | (at > raw.size - size) | ((at % 2 != 0) if size == 2 else False)
        first = int(at[bad][0])
        raise IndexError(f"wgmma: operand byte {first} is outside the shared array ({raw.size} bytes)"
                         + (" or misaligned" if size == 2 else ""))
    if size == 1:
        return raw[at]
    return raw.view("<u2")[at >> 1]  # (even addresses: the 16-bit value at byte a is element a / 2, little-endian)


def _layout(addresses: np.ndarray):
    """The swizzled positions of the byte ``addresses`` (read-only), their least and greatest, and whether one is odd:
    what :func:`_gather` checks against the shared array it reads."""
    at = swizzled(addresses)
    at.flags.writeable = False
    return at, int(at.min()), int(at.max()), bool((at % 2).any())


def _read_chunks(desc, layout, geometry: tuple) -> None:
    """Record the 16-byte chunks of the operand that ``layout(*geometry)`` places (its first array: unswizzled byte
    addresses) as read by this thread's open ``wgmma`` group (:func:`~.tensor_cores._sim_wgmma_read`)."""
    _sim_wgmma_read(_chunks_read(desc[0].view(np.uint8).ctypes.data, layout, geometry))


@functools.lru_cache(maxsize=4096)
def _chunks_read(base: int, layout, geometry: tuple) -> frozenset:
    """The absolute 16-byte chunks an operand placed by ``layout(*geometry)`` reads from a shared array at ``base``:
    one set for every lane of a warpgroup, which all read the same operand, at every step that reads it."""
    addresses = layout(*geometry)[0]
    return frozenset(((base + swizzled(np.asarray(addresses, np.int64))) >> 4).ravel().tolist())


@functools.lru_cache(maxsize=4096)
def _k_major_layout(start: int, sbo: int, rows: int, first: int, k: int, size: int):
    """:func:`_k_major`'s addresses, by the operand's geometry (every lane of a warpgroup asks for the same ones, at
    every step of a kernel's loop): the chunks' and the values' (with the values' :func:`_layout`)."""
    r = np.arange(first, first + rows, dtype=np.int64)[:, None]
    row = start + (r // 8) * sbo + (r % 8) * 128
    chunks = row + np.arange(0, k * size, 16, dtype=np.int64)[None, :]
    values = row + size * np.arange(k, dtype=np.int64)[None, :]
    chunks.flags.writeable = values.flags.writeable = False
    return chunks, values, _layout(values)


def _k_major(desc, rows, first=0, k=16, size=2):
    """Rows ``first ..`` of the ``k``-wide operand a K-major 128B-swizzled descriptor gives: row ``r`` at
    ``(r // 8) SBO + (r % 8) 128`` (a thread reads only its warp's rows: a simulated block may be one warp); values
    of ``size`` bytes (2: 16-bit patterns, 1: e4m3 bytes)."""
    _, start, _, sbo = desc
    _, values, layout = _k_major_layout(start, sbo, rows, first, k, size)
    _read_chunks(desc, _k_major_layout, (start, sbo, rows, first, k, size))
    return _gather(desc, values, size, layout)


@functools.lru_cache(maxsize=4096)
def _mn_major_layout(start: int, lbo: int, sbo: int, n: int, k: int):
    """:func:`_mn_major`'s addresses by the operand's geometry: the chunks' and the values' (with their layout)."""
    kk = np.arange(k, dtype=np.int64)[:, None]
    c = np.arange(n, dtype=np.int64)[None, :]
    at = start + (c // 64) * lbo + (kk // 8) * sbo + (kk % 8) * 128 + 2 * (c % 64)
    chunks = at[:, ::8]
    at.flags.writeable = False
    return chunks, at, _layout(at)


def _mn_major(desc, n, k=16):
    """The ``k × n`` operand an MN-major (transposed) 128B-swizzled descriptor gives: ``n`` in 64-value blocks LBO
    apart, ``k`` in rows of 128 bytes, eight rows an atom, atoms SBO apart."""
    _, start, lbo, sbo = desc
    _, at, layout = _mn_major_layout(start, lbo, sbo, n, k)
    _read_chunks(desc, _mn_major_layout, (start, lbo, sbo, n, k))
    return _gather(desc, at, 2, layout)


def _sim_halves(kind):
    if kind == "e4m3":
        return lambda bits: e4m3_values(bits).astype(np.float64)
    if kind == "bf16":
        return lambda bits: (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return lambda bits: bits.view(np.float16).astype(np.float64)


def _wgmma_place():
    """``(warp of the warpgroup, g, t)`` of the calling simulated thread."""
    import threading

    tid = threading.current_thread().thread_id
    lane = tid % 32
    return (tid // 32) % 4, lane >> 2, lane & 3


@functools.lru_cache(maxsize=None)
def _fragment(g: int, t: int, tiles: int):
    """The rows and columns of a warp's ``16 × 8 tiles`` product that lane ``(g, t)`` holds, tile by tile: value ``i``
    of tile ``j`` is row ``g + 8 (i >> 1)``, column ``8 j + 2 t + (i & 1)``."""
    j, i = np.divmod(np.arange(4 * tiles), 4)
    return g + 8 * (i >> 1), 8 * j + 2 * t + (i & 1)


def _accumulators(d, g, t, acc, scale_d: bool):
    """Lane ``(g, t)``'s accumulators from the warp's product ``d`` (float64) plus the old ones when ``scale_d``,
    added in float64 and rounded once to float32, as tiles of four float32."""
    rows, cols = _fragment(g, t, len(acc))
    old = np.array(acc, np.float64).reshape(-1) if scale_d else 0.0
    values = (d[rows, cols] + old).astype(np.float32)
    return tuple(tuple(values[4 * j:4 * j + 4]) for j in range(len(acc)))


def _sim_wgmma_ss(kind, transposed=False):
    widen = _sim_halves(kind)
    k, size = (32, 1) if kind == "e4m3" else (16, 2)

    def wgmma(acc, da, db, scale_d):
        w, g, t = _wgmma_place()
        a = widen(_k_major(da, 16, 16 * w, k, size))
        b = widen(_mn_major(db, 8 * len(acc))) if transposed else widen(_k_major(db, 8 * len(acc), 0, k, size)).T
        return _accumulators(a @ b, g, t, acc, bool(scale_d))
    return wgmma


def _sim_wgmma_rs(kind, transposed=True):
    widen = _sim_halves(kind)
    unpack = _sim_unpack(kind)

    def wgmma(acc, a0, a1, a2, a3, db):
        b = widen(_mn_major(db, 8 * len(acc))) if transposed else widen(_k_major(db, 8 * len(acc))).T

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
        return _accumulators(d, g, t, acc, True)
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


def _halves(builder, desc):
    """A 64-bit descriptor as its two 32-bit words (low, high). A descriptor plus a step (``d + n``) is a 64-bit add in
    the kernel's IR; taken apart here, LLVM narrows the low word's to 32 bits and, from the known bits of
    :func:`wgmma_desc`'s fields (no carry reaches bit 16), folds the high word to its constant — so ptxas gets one
    32-bit add per instruction instead of a 64-bit add with carry and the moves around it."""
    i32, i64 = ir.IntType(32), ir.IntType(64)
    return [builder.trunc(desc, i32), builder.trunc(builder.lshr(desc, i64(32)), i32)]


def _wgmma_call(context, builder, sig, args, text, words):
    """The wgmma ``text`` with the accumulators as tied ``=f`` operands, then ``words`` (i32 A registers and scale,
    descriptors as pairs of i32 words: see :func:`_halves`) as operands."""
    acc_t = sig.args[0]
    n = 4 * acc_t.count
    f32 = ir.FloatType()
    ops = _flat(builder, args[0], acc_t.count) + words
    cons = ["=f"] * n + [str(k) for k in range(n)] + ["r"] * len(words)
    out = _side_effect(builder, text, ",".join(cons), ops, ir.LiteralStructType([f32] * n))
    return _tiles(context, builder, acc_t, [builder.extract_value(out, k) for k in range(n)])


def _wgmma_text(kind: str, n: int, a: str, b: str, scale: str, transposes: str) -> str:
    """The inline PTX of a ``wgmma.mma_async.m64n{n}k16`` (``k32`` for e4m3): the ``n / 2`` accumulators as ``$0 …`` (tied to the inputs
    that follow them), then the operands; ``a``, ``b`` and ``scale`` name operands ``{k}`` counted after those (the
    A descriptor or registers, the B descriptor, the scale-d flag, set into a predicate; a descriptor ``{k}!`` is the
    words ``{k}`` and ``{k + 1}`` made one 64-bit register), ``transposes`` the
    immediates after the two scales (``0, 0`` for two K-major descriptors; ``1`` for B transposed beside registers)."""
    at = n  # the operands' first number: after the outputs and their tied inputs
    op = lambda text: re.sub(r"\{(\d+)\}", lambda m: f"${at + int(m.group(1))}", text)  # noqa: E731
    regs = ", ".join(f"${k}" for k in range(n // 2))
    # a descriptor operand ``{k}!`` is the two words ``{k}``, ``{k + 1}``, made one 64-bit register
    descs = re.findall(r"\{(\d+)\}!", a + b)
    head = "".join(f".reg .b64 d{k};\nmov.b64 d{k}, {{{op('{' + k + '}')}, {op('{' + str(int(k) + 1) + '}')}}};\n"
                   for k in descs)
    a, b = (re.sub(r"\{(\d+)\}!", r"d\1", x) for x in (a, b))
    return ("{\n.reg .pred p;\n" + head +
            f"setp.ne.b32 p, {op(scale)}, 0;\n"
            f"wgmma.mma_async.sync.aligned.m64n{n}k{32 if kind == 'e4m3' else 16}.f32.{kind}.{kind} {{{regs}}}, "
            f"{op(a)}, {op(b)}, p, 1, 1{', ' + transposes if transposes else ''};\n}}")


def _wgmma_ss(name, kind, transposed=False):
    # (FP8 operands have no transpose immediates: both are K-major)
    transposes = "" if kind == "e4m3" else "0, 1" if transposed else "0, 0"

    def typer(typingctx, acc, da, db, scale_d):
        _acc_type(name, acc)

        def codegen(context, builder, sig, args):
            descs = [w for v, t in zip(args[1:3], sig.args[1:3])
                     for w in _halves(builder, context.cast(builder, v, t, types.int64))]
            scale = context.cast(builder, args[3], sig.args[3], types.int32)
            text = _wgmma_text(kind, 8 * sig.args[0].count, "{0}!", "{2}!", "{4}", transposes)
            return _wgmma_call(context, builder, sig, args, text, descs + [scale])
        return acc(acc, types.int64, types.int64, types.int32), codegen
    typer.__name__ = typer.__qualname__ = name
    return _device(_sim_wgmma_ss(kind, transposed))(typer)


def _wgmma_rs(name, kind, transposed=True):
    def typer(typingctx, acc, a0, a1, a2, a3, db):
        _acc_type(name, acc)

        def codegen(context, builder, sig, args):
            words = [context.cast(builder, v, t, types.uint32) for v, t in zip(args[1:5], sig.args[1:5])]
            desc = _halves(builder, context.cast(builder, args[5], sig.args[5], types.int64))
            text = _wgmma_text(kind, 8 * sig.args[0].count, "{{0}, {1}, {2}, {3}}", "{4}!", "{6}",
                               "1" if transposed else "0")
            return _wgmma_call(context, builder, sig, args, text, words + desc + [ir.Constant(ir.IntType(32), 1)])
        return acc(acc, types.uint32, types.uint32, types.uint32, types.uint32, types.int64), codegen
    typer.__name__ = typer.__qualname__ = name
    return _device(_sim_wgmma_rs(kind, transposed))(typer)


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
wgmma_ss_e4m3 = _wgmma_ss("wgmma_ss_e4m3", "e4m3")
wgmma_ss_e4m3.__doc__ = """``wgmma_ss_bf16`` on e4m3 operands, both K-major: ``wgmma.mma_async.m64nNk32.f32.e4m3.e4m3``,
32 values (bytes) a row a step. Its sums keep fewer bits than float32 (on an H200 about 14: over K = 7168, 1.9e-3 of
the largest output from float64): a kernel sums a few steps in fresh accumulators (``scale_d`` 0 for the first) and
adds them to float32 ones, as cuBLAS's FP8 GEMM does."""
wgmma_rs_bf16 = _wgmma_rs("wgmma_rs_bf16", "bf16")
wgmma_rs_bf16.__doc__ = """``acc += A·B``: ``wgmma.mma_async.m64nNk16`` with A in registers (each warp its 16 rows in
``mma.sync``'s A layout: four words) and B ``16 × N`` in shared memory, MN-major (transposed: a row-major ``[k][n]``
tile such as a value tile, descriptor ``db``)."""
wgmma_rs_f16 = _wgmma_rs("wgmma_rs_f16", "f16")
wgmma_rs_f16.__doc__ = "``wgmma_rs_bf16`` on float16 operands."
wgmma_rsk_bf16 = _wgmma_rs("wgmma_rsk_bf16", "bf16", transposed=False)
wgmma_rsk_bf16.__doc__ = """``wgmma_rs_bf16`` with B ``N × 16`` K-major (rows of 128 bytes along K, as a ``Linear``
layer's weight rows: not transposed)."""
wgmma_rsk_f16 = _wgmma_rs("wgmma_rsk_f16", "f16", transposed=False)
wgmma_rsk_f16.__doc__ = "``wgmma_rsk_bf16`` on float16 operands."


def _sim_hold(acc):
    return acc


def _void(name, text, doc, stand_in=None):
    f = _wait(name, text, stand_in) if stand_in else _wait(name, text)
    f.__doc__ = doc
    return f


# (under the simulator the groups' shared-memory reads are tracked from issue to wait: a write into them between is
# reported, :func:`~.tensor_cores._sim_check_write`)
wgmma_fence = _void("wgmma_fence", "wgmma.fence.sync.aligned;",
                    "Orders the registers' earlier writes before the wgmmas that read them (``wgmma.fence``).")
wgmma_commit = _void("wgmma_commit", "wgmma.commit_group.sync.aligned;", "Closes a group of wgmmas.",
                     _sim_wgmma_commit)
wgmma_wait0 = _void("wgmma_wait0", "wgmma.wait_group.sync.aligned 0;", "Waits for every group of wgmmas.",
                    _sim_wgmma_wait(0))
wgmma_wait1 = _void("wgmma_wait1", "wgmma.wait_group.sync.aligned 1;",
                    "Waits for every group of wgmmas but the last committed: one group stays in flight.",
                    _sim_wgmma_wait(1))
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
