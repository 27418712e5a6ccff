"""``nvrx-seghealth demo``: a reused log folder is refused, never read as this run's."""

from __future__ import annotations

from .runner import nvrx_seghealth


def test_the_demo_twice_into_one_folder_refuses_the_second_run(tmp_path):
    folder = tmp_path / "logs"
    first = nvrx_seghealth("demo", "--keep-logs", str(folder), timeout=240)
    assert first.returncode == 0, first.stdout + first.stderr
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    second = nvrx_seghealth("demo", "--keep-logs", str(folder), timeout=60)
    assert second.returncode == 2 and "--keep-logs" in second.stderr
    assert "Outcome" not in second.stdout  # no report from the first run's files
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before  # untouched


def test_a_file_in_place_of_the_folder_is_refused_and_left_alone(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    refused = nvrx_seghealth("demo", "--keep-logs", str(tmp_path / "file"), timeout=60)
    assert refused.returncode == 2 and "--keep-logs" in refused.stderr
    assert (tmp_path / "file").read_text() == "not a folder"
