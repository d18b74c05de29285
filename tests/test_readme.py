"""The README's code runs as written: its Python blocks, its command-line sessions, its list of commands and its
glossary, so the README cannot drift from the code.

- Every ```python block runs top to bottom (its asserts are the checks); a comment ``# → TEXT`` says that
  TEXT appears in what the block prints.
- Every ```console block is a session: each ``$ redalgebra …`` line runs (in this process, or for ``ptx``,
  which compiles real PTX, in a subprocess without the CUDA simulator) and its output must be the lines
  shown under it, after the pipe the line gives (``| head -N``, ``| tail -N``, ``| sed -n A,Bp``).
- The command synopsis names exactly the CLI's subcommands; the glossary is the one the demo prints.
"""

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from redalgebra import cli
from redalgebra.report import GLOSSARY

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def fenced(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README, re.S | re.M)


def sessions() -> list[tuple[str, list[str]]]:
    """``(command line, expected output lines)`` for every ``$`` line of the console blocks."""
    out = []
    for block in fenced("console"):
        for chunk in re.split(r"^\$ ", block, flags=re.M)[1:]:
            command, *expected = chunk.rstrip("\n").split("\n")
            out.append((command, expected))
    return out


def pipe(lines: list[str], stage: str) -> list[str]:
    """The lines after one shell filter of the README's sessions."""
    words = shlex.split(stage)
    if words[0] in ("head", "tail") and len(words) == 2 and words[1].startswith("-"):
        n = int(words[1][1:])
        return lines[:n] if words[0] == "head" else lines[-n:]
    match = re.fullmatch(r"sed -n (\d+),(\d+)p", " ".join(words))
    if match:
        return lines[int(match[1]) - 1:int(match[2])]
    raise AssertionError(f"the README's session uses a filter this test does not know: {stage!r}")


def run(argv: list[str]) -> tuple[int, str]:
    if argv[0] == "ptx":  # real PTX: numba-cuda's NVVM, which this process (on the simulator) cannot use
        env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
        proc = subprocess.run([sys.executable, "-m", "redalgebra", *argv], capture_output=True, text=True, env=env,
                              cwd=ROOT, timeout=300)
        return proc.returncode, proc.stdout
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = cli.main(argv)
    return code, buffer.getvalue()


def test_the_readme_has_what_this_test_reads():
    assert len(fenced("python")) >= 2 and len(sessions()) >= 4
    assert any(cmd.startswith("redalgebra ptx") for cmd, _ in sessions())


@pytest.mark.parametrize("index", range(len(fenced("python"))), ids=lambda i: f"python-block-{i}")
def test_python_block_runs_and_prints_what_it_says(index):
    source = fenced("python")[index]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(compile(source, f"README.md python block {index}", "exec"), {"__name__": "__readme__"})
    printed = buffer.getvalue()
    for promised in re.findall(r"# → (.*)$", source, re.M):
        assert promised.strip() in printed, f"the README says {promised.strip()!r} is printed; it printed:\n{printed}"


@pytest.mark.parametrize("command, expected", sessions(), ids=[c for c, _ in sessions()])
def test_console_session_prints_what_the_readme_shows(command, expected):
    stages = [s.strip() for s in command.split("|")]
    argv = shlex.split(stages[0])
    assert argv[0] == "redalgebra", f"a README session runs the redalgebra command, not {argv[0]!r}"
    code, out = run(argv[1:])
    lines = out.rstrip("\n").split("\n")
    for stage in stages[1:]:
        lines = pipe(lines, stage)
    assert code == 0, f"{command} exited {code}"
    assert lines == expected, f"`{command}` now prints:\n" + "\n".join(lines)


def test_the_command_synopsis_names_every_subcommand_and_no_other():
    synopsis = README[README.index("## The command line"):]
    block = re.search(r"^```\n(.*?)^```", synopsis, re.S | re.M)[1]
    listed = {line.split()[1] for line in block.splitlines() if line.startswith("redalgebra ")}
    parser = cli.build_parser()
    commands = set(next(a for a in parser._actions if a.dest == "command").choices)
    assert listed == commands


def _plain(markdown: str) -> str:
    return " ".join(markdown.replace("`", "").replace("*", "").split())


def test_the_glossary_is_the_one_the_demo_prints(monkeypatch, tmp_path, capsys):
    section = README[README.index("## Words used here"):]
    paragraph = section.split("\n\n")[1]
    assert _plain(paragraph) == GLOSSARY + " redalgebra demo prints this paragraph first."
    for word in ("cascade", "⊗", "G", "H", "lift", "merge", "update", "finalize"):
        assert re.search(rf"\*{re.escape(word)}\*", paragraph), f"the glossary should set {word!r} in italics"
    monkeypatch.setattr(cli.workloads, "names", lambda: [])  # the demo's preamble only: no cascades,
    monkeypatch.setattr(cli, "REPO", tmp_path)                # no figures
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert " ".join(out.split()).startswith("redalgebra demo:") and GLOSSARY in " ".join(out.split())
