"""The public API: what ``nvrx_seghealth`` exports, and that nothing else looks public."""

from __future__ import annotations

import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import nvrx_seghealth

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_api() -> set[str]:
    """The names the README's "The Python API" table lists (remarks in parentheses aside)."""
    section = README.read_text().split("### The Python API", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    cells = [re.sub(r"\([^)]*\)", "", row.split("|")[2]) for row in rows]
    return {name for cell in cells for name in re.findall(r"`([A-Za-z_]+)`", cell)}


def test_the_package_exports_what_the_readme_lists_and_every_name_resolves():
    assert set(nvrx_seghealth.__all__) == readme_api()
    assert len(nvrx_seghealth.__all__) == 20  # a change of the public API is deliberate
    for name in nvrx_seghealth.__all__:
        assert getattr(nvrx_seghealth, name) is not None, name


def test_every_other_module_is_private():
    modules = [m.name for m in pkgutil.walk_packages(nvrx_seghealth.__path__, "nvrx_seghealth.")]
    assert len(modules) > 20  # the walk found the package's modules
    public = [m for m in modules if not m.split(".")[1].startswith("_")]
    assert public == []


def test_the_exceptions_are_named_by_the_public_package():
    """Tracebacks say ``nvrx_seghealth.UnhealthyNodeException``, not a private module."""
    for name in ("UnhealthyNodeException", "ConfigurationError", "InvalidIdentityError"):
        assert getattr(nvrx_seghealth, name).__module__ == "nvrx_seghealth"
    assert nvrx_seghealth.DecisionConflict.__module__ == "nvrx_seghealth"


def test_importing_the_package_does_not_import_torch():
    code = "import sys, nvrx_seghealth; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
