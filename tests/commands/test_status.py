"""``nvrx-seghealth status``: a table of the decision files, as the consumer would see them."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import tempfile
import time

import pytest

from harness.commands import nvrx_seghealth
from harness.services.accounts import as_nobody, public_copy, require_root
from harness.services.fakeslurm import TASK1_DRAINED, FakeSlurm, dump, planted


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
    assert rows[3][5].startswith("a FIFO: ")  # what blocks a producer, not its type alone
    assert rows[5][3:5] == ["-", "-"] and rows[5][5].startswith("a dangling symbolic link: ")
    # columns are aligned: every row's STATE starts where the header's does
    column = lines[0].index("STATE")
    assert all(line[column - 2 : column] == "  " and line[column] != " " for line in lines[1:8])
    assert lines[-1].startswith(f"7 decision files in {shc}; 3 unhealthy; 3 blocked: ")
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
    assert (done.returncode, done.stdout) == (1, "")
    assert str(tmp_path / "missing") in done.stderr and "--dir" in done.stderr
    done = nvrx_seghealth("status", "--dir", "shc")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("nvrx-seghealth status: error: --dir ")


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


def plant_producer(shc, producer_id, *, quiet, interval, failing):
    """A producer's state file: its last pass ``quiet`` seconds ago, one every
    ``interval`` seconds (``None``: single passes), its passes failing or not."""
    last = time.time() - quiet
    failed = {"failing_since": last - 600, "failed_passes": 4, "last_error": "squeue: timed out"}
    body = planted(
        producer_id,
        "12",
        last_pass=last,
        last_ok=last - 600 if failing else last,
        interval=interval,
        nodes={},
        **(failed if failing else {}),
    )
    state = shc / f".publish-drained.{producer_id}.12.json"
    state.write_bytes(dump(body))
    os.utime(state, (last, last))  # written at its last pass, as a producer does
    return state


#: producer id -> (seconds since its last pass, its interval, failing?, its state token).
#: Stopped means no pass for max(3 x interval, interval + 60) s; it wins over failing.
PRODUCERS = {
    "a-ok": (5, 30.0, False, "ok"),
    "b-ok-single-passes": (86400, None, False, "ok"),
    "c-failing": (5, 30.0, True, "failing"),
    "d-stopped": (3600, 30.0, False, "stopped"),
    "e-stopped-and-failing": (3600, 30.0, True, "stopped"),
    "f-not-stopped-yet": (60, 10.0, False, "ok"),  # 3 x 10 s < 60 s < 10 s + 60 s
    "g-stopped": (400, 100.0, False, "stopped"),  # 100 s + 60 s < 400 s > 3 x 100 s
}


def test_every_producer_state_is_a_token_in_json(tmp_path):
    shc = tmp_path / "shc"
    shc.mkdir()
    for producer_id, (quiet, interval, failing, _state) in PRODUCERS.items():
        plant_producer(shc, producer_id, quiet=quiet, interval=interval, failing=failing)
    (shc / ".publish-drained.h-unreadable.12.json").write_text("{not json")
    done = nvrx_seghealth("status", "--dir", str(shc), "--json")
    assert done.returncode == 1, done.stderr  # some are failing or stopped
    rows = {row["producer_id"]: row for row in json.loads(done.stdout)["producers"]}
    expected = {name: state for name, (*_, state) in PRODUCERS.items()}
    assert {name: row["state"] for name, row in rows.items()} == {
        **expected,
        "h-unreadable": "unreadable",
    }
    assert rows["e-stopped-and-failing"]["failing_since"] is not None
    assert rows["d-stopped"]["failing_since"] is None
    assert "unreadable" in rows["h-unreadable"] and "last_pass" not in rows["h-unreadable"]


def test_the_text_shows_the_same_producer_states(tmp_path):
    """The text line of each producer says what its token says: STOPPED? for
    ``stopped`` (also when it was failing), FAILING for ``failing``."""
    shc = tmp_path / "shc"
    shc.mkdir()
    for producer_id, (quiet, interval, failing, _state) in PRODUCERS.items():
        plant_producer(shc, producer_id, quiet=quiet, interval=interval, failing=failing)
    done = nvrx_seghealth("status", "--dir", str(shc))
    assert done.returncode == 1, done.stderr
    lines = {
        line.split()[1]: line for line in done.stdout.splitlines() if line.startswith("producer ")
    }
    for producer_id, (_quiet, _interval, failing, state) in PRODUCERS.items():
        assert ("STOPPED?" in lines[producer_id]) is (state == "stopped"), lines[producer_id]
        assert ("FAILING" in lines[producer_id]) is failing, lines[producer_id]


def test_a_producer_whose_clock_is_ahead_shows_no_negative_age(tmp_path):
    """The review's case: the producer's clock is 120 s ahead of this host's."""
    shc = tmp_path / "shc"
    shc.mkdir()
    state = plant_producer(shc, "p", quiet=-120, interval=30.0, failing=False)
    os.utime(state)  # the file server stamped it now, by its own clock
    done = nvrx_seghealth("status", "--dir", str(shc))
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("producer p ")]
    ahead = re.search(
        r"last pass 0s ago \(its clock is 1m([0-9]{2})s ahead of this host's\), ok", line
    )
    assert ahead is not None and int(ahead[1]) >= 30, line  # 120 s, less the time status took
    assert " -" not in line


