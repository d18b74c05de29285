"""The driver-level launch's argument packing against numba's kernel ABI (no GPU needed)."""

import ctypes

import numpy as np
import pytest
from numba.core import types

from redalgebra.errors import RedalgebraError
from redalgebra.runtime.driver import pack


class Device:
    """An object with the CUDA array interface of a NumPy array (its host address as the pointer)."""

    def __init__(self, a: np.ndarray, strided: bool = True):
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str, "version": 3,
                                         "data": (a.ctypes.data, False),
                                         "strides": a.strides if strided else None}


def values(fields):
    return [f.value or 0 for f in fields]


@pytest.mark.parametrize("strided", [True, False])
def test_contiguous_array(strided):
    a = np.zeros((3, 5), np.float32)
    fields, data = pack(types.Array(types.float32, 2, "C"), Device(a, strided))
    # meminfo, parent, nitems, itemsize, data, shape, strides (bytes)
    assert values(fields) == [0, 0, 15, 4, a.ctypes.data, 3, 5, 20, 4]
    assert data is fields[4] and all(ctypes.sizeof(f) == 8 for f in fields)


def test_strided_view_keeps_its_strides():
    base = np.zeros((4, 6, 2), np.uint16)
    view = base[::2, 1:, :]
    fields, _ = pack(types.Array(types.uint16, 3, "A"), Device(view))
    assert values(fields)[2:] == [2 * 5 * 2, 2, view.ctypes.data, 2, 5, 2, 48, 4, 2]


def test_scalars_take_their_c_types():
    for ty, value, ctype in ((types.int64, 7, ctypes.c_int64), (types.int32, -3, ctypes.c_int32),
                             (types.float32, 0.5, ctypes.c_float), (types.boolean, True, ctypes.c_bool)):
        fields, data = pack(ty, value)
        assert data is None and isinstance(fields[0], ctype) and fields[0].value == value


def test_unknown_type_is_refused_with_a_message():
    with pytest.raises(RedalgebraError, match="no driver-level packing"):
        pack(types.complex64, 1j)


def test_the_launch_config_is_laid_out_as_the_driver_reads_it():
    # cuLaunchKernelEx reads CUlaunchConfig and CUlaunchAttribute as C lays them out (cuda.h, CUDA 12): seven 32-bit
    # fields, the stream handle 8-byte aligned, the attributes' pointer and their count; an attribute is its id,
    # padding to 8 bytes, and a 64-byte union whose first 32 bits carry the programmatic-launch flag
    from redalgebra.runtime.driver import LaunchAttribute, LaunchConfig

    assert ctypes.sizeof(LaunchAttribute) == 72 and LaunchAttribute.value.offset == 8
    assert (LaunchConfig.shared.offset, LaunchConfig.stream.offset, LaunchConfig.attrs.offset,
            LaunchConfig.count.offset, ctypes.sizeof(LaunchConfig)) == (24, 32, 40, 48, 56)


class _Driver:
    """Stand-ins of the driver calls the whole-program load makes (ctypes out-parameters written through ``_obj``):
    ``refuse`` error codes the loads return in turn, ``regs`` the function's register count."""

    def __init__(self, refuse=(), regs=168, version=13000):
        self.refuse, self.regs, self.version, self.asked = list(refuse), regs, version, []

    def api(self):
        def load(module, image):
            self.asked.append(("load", image))
            module._obj.value = 7
            return self.refuse.pop(0) if self.refuse else 0

        def get(function, module, name):
            self.asked.append(("get", module._obj.value if hasattr(module, "_obj") else module.value, name))
            function._obj.value = 11
            return 0

        def attribute(out, which, function):
            out._obj.value = self.regs
            return 0

        def context(out):
            out._obj.value = 5
            return 0

        def version(out):
            out._obj.value = self.version
            return 0
        return load, get, attribute, context, version


ENTRY = ".visible .entry _Z5tilesPf(\n.param .u64 a\n)\n{\nret;\n}\n"


def test_a_whole_program_kernel_is_the_one_entry_of_its_ptx_with_the_registers_its_hand_over_needs(monkeypatch):
    # PTX of no entry or of two is refused before the driver is asked; one entry (visible or not) is looked up by its
    # name; a PTX newer than the driver is loaded again at the driver's ISA (CUDA 13.0: 9.0); a function built with
    # fewer registers than the hand-over's counts add up to is refused (its setmaxnreg.inc would wait forever)
    from redalgebra.runtime import driver

    fake = _Driver(refuse=[driver._UNSUPPORTED_PTX])
    monkeypatch.setattr(driver, "_module_api", fake.api)
    with pytest.raises(RedalgebraError, match="one entry, found 0"):
        driver.whole_program_function(".version 9.5\n.target sm_90a\n", 384, 64512)
    with pytest.raises(RedalgebraError, match="one entry, found 2"):
        driver.whole_program_function(ENTRY + ENTRY.replace("tiles", "other"), 384, 64512)
    assert fake.asked == []
    ptx = ".version 9.5\n.target sm_90a\n" + ENTRY
    assert driver.whole_program_function(ptx, 384, 64512) == 11
    assert fake.asked[0] == ("load", ptx.encode()) and fake.asked[1] == ("load", ptx.replace("9.5", "9.0").encode())
    assert fake.asked[2][2] == b"_Z5tilesPf"
    for version, isa in ((13010, "9.1"), (12060, "8.5"), (12090, "8.8"), (11080, None)):  # (the drivers' ISAs)
        fake.version = version
        assert driver._driver_isa() == isa
    fake.regs = 167  # 384 x 167 < 128 x 88 + 256 x 208
    with pytest.raises(RedalgebraError, match="167 registers a thread"):
        driver.whole_program_function(ptx, 384, 64512)


