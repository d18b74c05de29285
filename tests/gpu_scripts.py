"""The scripts of ``gpu/`` as modules, for tests that run their GPU-free parts here."""

import importlib.util
import sys
from pathlib import Path

GPU = Path(__file__).resolve().parent.parent / "gpu"


def loaded(script: str):
    """``gpu/<script>.py`` as a module named ``gpu_<script>``, registered while the caller holds it (its dataclasses
    look their module up while they are made): a generator for a pytest fixture — it yields the module, then removes
    it."""
    spec = importlib.util.spec_from_file_location(f"gpu_{script}", GPU / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]
