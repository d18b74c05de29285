"""Compile generated CUDA kernels to PTX without a GPU (numba-cuda's NVVM), for CI and inspection."""

from __future__ import annotations

import contextlib
import re
from types import SimpleNamespace

from ..codegen import Spec, generate
from ..derive import FusedCascade
from ..errors import RedalgebraError
from .backends import cuda_module
from .cache import load


def signature(fused: FusedCascade, spec: Spec, args: tuple, scratch: tuple = (), out_dtypes: tuple = ()):
    """numba types of a generated kernel's arguments, from the cascade, the spec and the scratch arrays."""
    from numba import types

    c = fused.cascade
    dtypes = dict(spec.dtypes)
    stored = {"float16": types.float16, "bfloat16": types.uint16, "e4m3": types.uint8}  # else float32
    by_name = {}
    for s in c.inputs:
        base = stored.get(dtypes.get(s.name), types.float32)
        # (an input read K-major, Spec.k_major: bound as its (n, L) rows)
        by_name[s.name] = types.Array(base, 2 if s.size is None or s.name in spec.k_major else 3, "C")
        by_name[f"rep_{s.name}"] = types.int64
    for p in c.params:  # (float32, or a vector param given in 16 bits where the strategy stages it so)
        by_name[p.name] = types.Array(stored.get(dtypes.get(p.name), types.float32), 1 if p.size is None else 2, "C")
    by_name["keep"] = types.Array(types.uint8, 2, "C")
    varying, sizes = set(fused.per_element_outputs), c.sizes
    for o in c.outputs:
        ndim = 1 + (o.name in varying) + (sizes[o.name] is not None)
        by_name[f"out_{o.name}"] = types.Array(stored.get(dict(out_dtypes).get(o.name), types.float32), ndim, "C")
    for r in c.reductions:
        if r.monoid.k is not None:
            by_name[f"out_{r.name}_index"] = types.Array(types.int32, 2, "C")
    for name, dtype, layout, width in scratch:
        ndim = 2 if layout == "transposed" else (2 if layout in ("segments", "tiles", "fragments") else 1) + (
            width is not None)
        kind = {"int32": types.int32, "uint16": types.uint16, "float16": types.float16,
                "uint8": types.uint8, "uint32": types.uint32}.get(dtype, types.float32)
        by_name[name] = types.Array(kind, ndim, "C")
    for n in ("rows", "length", "nseg", "seglen"):
        by_name[n] = types.int64
    return tuple(by_name[a] for a in args)


def compile_ptx(fused: FusedCascade, strategy: str, spec: Spec, cc=None) -> str:
    """PTX of a generated CUDA strategy (every kernel of it) for compute capability ``cc`` (the strategy's:
    sm_90, or sm_90a for Hopper's arch-specific instructions)."""
    from ..codegen.strategies import get

    cc = cc or get(strategy).cc
    cuda = cuda_module("ptx")
    src = generate(fused, "cuda", strategy, spec)
    module = load(src.source)
    entries = src.entries or (("kernel", src.args, "rows"),)
    from numba.cuda.cudadrv.error import CudaSupportError, NvvmSupportError

    out = []
    with _target_device(cc):
        for name, args, _ in entries:
            sig = signature(fused, spec, args, src.scratch, src.out_dtypes)
            try:
                # the launch bounds the real kernel is compiled with (registers follow from them)
                bounds = dict(src.bounds).get(name) or ((spec.threads, spec.min_blocks) if spec.min_blocks
                                                        else spec.threads)
                # a kernel whose registers are capped (numba's max_registers, a link-time option, instead of launch
                # bounds) states the cap in its PTX, as the linked kernel has it
                cap = getattr(module, f"BOUNDS_{name}", {}).get("max_registers")
                ptx, _ = cuda.compile_ptx(getattr(module, name).py_func, sig, cc=cc,
                                          launch_bounds=None if cap else bounds)
                if cap:
                    ptx = re.sub(r"(\.entry[^{]*\{)", lambda m: m.group(1).replace("{", f".maxnreg {cap}\n{{", 1),
                                 ptx, count=1)
            except (NvvmSupportError, CudaSupportError) as err:
                raise RedalgebraError(f"compiling PTX needs numba-cuda with libNVVM: pip install "
                                      f"'redalgebra[cuda]' ({err})") from None
            out.append(ptx)
    return "\n".join(out)


