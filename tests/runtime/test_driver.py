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


def test_a_whole_program_kernel_is_one_entry_of_its_ptx(monkeypatch):
    # a kernel handing registers between warpgroups is loaded from its PTX by the driver and found by its entry's
    # name: PTX of no entry or of two is refused before the driver is asked; one entry (visible or not) is looked up
    # by that name
    from redalgebra.runtime import driver

    asked = []

    def load(module, image):
        module._obj.value = 7
        asked.append(("load", image))
        return 0

    def get(function, module, name):
        function._obj.value = 11
        asked.append(("get", module.value, name))
        return 0
    monkeypatch.setattr(driver, "_module_api", lambda: (load, get))
    monkeypatch.setattr(driver, "_WHOLE", {})
    entry = ".visible .entry _Z5tilesPf(\n.param .u64 a\n)\n{\nret;\n}\n"
    with pytest.raises(RedalgebraError, match="one entry, found 0"):
        driver.whole_program_function(".version 9.0\n.target sm_90a\n")
    with pytest.raises(RedalgebraError, match="one entry, found 2"):
        driver.whole_program_function(entry + entry.replace("tiles", "other"))
    ptx = ".version 9.0\n.target sm_90a\n" + entry
    assert driver.whole_program_function(ptx) == 11 and driver.whole_program_function(ptx) == 11
    assert asked == [("load", ptx.encode() + b"\0"), ("get", 7, b"_Z5tilesPf"), ("get", 7, b"_Z5tilesPf")]