def test_a_kernel_handing_registers_over_is_launched_whole_or_as_numba_links_it_with_a_warning(monkeypatch):
    # DriverStep: a kernel whose function calls regs_take is loaded from its PTX once per context and library; where
    # the driver refuses it (or it is more than one module), a warning, and numba's linked kernel
    from redalgebra.runtime import driver

    class Library:
        def __init__(self, ptxes):
            self.ptxes, self.linked = ptxes, 0

        def get_asm_strs(self):
            return self.ptxes

        def get_cufunc(self):
            self.linked += 1
            return type("F", (), {"handle": 3})()

    def kernel():
        regs_take()  # noqa: F821 - a name in the function's globals, as the generated kernels import it

    def configured(library):
        dispatcher = type("D", (), {"py_func": staticmethod(kernel), "typeof_pyval": staticmethod(lambda a: a),
                                    "compile": staticmethod(lambda t: type("O", (), {"_codelibrary": library})())})()
        return type("C", (), {"dispatcher": dispatcher, "griddim": (2, 1, 1), "blockdim": (384, 1, 1),
                              "sharedmem": 0})()

    def get_function(out, kernel):
        out._obj.value = 13
        return 0
    monkeypatch.setattr(driver, "_libcuda", lambda: (None, get_function, lambda code, text: 0, None))
    monkeypatch.setattr(driver, "_WHOLE", {})
    monkeypatch.setattr("numba.cuda.current_context", lambda: None)
    fake = _Driver()
    monkeypatch.setattr(driver, "_module_api", fake.api)
    library = Library([".version 9.0\n" + ENTRY])
    assert driver.DriverStep(configured(library), (), ()).function == 11
    assert driver.DriverStep(configured(library), (), ()).function == 11 and len(fake.asked) == 2  # (loaded once)
    refused = Library([".version 9.0\n" + ENTRY])
    fake.refuse = [218]  # CUDA_ERROR_INVALID_PTX
    with pytest.warns(UserWarning, match="launching the kernel as numba links it"):
        assert driver.DriverStep(configured(refused), (), ()).function == 13
    two = Library([".version 9.0\n" + ENTRY, ".version 9.0\n"])
    with pytest.warns(UserWarning, match="more than one PTX module"):
        assert driver.DriverStep(configured(two), (), ()).function == 13
    assert refused.linked == two.linked == 1 and library.linked == 0
    # a kernel without the hand-over: numba's linked kernel, its PTX never asked for
    plain = Library(None)

    def kernel():  # noqa: F811 - the plain kernel
        return 0
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert driver.DriverStep(configured(plain), (), ()).function == 13 and plain.linked == 1


def test_a_binding_points_each_named_array_at_its_new_data_and_leaves_the_others():
    # a step's fields as DriverStep packs them (a name passed twice has two data fields); a binding sets what changed
    # and leaves the fields of names not given, or given the pointer they hold, as they are
    from redalgebra.runtime.driver import DriverStep

    step = object.__new__(DriverStep)
    x, w = ctypes.c_void_p(0x1000), ctypes.c_void_p(0x2000)
    out = [ctypes.c_void_p(0x3000), ctypes.c_void_p(0x3000)]
    step.pointers = {"x": [x], "w": [w], "out": out}
    step.offsets = {}
    step._held = {name: fields[0].value for name, fields in step.pointers.items()}
    step.bind({"x": 0x1100, "out": 0x3300, "other": 0x9000})
    assert (x.value, w.value, [f.value for f in out]) == (0x1100, 0x2000, [0x3300, 0x3300])
    w.value = 0x2200  # (set here only to show that a pointer the step already holds is not written again)
    step.bind({"x": 0x1100, "w": 0x2000, "out": 0x3000})
    assert (x.value, w.value, [f.value for f in out]) == (0x1100, 0x2200, [0x3000, 0x3000])
    step.bind({"w": 0x2400})
    assert w.value == 0x2400 and step._held == {"x": 0x1100, "w": 0x2400, "out": 0x3000}


def test_a_chunks_binding_points_its_slices_at_their_rows_of_the_new_arrays():
    # a chunk of rows reads slices of the call's arrays: a new array's pointer is moved by the slice's offset, and a
    # name without an offset (a weight every chunk reads whole) takes the pointer as it is
    from redalgebra.runtime.driver import DriverStep

    step = object.__new__(DriverStep)
    x, w = ctypes.c_void_p(0x1000 + 0x400), ctypes.c_void_p(0x2000)
    step.pointers, step.offsets = {"x": [x], "w": [w]}, {"x": 0x400}
    step._held = {"x": 0x1000, "w": 0x2000}
    step.bind({"x": 0x1000, "w": 0x2000})  # (the arrays it holds: nothing written)
    assert (x.value, w.value) == (0x1400, 0x2000)
    step.bind({"x": 0x8000, "w": 0x9000})
    assert (x.value, w.value) == (0x8400, 0x9000) and step._held == {"x": 0x8000, "w": 0x9000}
