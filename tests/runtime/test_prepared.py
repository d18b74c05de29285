"""The prepared torch call's bookkeeping (``tensors._Call``), without a GPU: CPU tensors stand for the device's
(the current device is made -1, a CPU tensor's ``get_device()``) and each launch is replaced by a stand-in that
reads, at the pointers the call bound, what the kernel would read. The GPU runs the same path bit for bit against
numba's own launch (``gpu/calls.py``)."""

import ctypes
import importlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from redalgebra.runtime import backends, compile as compile_kernel  # noqa: E402
from redalgebra.runtime import tensors  # noqa: E402
from tests.catalogue import fused  # noqa: E402

compile_module = importlib.import_module("redalgebra.runtime.compile")
B, L, D = 3, 37, 16


class Reader:
    """A launch that records the pointers bound to it and copies ``(name, count, ctype)``'s memory at launch, while
    the call's tensors are alive (a kernel reads them then)."""

    def __init__(self, names, reads):
        self.pointers = {n: [ctypes.c_void_p(0)] for n in names}
        self._config = None
        self.reads, self.seen = reads, []

    def bind(self, pointers):
        for name, fields in self.pointers.items():
            if pointers.get(name) is not None:
                fields[0].value = pointers[name]

    def launch(self, stream=0):
        got = {n: f[0].value for n, f in self.pointers.items()}
        got.update({f"{n} values": np.ctypeslib.as_array((ctype * count).from_address(got[n])).copy()
                    for n, count, ctype in self.reads})
        self.seen.append(got)


def _prepared(monkeypatch, name, strategy=None, reads=()):
    """``name`` compiled for the simulator and called as on the GPU; returns the kernel and the launch stand-ins of
    its prepared calls."""
    launches = []

    def device_launch(self, src, module, named, rows):
        launches.append(Reader(src.args, reads))
        return compile_module.Launch(((None, ("keep",), (named["keep"],)),), {}, (launches[-1],))

    monkeypatch.setattr(tensors, "_current_device", lambda torch: -1)
    monkeypatch.setattr(compile_module.Kernel, "_device_launch", device_launch)
    monkeypatch.setattr(compile_module, "cuda_module", lambda backend: backends.cuda_module("cudasim"))
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 0, raising=False)
    kernel = compile_kernel(fused(name), "cudasim", strategy)
    kernel.backend = "cuda"  # the prepared path, launched by the stand-in
    return kernel, launches


@pytest.fixture
def attention(monkeypatch):
    """Decode attention: params a query row and a scale per row."""
    return _prepared(monkeypatch, "decode_attention", reads=[("q", B * D, ctypes.c_float),
                                                             ("k", B * L * D, ctypes.c_float)])


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"k": torch.randn(B, L, D, generator=g), "v": torch.randn(B, L, D, generator=g)}


def test_a_float32_query_of_one_row_per_row_is_bound_as_it_is_and_a_number_once(attention):
    kernel, launches = attention
    q = torch.randn(B, D)
    one, two = _inputs(), _inputs(1)  # both alive: the second's keys cannot take the first's freed memory
    kernel(one, {"q": q, "scale": np.float32(0.25)})
    kernel(two, {"q": q, "scale": 0.25})  # the same signature: the same prepared call, the same scale tensor
    assert len(launches) == 1 and len(kernel._calls) == 1
    first, second = launches[0].seen
    assert first["q"] == second["q"] == q.data_ptr()  # not copied
    assert first["scale"] == second["scale"] and first["k"] != second["k"]


def test_queries_of_another_dtype_or_strided_are_converted_on_every_call(attention):
    kernel, launches = attention
    for q in (torch.randn(B, D).half(), torch.randn(D, B).t()):  # float16; a transposed view
        for _ in range(2):
            q = q + 1  # other values, the same signature
            kernel(_inputs(), {"q": q, "scale": 0.5})
            got = launches[-1].seen[-1]
            assert got["q"] != q.data_ptr()
            assert np.array_equal(got["q values"], q.float().contiguous().numpy().ravel())
    assert len(kernel._calls) == 2 and [len(launch.seen) for launch in launches] == [2, 2]