@contextlib.contextmanager
def _target_device(cc):
    """numba-cuda asks the driver for the current device's compute capability when it compiles a
    device function, even inside ``compile_ptx``; on a machine without a driver, answer with the
    target's ``cc`` (only the capability is read)."""
    from numba.cuda import dispatcher

    try:
        dispatcher.get_current_device().compute_capability
        yield  # a real device is there: leave numba alone
        return
    except Exception:  # noqa: BLE001 - no driver or no device: any failure means "no device"
        pass
    original = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=cc)
    try:
        yield
    finally:
        dispatcher.get_current_device = original


def f64_instructions(ptx: str) -> list[str]:
    """PTX lines doing float64 arithmetic (conversions to print are allowed; math is not)."""
    return [ln.strip() for ln in ptx.splitlines()
            if re.search(r"\.f64\b", ln) and not ln.strip().startswith(("//", ".param", "ld.param"))]


#: ``[@pred] ld|st.QUALIFIERS operands``: a memory instruction and its qualifiers.
_MEMORY = re.compile(r"^\s*(?:@!?%\w+\s+)?(ld|st)((?:\.[\w:]+)+)\s")
_SPACES = ("global", "shared", "local", "param", "const")
_BITS = re.compile(r"^[bfsu](8|16|32|64)$")


def memory_instructions(ptx: str) -> list[tuple[str, str, int, bool, str]]:
    """Every load and store of the PTX as (``ld``|``st``, state space — ``generic`` when none is named,
    bits moved, vector?, the instruction's opcode text)."""
    out = []
    for line in ptx.splitlines():
        m = _MEMORY.match(line)
        if not m:
            continue
        quals = m.group(2).split(".")[1:]
        # (``shared::cluster``: another block's shared memory, a space of its own, not generic)
        space = next((q for q in quals if q.split("::")[0] in _SPACES), "generic")
        lanes = next((int(q[1:]) for q in quals if q in ("v2", "v4", "v8")), 1)
        bits = next((int(_BITS.match(q).group(1)) for q in reversed(quals) if _BITS.match(q)), 0)
        out.append((m.group(1), space, lanes * bits, lanes > 1, m.group(1) + m.group(2)))
    return out


