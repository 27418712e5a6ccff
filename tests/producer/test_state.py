"""The producer's state file: one schema, checked on every load, by the producer and by
``status``.

A state file lives in a directory other accounts may write, so whatever it holds is
input: a malformed one is an ``unreadable`` row in ``status`` (never a traceback, never
``NaN`` in ``--json``) and, for ``publish-drained``, one warning and a fresh start that
publishes nothing because of it. Slurm is the fake of ``harness/services/fakeslurm.py``.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from harness.commands import nvrx_seghealth
from harness.services.fakeslurm import ALL_FINE, FakeSlurm, dump, planted
from nvrx_seghealth._producer.bootclock import BootClock
from nvrx_seghealth._producer.debounce import NodeRecord
from nvrx_seghealth._producer.state import (
    FailureStreak,
    StateFileError,
    parse_state,
    state_file_name,
)


def strict_json(text):
    """Parse ``text`` as JSON proper: ``NaN`` and ``Infinity`` are refused."""

    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


#: Malformed bodies, each with the field it is refused for (``None``: the whole file).
MALFORMED = [
    pytest.param({"last_pass": "yesterday"}, "last_pass", id="last_pass-text"),
    pytest.param({"failing_since": 1e300, "failed_passes": 1}, "failing_since", id="far-future"),
    pytest.param({"last_pass": math.nan}, None, id="last_pass-NaN"),
    pytest.param({"last_ok": math.inf}, None, id="last_ok-Infinity"),
    pytest.param({"interval": "30"}, "interval", id="interval-text"),
    pytest.param({"nodes": []}, "nodes", id="nodes-list"),
    pytest.param({"nodes": {"n2": {"streaks": {}}}}, "nodes", id="node-fields-missing"),
    pytest.param(
        {
            "nodes": {
                "n2": {
                    "streaks": {"drain": 1},
                    "unavailable": True,
                    "hold": -1,
                    "clean": 0,
                    "seen": "",
                }
            }
        },
        "nodes",
        id="node-hold-negative",
    ),
    pytest.param(
        {
            "nodes": {
                "n2": {
                    "streaks": {"flaky": 1},
                    "unavailable": True,
                    "hold": 1,
                    "clean": 0,
                    "seen": "",
                }
            }
        },
        "nodes",
        id="node-unknown-state",
    ),
    pytest.param({"failed_passes": -1}, "failed_passes", id="count-negative"),
    pytest.param({"failed_passes": True}, "failed_passes", id="count-bool"),
    pytest.param({"failed_passes": 10**400}, "failed_passes", id="count-huge"),
    pytest.param({"last_pass": -5}, "last_pass", id="before-1970"),
    pytest.param({"last_error": 7}, "last_error", id="error-number"),
    pytest.param({"stale_cleared": "no"}, "stale_cleared", id="flag-text"),
    pytest.param({"unreadable": "x"}, "unreadable", id="paths-text"),
    pytest.param({"passes": {"drain": 0}}, "passes", id="passes-zero"),
    pytest.param({"version": 2}, "version", id="other-version"),
    pytest.param({"version": ...}, "version", id="no-version"),
    pytest.param({"last_ok": ...}, "last_ok", id="missing-key"),
    pytest.param({"extra": 1}, None, id="unknown-key"),
    pytest.param({"producer_id": "t2"}, "producer_id", id="another-producers"),
    pytest.param({"job_id": "501"}, "producer_id", id="another-jobs"),
]

PATH = f"/shc/{state_file_name('t1', '500')}"


def test_a_state_reads_back_as_it_was_written():
    body = planted()
    state = parse_state(PATH, dump(body))
    assert json.loads(state.to_json()) == body
    assert state.nodes["n2"] == NodeRecord({"drain": 1}, True, 9999, 0, "n2 drain (planted)")


@pytest.mark.parametrize("changes,field", MALFORMED)
def test_a_malformed_state_is_refused_naming_the_file_and_the_field(changes, field):
    with pytest.raises(StateFileError) as refused:
        parse_state(PATH, dump(planted(**changes)))
    assert (refused.value.path, refused.value.field) == (PATH, field)
    assert str(refused.value).startswith(PATH)


@pytest.mark.parametrize(
    "data",
    [b"", b"{not json", b"[]", b"\xff\xfe\x00", b"[" * 100_000, b'{"version": 1}' * 2],
    ids=["empty", "not-json", "a-list", "not-utf8", "nested-deep", "two-objects"],
)
def test_what_is_not_a_json_object_is_refused(data):
    with pytest.raises(StateFileError) as refused:
        parse_state(PATH, data)
    assert refused.value.path == PATH


def test_a_state_that_would_not_load_cannot_be_made():
    with pytest.raises(StateFileError) as refused:
        dataclasses.replace(parse_state(PATH, dump(planted())), last_ok=math.nan)
    assert (refused.value.field, refused.value.path) == ("last_ok", None)


# --- status --------------------------------------------------------------------------------


@pytest.mark.parametrize("changes,_field", MALFORMED[:6])
def test_status_shows_a_malformed_state_file_as_unreadable(tmp_path, changes, _field):
    shc = tmp_path / "shc"
    shc.mkdir()
    (shc / state_file_name("evil", "5")).write_bytes(dump(planted("evil", "5", **changes)))
    (shc / state_file_name("good", "5")).write_bytes(dump(planted("good", "5")))
    done = nvrx_seghealth("status", "--dir", str(shc), "--json")
    assert (done.returncode, done.stderr) == (0, "")
    evil, good = strict_json(done.stdout)["producers"]
    assert set(evil) == {"producer_id", "job_id", "state", "unreadable"}
    assert (evil["producer_id"], evil["state"]) == ("evil", "unreadable")
    assert "unreadable" not in good and good["last_pass"] == 1.7e9

    done = nvrx_seghealth("status", "--dir", str(shc))
    assert (done.returncode, done.stderr) == (0, "")
    [line] = [line for line in done.stdout.splitlines() if "producer evil" in line]
    assert "unreadable" in line


def test_status_escapes_the_control_characters_of_a_producers_error(tmp_path):
    shc = tmp_path / "shc"
    shc.mkdir()
    error = "x\r1000  1     clear\x1b]0;pwned-title\x07\x1b[8m"
    body = planted(failing_since=1.7e9, failed_passes=3, last_error=error)
    (shc / state_file_name("t1", "500")).write_bytes(dump(body))
    done = nvrx_seghealth("status", "--dir", str(shc))
    assert done.returncode == 1  # the producer is failing (exit-codes.md)
    [line] = [line for line in done.stdout.splitlines() if "producer t1" in line]
    assert not any(char in done.stdout for char in "\r\x1b\x07")
    assert line.endswith(r"x\x0d1000  1     clear\x1b]0;pwned-title\x07\x1b[8m")
    [row] = strict_json(nvrx_seghealth("status", "--dir", str(shc), "--json").stdout)["producers"]
    assert row["last_error"] == error  # the JSON keeps the text, escaped the JSON way


# --- publish-drained -------------------------------------------------------------------------


@pytest.fixture
def slurm(tmp_path):
    fake = FakeSlurm(tmp_path)
    fake.answer("sinfo", ALL_FINE)
    return fake


def warnings(stderr):
    return [line for line in stderr.splitlines() if " warning: " in line]


@pytest.mark.parametrize("changes,_field", MALFORMED)
def test_a_malformed_state_file_is_one_warning_and_a_fresh_start(slurm, changes, _field):
    """Every node is fine; the state file says n2 is unavailable for 9999 more passes but
    is malformed elsewhere: none of it is used, so nothing is published."""
    state = slurm.shc / state_file_name("t1", "500")
    state.write_bytes(dump(planted(**changes)))
    done = slurm.run("--once")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    [warning] = warnings(done.stderr)
    assert str(state) in warning
    assert slurm.files() == {}  # nothing published: n2's planted counts were not used
    assert slurm.audit_events() == []
    saved = parse_state(str(state), state.read_bytes())  # replaced by the producer's own
    assert saved.nodes == {} and saved.producer_id == "t1"


def test_the_producers_own_valid_state_is_used(slurm):
    """The counterpart: the same state, valid and the producer's own, is trusted (the
    node's counts survive), so the refusals above are refusals, not a lost state."""
    (slurm.shc / state_file_name("t1", "500")).write_bytes(dump(planted()))
    done = slurm.run("--once")
    assert done.returncode == 0, done.stderr
    assert warnings(done.stderr) == []
    assert slurm.decision(0).read_text().endswith("unavailable nodes: n2 drain (planted)\n")


