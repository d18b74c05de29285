"""Generated source is committed: a code generator change shows up as a readable diff.

Set REDALGEBRA_UPDATE_SNAPSHOTS=1 to rewrite the snapshots after an intended change.
"""

import os
from pathlib import Path

import pytest

from redalgebra import workloads
from redalgebra.codegen import Spec, generate
from tests.catalogue import fused

SNAPSHOTS = Path(__file__).parent / "__snapshots__"
# one snapshot per distinct cascade: decode_attention is attention's text at other shapes
PAPER = list({w.text: w.name for w in reversed(list(workloads.CATALOGUE.values())) if w.paper and w.fusable}.values())[::-1]
SIZES = Spec((("d", 128), ("e", 64), ("n", 64), ("r", 512)), threads=128)


@pytest.mark.parametrize("name", PAPER)
@pytest.mark.parametrize("backend, strategy", [("cpu", "row"), ("cuda", "block"), ("cuda", "lanes")])
def test_generated_source_matches_its_snapshot(name, backend, strategy, parallel_cpu):
    source = generate(fused(name), backend, strategy, SIZES).source
    path = SNAPSHOTS / f"{name}.{backend}.{strategy}.py"
    if os.environ.get("REDALGEBRA_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(source)
    assert path.exists(), f"no snapshot {path.name}: run with REDALGEBRA_UPDATE_SNAPSHOTS=1"
    assert source == path.read_text(), f"{path.name} changed: review the diff, then update the snapshots"