def test_a_live_producer_whose_clock_is_behind_is_not_stopped(tmp_path):
    """The producer runs every second, its clock 95 s behind this host's (more than the
    61 s margin); its state file was stamped 1 s ago by the file server. A producer whose
    file is as old as its stamp is stopped."""
    shc = tmp_path / "shc"
    shc.mkdir()
    behind = plant_producer(shc, "behind", quiet=95, interval=1.0, failing=False)
    os.utime(behind, (time.time() - 1, time.time() - 1))
    plant_producer(shc, "stopped", quiet=95, interval=1.0, failing=False)
    done = nvrx_seghealth("status", "--dir", str(shc), "--json")
    assert done.returncode == 1, done.stderr  # one is stopped
    rows = {row["producer_id"]: row["state"] for row in json.loads(done.stdout)["producers"]}
    assert rows == {"behind": "ok", "stopped": "stopped"}


@pytest.mark.parametrize("producer_id", sorted(PRODUCERS))
def test_a_failing_or_stopped_producer_makes_status_exit_1(tmp_path, producer_id):
    """A monitoring check reads the exit code alone: 1 for a producer that is failing or
    stopped, 0 for one that is ok or whose state file cannot be read."""
    shc = tmp_path / "shc"
    shc.mkdir()
    quiet, interval, failing, state = PRODUCERS[producer_id]
    plant_producer(shc, producer_id, quiet=quiet, interval=interval, failing=failing)
    (shc / "segment_health_check.12.3").touch()
    done = nvrx_seghealth("status", "--dir", str(shc))
    assert done.returncode == (0 if state == "ok" else 1), done.stderr
    assert "1 decision file in" in done.stdout  # the whole listing is printed either way
    (shc / f".publish-drained.{producer_id}.12.json").write_text("{not json")
    assert nvrx_seghealth("status", "--dir", str(shc)).returncode == 0


def test_help_documents_every_producer_state():
    from nvrx_seghealth._producer.state import ProducerHealth

    done = nvrx_seghealth("status", "--help")
    assert done.returncode == 0
    for health in ProducerHealth:
        assert f"{health.value} (" in done.stdout or f"{health.value};" in done.stdout


def _raw_controls(text: str) -> list[str]:
    return [char for char in text if not char.isprintable() and char != "\n"]


def test_the_producers_text_is_printed_with_its_control_characters_escaped(tmp_path):
    """A carriage return would make an unhealthy row read as clear; the OSC sequence
    sets the terminal's title; SGR 8 hides what follows."""
    body = "x\r1000  1     clear       0     1s\x1b]0;pwned-title\x07\x1b[8m\n"
    (tmp_path / "segment_health_check.1000.1").write_text(body)
    table = nvrx_seghealth("status", "--dir", str(tmp_path))
    as_json = nvrx_seghealth("status", "--dir", str(tmp_path), "--json")
    assert (table.returncode, as_json.returncode) == (0, 0), table.stderr + as_json.stderr
    for output in (table.stdout, table.stderr, as_json.stdout, as_json.stderr):
        assert _raw_controls(output) == []
    (row,) = json.loads(as_json.stdout)["decisions"]
    assert row["state"] == "unhealthy"
    assert (
        row["diagnostic"] == r"x\x0d1000  1     clear       0     1s\x1b]0;pwned-title\x07\x1b[8m"
    )


def test_printable_escapes_controls_bidi_overrides_and_separators():
    from nvrx_seghealth._decision.listing import printable

    assert printable("ok: né – 1 µs") == "ok: né – 1 µs"
    assert printable("\t\x00\x7f\x85\u2028\u202e\u2066\U000e0001") == (
        r"\x09\x00\x7f\x85\u2028\u202e\u2066\U000e0001"
    )


@pytest.fixture
def secret_behind_a_symlink():
    """A 0777 directory where another account planted a symlink to a root-only file."""
    require_root("needs root to run status as user nobody and to own the secret")
    root = tempfile.mkdtemp(prefix="nvrx-status-symlink-")  # not under pytest's 0700 tmp
    try:
        os.chmod(root, 0o755)
        private = os.path.join(root, "private")
        os.mkdir(private, 0o700)
        with open(os.path.join(private, "shadow"), "w") as file:
            file.write("root:SECRET-HASH\n")
        shc = os.path.join(root, "shc")
        os.mkdir(shc)
        os.chmod(shc, 0o777)
        os.symlink(os.path.join(private, "shadow"), os.path.join(shc, "segment_health_check.1.1"))
        yield shc
    finally:
        shutil.rmtree(root)


