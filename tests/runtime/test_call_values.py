"""What a call makes of the values it is given: a mask read as booleans, integer params checked as the reference
checks them, params of the wrong shape or kind refused by name, and values a tensor-core strategy cannot hold refused
before the launch — never a traceback from NumPy or a silent wrong answer."""

import numpy as np
import pytest

from redalgebra import RedalgebraError, evaluate, workloads
from redalgebra.runtime import compile
from tests.catalogue import fused


def test_a_mask_that_is_not_boolean_is_read_as_booleans():
    # 0.5 and 256 keep an element (the reference's reading); before, the cast to bytes dropped 0.5 and wrapped 256
    kernel = compile(fused("safe_softmax"), "cpu")
    x = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], np.float32)
    want = kernel({"x": x})["y"]
    for keep in (np.array([[0.5, 0.5, 1.0], [256, 1, -3]]), np.array([[2, 3, 1], [1, 1, 1]], np.int64)):
        np.testing.assert_array_equal(kernel({"x": x}, None, keep)["y"], want)
    torch = pytest.importorskip("torch")
    got = kernel({"x": torch.from_numpy(x)}, None, torch.tensor([[0.5, 0.5, 1.0], [256.0, 1.0, -3.0]]))["y"]
    np.testing.assert_array_equal(got.numpy(), want)


def test_integer_params_are_whole_numbers_exact_in_float32():
    # ALiBi's query position: 2**30 - pos is not a float32 number (the bias vanished, silently); 2.5 is no position
    rng = np.random.default_rng(3)
    k, v = (rng.normal(size=(4, 20, 8)).astype(np.float32) for _ in range(2))
    params = {"q": rng.normal(size=8).astype(np.float32), "scale": 0.3, "slope": 0.1}
    kernel = compile(fused("alibi_attention"), "cpu")
    good = dict(params, qpos=np.array([2, 5, 19, 3]))
    ref = evaluate(workloads.get("alibi_attention").cascade, {"k": k, "v": v}, good)["y"]
    np.testing.assert_allclose(kernel({"k": k, "v": v}, good)["y"], ref, rtol=1e-5, atol=1e-6)
    with pytest.raises(RedalgebraError, match="exact up to 16777216"):
        kernel({"k": k, "v": v}, dict(params, qpos=np.array([2 ** 30, 5, 19, 3])))
    with pytest.raises(RedalgebraError, match="whole numbers, got 2.5"):
        kernel({"k": k, "v": v}, dict(params, qpos=np.array([2.5, 5, 19, 3])))


@pytest.mark.parametrize("q,message", [
    (np.ones((2, 8), np.float32), r"\(size,\) or \(rows, size\) with rows = 3, got shape \(2, 8\)"),
    (1.0, "is a vector of size d: pass"),
    (None, "is a vector of size d: pass"),
    (np.array(["a"] * 8), "real numbers, got <U1"),
])
def test_params_of_the_wrong_shape_or_kind_are_refused_by_name(q, message):
    k = np.random.default_rng(4).normal(size=(3, 20, 8)).astype(np.float32)
    kernel = compile(fused("attention"), "cpu")
    with pytest.raises(RedalgebraError, match=message):
        kernel({"k": k, "v": k}, {"q": q, "scale": 0.5})
    with pytest.raises(RedalgebraError, match="real numbers, got complex128"):
        kernel({"k": k, "v": k}, {"q": np.ones(8), "scale": 1 + 2j})


def test_a_zero_dimensional_tensor_is_refused_by_name():
    torch = pytest.importorskip("torch")
    with pytest.raises(RedalgebraError, match=r"must be a 2-D array \(rows, L\), got shape \(\)"):
        compile(fused("safe_softmax"), "cpu")({"x": torch.tensor(1.0)})


@pytest.mark.parametrize("strategy", ["mma", "wgmma"])
def test_a_query_beyond_float16_is_refused_where_float16_products_would_make_it_nan(strategy):
    # the float32 query is multiplied as a float16 value plus a residual: 1e5 has no float16 value (the scores were
    # NaN, silently); within the range the call answers, and bfloat16 keys take the large query
    rng = np.random.default_rng(2)
    k, v = (rng.normal(size=(1, 40, 16)).astype(np.float16) for _ in range(2))
    q = (rng.normal(size=(5, 16)) * 1e5).astype(np.float32)
    kernel = compile(fused("attention"), "cudasim", strategy)
    with pytest.raises(RedalgebraError, match="beyond float16's range"):
        kernel({"k": k, "v": v}, {"q": q, "scale": 1e-5})
    near = np.clip(q, -65000, 65000)
    y = kernel({"k": k, "v": v}, {"q": near, "scale": 1e-5})["y"]
    wide = {"k": np.broadcast_to(k.astype(np.float64), (5, 40, 16)), "v": np.broadcast_to(v.astype(np.float64), (5, 40, 16))}
    ref = evaluate(workloads.get("attention").cascade, wide, {"q": near.astype(np.float64), "scale": 1e-5})["y"]
    assert np.isfinite(y).all() and np.abs(y - ref).max() <= 1e-3 * np.abs(ref).max()


