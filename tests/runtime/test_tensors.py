"""PyTorch tensors in and out of a kernel, and a cascade as a torch custom op (CPU; the simulator)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import redalgebra as ra  # noqa: E402
from redalgebra import RedalgebraError  # noqa: E402
from tests.catalogue import fused  # noqa: E402

X = torch.from_numpy(np.random.default_rng(5).normal(size=(5, 37)).astype(np.float32)) * 2


@pytest.mark.parametrize("backend", ["cpu", "cudasim"])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float16, 2e-3), (torch.bfloat16, 8e-3)])
def test_tensors_in_give_tensors_out_in_the_inputs_dtype(backend, dtype, tol):
    x = X.to(dtype)
    y = ra.compile(fused("safe_softmax"), backend)({"x": x})["y"]
    assert isinstance(y, torch.Tensor) and y.dtype == dtype and y.shape == x.shape
    want = torch.softmax(x.double(), -1)
    assert (y.double() - want).abs().max() <= tol


def test_params_are_tensors_and_row_outputs_are_float32():
    k, v = torch.randn(3, 20, 8), torch.randn(3, 20, 8)
    q, scale = torch.randn(3, 8), torch.tensor(0.35)
    y = ra.compile(fused("decode_attention"), "cpu")({"k": k, "v": v}, {"q": q, "scale": scale})["y"]
    want = torch.softmax(torch.einsum("rd,rld->rl", q, k) * scale, -1)
    assert y.dtype == torch.float32 and torch.allclose(y, torch.einsum("rl,rld->rd", want, v), atol=1e-5)


def test_the_op_returns_outputs_in_declaration_order_then_top_k_indices():
    op = ra.torch_op(fused("moe_routing"))
    w, index = op(X)
    p = torch.softmax(X, -1)
    top, picked = torch.topk(p, 8)
    assert index.dtype == torch.int32 and torch.equal(index.long(), picked)
    assert torch.allclose(w, top / top.sum(-1, keepdim=True), atol=1e-6)
    assert ra.torch_op(fused("moe_routing")) is op  # registered once per cascade


def test_the_op_runs_inside_a_full_graph_compile_with_an_integer_label():
    op = ra.torch_op(fused("cross_entropy"))
    label = torch.randint(0, 37, (5,))

    def loss(logits, target):
        return op(logits * 0.5, target).mean()

    # aot_eager: the whole Dynamo and AOT-autograd path (fake tensors through the op's fake
    # implementation, no graph break allowed) without the C++ compile of inductor (17 s here)
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    want = torch.nn.functional.cross_entropy(X * 0.5, label)
    assert torch.allclose(compiled(X, label), want, atol=1e-5)


def test_the_fake_implementation_agrees_with_the_op():
    torch.library.opcheck(ra.torch_op(fused("safe_softmax")), (X,), test_utils=("test_schema", "test_faketensor"))


def test_tensors_of_other_dtypes_get_a_message():
    with pytest.raises(RedalgebraError, match="float32, float16, bfloat16 or float8_e4m3fn tensors, got torch.float64"):
        ra.compile(fused("safe_softmax"), "cpu")({"x": X.double()})


@pytest.mark.parametrize("backend", ["cpu", "cudasim"])
def test_float8_weights_are_read_as_their_values(backend):
    x = X.to(torch.bfloat16)
    w = (torch.randn(1, 37, 16, generator=torch.Generator().manual_seed(3)) * 0.3).to(torch.float8_e4m3fn)
    strategy = "columns" if backend == "cudasim" else None
    y = ra.compile(fused("fp8_quant_gemm"), backend, strategy)({"x": x, "w": w})["y"]
    xd = x.double()
    s = xd.abs().amax(-1, keepdim=True).clamp(min=1e-12) / 448
    want = ((xd / s).to(torch.float8_e4m3fn).double() @ w[0].double()) * s
    assert y.dtype == torch.float32 and (y.double() - want).abs().max() <= 1e-5 * want.abs().max()


def test_the_op_refuses_inputs_that_need_a_gradient_it_cannot_give():
    op = ra.torch_op(fused("safe_softmax"))
    x = X.clone().requires_grad_()
    with pytest.raises(ra.RedalgebraError, match="no backward"):
        op(x)
    with torch.no_grad():
        assert torch.allclose(op(x), torch.softmax(X, -1), atol=1e-6)


def test_outputs_are_written_into_the_tensors_given_as_out():
    kernel = ra.compile(fused("moe_routing"), "cpu")
    w, index = torch.empty(5, 8), torch.empty(5, 8, dtype=torch.int32)
    got = kernel({"g": X}, out={"w": w, "t.index": index})
    assert got["w"] is w and got["t.index"] is index
    top, picked = torch.topk(torch.softmax(X, -1), 8)
    assert torch.allclose(w, top / top.sum(-1, keepdim=True), atol=1e-6) and torch.equal(index.long(), picked)
    with pytest.raises(RedalgebraError, match=r"out\['w'\] must be a torch.float32 tensor of shape \(5, 8\)"):
        kernel({"g": X}, out={"w": torch.empty(5, 7)})
    with pytest.raises(RedalgebraError, match="no output named 'v'"):
        kernel({"g": X}, out={"v": w})


def test_two_outputs_in_one_tensors_memory_are_refused_and_a_buffers_columns_taken():
    kernel = ra.compile(ra.derive(ra.parse("input x\nreduce m = max(x)\nreduce s = sum(exp(x - m))\nout y = m\n"
                                           "out w = log(s)")), "cpu")
    buf = torch.zeros(5, 2)
    got = kernel({"x": X}, out={"y": buf[:, 0], "w": buf[:, 1]})  # (strided views that interleave: apart)
    assert torch.allclose(buf[:, 0], X.max(-1).values) and torch.allclose(got["w"], buf[:, 1])
    assert not torch.allclose(buf[:, 0], buf[:, 1])
    flat = torch.zeros(6)
    # the same elements; overlapping bytes; a column and a contiguous run through it (strided against contiguous)
    for y, w in ((buf[:, 0], buf[:, 0]), (flat[:5], flat[1:]), (buf[:, 0], buf.view(-1)[3:8])):
        with pytest.raises(RedalgebraError, match="share memory"):
            kernel({"x": X}, out={"y": y, "w": w})


def test_the_op_takes_float8_weights_and_its_fake_agrees():
    op = ra.torch_op(fused("fp8_quant_gemm"))
    x = X.to(torch.bfloat16)
    w = (torch.randn(1, 37, 16, generator=torch.Generator().manual_seed(4)) * 0.3).to(torch.float8_e4m3fn)
    y = op(x, w)
    assert y.dtype == torch.float32 and y.shape == (5, 16)
    # (test_schema would multiply float8 tensors, which torch's CPU kernels do not implement)
    torch.library.opcheck(op, (x, w), test_utils=("test_faketensor",))


def test_wrapping_a_host_tensor_gets_a_message():
    for wrap, t in ((ra.as_e4m3, torch.zeros(3).to(torch.float8_e4m3fn)),
                    (ra.as_bfloat16, torch.zeros(3, dtype=torch.bfloat16))):
        with pytest.raises(RedalgebraError, match="give host data as a NumPy array; kernels take torch tensors"):
            wrap(t)


@pytest.mark.parametrize("strategy,out,name", [
    ("columns_wgmma", "bfloat16", "fp8_quant_gemm"),  # a GEMM's outputs stored in 16 bits when asked
    ("columns_wgmma", "float16", "fp8_quant_gemm"),
    ("rows", "bfloat16", "safe_softmax"),             # per-element outputs of float32 inputs stored in bfloat16
    ("columns", "bfloat16", "fp8_quant_gemm"),        # stored in float32 by the strategy: converted on return
])
def test_outputs_stored_in_16_bits_when_asked_come_back_as_such_tensors(strategy, out, name):
    # the stored patterns are read as the values they are (never converted as integers), in the type asked for
    gen = torch.Generator().manual_seed(4)
    if name == "fp8_quant_gemm":
        inputs = {"x": torch.randn(17, 64, generator=gen).to(torch.bfloat16),
                  "w": (torch.randn(1, 64, 40, generator=gen) * 0.3).to(torch.bfloat16)}
        xd, wd = inputs["x"].double(), inputs["w"][0].double()
        s = xd.abs().amax(-1, keepdim=True).clamp(min=1e-12) / 448
        want = ((xd / s).to(torch.float8_e4m3fn).double() @ wd) * s
    else:
        inputs = {"x": X}
        want = torch.softmax(X.double(), -1)
    y = ra.compile(fused(name), "cudasim", strategy, out_dtype=out)(inputs)["y"]
    assert y.dtype == getattr(torch, out)
    from redalgebra.runtime.check import STORE_ROUNDING  # (half an ulp of the stored type, of the value)

    assert (y.double() - want).abs().max() <= (STORE_ROUNDING[out] + 1e-5) * want.abs().max()


def test_out_dtype_float32_returns_float32_tensors_for_16_bit_inputs():
    # (the float32 results were rounded back to the input's float16, and a float32 out= refused)
    kernel = ra.compile(fused("safe_softmax"), "cpu", out_dtype="float32")
    x = X.half()
    y = kernel({"x": x})["y"]
    assert y.dtype == torch.float32 and torch.allclose(y.double(), torch.softmax(x.double(), -1), atol=1e-6)
    given = torch.empty(5, 37)
    assert kernel({"x": x}, out={"y": given})["y"] is given


def test_float64_param_tensors_are_checked_before_they_are_rounded_to_float32():
    # (a float64 tensor was made float32 first: 1e39 became inf and NaN outputs, 3 + 1e-9 a whole label)
    k, v = torch.randn(1, 5, 8), torch.randn(1, 5, 8)
    attention = ra.compile(fused("decode_attention"), "cpu")
    with pytest.raises(RedalgebraError, match="past float32's range"):
        attention({"k": k, "v": v}, {"q": torch.randn(1, 8, dtype=torch.float64) * 1e39, "scale": 0.3})
    with pytest.raises(RedalgebraError, match="past float32's range"):
        attention({"k": k, "v": v}, {"q": torch.randn(1, 8), "scale": torch.tensor(1e39, dtype=torch.float64)})
    q = torch.randn(1, 8, dtype=torch.float64)
    assert torch.allclose(attention({"k": k, "v": v}, {"q": q, "scale": 0.3})["y"],
                          attention({"k": k, "v": v}, {"q": q.float(), "scale": 0.3})["y"])
    ce = ra.compile(fused("cross_entropy"), "cpu")
    for label, why in (([3 + 1e-9, 0], "needs whole numbers"), ([2.0 ** 24 + 1, 0], "exact up to")):
        with pytest.raises(RedalgebraError, match=why):
            ce({"x": torch.randn(2, 10)}, {"label": torch.tensor(label, dtype=torch.float64)})


def test_a_keep_mask_that_requires_grad_is_read_as_its_values():
    keep = (torch.rand(5, 37, generator=torch.Generator().manual_seed(1)) > 0.3).float().requires_grad_()
    got = ra.compile(fused("safe_softmax"), "cpu")({"x": X}, keep=keep)["y"]
    want = ra.compile(fused("safe_softmax"), "cpu")({"x": X}, keep=keep.detach() != 0)["y"]
    assert torch.equal(got, want)


def test_the_op_takes_names_torchscript_reserves_and_refuses_a_name_that_is_not_an_identifier():
    # (an input named None, a param named def or Tensor: legal in the text format, a raw schema error from torch)
    f = ra.derive(ra.parse("input None\nparam def\nparam Tensor\nreduce m = max(None)\nout y = None - m + def * Tensor\n",
                           "reserved_names"))
    x, d, t = torch.randn(2, 5), torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])
    got = ra.torch_op(f)(x, d, t)
    assert torch.allclose(got, x - x.max(-1, keepdim=True).values + (d * t)[:, None])
    for bad in ("a b-c", "1abc", "class"):
        with pytest.raises(RedalgebraError, match="must be a Python identifier"):
            ra.torch_op(fused("safe_softmax"), name=bad)
    # the op namespace's own attributes: torch returned them for the op (an AttributeError inside torch), and the
    # registration, half done, then failed as registered twice
    for taken in ("name", "_dir", "__class__"):
        for _ in range(2):
            with pytest.raises(RedalgebraError, match=f"torch.ops.redalgebra.{taken} is the op namespace's own"):
                ra.torch_op(fused("safe_softmax"), name=taken)
    named = ra.derive(ra.parse("input x\nreduce m = max(x)\nout y = m\n", "name"))  # (its default name: another)
    assert torch.equal(ra.torch_op(named)(X), X.max(-1).values)


def test_an_out_tensor_that_requires_grad_is_refused_with_a_clear_error():
    kernel = ra.compile(fused("safe_softmax"), "cpu")
    with pytest.raises(RedalgebraError, match=r"out\['y'\] requires grad"):
        kernel({"x": X}, out={"y": torch.empty(5, 37, requires_grad=True)})
    with torch.no_grad():  # (outside grad mode it is written, as torch's own out= ops do)
        given = torch.empty(5, 37, requires_grad=True)
        assert kernel({"x": X}, out={"y": given})["y"] is given


def test_a_param_name_the_cascade_lacks_is_refused_on_the_torch_path():
    k = ra.compile(fused("safe_softmax"), "cpu")
    with pytest.raises(RedalgebraError, match=r"unknown param 'scale'"):
        k({"x": X}, {"scale": torch.tensor(2.0)})
    with pytest.raises(RedalgebraError, match=r"unknown input 'z'"):
        k({"x": X, "z": X})
    with pytest.raises(RedalgebraError, match=r"no value given for \['x'\]; unknown input 'xx'"):
        k({"xx": X})  # (a bare KeyError from reading the first input before)


def test_tensors_the_kernels_cannot_take_are_refused_by_name_before_they_run():
    # a meta tensor reached NumPy's conversion (a TypeError, or "data is NULL" for an out); an expanded out, torch's
    # copy after the kernels ran; a float8 mask, "unsupported ScalarType"
    kernel = ra.compile(ra.derive(ra.parse("input x\nreduce m = max(x)\nout y = m")), "cpu")
    meta = {"device": "meta"}
    for args, message in ((({"x": torch.randn(5, 37, **meta)},), "input x is a meta tensor"),
                          (({"x": X}, {}, torch.ones(5, 37, dtype=torch.bool, **meta)), "keep is a meta tensor"),
                          (({"x": X}, {}, None, {"y": torch.empty(5, **meta)}), r"out\['y'\] is a meta tensor"),
                          (({"x": X}, {}, None, {"y": torch.zeros(1).expand(5)}), r"out\['y'\] is expanded")):
        with pytest.raises(RedalgebraError, match=message):
            kernel(*args)
    keep = torch.rand(5, 37, generator=torch.Generator().manual_seed(2)) > 0.3
    got = kernel({"x": X}, keep=keep.to(torch.float8_e4m3fn))["y"]
    assert torch.equal(got, kernel({"x": X}, keep=keep)["y"])


def test_a_tensor_expanded_over_the_rows_is_its_first_row_read_in_place():
    # (the CUDA path copied a weight expanded to (R, L, n) whole on every call; its one row needs no copy)
    from redalgebra.runtime.call_layout import broadcast_rows

    w = torch.randn(1, 37, 16)
    got = broadcast_rows({"x": X, "w": w.expand(5, 37, 16)})["w"]
    assert got.shape == (1, 37, 16) and got.is_contiguous() and 0 not in got.stride()
    assert got.data_ptr() == w.data_ptr()
    kernel = ra.compile(fused("fp8_quant_gemm"), "cpu")
    assert torch.equal(kernel({"x": X, "w": w.expand(5, 37, 16)})["y"], kernel({"x": X, "w": w})["y"])