def test_status_never_prints_what_a_planted_symlink_points_to(secret_behind_a_symlink):
    shc = secret_behind_a_symlink
    lib = public_copy(os.path.dirname(shc))
    env = {"PATH": os.environ["PATH"]}
    outputs = [
        nvrx_seghealth("status", "--dir", shc),
        nvrx_seghealth("status", "--dir", shc, "--json"),
        as_nobody(lib, "status", "--dir", shc, env=env),
        as_nobody(lib, "status", "--dir", shc, "--json", env=env),
    ]
    for done in outputs:
        assert done.returncode == 0, done.stderr
        assert "SECRET" not in done.stdout + done.stderr


def test_each_decision_file_is_stated_once(shc, monkeypatch, capsys):
    """One bounded ``stat`` per decision file gives its state and its age, and one read
    that follows no link what is there (an unhealthy file's text). Counted: the requests
    the real helpers get."""
    import collections

    from nvrx_seghealth._commands import main
    from nvrx_seghealth._decision import boundedfs, boundedstat

    stats: collections.Counter[str] = collections.Counter()
    reads: collections.Counter[str] = collections.Counter()
    real_stat, real_fs = boundedstat._client.call, boundedfs._client.call

    def stat_call(key, request, timeout, **kwargs):
        stats[os.fsdecode(request.rstrip(b"\0"))] += 1
        return real_stat(key, request, timeout, **kwargs)

    def fs_call(key, request, timeout, **kwargs):
        wire = json.loads(request)
        if wire["op"] == "read":
            reads[wire["args"]["path"]] += 1
        return real_fs(key, request, timeout, **kwargs)

    monkeypatch.setattr(boundedstat._client, "call", stat_call)
    monkeypatch.setattr(boundedfs._client, "call", fs_call)
    assert main(["status", "--dir", str(shc), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["decisions"]
    assert {row["path"]: stats[row["path"]] for row in rows} == {row["path"]: 1 for row in rows}
    assert set(reads) == {row["path"] for row in rows} and set(reads.values()) == {1}
    assert all(row["age_seconds"] is not None for row in rows if row["state"] != "absent")


def test_a_name_with_leading_zeros_is_shown_as_a_file_no_launcher_reads(tmp_path):
    """``mark`` refuses ``--task-id 01``: Slurm writes no such id, so no launcher reads
    ``segment_health_check.01.1``. status says so instead of calling it unhealthy."""
    shc = tmp_path / "shc"
    shc.mkdir()
    (shc / "segment_health_check.01.1").write_text("bad\n")
    (shc / "segment_health_check.1.01").write_text("bad\n")
    (shc / "segment_health_check.1.2").write_text("bad\n")
    done = nvrx_seghealth("status", "--dir", str(shc), "--json")
    assert done.returncode == 0, done.stderr
    rows = {(r["job_id"], r["task_id"]): r for r in json.loads(done.stdout)["decisions"]}
    assert {key: row["state"] for key, row in rows.items()} == {
        ("01", "1"): "unread",
        ("1", "01"): "unread",
        ("1", "2"): "unhealthy",
    }
    assert "segment_health_check.1.1 is read" in rows[("01", "1")]["reason"]
    done = nvrx_seghealth("status", "--dir", str(shc))
    assert "3 decision files in" in done.stdout and "1 unhealthy; 2 unread" in done.stdout


#: What can be at a decision path where no producer writes: its ``blocked`` token.
BLOCKERS = {
    "fifo": ("not-a-regular-file", "not-a-regular-file"),
    "directory": ("not-a-regular-file", "not-a-regular-file"),
    "dangling symlink": ("absent", "symlink"),
    "symlink to an empty file": ("clear", "symlink"),
}


@pytest.mark.parametrize("kind", sorted(BLOCKERS))
def test_what_keeps_a_producer_from_marking_a_drained_unit_is_shown(tmp_path, kind):
    """A producer leaves alone what it cannot read at a drained task's decision path (it
    is someone else's) and stays ok; status shows that no producer can write there."""
    fake = FakeSlurm(tmp_path)
    path = fake.decision(1)  # task 1's node drains
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        empty = tmp_path / "empty"
        empty.touch()
        path.symlink_to(empty if kind == "symlink to an empty file" else tmp_path / "nowhere")
    assert fake.run("--once").returncode == 0  # the pass itself succeeds

    done = nvrx_seghealth("status", "--dir", str(fake.shc), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    [producer] = report["producers"]
    assert producer["state"] == "ok"
    rows = {row["task_id"]: row for row in report["decisions"]}
    assert (rows["1"]["state"], rows["1"]["blocked"]) == BLOCKERS[kind]
    assert all(row["blocked"] is None for task, row in rows.items() if task != "1")

    text = nvrx_seghealth("status", "--dir", str(fake.shc)).stdout
    assert "; 1 blocked: " in text.splitlines()[-2]  # the count, above the producer's line


def test_a_regular_decision_blocks_no_producer(tmp_path):
    fake = FakeSlurm(tmp_path)
    assert fake.run("--once").returncode == 0
    assert fake.decision(1).read_text() == TASK1_DRAINED
    done = nvrx_seghealth("status", "--dir", str(fake.shc), "--json")
    rows = json.loads(done.stdout)["decisions"]
    assert [(row["task_id"], row["blocked"]) for row in rows] == [("1", None)]
    assert "blocked" not in nvrx_seghealth("status", "--dir", str(fake.shc)).stdout