def test_an_input_without_a_shape_is_named_with_its_type():
    with pytest.raises(RedalgebraError, match="must be an array of 2 dimensions .* got a list"):
        compile(fused("safe_softmax"), "cpu")({"x": [[1.0] * 8] * 6})


def test_the_simulator_after_the_cpu_in_one_process_says_why_it_cannot_run(tmp_path):
    # the CPU back end imports numba without the simulator, which numba fixes at its import: the message says so,
    # every time, and the process is left as it was
    # (it spoke of real CUDA, which the process had not used)
    import os
    import subprocess
    import sys

    script = ("import numpy as np\nfrom redalgebra import RedalgebraError, workloads\nfrom redalgebra.derive import derive\n"
              "from redalgebra.runtime import compile\nf = derive(workloads.get('safe_softmax').cascade)\n"
              "compile(f, 'cpu')({'x': np.ones((2, 8), np.float32)})\n"
              "import os\nfor scale in (2, 3):\n"
              "    try:\n        compile(f, 'cudasim')({'x': np.ones((2, 8), np.float32)})\n"
              "    except RedalgebraError as err:\n        print(err, os.environ.get('NUMBA_ENABLE_CUDASIM'))\n"
              # (a CPU kernel compiled afresh reloads numba's configuration: with the variable left set, the second
              # try passed the check and reached real CUDA's driver, a CudaSupportError)
              "    compile(derive(parse(f'input x\\nreduce m = min(x)\\nout y = m * {scale}')), 'cpu')"
              "({'x': np.ones((2, 8), np.float32)})\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["REDALGEBRA_CACHE"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", "from redalgebra import parse\n" + script], capture_output=True,
                          text=True, env=env, timeout=300)
    said = done.stdout.splitlines()
    assert len(said) == 2 and all("chosen when numba is first imported" in line and "NUMBA_ENABLE_CUDASIM=1" in line
                                  and line.endswith(" None") for line in said), done.stderr[-2000:]


def test_a_tensor_that_requires_grad_gets_a_warning_that_the_outputs_carry_none():
    torch = pytest.importorskip("torch")
    import warnings

    x = torch.randn(3, 8, requires_grad=True)
    kernel = compile(fused("safe_softmax"), "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad():
            kernel({"x": x})  # said to be inference: no warning
    with pytest.warns(UserWarning, match="outputs carry no gradient"):
        y = kernel({"x": x})["y"]
    assert y.grad_fn is None
    np.testing.assert_allclose(y.numpy(), torch.softmax(x.detach(), -1).numpy(), rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernel({"x": x})  # once a kernel


def test_exact_numbers_are_params_and_torch_integers_are_checked():
    # a Fraction, a Decimal and a SymPy number are real numbers (NumPy holds them as objects); a torch int tensor's
    # values are checked as a NumPy array's (they were made float32 first, and 2**24 + 1 rounded unseen)
    import decimal
    import fractions

    import sympy as sp

    rng = np.random.default_rng(3)
    k, v = (rng.normal(size=(4, 20, 8)).astype(np.float32) for _ in range(2))
    q = rng.normal(size=8).astype(np.float32)
    kernel = compile(fused("attention"), "cpu")
    want = kernel({"k": k, "v": v}, {"q": q, "scale": 0.5})["y"]
    for scale in (fractions.Fraction(1, 2), decimal.Decimal("0.5"), sp.Rational(1, 2)):
        np.testing.assert_array_equal(kernel({"k": k, "v": v}, {"q": q, "scale": scale})["y"], want)
    with pytest.raises(RedalgebraError, match="real numbers, got <U3"):
        kernel({"k": k, "v": v}, {"q": q, "scale": "0.5"})
    torch = pytest.importorskip("torch")
    alibi = compile(fused("alibi_attention"), "cpu")
    params = {"q": torch.from_numpy(q), "scale": 0.3, "slope": 0.1}
    tensors = {"k": torch.from_numpy(k), "v": torch.from_numpy(v)}
    with pytest.raises(RedalgebraError, match="exact up to 16777216"):
        alibi(tensors, dict(params, qpos=torch.tensor([2 ** 24 + 1, 5, 19, 3])))
    assert alibi(tensors, dict(params, qpos=torch.tensor([2, 5, 19, 3])))["y"].shape == (4, 8)
