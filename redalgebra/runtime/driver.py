"""Kernel launches through the CUDA driver with arguments packed once.

numba's launch path converts every argument on every call (typing, overload lookup, a device-array
object per array): 0.15–0.2 ms of host time, far more than a small kernel runs. A :class:`DriverStep`
does that work once — the overload compiled for the argument types, its ``CUfunction``, the grid,
and the parameter buffer in numba's kernel ABI — and a launch is one ``cuLaunchKernel`` call. Only
array data pointers may change between launches (:meth:`DriverStep.bind`); everything else (shapes,
strides, scalars) is fixed by the call signature the step was built for.

numba's kernel ABI (``numba.cuda.dispatcher._Kernel._prepare_args``): an array argument is expanded
to ``meminfo, parent, nitems, itemsize, data, shape[ndim], strides[ndim]`` (pointer-sized each);
scalars are passed as their C type. Each field is a separate kernel parameter.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

from ..codegen.strategies.cluster_merge import CLUSTER_PORTABLE
from ..errors import RedalgebraError

_SCALARS = {"int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32, "int64": ctypes.c_int64,
            "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16, "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64,
            "float32": ctypes.c_float, "float64": ctypes.c_double, "bool": ctypes.c_bool}


@lru_cache(maxsize=1)
def _libcuda():
    """The driver's ``cuLaunchKernel`` and ``cuKernelGetFunction`` through ctypes (loaded once)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as err:  # pragma: no cover - machines without a driver never build a step
        raise RedalgebraError(f"the CUDA driver (libcuda.so.1) cannot be loaded: {err}") from err
    launch = lib.cuLaunchKernel
    launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    launch.restype = ctypes.c_int
    function = lib.cuKernelGetFunction
    function.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    function.restype = ctypes.c_int
    name = lib.cuGetErrorString
    name.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    name.restype = ctypes.c_int
    attribute = lib.cuFuncSetAttribute
    attribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    attribute.restype = ctypes.c_int
    return launch, function, name, attribute


@lru_cache(maxsize=1)
def _launch_ex():
    """The driver's ``cuLaunchKernelEx`` (CUDA 12), or None where the driver lacks it."""
    launch = getattr(ctypes.CDLL("libcuda.so.1"), "cuLaunchKernelEx", None)
    if launch is not None:
        launch.argtypes = [ctypes.POINTER(LaunchConfig), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        launch.restype = ctypes.c_int
    return launch


class LaunchAttribute(ctypes.Structure):
    """``CUlaunchAttribute``: an id, padding to 8 bytes, a 64-byte union of values."""
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_int), ("value", ctypes.c_int * 16)]


class LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig`` (the stream handle 8-byte aligned after the seven 32-bit fields, as C lays it out)."""
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(LaunchAttribute)), ("count", ctypes.c_uint)]


#: ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``: the kernel may start before the one before it on the
#: stream has finished (it waits for it by ``griddepcontrol.wait``).
_PROGRAMMATIC = 6


#: ``CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION``: the blocks are launched in clusters of this shape (x, y, z), each on one
#: GPC, reading each other's shared memory; ``CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED``: past 8 blocks.
_CLUSTER, _NON_PORTABLE = 4, 14

#: ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``: a block may use more than 48 KB only when asked.
_MAX_DYNAMIC_SHARED = 8
_STATIC_LIMIT = 48 * 1024


@lru_cache(maxsize=1)
def _module_api():
    """The driver's ``cuModuleLoadData``, ``cuModuleGetFunction``, ``cuFuncGetAttribute``, ``cuCtxGetCurrent`` and
    ``cuDriverGetVersion`` through ctypes (loaded once)."""
    lib = ctypes.CDLL("libcuda.so.1")
    load, get, attribute = lib.cuModuleLoadData, lib.cuModuleGetFunction, lib.cuFuncGetAttribute
    context, version = lib.cuCtxGetCurrent, lib.cuDriverGetVersion
    load.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
    get.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p]
    attribute.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_void_p]
    context.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    version.argtypes = [ctypes.POINTER(ctypes.c_int)]
    for f in (load, get, attribute, context, version):
        f.restype = ctypes.c_int
    return load, get, attribute, context, version


#: Functions loaded from a kernel's whole PTX, by (context, code library): kept loaded for the process's life; the
#: library is held, so that its ``id`` is not reused.
_WHOLE: dict = {}
#: ``CUDA_ERROR_UNSUPPORTED_PTX_VERSION``; ``CU_FUNC_ATTRIBUTE_NUM_REGS``.
_UNSUPPORTED_PTX, _NUM_REGS = 222, 4


def _entry(ptx: str) -> str:
    import re

    names = re.findall(r"^\s*(?:\.visible\s+)?\.entry\s+([\w$]+)\s*\(", ptx, re.M)
    if len(names) != 1:
        raise RedalgebraError(f"a whole-program kernel's PTX must hold one entry, found {len(names)}")
    return names[0]


#: The newest PTX ISA of each CUDA 12 driver (12.6 kept 12.5's; 12.8 and 12.9 brought 8.7 and 8.8); CUDA 13.m: 9.m.
_ISA_12 = {0: "8.0", 1: "8.1", 2: "8.2", 3: "8.3", 4: "8.4", 5: "8.5", 6: "8.5", 8: "8.7", 9: "8.8"}


def _driver_isa() -> str | None:
    """The newest PTX ISA the driver's JIT takes, or None if unknown."""
    version = ctypes.c_int()
    if _module_api()[4](ctypes.byref(version)):
        return None
    major, minor = divmod(version.value // 10, 100)
    return f"9.{minor}" if major == 13 else _ISA_12.get(minor) if major == 12 else None


def whole_program_function(ptx: str, threads: int, needs: int) -> int:
    """The ``CUfunction`` of the one kernel in ``ptx``, the module compiled as a whole program by the driver's JIT
    (``cuModuleLoadData``, into the current context), for kernels that hand registers between warpgroups
    (``setmaxnreg``): numba-cuda links its kernels as relocatable code, in which ptxas ignores it (C7504). A PTX
    newer than the driver takes is tried again at the driver's version (it fails there if it uses anything newer:
    the JIT refuses what it does not know). ``needs``: the registers the hand-over's counts add up to over the block's
    ``threads`` — a function launched with fewer would wait forever in ``setmaxnreg.inc``, so it is refused."""
    import re

    name = _entry(ptx)
    load, get, attribute, _, _ = _module_api()
    module = ctypes.c_void_p()
    code = load(ctypes.byref(module), ptx.encode())
    isa = _driver_isa() if code == _UNSUPPORTED_PTX else None
    if isa is not None:
        code = load(ctypes.byref(module), re.sub(r"(?m)^(\s*)\.version\s+\d+\.\d+", rf"\g<1>.version {isa}",
                                                 ptx).encode())
    _check(code, f"cuModuleLoadData (the kernel's PTX, whole{'; again at ISA ' + isa if isa else ''})")
    function, regs = ctypes.c_void_p(), ctypes.c_int()
    _check(get(ctypes.byref(function), module, name.encode()), "cuModuleGetFunction")
    _check(attribute(ctypes.byref(regs), _NUM_REGS, function), "cuFuncGetAttribute")
    if threads * regs.value < needs:
        raise RedalgebraError(f"the whole-program kernel was built with {regs.value} registers a thread: its block of "
                              f"{threads} threads holds fewer than the {needs} its register hand-over adds up to")
    return function.value


def _whole_program(overload, threads: int, most: bool = False):
    """:func:`whole_program_function` of a numba overload, once per context (a warning and None where it cannot be
    loaded so: the caller launches numba's linked kernel, which is right but spills). ``most``: the kernel hands
    registers over as far as ``regs_take232`` does."""
    import warnings

    from numba import cuda

    from .sync import PRODUCER_THREADS, REGS_GIVE, REGS_GIVE_MOST, REGS_TAKE, REGS_TAKE_MOST

    cuda.current_context()  # (numba's context, current: the module loads into it)
    context = ctypes.c_void_p()
    library = overload._codelibrary
    try:
        _check(_module_api()[3](ctypes.byref(context)), "cuCtxGetCurrent")
        key = (context.value, id(library))
        if key not in _WHOLE:
            ptxes = library.get_asm_strs()
            if len(ptxes) != 1 or getattr(library, "_linking_files", None):
                raise RedalgebraError("the kernel is more than one PTX module (debug information, or files to link)")
            give, take = (REGS_GIVE_MOST, REGS_TAKE_MOST) if most else (REGS_GIVE, REGS_TAKE)
            needs = PRODUCER_THREADS * give + (threads - PRODUCER_THREADS) * take
            _WHOLE[key] = (whole_program_function(ptxes[0], threads, needs), library)
        return _WHOLE[key][0]
    except RedalgebraError as err:
        warnings.warn(f"{err}: launching the kernel as numba links it, where ptxas ignores the register hand-over "
                      f"(setmaxnreg) and the consumers spill", stacklevel=3)
        return None


def _check(code: int, what: str) -> None:
    if code:
        text = ctypes.c_char_p()
        _libcuda()[2](code, ctypes.byref(text))
        raise RedalgebraError(f"{what} failed: CUDA error {code} ({(text.value or b'?').decode()})")


def c_strides(shape: tuple, itemsize: int) -> tuple:
    """The byte strides of a C-contiguous array of ``shape``."""
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.insert(0, step)
        step *= n
    return tuple(strides)


def pack(ty, value) -> tuple[list, ctypes.c_void_p | None]:
    """``value`` of numba type ``ty`` as kernel parameters (ctypes objects), and the data-pointer field
    of an array (None for a scalar). ``value``: an object with the CUDA array interface, or a number."""
    from numba.core import types

    if isinstance(ty, types.Array):
        face = value.__cuda_array_interface__
        shape = tuple(face["shape"])
        item = ty.dtype.bitwidth // 8
        strides = face.get("strides") or c_strides(shape, item)  # None: C-contiguous
        size = 1
        for n in shape:
            size *= n
        data = ctypes.c_void_p(face["data"][0])
        fields = [ctypes.c_void_p(0), ctypes.c_void_p(0), ctypes.c_int64(size), ctypes.c_int64(item), data]
        fields += [ctypes.c_int64(n) for n in shape] + [ctypes.c_int64(s) for s in strides]
        return fields, data
    kind = "bool" if ty == types.boolean else str(ty)
    if kind not in _SCALARS:
        raise RedalgebraError(f"no driver-level packing for kernel arguments of type {ty}")
    return [_SCALARS[kind](value)], None


class DriverStep:
    """One configured numba kernel as a ``cuLaunchKernel`` call with its parameters packed.

    ``configured``: ``module.kernel[grid, block]``; ``args``: its arguments (CUDA-array-interface objects
    and numbers); ``names``: a name per argument, by which :meth:`bind` rebinds an array's data pointer.
    """

    __slots__ = ("function", "grid", "block", "shared", "fields", "params", "pointers", "offsets", "_held", "_launch",
                 "_fixed", "_config", "_attributes", "cluster")

    def __init__(self, configured, args, names, dependent: bool = False, offsets: dict | None = None,
                 cluster: tuple | None = None):
        dispatcher = configured.dispatcher
        argtypes = tuple(dispatcher.typeof_pyval(a) for a in args)
        overload = dispatcher.compile(argtypes)  # the overload a numba launch would select
        launch, get_function, _, set_attribute = _libcuda()
        self.function = None
        # a register hand-over (the kernel calls regs_take: setmaxnreg) is honoured only in a whole program, not in
        # numba's linked one (found by the kernel's global names, which cost nothing to ask: the generator calls
        # regs_take in the kernel itself, never in a device function)
        code = getattr(getattr(dispatcher, "py_func", None), "__code__", None)
        if code is not None and any(name.startswith("regs_take") for name in code.co_names):
            block = tuple(configured.blockdim)
            self.function = _whole_program(overload, block[0] * block[1] * block[2], "regs_take232" in code.co_names)
        if self.function is None:
            kernel = int(overload._codelibrary.get_cufunc().handle)
            function = ctypes.c_void_p()
            _check(get_function(ctypes.byref(function), kernel), "cuKernelGetFunction")
            self.function = function.value
        self.grid, self.block = tuple(configured.griddim), tuple(configured.blockdim)
        self.shared = int(configured.sharedmem)
        if self.shared > _STATIC_LIMIT:  # dynamic shared memory beyond 48 KB (up to 227 KB on Hopper)
            _check(set_attribute(self.function, _MAX_DYNAMIC_SHARED, self.shared), "cuFuncSetAttribute")
        self.fields, self.pointers = [], {}
        for name, ty, value in zip(names, argtypes, args):
            fields, data = pack(ty, value)
            self.fields += fields
            if data is not None:
                self.pointers.setdefault(name, []).append(data)
        self.params = (ctypes.c_void_p * len(self.fields))(*[ctypes.addressof(f) for f in self.fields])
        # what each name's fields point at now: a binding sets only those that change (a prepared call's weights,
        # kept scratch and cached params keep theirs; setting a ctypes field costs about 0.1 us)
        # (``offsets``: bytes from an array's start to the slice this launch reads — a chunk of its rows —, by name:
        # a binding points the slice at the new array's rows)
        self.offsets = offsets or {}
        self._held = {name: fields[0].value - self.offsets.get(name, 0) for name, fields in self.pointers.items()}
        self._launch = launch
        self._fixed = (self.function, *self.grid, *self.block, self.shared)  # the arguments before the stream
        # dependent (``Spec.dependent``, a module's later kernel): launched by cuLaunchKernelEx with the attribute
        # that lets it start while the kernel before it runs; it waits for that one itself (grid_wait)
        # ``cluster``: the blocks launched in clusters of this shape (codegen's Spec.cluster), which the kernel needs
        self._config, self.cluster = None, cluster
        attributes = []
        if dependent and _launch_ex() is not None:
            attributes.append(LaunchAttribute(id=_PROGRAMMATIC))
            attributes[-1].value[0] = 1
        if cluster is not None:
            if _launch_ex() is None:
                raise RedalgebraError("a kernel launched in thread-block clusters needs cuLaunchKernelEx (CUDA 12)")
            size = cluster[0] * cluster[1] * cluster[2]
            if size > CLUSTER_PORTABLE:  # (past the portable size: allowed where the GPU has it, a Hopper's 16)
                _check(set_attribute(self.function, _NON_PORTABLE, 1), "cuFuncSetAttribute (non-portable cluster)")
            attributes.append(LaunchAttribute(id=_CLUSTER))
            attributes[-1].value[0:3] = list(cluster)
        if attributes:
            self._attributes = (LaunchAttribute * len(attributes))(*attributes)
            self._config = LaunchConfig((ctypes.c_uint * 3)(*self.grid), (ctypes.c_uint * 3)(*self.block), self.shared,
                                        None, self._attributes, len(attributes))
            self._launch = _launch_ex()

    def bind(self, pointers: dict) -> None:
        """Point the named array arguments at new data (same shape, strides and dtype); those already pointing there
        are left as they are."""
        held = self._held
        for name, fields in self.pointers.items():
            ptr = pointers.get(name)
            if ptr is not None and ptr != held[name]:
                held[name] = ptr
                at = ptr + self.offsets.get(name, 0) if self.offsets else ptr
                for field in fields:
                    field.value = at

    def launch(self, stream: int = 0) -> None:
        """Launch on ``stream`` (a ``CUstream`` handle; 0: the legacy default stream), asynchronously."""
        if self._config is not None:
            self._config.stream = stream
            code = self._launch(ctypes.byref(self._config), self.function, self.params, None)
        else:
            code = self._launch(*self._fixed, stream, self.params, None)
        if code:
            _check(code, "cuLaunchKernel")
