"""The fail-open table, row by row, on real files."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

import nvrx_seghealth
from nvrx_seghealth._decision import decision_file
from nvrx_seghealth._decision.decision_file import (
    Outcome,
    clear_decision,
    decision_file_path,
    evaluate,
    publish_decision,
)
from nvrx_seghealth._decision.unit import InvalidIdentityError
from nvrx_seghealth._errors import ConfigurationError
from nvrx_seghealth._settings.check_settings import require_absolute_directory


@pytest.fixture
def path(tmp_path):
    return decision_file_path(str(tmp_path), "123", "7")


@contextlib.contextmanager
def recorded_opens(target):
    """Record every ``open`` audit event on ``target`` while the block runs."""
    opened = []
    active = [True]

    def hook(event, args):
        if (
            active[0]
            and event == "open"
            and isinstance(args[0], (str, bytes, os.PathLike))
            and os.fsdecode(args[0]) == target
        ):
            opened.append(args)

    sys.addaudithook(hook)  # audit hooks cannot be removed: this one goes inert after
    try:
        yield opened
    finally:
        active[0] = False


def test_path_layout(tmp_path):
    assert decision_file_path("/shared/job", "123", "7") == "/shared/job/segment_health_check.123.7"


@pytest.mark.parametrize("directory", ["relative/dir", "", "./x"])
def test_relative_directory_is_refused(directory):
    with pytest.raises(ConfigurationError) as refused:
        decision_file_path(directory, "1", "2")
    assert refused.value.setting == "directory"


def test_directory_message_names_the_setting_and_a_fix():
    with pytest.raises(ConfigurationError) as refused:
        require_absolute_directory("shc", what="--my-flag")
    assert refused.value.setting == "--my-flag"
    assert repr(os.path.abspath("shc")) in str(refused.value)  # the fix: an absolute path


@pytest.mark.parametrize(
    "job_id,task_id", [("../x", "1"), ("1", "../../etc/passwd"), ("1", "2/..")]
)
def test_ids_cannot_escape_the_directory(job_id, task_id):
    with pytest.raises(InvalidIdentityError):
        decision_file_path("/shared", job_id, task_id)


def test_non_empty_regular_file_is_unhealthy_and_never_opened(path):
    content = b"node n3 drained: ECC errors\n" + b"x" * (128 * 1024)
    with open(path, "wb") as handle:
        handle.write(content)
    with recorded_opens(path) as opened:
        decision = evaluate(path)
    assert decision.outcome is Outcome.UNHEALTHY
    assert decision.size == len(content)
    assert not decision.proceed and not decision.failed_open
    assert opened == []


def test_empty_regular_file_proceeds(path):
    open(path, "wb").close()
    decision = evaluate(path)
    assert (decision.outcome, decision.size, decision.proceed) == (Outcome.CLEAR, 0, True)


def test_missing_file_proceeds_quietly(path):
    decision = evaluate(path)
    assert decision.outcome is Outcome.ABSENT
    assert decision.proceed and not decision.failed_open


def test_missing_directory_proceeds_quietly(tmp_path):
    decision = evaluate(decision_file_path(str(tmp_path / "not-there"), "1", "2"))
    assert decision.outcome is Outcome.ABSENT


def test_dangling_symlink_proceeds_quietly(path, tmp_path):
    os.symlink(tmp_path / "nowhere", path)
    assert evaluate(path).outcome is Outcome.ABSENT


def test_directory_fails_open(path):
    os.mkdir(path)
    decision = evaluate(path)
    assert decision.outcome is Outcome.NOT_REGULAR
    assert decision.proceed and decision.failed_open
    assert "directory" in decision.reason


def test_fifo_fails_open_without_blocking(path):
    os.mkfifo(path)  # no writer: opening it for reading would block for ever
    result = []
    worker = threading.Thread(target=lambda: result.append(evaluate(path)), daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert result, "evaluate() blocked on a FIFO"
    assert result[0].outcome is Outcome.NOT_REGULAR
    assert "FIFO" in result[0].reason


def test_socket_fails_open(tmp_path):
    # AF_UNIX paths are limited to ~108 bytes: bind in a short directory.
    directory = tmp_path / "s"
    directory.mkdir()
    path = decision_file_path(str(directory), "1", "2")
    cwd = os.getcwd()
    os.chdir(directory)
    try:
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(os.path.basename(path))
            decision = evaluate(path)
    finally:
        os.chdir(cwd)
    assert decision.outcome is Outcome.NOT_REGULAR
    assert "socket" in decision.reason


def test_character_device_fails_open(path):
    os.symlink("/dev/null", path)
    decision = evaluate(path)
    assert decision.outcome is Outcome.NOT_REGULAR
    assert "character device" in decision.reason


@pytest.mark.parametrize(
    "make,outcome",
    [
        (lambda target: target.write_bytes(b"bad"), Outcome.UNHEALTHY),
        (lambda target: target.write_bytes(b""), Outcome.CLEAR),
        (lambda target: target.mkdir(), Outcome.NOT_REGULAR),
        (lambda target: os.mkfifo(target), Outcome.NOT_REGULAR),
    ],
    ids=["non-empty", "empty", "directory", "fifo"],
)
def test_symlinks_are_followed(path, tmp_path, make, outcome):
    target = tmp_path / "target"
    make(target)
    os.symlink(target, path)
    assert evaluate(path).outcome is outcome


def test_symlink_loop_fails_open(path, tmp_path):
    os.symlink(path, tmp_path / "other")
    os.symlink(tmp_path / "other", path)
    decision = evaluate(path)
    assert decision.outcome is Outcome.UNREADABLE
    assert "ELOOP" in decision.reason


def test_file_in_place_of_directory_fails_open(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    decision = evaluate(decision_file_path(str(tmp_path / "file"), "1", "2"))
    assert decision.outcome is Outcome.UNREADABLE
    assert "ENOTDIR" in decision.reason


def test_name_too_long_fails_open(tmp_path):
    decision = evaluate(decision_file_path(str(tmp_path), "1", "9" * 300))
    assert decision.outcome is Outcome.UNREADABLE
    assert "ENAMETOOLONG" in decision.reason


_EVALUATE_AS_NOBODY = """
import json, sys
from nvrx_seghealth._decision.decision_file import evaluate
print(json.dumps([[d.outcome.value, d.reason] for d in map(evaluate, sys.argv[1:])]))
"""


def test_permission_denied_fails_open():
    """EACCES for real: a directory closed to an unprivileged user (root ignores modes)."""
    public = tempfile.mkdtemp(prefix="nvrx-eacces-")  # not under pytest's 0700 tmp dir
    try:
        os.chmod(public, 0o755)
        private = os.path.join(public, "private")
        os.mkdir(private, 0o700)
        hidden = publish_decision(private, "1", "2", "unhealthy, but nobody can see it")
        visible = decision_file_path(public, "1", "2")  # control: reachable, and missing
        # The decision layer is standard-library only: a copy of the package and the base
        # interpreter are all the unprivileged user needs, wherever the checkout lives.
        shutil.copytree(
            os.path.dirname(nvrx_seghealth.__file__), os.path.join(public, "lib", "nvrx_seghealth")
        )
        command = [
            os.path.realpath(sys.executable),
            "-s",
            "-c",
            _EVALUATE_AS_NOBODY,
            visible,
            hidden,
        ]
        if os.geteuid() == 0:
            command = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *command]
        else:
            os.chmod(private, 0o000)
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": os.path.join(public, "lib")},
            check=False,
        )
    finally:
        os.chmod(os.path.join(public, "private"), 0o700)
        shutil.rmtree(public)
    assert done.returncode == 0, f"the unprivileged evaluator failed: {done.stderr}"
    (visible_outcome, _), (hidden_outcome, hidden_reason) = json.loads(done.stdout)
    assert visible_outcome == "absent"
    assert hidden_outcome == "unreadable"
    assert "EACCES" in hidden_reason


def test_eio_fails_open(path, monkeypatch):
    """EIO cannot be made real on a local filesystem: injected where the helper's answer
    comes back (the stat itself runs in another process)."""
    real_stat_within = decision_file.stat_within

    def failing_stat(target, timeout):
        if target == path:
            raise OSError(errno.EIO, os.strerror(errno.EIO), target)
        return real_stat_within(target, timeout)

    monkeypatch.setattr(decision_file, "stat_within", failing_stat)
    decision = evaluate(path)
    assert decision.outcome is Outcome.UNREADABLE
    assert "EIO" in decision.reason


def test_publish_is_atomic_and_leaves_no_temporary(tmp_path):
    path = publish_decision(str(tmp_path), "5", "3", "drained: n7")
    assert evaluate(path).outcome is Outcome.UNHEALTHY
    assert Path(path).read_text() == "drained: n7"
    assert oct(os.stat(path).st_mode & 0o777) == oct(0o644)
    assert sorted(os.listdir(tmp_path)) == [".segment_health_check.lock", os.path.basename(path)]


def test_publish_never_shows_a_partial_or_empty_file(tmp_path):
    """A reader racing many rewrites only ever sees a whole decision."""
    directory = str(tmp_path)
    texts = {f"reason {i}: " + "x" * (i * 997) for i in range(1, 40)}
    publish_decision(directory, "5", "3", "reason 0: first")
    path = decision_file_path(directory, "5", "3")
    seen = set()
    stop = time.monotonic() + 30

    def writer():
        for text in sorted(texts):
            publish_decision(directory, "5", "3", text)

    thread = threading.Thread(target=writer)
    thread.start()
    while thread.is_alive() and time.monotonic() < stop:
        with open(path) as handle:  # the test reads; the consumer never does
            seen.add(handle.read())
    thread.join()
    assert seen <= texts | {"reason 0: first"}


def test_publish_refuses_empty_text(tmp_path):
    with pytest.raises(ValueError, match="empty file means healthy"):
        publish_decision(str(tmp_path), "5", "3", "")


def test_clear_truncates_or_removes_only_its_own_file(tmp_path):
    directory = str(tmp_path)
    mine = publish_decision(directory, "5", "3", "bad")
    other = publish_decision(directory, "5", "4", "also bad")
    clear_decision(directory, "5", "3")
    assert evaluate(mine).outcome is Outcome.CLEAR
    clear_decision(directory, "5", "3", remove=True)
    assert evaluate(mine).outcome is Outcome.ABSENT
    clear_decision(directory, "5", "3", remove=True)  # already gone: fine
    assert Path(other).read_text() == "also bad"
    assert sorted(os.listdir(tmp_path)) == [".segment_health_check.lock", os.path.basename(other)]


def test_integer_ids_make_the_same_path_and_other_types_are_a_type_error():
    by_int = decision_file_path("/shared/job", 123, 7)
    assert by_int == decision_file_path("/shared/job", "123", "7")
    with pytest.raises(
        TypeError, match="task_id must be a str of decimal digits or an int, got float 7.0"
    ):
        decision_file_path("/shared/job", 123, 7.0)  # type: ignore[arg-type]  # on purpose
