from pathlib import Path

import pytest

from redalgebra import RedalgebraError
from redalgebra.runtime import cache


def test_sources_are_files_named_by_their_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("REDALGEBRA_CACHE", str(tmp_path))
    src = "VALUE = 41 + 1\n"
    module = cache.load(src)
    assert module.VALUE == 42
    stamped = src + cache.runtime_stamp()  # the package's version and intrinsics, for numba's disk cache
    path = tmp_path / f"ra_{cache.digest(stamped)[:32]}.py"
    assert path.read_text() == stamped and module.__file__ == str(path)
    assert cache.runtime_stamp().startswith("# runtime ") and cache.runtime_stamp().endswith("\n")


def test_a_planted_or_altered_file_is_never_imported(tmp_path, monkeypatch):
    monkeypatch.setenv("REDALGEBRA_CACHE", str(tmp_path))
    src = "VALUE = 'genuine'\n"
    stamped = src + cache.runtime_stamp()
    path = tmp_path / f"ra_{cache.digest(stamped)[:32]}.py"
    path.write_text("raise SystemExit('planted code ran')\n")
    module = cache.load(src)  # rewritten from the source, since the content does not hash to the name
    assert module.VALUE == "genuine" and path.read_text() == stamped


def test_load_refuses_a_file_changed_after_writing(tmp_path, monkeypatch):
    monkeypatch.setenv("REDALGEBRA_CACHE", str(tmp_path))
    src = "VALUE = 1\n"
    real_write = cache.write

    def write_then_tamper(source):
        path = real_write(source)
        path.write_text("VALUE = 2\n")
        return path

    monkeypatch.setattr(cache, "write", write_then_tamper)
    with pytest.raises(RedalgebraError, match="does not hash to its name"):
        cache.load(src)


def test_numba_keeps_compiled_kernels_only_in_a_folder_no_one_else_may_write(tmp_path, monkeypatch):
    monkeypatch.setenv("REDALGEBRA_CACHE", str(tmp_path / "kernels"))
    monkeypatch.delenv("REDALGEBRA_NUMBA_CACHE", raising=False)
    path = cache.write("x = 1\n")  # its folder made by the cache: the user's own, 0o700
    assert cache.numba_cache(str(path))
    for mode in (0o770, 0o757):  # the group or others may write: numba's pickles could be planted there
        path.parent.chmod(mode)
        assert not cache.numba_cache(str(path)), oct(mode)
    path.parent.chmod(0o755)
    assert cache.numba_cache(str(path))
    pycache = path.parent / "__pycache__"  # where numba puts them: made private here, whatever the umask
    assert pycache.is_dir() and pycache.stat().st_mode & 0o777 == 0o700
    pycache.chmod(0o775)  # made by someone else's umask, or opened since
    assert not cache.numba_cache(str(path))
    pycache.chmod(0o700)
    shared = tmp_path / "numba"  # NUMBA_CACHE_DIR: numba's files go there instead, so that folder is the one checked
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(shared))
    assert not cache.numba_cache(str(path))
    shared.chmod(0o700)
    assert cache.numba_cache(str(path))
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    monkeypatch.setenv("REDALGEBRA_NUMBA_CACHE", "0")
    assert not cache.numba_cache(str(path))
    assert not cache.numba_cache(None)  # a module without a file (source run as text)


def test_generated_cuda_modules_ask_for_the_disk_cache_and_the_simulator_does_not_get_it(parallel_cpu, monkeypatch):
    from redalgebra.codegen import generate
    from tests.catalogue import fused

    for strategy in ("rows", "block"):  # a statement-tree strategy and a first-generation text one
        source = generate(fused("safe_softmax"), "cuda", strategy).source
        assert "CACHE = numba_cache(" in source
        assert "'cache': CACHE}" in source.split("\nBOUNDS = ")[1].splitlines()[0]
    namespace = {}
    exec(compile(generate(fused("safe_softmax"), "cudasim", "rows").source, "<generated>", "exec"), namespace)
    # the simulator's kernels take no options (the cache among them); a module run without a file has no cache
    assert namespace["BOUNDS"] == {} and namespace["CACHE"] is False
    cpu = generate(fused("safe_softmax"), "cpu").source  # the CPU's parallel kernels too
    assert "CACHE = numba_cache(" in cpu and "njit(parallel=True, fastmath=False, error_model='numpy', cache=CACHE)" in cpu
    monkeypatch.setenv("REDALGEBRA_CPU_PARALLEL", "0")  # ... or serial, asked for: another module
    serial = generate(fused("safe_softmax"), "cpu").source
    assert serial == cpu.replace("njit(parallel=True,", "njit(parallel=False,")


def test_a_cpu_kernel_compiled_in_one_process_is_loaded_by_the_next(tmp_path):
    import subprocess
    import sys

    code = ("from redalgebra.runtime import compile; from tests.catalogue import fused; import numpy as np; "
            "k = compile(fused('safe_softmax'), 'cpu'); k({'x': np.ones((2, 5), np.float32)}); "
            "import sys; d = next(v for n, v in sys.modules.items() if n.startswith('ra_')).kernel; "
            "print(d.stats.cache_hits.total(), d.stats.cache_misses.total())")
    env = {**__import__("os").environ, "REDALGEBRA_CACHE": str(tmp_path / "kernels")}
    env.pop("REDALGEBRA_NUMBA_CACHE", None)
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=Path(__file__).parents[2])
            for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr[-2000:]
    assert runs[0].stdout.split() == ["0", "1"]  # compiled (a miss), kept
    assert runs[1].stdout.split() == ["1", "0"]  # loaded


@pytest.mark.parametrize("text,kind", [("def kernel(:\n    pass\n", "SyntaxError"), ("x = no_such_name\n", "NameError")])
def test_a_generated_module_that_does_not_import_is_a_clear_error_every_time(text, kind):
    # (an IndentationError from a generator fault reached the user as it was, and the half-imported module stayed in
    # sys.modules: the next call said the module had no attribute 'kernel')
    for _ in range(2):
        with pytest.raises(RedalgebraError, match=f"does not import \\({kind}.*fault of the code generator"):
            cache.load(text)
