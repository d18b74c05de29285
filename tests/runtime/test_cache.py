import pytest

from redalgebra import RedalgebraError
from redalgebra.runtime import cache


def test_sources_are_files_named_by_their_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("REDALGEBRA_CACHE", str(tmp_path))
    src = "VALUE = 41 + 1\n"
    module = cache.load(src)
    assert module.VALUE == 42
    path = tmp_path / f"ra_{cache.digest(src)[:32]}.py"
    assert path.read_text() == src and module.__file__ == str(path)


def test_a_planted_or_altered_file_is_never_imported(tmp_path, monkeypatch):
    monkeypatch.setenv("REDALGEBRA_CACHE", str(tmp_path))
    src = "VALUE = 'genuine'\n"
    path = tmp_path / f"ra_{cache.digest(src)[:32]}.py"
    path.write_text("raise SystemExit('planted code ran')\n")
    module = cache.load(src)  # rewritten from the source, since the content does not hash to the name
    assert module.VALUE == "genuine" and path.read_text() == src


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
