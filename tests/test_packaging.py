"""Set-up contracts: one dependency list in two spellings, the README's commands, the layering."""

import ast
import re
import tomllib
from pathlib import Path

import yaml

import redalgebra

ROOT = Path(__file__).resolve().parent.parent


def _name_spec(req: str) -> tuple[str, str]:
    m = re.match(r"^\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(.*)$", req)
    return m.group(1).lower(), m.group(3).replace(" ", "")


def test_environment_yml_mirrors_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    core = dict(_name_spec(r) for r in project["dependencies"])
    conda_core = dict(_name_spec(r) for r in conda if _name_spec(r)[0] not in ("python", "pip"))
    assert conda_core == core
    assert dict(_name_spec(r) for r in conda)["python"] == project["requires-python"]
    extras = set(re.search(r"\[([^\]]*)\]", pip[0]).group(1).split(","))
    # cuda comes from pip on GPU machines; torch is the user's own build (CPU or CUDA) to choose
    assert extras == set(project["optional-dependencies"]) - {"cuda", "torch"}


def test_readme_quick_start_and_ci():
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_public_api_is_one_explicit_list():
    for name in redalgebra.__all__:
        assert hasattr(redalgebra, name), name


CORE = ["ir", "algebra", "derive", "codegen"]
LAYERS = ["ir", "algebra", "derive", "codegen", "runtime"]


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield ("." * node.level) + (node.module or "")


def test_core_layers_never_import_numba_torch_or_matplotlib_at_module_level():
    for layer in CORE:
        for path in (ROOT / "redalgebra" / layer).rglob("*.py"):
            tree = ast.parse(path.read_text())
            top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
            names = [a.name for n in top if isinstance(n, ast.Import) for a in n.names]
            names += [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
            bad = [n for n in names if n.split(".")[0] in ("numba", "torch", "matplotlib")]
            assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_layers_only_import_downward():
    for i, layer in enumerate(LAYERS):
        above = LAYERS[i + 1:]
        for path in (ROOT / "redalgebra" / layer).rglob("*.py"):
            for mod in _imports(path):
                parts = mod.lstrip(".").split(".")
                assert not (mod.startswith("..") and parts[0] in above), f"{path.name} imports upward: {mod}"


def test_readme_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
