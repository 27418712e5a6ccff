"""``nvrx-seghealth demo`` refuses before any job starts: a used log folder is never read
as this run's, and a watch it cannot run is refused. Its jobs:
``integration/commands/test_demo.py``."""

from __future__ import annotations

import pytest

from harness.commands import nvrx_seghealth


def _tree(folder):
    return sorted(
        (p.relative_to(folder), p.read_bytes() if p.is_file() else None) for p in folder.rglob("*")
    )


def test_a_folder_a_previous_run_left_is_refused_and_left_alone(tmp_path):
    folder = tmp_path / "logs"
    (folder / "task0.proc0").mkdir(parents=True)
    (folder / "task0.proc0" / "launcher.log").write_text("a previous run's log\n")
    (folder / "comparison.json").write_text("{}\n")
    before = _tree(folder)
    second = nvrx_seghealth("demo", "--keep-logs", str(folder), timeout=60)
    assert second.returncode == 2 and "--keep-logs" in second.stderr
    assert "Outcome" not in second.stdout  # no report from the previous run's files
    assert _tree(folder) == before


def test_a_file_in_place_of_the_folder_is_refused_and_left_alone(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    refused = nvrx_seghealth("demo", "--keep-logs", str(tmp_path / "file"), timeout=60)
    assert refused.returncode == 2 and "--keep-logs" in refused.stderr
    assert (tmp_path / "file").read_text() == "not a folder"


@pytest.mark.parametrize(
    "args", [["--watch", "0"], ["--watch", "soon"], ["--watch", "1", "--compare"]]
)
def test_a_watch_that_cannot_run_is_refused(tmp_path, args):
    refused = nvrx_seghealth("demo", *args, "--keep-logs", str(tmp_path / "k"), timeout=60)
    assert refused.returncode == 2 and "--watch" in refused.stderr
    assert not (tmp_path / "k").exists()
