"""``nvrx-seghealth status``: a table of the decision files, as the consumer would see them."""

from __future__ import annotations

import json
import os
import pty
import time

import pytest

from .runner import nvrx_seghealth


@pytest.fixture
def shc(tmp_path):
    """One decision file of every kind, plus names that are not decisions."""
    d = tmp_path / "shc"
    d.mkdir()
    (d / "segment_health_check.12.3").write_text("n7 drained: ECC\nsecond line\n")
    (d / "segment_health_check.12.10").write_bytes(b"x" * 300 + b"\n" + b"y" * 2_000_000)
    (d / "segment_health_check.12.4").touch()
    os.mkfifo(d / "segment_health_check.12.5")  # opening it for reading would block
    (d / "segment_health_check.12.6").mkdir()
    (d / "segment_health_check.12.7").symlink_to(d / "nowhere")
    (d / "segment_health_check.9.1").write_text("old job\n")
    for ignored in (
        ".segment_health_check.12.8.abc123.tmp",
        "segment_health_check.12.x",
        "segment_health_check.12.8.bak",
        "README",
    ):
        (d / ignored).write_text("not a decision\n")
    hour_ago = time.time() - 3700
    os.utime(d / "segment_health_check.12.3", (hour_ago, hour_ago))
    return d


def test_table_of_every_decision_file(shc):
    done = nvrx_seghealth("status", "--dir", str(shc))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["JOB", "TASK", "STATE", "SIZE", "AGE", "DIAGNOSTIC"]
    rows = [line.split(None, 5) for line in lines[1:8]]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("9", "1", "unhealthy"),
        ("12", "3", "unhealthy"),
        ("12", "4", "clear"),
        ("12", "5", "not-a-regular-file"),
        ("12", "6", "not-a-regular-file"),
        ("12", "7", "absent"),
        ("12", "10", "unhealthy"),
    ]
    assert rows[1][3:] == ["28", "1h01m", "n7 drained: ECC"]  # first line only
    assert rows[6][5] == "x" * 199 + "…"  # a long first line is cut; the rest is not read
    assert rows[3][5] == "not a regular file: FIFO"
    assert rows[5][3:] == ["-", "-", "no decision file"]
    # columns are aligned: every row's STATE starts where the header's does
    column = lines[0].index("STATE")
    assert all(line[column - 2 : column] == "  " and line[column] != " " for line in lines[1:8])
    assert lines[-1] == f"7 decision files in {shc}; 3 unhealthy"
    assert "\033[" not in done.stdout


def test_json_and_job_filter(shc):
    done = nvrx_seghealth("status", "--dir", str(shc), "--job-id", "9", "--json")
    assert done.returncode == 0
    report = json.loads(done.stdout)
    assert report["directory"] == str(shc)
    [row] = report["decisions"]
    assert row["path"] == str(shc / "segment_health_check.9.1")
    assert (row["state"], row["size"], row["diagnostic"]) == ("unhealthy", 8, "old job")
    assert 0 <= row["age_seconds"] < 60


def test_colours_only_on_a_terminal(shc):
    leader, follower = pty.openpty()
    try:
        done = nvrx_seghealth(
            "status", "--dir", str(shc), "--job-id", "9", stdout=follower, env={"TERM": "xterm"}
        )
        output = os.read(leader, 65536).decode()
    finally:
        os.close(leader)
        os.close(follower)
    assert done.returncode == 0
    assert "\033[31munhealthy" in output


def test_empty_missing_and_relative_directories(tmp_path):
    done = nvrx_seghealth("status", "--dir", str(tmp_path))
    assert (done.returncode, done.stdout) == (0, f"no decision files in {tmp_path}\n")
    done = nvrx_seghealth("status", "--dir", str(tmp_path / "missing"))
    assert done.returncode == 1
    assert f"the decision directory {tmp_path / 'missing'} does not exist: fix --dir" in done.stderr
    done = nvrx_seghealth("status", "--dir", "shc")
    assert done.returncode == 2 and "--dir must be an absolute path" in done.stderr


@pytest.mark.parametrize(
    "mode,warned", [(0o755, False), (0o1777, False), (0o777, True), (0o775, True)]
)
def test_a_directory_others_can_write_without_the_sticky_bit_is_warned_about(
    tmp_path, mode, warned
):
    shc = tmp_path / "shc"
    shc.mkdir()
    shc.chmod(mode)
    done = nvrx_seghealth("status", "--dir", str(shc))
    assert done.returncode == 0
    assert ("without the sticky bit" in done.stderr) is warned, done.stderr
    if warned:
        assert f"chmod 0755 {shc}" in done.stderr and "or chmod 1777" in done.stderr
    report = json.loads(nvrx_seghealth("status", "--dir", str(shc), "--json").stdout)
    assert bool(report["warnings"]) is warned


def test_a_parent_others_can_write_is_warned_about_too(tmp_path):
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)
    (parent / "shc").mkdir()
    done = nvrx_seghealth("status", "--dir", str(parent / "shc"))
    assert done.returncode == 0
    assert (
        f"{parent}, above the decision directory (owner root, mode 0777), is writable"
        in done.stderr
    )
    assert "rename the decision directory away" in done.stderr


def test_a_producer_that_stopped_is_told_apart(tmp_path):
    """The producer's state file says it runs a pass every 30 s; its last pass is an hour
    old: status says it may have stopped."""
    shc = tmp_path / "shc"
    shc.mkdir()
    last = time.time() - 3600
    (shc / ".publish-drained.ops-a.12.json").write_text(
        json.dumps(
            {
                "last_pass": last,
                "last_ok": last,
                "failing_since": None,
                "failed_passes": 0,
                "last_error": None,
                "interval": 30.0,
            }
        )
    )
    done = nvrx_seghealth("status", "--dir", str(shc))
    assert done.returncode == 0
    assert (
        "producer ops-a (job 12): last pass 1h00m ago, ok; STOPPED? no pass for 1h00m "
        "though it runs one every 30 s: its decisions are not kept up to date, restart it"
        in done.stdout
    )
    (shc / ".publish-drained.ops-b.12.json").write_text("{not json")
    done = nvrx_seghealth("status", "--dir", str(shc), "--json")
    assert [p["producer_id"] for p in json.loads(done.stdout)["producers"]] == ["ops-a", "ops-b"]
    assert "unreadable" in json.loads(done.stdout)["producers"][1]
