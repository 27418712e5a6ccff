"""What a decision path holds when it is no regular file, told without following it."""

from __future__ import annotations

import os

import pytest

from nvrx_seghealth._decision import boundedfs
from nvrx_seghealth._decision.listing import job_folder, not_regular_kind


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (os.mkfifo, "FIFO"),
        (os.mkdir, "directory"),
        (lambda path: os.symlink("/nowhere", path), "symbolic link"),
        (lambda path: os.symlink(os.devnull, path), "symbolic link"),  # never followed
        (lambda path: open(path, "w").close(), None),
        (lambda path: None, None),  # nothing there
    ],
)
def test_the_kind_of_what_is_at_a_decision_path(tmp_path, make, kind):
    path = str(tmp_path / "segment_health_check.5.1")
    make(path)
    assert not_regular_kind(boundedfs.read_current(path, 10)) == kind


def test_a_path_that_cannot_be_looked_at_is_no_kind(tmp_path):
    (tmp_path / "file").touch()
    current = boundedfs.read_current(str(tmp_path / "file" / "x"), 10)  # ENOTDIR
    assert current.kind == "unreadable" and not_regular_kind(current) is None


def test_a_root_of_per_job_folders_is_told_from_a_jobs_folder(tmp_path):
    (tmp_path / "122").mkdir()
    assert job_folder(str(tmp_path), "123", 10) == str(tmp_path / "123")
    assert job_folder(str(tmp_path / "122"), "122", 10) is None  # the job's own
    assert job_folder(str(tmp_path / "122") + "/", "122", 10) is None
    assert job_folder(str(tmp_path / "122"), "9", 10) is None  # nothing job-like in it
    assert job_folder(str(tmp_path / "missing"), "9", 10) is None  # cannot be listed