def ptx_facts(ptx: str, assemble: bool = True) -> dict:
    """Counts that say how a kernel moves data and computes, for tests and ``redalgebra ptx``:

    ``kernels`` (``.entry`` points); global loads and stores that move 128 bits at once
    (``ld.global[.nc].v4.f32|u32``, ``st.global.v4``: ``ld_global_128``, ``st_global_128``), other
    vector ones (``*_global_vector_narrow``), one element at a time (``*_global_scalar``), through the
    read-only cache (``ld_global_nc``); ``ld_generic``/``st_generic`` (no state space: the compiler
    could not prove the address global or shared); ``ld_cluster`` (loads from the shared memory of another block
    of the cluster, ``ld.shared::cluster``), ``cluster_barriers`` (``barrier.cluster.arrive``); ``ld_local``, ``st_local`` and ``local_bytes``
    (thread-private memory: arrays indexed at run time, spills; the bytes the kernels declare); ``f64`` (float64 arithmetic, :func:`f64_instructions`); ``ex2``
    (``ex2.approx``); ``shfl_bfly`` (butterfly shuffles); ``sm_90`` (the target line); the tensor cores'
    ``mma`` (``mma.sync``), ``wgmma`` (``wgmma.mma_async``), ``ldmatrix`` and ``cp_async`` (16-byte copies to shared memory), ``e4m3_widen`` (pairs of e4m3 bytes widened to float16); ``ld_stream`` (global loads that
    skip L1: data read once); ``block_barriers`` (the block's barrier 0: ``syncthreads`` and its votes),
    ``named_barriers`` (waits and arrivals at a named barrier of some of the block's threads: a producer's ring, the
    column groups' hand-over) and ``named_votes`` (votes at one, ``bar_red_or``); with ``assemble``,
    ptxas's ``registers``, ``spill_stores``, ``spill_loads`` and ``stack_bytes`` (:func:`ptxas_facts`).
    """
    ptx = re.sub(r"//[^\n]*", "", ptx)  # comments (such as the summary ``redalgebra ptx`` writes) count for nothing
    facts = dict(kernels=len(re.findall(r"^\s*(?:\.visible\s+)?\.entry\b", ptx, re.M)),
                 ld_global_128=0, ld_global_nc=0, ld_global_vector_narrow=0, ld_global_scalar=0,
                 st_global_128=0, st_global_vector_narrow=0, st_global_scalar=0, ld_generic=0, st_generic=0,
                 ld_local=0, st_local=0, ld_cluster=0)
    for op, space, bits, vector, text in memory_instructions(ptx):
        if space in ("generic", "local"):
            facts[f"{op}_{space}"] += 1
        if op == "ld" and space == "shared::cluster":
            facts["ld_cluster"] += 1
        if space != "global":
            continue
        if vector:
            facts[f"{op}_global_{'128' if bits == 128 else 'vector_narrow'}"] += 1
        else:
            facts[f"{op}_global_scalar"] += 1
        if op == "ld" and ".nc" in text:
            facts["ld_global_nc"] += 1
    facts.update(local_bytes=sum(map(int, re.findall(r"^\s*\.local\b[^;\[]*\[(\d+)\]", ptx, re.M))), f64=len(f64_instructions(ptx)),
                 ex2=len(re.findall(r"\bex2\.approx\b", ptx)), shfl_bfly=len(re.findall(r"\bshfl\.sync\.bfly\b", ptx)),
                 sm_90=".target sm_90" in ptx, mma=len(re.findall(r"\bmma\.sync\.aligned\b", ptx)),
                 wgmma=len(re.findall(r"\bwgmma\.mma_async\b", ptx)),
                 ldmatrix=len(re.findall(r"\bldmatrix\.sync\.aligned\b", ptx)),
                 cp_async=len(re.findall(r"\bcp\.async\.cg\.shared\.global\b", ptx)),
                 e4m3_widen=len(re.findall(r"\bcvt\.rn\.f16x2\.e4m3x2\b", ptx)),
                 ld_stream=len(re.findall(r"\bld\.global\.nc\.L1::no_allocate\b", ptx)),
                 cluster_barriers=len(re.findall(r"\bbarrier\.cluster\.arrive\b", ptx)),
                 block_barriers=len(re.findall(r"\bbar(?:rier)?\.sync(?:\.aligned)?\s+0\s*;", ptx)) +
                 len(re.findall(r"\bbar(?:rier)?\.red\.\w+\.\w+\s+%\w+,\s*0\s*,\s*!?%\w+\s*;", ptx)),
                 named_barriers=len(re.findall(r"\bbarrier\.(?:sync|arrive)\.aligned\s+%?\w+\s*,\s*%?\w+\s*;", ptx)),
                 named_votes=len(re.findall(r"\bbar(?:rier)?\.red\.\w+\.\w+\s+%?\w+,\s*%?\w+\s*,\s*%?\w+\s*,\s*!?%?\w+\s*;",
                                            ptx)))
    if assemble:
        facts.update(ptxas_facts(ptx) or {})
    return facts


