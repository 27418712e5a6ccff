"""The package's modules stay under 400 lines, or say at their top why one is longer
(ARCHITECTURE.md, "Invariants")."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nvrx_seghealth

PACKAGE = Path(nvrx_seghealth.__file__).resolve().parent
LIMIT = 400
#: How a longer module's docstring says why: "... about 600 lines, over the package's 400: ..."
REASON = re.compile(r"over the package's 400\b")


def test_a_module_over_400_lines_states_its_reason_in_its_docstring():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 50  # the walk found the package
    unexplained = []
    for path in modules:
        text = path.read_text()
        lines = len(text.splitlines())
        docstring = " ".join((ast.get_docstring(ast.parse(text)) or "").split())
        if lines > LIMIT and not REASON.search(docstring):
            unexplained.append(f"{path.relative_to(PACKAGE)}: {lines} lines")
    assert unexplained == []
