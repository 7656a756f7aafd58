"""docs/reliability.md matches the fault matrix it reports on: the same rows, faults and pass
criteria as spec/faults.md (or, in a checkout without it beside, the copy in
scripts/reliability.py, which must then be the spec's too). A row added to or changed in the
matrix fails here until the document is regenerated."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "reliability.md"


def _script():
    spec = importlib.util.spec_from_file_location("reliability", ROOT / "scripts/reliability.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _documented(reliability) -> list[tuple[int, str, str]]:
    """``(number, fault, criterion)`` of each row of the document's table."""
    rows = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = reliability._cells(line)
        if len(cells) > 2 and cells[0].isdigit():
            fault, _, criterion = cells[1].partition("<br>*pass:* ")
            rows.append((int(cells[0]), fault, criterion))
    return rows


def test_the_reliability_table_has_the_fault_matrixs_rows() -> None:
    reliability = _script()
    rows, source = reliability.spec_rows()
    matrix = [(r.number, reliability._md(r.fault), reliability._md(r.criterion)) for r in rows]
    regenerate = f"docs/reliability.md is stale against {source}: {reliability.REGENERATE}"
    assert _documented(reliability) == matrix, regenerate


def test_the_scripts_copy_of_the_matrix_is_the_specs() -> None:
    reliability = _script()
    if not reliability.SPEC.is_file():
        # A checkout alone (CI's clone): the copy is all there is; the test above holds it.
        assert re.search(r"spec/faults\.md", DOC.read_text(encoding="utf-8"))
        return
    rows, _ = reliability.spec_rows()
    assert [(r.number, r.fault, r.criterion) for r in rows] == reliability.FALLBACK_ROWS, (
        "scripts/reliability.py's FALLBACK_ROWS differ from spec/faults.md: copy them over"
    )
