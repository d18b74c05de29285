from pathlib import Path

import pytest

from redalgebra import workloads
from redalgebra.derive.document import document
from tests.catalogue import WORKLOADS

PROOFS = Path(__file__).resolve().parents[2] / "proofs"


@pytest.mark.parametrize("name", WORKLOADS)
def test_committed_proof_documents_are_current(name):
    path = PROOFS / f"{name}.md"
    assert path.exists(), f"missing {path}: run `redalgebra prove --all --out proofs/`"
    assert path.read_text() == document(workloads.get(name).cascade), \
        f"{path} is stale: run `redalgebra prove --all --out proofs/`"


def test_a_document_holds_the_proofs_and_the_derived_forms():
    text = document(workloads.get("attention").cascade)
    for heading in ("## The cascade", "## Verdict", "## Monoid laws", "## Fusion conditions", "## Derived forms",
                    "### Stable corrections", "## Edge guards"):
        assert heading in text
    assert "exp(m_a - m_n)" in text and "**proved** — F_l is separable" in text


def test_a_non_fusable_document_gives_the_counterexample_and_no_derived_forms():
    text = document(workloads.get("softplus_sum").cascade)
    assert "Not fusable" in text and "counterexample at" in text and "## Derived forms" not in text
