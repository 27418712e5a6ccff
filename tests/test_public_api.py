"""The public API: what ``nvrx_seghealth`` exports, and that nothing else looks public."""

from __future__ import annotations

import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import nvrx_seghealth

pytestmark = pytest.mark.torch  # the API loads torch on first use of a launcher name

API_PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "python-api.md"


def documented_api() -> set[str]:
    """The names the table of docs/reference/python-api.md lists (remarks in parentheses
    aside)."""
    section = API_PAGE.read_text().split("## The public names", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    cells = [re.sub(r"\([^)]*\)", "", row.split("|")[2]) for row in rows]
    return {name for cell in cells for name in re.findall(r"`([A-Za-z_]+)`", cell)}


def test_the_package_exports_what_the_docs_list_and_every_name_resolves():
    assert set(nvrx_seghealth.__all__) == documented_api()
    assert len(nvrx_seghealth.__all__) == 21  # a change of the public API is deliberate
    for name in nvrx_seghealth.__all__:
        assert getattr(nvrx_seghealth, name) is not None, name


def test_the_docs_render_every_public_name_from_its_docstring():
    """Each public name has its autodoc directive in the API page, and nothing else has."""
    rendered = re.findall(
        r"^\.\. auto\w+:: nvrx_seghealth\.(\w+)$", API_PAGE.read_text(), re.MULTILINE
    )
    assert sorted(rendered) == sorted(nvrx_seghealth.__all__)


def test_every_other_module_is_private():
    modules = [m.name for m in pkgutil.walk_packages(nvrx_seghealth.__path__, "nvrx_seghealth.")]
    assert len(modules) > 20  # the walk found the package's modules
    public = [m for m in modules if not m.split(".")[1].startswith("_")]
    assert public == []


def test_the_exceptions_are_named_by_the_public_package():
    """Tracebacks say ``nvrx_seghealth.UnhealthyNodeException``, not a private module."""
    for name in (
        "SegmentHealthError",
        "UnhealthyNodeException",
        "ConfigurationError",
        "InvalidIdentityError",
    ):
        assert getattr(nvrx_seghealth, name).__module__ == "nvrx_seghealth"
    assert nvrx_seghealth.DecisionConflict.__module__ == "nvrx_seghealth"


def test_importing_the_package_does_not_import_torch():
    code = "import sys, nvrx_seghealth; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_every_public_name_is_listed_by_dir():
    assert set(nvrx_seghealth.__all__) <= set(dir(nvrx_seghealth))


def test_an_exception_is_named_by_the_public_package_also_when_only_a_function_was_imported(
    tmp_path,
):
    """The names load when first used; a call's exception is named by the package even
    when the exception's own name was never asked for."""
    code = (
        "from nvrx_seghealth import publish_decision\n"
        "try:\n"
        f"    publish_decision({str(tmp_path)!r}, '1x', '1', 'reason')\n"
        "except Exception as error:\n"
        "    print(type(error).__module__, type(error).__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["nvrx_seghealth", "InvalidIdentityError"]


def test_torchs_entry_point_loads_the_backend_without_the_rest_of_the_api():
    """Every process that imports torch's rendezvous package loads the backend's entry
    point: the decision files' code and the handler's are loaded only when used."""
    code = (
        "import sys, torch.distributed.elastic.rendezvous\n"
        "print(' '.join(m for m in sys.modules if m.startswith('nvrx_seghealth')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert "nvrx_seghealth._launcher.backend" in loaded, loaded
    assert {m for m in loaded if m.startswith("nvrx_seghealth._decision")} == set(), loaded
    unused = {"check", "handler", "markers", "coordinator", "process_zero"}
    assert {f"nvrx_seghealth._launcher.{name}" for name in unused} & loaded == set(), loaded


def test_the_deprecated_artifact_path_warns_and_returns_what_decision_file_path_does():
    """``artifact_path``, the old name of ``decision_file_path``, works for one release:
    each use warns, naming the new name, from the caller's line."""
    with pytest.warns(DeprecationWarning, match="use nvrx_seghealth.decision_file_path") as caught:
        old = nvrx_seghealth.artifact_path
    assert caught[0].filename == __file__
    assert old is nvrx_seghealth.decision_file_path
    with pytest.warns(DeprecationWarning, match="artifact_path is deprecated"):
        from nvrx_seghealth import artifact_path  # warns again: the old name is never bound
    assert artifact_path("/shared/job", 123, "7") == nvrx_seghealth.decision_file_path(
        "/shared/job", 123, "7"
    )
    assert "artifact_path" not in nvrx_seghealth.__all__
