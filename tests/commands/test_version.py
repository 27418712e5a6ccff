"""``nvrx-seghealth --version``: the version installed, from its one place, pyproject.toml.

An operator asks a node which behaviour it has (CHANGELOG.md says which version holds
what). The version is written once, in pyproject.toml; the command reads it from the
installed distribution's metadata, so it cannot disagree with what pip installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

import nvrx_seghealth

ROOT = Path(__file__).resolve().parents[2]


def pyproject_version() -> str:
    match = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert match, "pyproject.toml has no [project] version"
    return match.group(1)


def test_version_prints_pyprojects_version_and_exits_0():
    done = subprocess.run(
        [sys.executable, "-m", "nvrx_seghealth", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"nvrx-seghealth {pyproject_version()}\n"


def test_the_version_is_written_in_pyproject_only():
    version = pyproject_version()
    package = Path(nvrx_seghealth.__file__).parent
    copies = [p for p in package.rglob("*.py") if f'"{version}"' in p.read_text()]
    assert copies == []


def test_a_source_tree_that_is_not_installed_says_so(tmp_path):
    """Run from a copy of the package with no distribution metadata beside it (and no
    site-packages): the command says it is not installed and exits 1, no traceback."""
    site = tmp_path / "site"
    shutil.copytree(
        Path(nvrx_seghealth.__file__).parent,
        site / "nvrx_seghealth",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copytree(Path(yaml.__file__).parent, site / "yaml")  # the package's one dependency
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(site)!r})\n"
        "from nvrx_seghealth._commands import main\n"
        "sys.exit(main(['--version']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr.startswith("nvrx-seghealth: ") and "Traceback" not in done.stderr