# --- the failure streak ------------------------------------------------------------------


def test_a_streak_counts_failed_passes_from_the_first_and_a_good_pass_ends_it():
    """The run lasts what the boot clock says between its passes (60 s here), not what
    the wall clock says (10,060 s: it was stepped forward meanwhile)."""
    streak = FailureStreak().failed(100.0, "sinfo: exit 1", BootClock("b", 500.0))
    streak = streak.failed(10_160.0, "squeue hung", BootClock("b", 560.0))
    assert (streak.failing_since, streak.failed_passes, streak.last_error) == (
        100.0,
        2,
        "squeue hung",
    )
    assert streak.failing_for == 60.0
    assert not streak.stale_due(None) and not streak.stale_due(61.0)
    assert streak.stale_due(60.0)
    cleared = streak.cleared()
    assert cleared.stale_cleared and not cleared.stale_due(60.0)  # once per streak
    assert cleared.ok(200.0) == FailureStreak(last_ok=200.0)


def test_time_across_a_reboot_adds_nothing_to_a_streak():
    """A reading of another boot (or host) cannot be compared with this one: the time in
    between, which only the wall clock spans, is not counted."""
    streak = FailureStreak().failed(100.0, "x", BootClock("b1", 5000.0))
    streak = streak.failed(9000.0, "x", BootClock("b2", 30.0))
    assert (streak.failing_for, streak.failed_passes) == (0.0, 2)
    assert streak.failed(9060.0, "x", BootClock("b2", 90.0)).failing_for == 60.0
    assert BootClock("b2", 30.0).since("b2", 90.0) == 0.0  # never negative
