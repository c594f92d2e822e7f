"""The documents say what is true: the authorization table is the code's, and every test they name exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from relay_es.adapters import authz

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "docs" / "reliability.md"]

# `tests/x/test_y.py::test_z`, `test_y.py::test_z`, or `::test_z` (same file as the reference before it)
REF = re.compile(r"`((?:tests/)?(?:[\w/]+/)?test_\w+\.py)?::(test_\w+)")


def test_the_authorization_table_in_the_docs_is_the_codes() -> None:
    text = (ROOT / "docs" / "reliability.md").read_text()
    assert authz.table_markdown() in text, "docs/reliability.md's table differs from authz.table_markdown()"


def _resolve(name: str) -> Path:
    if name.startswith("tests/"):
        return ROOT / name
    found = [p for p in (ROOT / "tests").rglob(Path(name).name) if str(p).endswith(name)]
    assert len(found) == 1, f"{name!r} names {len(found)} files under tests/"
    return found[0]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_test_the_docs_name_exists(doc: Path) -> None:
    missing = []
    count = 0
    for line in doc.read_text().splitlines():
        current: Path | None = None
        for file, test in REF.findall(line):
            if file:
                current = _resolve(file)
            if current is None:
                continue  # a bare ::name with no file before it on the line
            count += 1
            if not re.search(rf"^(async )?def {test}\b", current.read_text(), flags=re.M):
                missing.append(f"{current.relative_to(ROOT)}::{test}")
    assert count > 40, "the reference pattern no longer matches the document's references"
    assert not missing, "docs name tests that do not exist: " + ", ".join(missing)