def ptxas_facts(ptx: str, arch: str | None = None) -> dict | None:
    """What ptxas says of the kernels once assembled for ``arch`` (the PTX's target: sm_90 or sm_90a) — without a
    GPU, through nvJitLink (which
    numba-cuda's CUDA 13 wheels bring): ``registers`` (the most any kernel uses: it bounds how many blocks
    fit on a multiprocessor), ``spill_stores``/``spill_loads`` and ``stack_bytes`` (summed over kernels).
    Assembling also checks the inline PTX of the intrinsics, which NVVM passes through unread.
    None where nvJitLink is not installed; a :class:`RedalgebraError` with ptxas's log if it refuses."""
    try:
        from cuda.bindings import nvjitlink
    except ImportError:  # pragma: no cover - every supported install has it
        return None
    text = ""
    target = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, re.M)
    arch = arch or (target.group(1) if target else "sm_90")
    # a strategy of several kernels gives one PTX module each (each with its own .version): one at a time
    for module in re.split(r"(?m)^(?=\s*\.version\b)", re.sub(r"//[^\n]*", "", ptx)):
        if ".entry" not in module:
            continue
        code = module.encode()
        handle = nvjitlink.create(3, [f"-arch={arch}", "-O3", "-verbose"])
        try:
            try:
                nvjitlink.add_data(handle, nvjitlink.InputType.PTX, code, len(code), "kernel.ptx")
                nvjitlink.complete(handle)
            except Exception as err:  # noqa: BLE001 - nvJitLink reports through its log
                log = bytearray(nvjitlink.get_error_log_size(handle))
                nvjitlink.get_error_log(handle, log)
                raise RedalgebraError(f"ptxas refused the generated PTX: {err}\n"
                                      f"{log.decode(errors='replace')[-2000:]}") from None
            log = bytearray(nvjitlink.get_info_log_size(handle))
            nvjitlink.get_info_log(handle, log)
        finally:
            nvjitlink.destroy(handle)
        text += log.decode(errors="replace")
    spills = [tuple(map(int, m)) for m in re.findall(
        r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", text)]
    return dict(registers=max(map(int, re.findall(r"Used (\d+) registers", text)), default=0),
                # "wgmma.mma_async instructions are serialized due to ..." (a call, a fence the compiler had to add)
                wgmma_serialized=len(re.findall(r"\(C75\d\d\)[^\n]*wgmma[^\n]*serialized", text)),
                # every other "Potential Performance Loss" ptxas reports, by its text (e.g. C7504: setmaxnreg ignored
                # in code compiled for linking, as numba-cuda's is)
                performance_losses=tuple(sorted({m.strip() for m in re.findall(
                    r"(\(C75\d\d\) Potential Performance Loss:[^\n]*)", text) if "serialized" not in m})),
                stack_bytes=sum(s[0] for s in spills), spill_stores=sum(s[1] for s in spills),
                spill_loads=sum(s[2] for s in spills))


def facts_text(facts: dict) -> list[str]:
    """:func:`ptx_facts` as a few lines of text (``redalgebra ptx`` prints them as PTX comments)."""
    f = facts
    return [f"{f['kernels']} kernel{'s' * (f['kernels'] != 1)}; global loads: {f['ld_global_128']} of 128 bits "
            f"({f['ld_global_nc']} through the read-only cache), {f['ld_global_vector_narrow']} narrower vectors, "
            f"{f['ld_global_scalar']} scalar",
            f"global stores: {f['st_global_128']} of 128 bits, {f['st_global_vector_narrow']} narrower vectors, "
            f"{f['st_global_scalar']} scalar; generic loads/stores: {f['ld_generic']}/{f['st_generic']}" + (
                f"; loads from the cluster's shared memory: {f['ld_cluster']}, cluster barriers: "
                f"{f['cluster_barriers']}" if f.get("ld_cluster") else ""),
            f".local: {f['local_bytes']} bytes, {f['ld_local']} loads, {f['st_local']} stores; f64 instructions: {f['f64']}; ex2.approx: {f['ex2']}; "
            f"shfl.sync.bfly: {f['shfl_bfly']}",
            f"barriers: {f['block_barriers']} of the block, {f['named_barriers']} waits and arrivals at named ones, "
            f"{f['named_votes']} named votes"] + (
        [f"ptxas: {f['registers']} registers per thread at most, {f['spill_stores']}/{f['spill_loads']} bytes "
         f"spilled (stores/loads), {f['stack_bytes']} bytes of stack"] if "registers" in f else []) + (
        [f"ptxas: wgmma serialized ({f['wgmma_serialized']} warning(s): a call or a compiler-inserted fence)"]
        if f.get("wgmma_serialized") else []) + [f"ptxas: {loss}" for loss in f.get("performance_losses", ())] + (
        ["(assembled for linking, as numba-cuda links: the call's driver launch loads a kernel handing registers over "
         "from its whole PTX, where setmaxnreg is honoured and these counts and spills do not hold)"]
        if any("C7504" in loss and "setmaxnreg" in loss for loss in f.get("performance_losses", ())) else [])