def test_a_strided_input_is_copied_whole_and_its_signature_prepared_once(attention):
    kernel, launches = attention
    q = torch.randn(B, D)
    for n in range(2):
        wide = torch.randn(B, L, 2 * D)
        k = wide[:, :, ::2]  # every other component: strided
        kernel({"k": k, "v": _inputs()["v"]}, {"q": q, "scale": 1.0})
        got = launches[-1].seen[-1]
        assert got["k"] != k.data_ptr() and np.array_equal(got["k values"], k.contiguous().numpy().ravel())
    # the clone's signature is the one prepared (a view's own is never kept: its strides would say contiguous)
    assert len(kernel._calls) == 1 and len(launches) == 1 and len(launches[0].seen) == 2


def test_an_out_tensor_is_written_in_place_when_it_fits(attention):
    kernel, launches = attention
    inputs, params = _inputs(), {"q": torch.randn(B, D), "scale": 1.0}
    y = torch.empty(B, D)
    got = kernel(inputs, params, out={"y": y})
    assert got["y"] is y and launches[-1].seen[-1]["out_y"] == y.data_ptr()
    with pytest.raises(tensors.RedalgebraError, match="no output named"):
        kernel(inputs, params, out={"z": y})


def test_an_out_tensor_off_a_16_byte_boundary_is_copied_into_not_written_in_place(attention):
    # the kernels store 16 bytes at a time: a contiguous slice starting 4 bytes past a boundary would fault on the GPU
    kernel, launches = attention
    inputs, params = _inputs(), {"q": torch.randn(B, D), "scale": 1.0}
    y = torch.zeros(B * D + 1)[1:].view(B, D)
    assert y.is_contiguous() and y.data_ptr() % 16 == 4
    got = kernel(inputs, params, out={"y": y})
    bound = launches[-1].seen[-1]["out_y"]
    assert got["y"] is y and bound != y.data_ptr() and bound % 16 == 0


def test_an_output_written_in_float32_is_returned_in_the_inputs_dtype(monkeypatch):
    # a first-generation strategy writes its per-element output in float32; torch's convention is the input's dtype
    kernel, launches = _prepared(monkeypatch, "safe_softmax", "block")
    x = torch.randn(B, L).half()
    for _ in range(2):
        y = kernel({"x": x})["y"]
        assert y.dtype == torch.float16 and tuple(y.shape) == (B, L)
    assert len(launches) == 1 and len(launches[0].seen) == 2


class Subclass(torch.Tensor):
    """A tensor subclass of a user's own module (its type's module is not torch's)."""


def test_a_strided_view_of_a_tensor_subclass_is_copied_too(attention):
    kernel, launches = attention
    k = torch.randn(B, L, 2 * D)[:, :, ::2].as_subclass(Subclass)
    kernel({"k": k, "v": _inputs()["v"]}, {"q": torch.randn(B, D), "scale": 1.0})
    got = launches[-1].seen[-1]
    assert got["k"] != k.data_ptr() and np.array_equal(got["k values"], torch.Tensor(k).contiguous().numpy().ravel())


def test_a_number_is_cached_by_its_bits_and_odd_params_get_the_layouts_message(attention):
    kernel, launches = attention
    reads = {}
    for scale in (0.0, -0.0, 0.0):
        kernel(_inputs(), {"q": torch.randn(B, D), "scale": scale})
        reads[launches[-1].seen[-1]["scale"]] = scale
    assert len(reads) == 2  # -0.0 has its own tensor (a kernel may divide by it)
    with pytest.raises(tensors.RedalgebraError):  # a ragged list: the layout's message, not NumPy's ValueError
        kernel(_inputs(), {"q": [[1.0], [1.0, 2.0]], "scale": 1.0})
