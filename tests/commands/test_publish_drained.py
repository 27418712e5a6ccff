"""``nvrx-seghealth publish-drained`` without a cluster: the command's passes against a fake Slurm.

The fake Slurm (``harness/services/fakeslurm.py``) is a directory of small shell scripts named
``sinfo`` and ``squeue`` put first on PATH: they print canned answers, fail, or hang in a
real ``sleep``. That is the only way to make Slurm misbehave on demand; the real-cluster
behaviour (drain, a stopped slurmd, two producers) is covered by
``integration/slurm/test_publish_drained.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from harness.commands import COMMAND, in_the_foreground, nvrx_seghealth
from harness.services.fakeslurm import NODES, PRODUCER, TASK1_DRAINED, TASKS, FakeSlurm
from harness.waits import AT_ONCE_BOUND, wait_until
from nvrx_seghealth._producer.publisher import producer_tag

TAG = producer_tag(PRODUCER)
#: How long a hung fake Slurm command sleeps: far beyond any bound a test allows.
HANG = 4 * AT_ONCE_BOUND


# --- passes against a fake Slurm ---------------------------------------------------------


@pytest.fixture
def slurm(tmp_path):
    return FakeSlurm(tmp_path)


def test_a_pass_publishes_affected_tasks_clears_its_own_and_keeps_others(slurm):
    slurm.decision(0).write_text(f"{TAG} unavailable nodes: n1 drain (old)\n")
    slurm.decision(2).write_text("ops: bad cable\n")  # an operator's mark: not ours

    done = slurm.run()
    assert done.returncode == 0, done.stderr
    assert slurm.decision(0).read_bytes() == b""
    assert slurm.decision(1).read_text() == TASK1_DRAINED
    assert slurm.decision(2).read_text() == "ops: bad cable\n"
    assert f"task 0: cleared {slurm.decision(0)}" in done.stdout
    assert f"task 1: published {slurm.decision(1)}: {TASK1_DRAINED.strip()}" in done.stdout
    assert (
        "pass done: unavailable nodes: n3 drng (disk errors | smart); 3 running tasks; "
        "1 published, 0 updated, 1 cleared, 0 conflict, 0 write-failed, 1 unchanged" in done.stdout
    )
    events = slurm.audit_events()
    assert [(e["event"], e["task_id"]) for e in events] == [("cleared", "0"), ("published", "1")]
    assert events[1]["text"] == TASK1_DRAINED.strip() and events[1]["job_id"] == "500"
    assert events[1]["producer_id"] == PRODUCER
    assert all(e["time"].endswith("+00:00") for e in events)
    # sinfo is asked about the job's partitions only, after squeue named them
    assert (slurm.root / "sinfo.args").read_text() == "-p cpu,gpu -N -h -o %N|%t|%E\n"

    before = slurm.files()
    done = slurm.run()  # nothing changed in Slurm: nothing is written, nothing audited
    assert done.returncode == 0
    assert slurm.files() == before
    assert len(slurm.audit_events()) == 2
    assert (
        "0 published, 0 updated, 0 cleared, 0 conflict, 0 write-failed, 3 unchanged" in done.stdout
    )

    slurm.answer("sinfo", NODES.replace("n4|alloc|none", "n4|down|Not responding"))
    slurm.run()  # down counts after 2 passes (the default): the first changes nothing
    assert slurm.decision(1).read_text() == TASK1_DRAINED
    done = slurm.run()
    assert done.returncode == 0
    assert slurm.decision(1).read_text() == (
        f"{TAG} unavailable nodes: n3 drng (disk errors | smart); n4 down (Not responding)\n"
    )
    assert slurm.audit_events()[-1]["event"] == "updated"


def test_states_selects_what_counts_as_unavailable(slurm):
    slurm.answer("sinfo", NODES.replace("n5|mix|none", "n5|mix*|none"))
    done = slurm.run("--states", "no_respond", "--passes", "no_respond=1", "--once")
    assert done.returncode == 0, done.stderr
    assert not slurm.decision(1).exists()
    assert slurm.decision(2).read_text() == f"{TAG} unavailable nodes: n5 mix*\n"


def test_a_blip_excludes_nothing_and_a_state_that_holds_counts(slurm):
    """Not responding for one or two passes (a slurmd restart) publishes nothing; a
    third pass in a row does (the default: no_respond=3). Clearing takes three clean
    passes too. Each pass is its own process: the counts live in the state file."""
    blip = NODES.replace("n5|mix|none", "n5|mix*|none")
    for sinfo, expected in [
        (blip, None),
        (NODES, None),
        (blip, None),
        (blip, None),
        (blip, "n5 mix*"),
        (NODES, "n5 mix*"),
        (NODES, "n5 mix*"),
        (NODES, ""),
    ]:
        slurm.answer("sinfo", sinfo)
        done = slurm.run("--states", "no_respond")
        assert done.returncode == 0, done.stderr
        if expected is None:
            assert not slurm.decision(2).exists()
        elif expected:
            assert slurm.decision(2).read_text() == f"{TAG} unavailable nodes: {expected}\n"
        else:
            assert slurm.decision(2).read_bytes() == b""
    assert [e["event"] for e in slurm.audit_events()] == ["published", "cleared"]
    assert "not counted yet" not in done.stdout


def test_a_node_pending_keeps_the_decision_it_has(slurm):
    """A task whose node is in a state that has not counted yet is neither published nor
    cleared, even when the producer starts without counts."""
    slurm.decision(2).write_text(f"{TAG} unavailable nodes: n5 mix*\n")
    slurm.answer("sinfo", NODES.replace("n5|mix|none", "n5|mix*|none"))
    done = slurm.run("--states", "no_respond")
    assert done.returncode == 0, done.stderr
    assert "not counted yet: n5" in done.stdout
    assert slurm.decision(2).read_text() == f"{TAG} unavailable nodes: n5 mix*\n"


def test_producers_never_clear_each_others_decisions(slurm):
    first = slurm.run(producer="ops-a")
    assert first.returncode == 0
    text = slurm.decision(1).read_text()
    assert text.startswith("nvrx-seghealth publish-drained[ops-a]: ")
    slurm.answer("sinfo", NODES.replace("drng", "alloc"))  # all fine, for producer b
    second = slurm.run(producer="ops-b")
    assert second.returncode == 0
    assert slurm.decision(1).read_text() == text  # not ops-b's: left alone
    assert slurm.run(producer="ops-a").returncode == 0
    assert slurm.decision(1).read_bytes() == b""  # ops-a clears its own


def test_the_default_producer_id_is_the_account_and_the_states(slurm):
    done = nvrx_seghealth(
        "publish-drained",
        "--dir",
        str(slurm.shc),
        "--job-id",
        "500",
        "--states",
        "fail,drain",
        env=slurm.env,
    )
    assert done.returncode == 0, done.stderr
    assert (
        slurm.decision(1)
        .read_text()
        .startswith("nvrx-seghealth publish-drained[root-drain+fail]: unavailable nodes: n3 drng")
    )
    assert (slurm.shc / ".publish-drained.root-drain+fail.500.json").exists()


@pytest.mark.parametrize(
    "command,body",
    [
        ("squeue", f"exec sleep {HANG:g}\n"),  # hangs
        ("sinfo", f"sleep {HANG:g}\necho n3\n"),  # hangs; its child holds the pipe
        ("sinfo", "echo 'n1 alloc none'\n"),  # malformed
        ("sinfo", "true\n"),  # no nodes at all
        ("sinfo", "echo 'sinfo: error: Unable to contact slurm controller' >&2; exit 1\n"),
        ("squeue", "echo '499|1|gpu|n[3-4]'\n"),  # another array's task
        ("squeue", "echo '500|1|gpu|n[3-'\n"),  # a host list cut short
    ],
)
def test_a_failed_pass_writes_nothing_and_keeps_the_last_decisions(slurm, command, body):
    slurm.decision(0).write_text(f"{TAG} unavailable nodes: n1 drain (old)\n")
    before = slurm.files()  # a good pass would clear task 0 and publish task 1
    slurm.script(command, body)

    started = time.monotonic()
    done = slurm.run("--slurm-timeout", "1", timeout=HANG)
    assert time.monotonic() - started < AT_ONCE_BOUND  # the 1 s bound, not the hang
    assert done.returncode == 1
    assert "pass failed, nothing written, last decisions kept (passes failing since " in done.stderr
    assert done.stdout == ""
    assert slurm.files() == before
    [event] = slurm.audit_events()
    assert event["event"] == "pass-failed" and event["job_id"] == "500" and event["error"]


def test_failing_passes_keep_decisions_status_says_since_when_and_an_opt_in_window_clears(slurm):
    assert slurm.run().returncode == 0
    assert slurm.decision(1).read_text() == TASK1_DRAINED
    slurm.script("sinfo", "exit 1\n")
    for _ in range(2):
        assert slurm.run().returncode == 1
    assert slurm.decision(1).read_text() == TASK1_DRAINED  # never a false clean
    status = nvrx_seghealth("status", "--dir", str(slurm.shc))
    assert re.search(
        rf"producer {PRODUCER} \(job 500\): FAILING since \S+Z \(\d+s, 2 passes; "
        r"last good pass \d+s ago\); its decisions are kept",
        status.stdout,
    ), status.stdout
    report = json.loads(nvrx_seghealth("status", "--dir", str(slurm.shc), "--json").stdout)
    [producer] = report["producers"]
    assert producer["failed_passes"] == 2 and producer["failing_since"] > 0

    done = slurm.run("--clear-after-failing", "0.001")
    assert done.returncode == 1
    assert slurm.decision(1).read_bytes() == b""  # its own decision, cleared: fail open
    assert slurm.decision(0).exists() is False
    assert f"task 1: stale-cleared {slurm.decision(1)}" in done.stdout
    assert [e["event"] for e in slurm.audit_events()][-2:] == ["pass-failed", "stale-cleared"]
    slurm.answer("sinfo", NODES)
    assert slurm.run().returncode == 0  # Slurm is back: the drain counts again at once
    assert slurm.decision(1).read_text() == TASK1_DRAINED
    status = nvrx_seghealth("status", "--dir", str(slurm.shc))
    assert re.search(rf"producer {PRODUCER} \(job 500\): last pass \d+s ago, ok", status.stdout)


def test_what_cannot_be_read_is_left_alone_once_warned_and_the_others_are_written(slurm):
    slurm.answer("sinfo", NODES.replace("n5|mix|none", "n5|fail|psu"))
    slurm.decision(1).mkdir()  # not a decision this producer can read: not its own
    done = slurm.run()
    assert done.returncode == 0, done.stderr
    assert (
        f"warning: task 1: {slurm.decision(1)} cannot be read (not a regular file: "
        "directory): it is someone else's decision and is left alone" in done.stderr
    )
    assert slurm.decision(1).is_dir()
    assert slurm.decision(2).read_text() == f"{TAG} unavailable nodes: n5 fail (psu)\n"
    assert [(e["event"], e["task_id"]) for e in slurm.audit_events()] == [
        ("unreadable", "1"),
        ("published", "2"),
    ]
    assert [p.name for p in slurm.shc.iterdir() if p.name.endswith(".tmp")] == []
    done = slurm.run()  # warned once: not again while it stays so
    assert "warning" not in done.stderr and len(slurm.audit_events()) == 2


def test_interval_runs_passes_until_sigterm(slurm):
    process = subprocess.Popen(
        [*COMMAND, *slurm.args("--interval", "0.2")],
        env={**os.environ, **slurm.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None  # a pipe
    try:
        passes = [
            line for line in (process.stdout.readline() for _ in range(4)) if "pass done" in line
        ]
        assert len(passes) >= 2  # the first pass publishes (2 lines), then a quiet pass
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=AT_ONCE_BOUND) == 0
    finally:
        process.kill()
        process.communicate()
    assert [e["event"] for e in slurm.audit_events()] == ["published"]


@pytest.mark.parametrize(
    ("sig", "mode", "code"),
    [
        (signal.SIGTERM, ["--interval", "5"], 0),
        (signal.SIGINT, ["--interval", "5"], 0),
        (signal.SIGTERM, ["--once"], 1),
        (signal.SIGINT, ["--once"], 1),
    ],
    ids=["interval-SIGTERM", "interval-SIGINT", "once-SIGTERM", "once-SIGINT"],
)
def test_a_stop_signal_ends_a_pass_in_a_hung_slurm_command_and_the_command(slurm, sig, mode, code):
    """A pass waiting for a Slurm command that hangs (its bound 60 s) is ended by SIGTERM
    or SIGINT at once, the hanging command killed with it (its process gone): exit 0
    with ``--interval`` (the producer stopped as asked), 1 with ``--once`` (its pass did
    not finish)."""
    pid_file = slurm.root / "squeue.pid"
    slurm.script(
        "squeue", f"echo $$ > {pid_file}.new\nmv {pid_file}.new {pid_file}\nexec sleep 120\n"
    )
    process = subprocess.Popen(
        in_the_foreground([*COMMAND, *slurm.args(*mode, "--slurm-timeout", "60")]),
        env={**os.environ, **slurm.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    command = None
    try:
        wait_until(pid_file.exists, timeout=30)
        command = int(pid_file.read_text())
        wait_until(lambda: _runs(command, b"sleep"), timeout=30)  # squeue now hangs
        process.send_signal(sig)
        assert process.wait(timeout=AT_ONCE_BOUND) == code  # half the squeue call's bound
    finally:
        process.kill()
        _out, err = process.communicate()
        left = command is not None and _runs(command, b"sleep")
        if command is not None and left:  # the producer left it: the test fails below
            os.kill(command, signal.SIGKILL)
    assert f"stopped by {sig.name} during a pass" in err
    assert not left
    assert list(slurm.files()) == []


def _runs(pid: int, name: bytes) -> bool:
    """Whether process ``pid`` runs a command line that starts with ``name``."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read().startswith(name)
    except OSError:
        return False


def _producer(slurm, *extra):
    """``publish-drained`` with ``extra`` options as a running process (text pipes)."""
    return subprocess.Popen(
        [*COMMAND, *slurm.args(*extra)],
        env={**os.environ, **slurm.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _next_pass(process):
    """Read the producer's stdout up to its next ``pass done`` line."""
    for line in process.stdout:
        if "pass done" in line:
            return line
    raise AssertionError("the producer ended before its next pass")


def _block_call(slurm, number):
    """Make squeue's call ``number`` touch ``squeue.started`` and wait until a line is
    written to the FIFO ``squeue.go``; returns (started flag, FIFO)."""
    started, go = slurm.root / "squeue.started", slurm.root / "squeue.go"
    os.mkfifo(go)
    slurm.script(
        "squeue",
        f'if [ "$(wc -l < {slurm.root}/squeue.args)" -eq {number} ]; then\n'
        f"  touch {started}; read line < {go}\nfi\ncat <<'EOF'\n{TASKS}EOF\n",
    )
    return started, go


def test_sigusr1_runs_a_pass_at_once_while_sleeping_found_by_the_pid_file(slurm):
    """With --interval 600 only a signal can explain a second pass: ``kill -USR1 $(cat
    PIDFILE)``, the operator's path, runs it; SIGTERM still stops the producer, and the
    pid file goes with it."""
    pid_file = slurm.root / "producer.pid"
    process = _producer(slurm, "--interval", "600", "--pid-file", str(pid_file))
    try:
        _next_pass(process)
        assert pid_file.read_text() == f"{process.pid}\n"
        subprocess.run(["sh", "-c", f'kill -USR1 "$(cat {pid_file})"'], check=True, timeout=30)
        _next_pass(process)  # the sleep of 600 s ended at once
        assert slurm.calls("squeue") == 2
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=AT_ONCE_BOUND) == 0
    finally:
        process.kill()
        process.communicate()
    assert not pid_file.exists()
    assert [e["event"] for e in slurm.audit_events()] == ["published"]


def test_sigusr1_during_a_pass_runs_one_more_pass_however_many_arrive(slurm):
    started, go = _block_call(slurm, 2)
    process = _producer(slurm, "--interval", "600")
    try:
        _next_pass(process)
        process.send_signal(signal.SIGUSR1)
        wait_until(started.exists, timeout=60)  # the second pass waits in squeue
        for _ in range(3):
            process.send_signal(signal.SIGUSR1)
        go.write_text("go\n")
        _next_pass(process)  # the second pass ends
        _next_pass(process)  # the one pass the three signals asked for
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=AT_ONCE_BOUND) == 0
    finally:
        process.kill()
        process.communicate()
    assert slurm.calls("squeue") == 3


def test_sigterm_stops_a_pass_that_sigusr1_started(slurm):
    started, _go = _block_call(slurm, 2)
    pid_file = slurm.root / "producer.pid"
    process = _producer(slurm, "--interval", "600", "--pid-file", str(pid_file))
    try:
        _next_pass(process)
        process.send_signal(signal.SIGUSR1)
        wait_until(started.exists, timeout=60)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=AT_ONCE_BOUND) == 0
    finally:
        process.kill()
        _out, err = process.communicate()
    assert "stopped by SIGTERM during a pass" in err
    assert not pid_file.exists()


def test_a_running_producer_keeps_its_pid_file_and_a_second_one_is_refused(slurm):
    pid_file = slurm.root / "producer.pid"
    process = _producer(slurm, "--interval", "600", "--pid-file", str(pid_file))
    try:
        _next_pass(process)
        second = slurm.run("--interval", "600", "--pid-file", str(pid_file))
        assert second.returncode == 2
        assert second.stderr.startswith("nvrx-seghealth publish-drained: error: --pid-file ")
        assert pid_file.read_text() == f"{process.pid}\n"
        assert slurm.calls("squeue") == 1  # the refused one ran no pass
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=AT_ONCE_BOUND) == 0
    finally:
        process.kill()
        process.communicate()
    assert not pid_file.exists()


def test_a_fifo_planted_as_the_pid_file_is_refused_at_once(slurm):
    """Opening a FIFO for reading waits for a writer: the claim never opens one."""
    pid_file = slurm.root / "producer.pid"
    os.mkfifo(pid_file)
    done = slurm.run("--interval", "600", "--pid-file", str(pid_file), timeout=30)
    assert done.returncode == 2
    assert f"--pid-file {pid_file} is a FIFO, not a pid file: remove it" in done.stderr
    assert slurm.calls("squeue") == 0 and pid_file.is_fifo()


def test_a_killed_producers_file_is_taken_over_though_its_pid_runs_another_program(slurm):
    """SIGKILL (or the OOM killer) leaves the pid file, and the pid is reused: a restarted
    producer (systemd's Restart=) takes the file over; the other process is left be."""
    pid_file = slurm.root / "producer.pid"
    first = _producer(slurm, "--interval", "600", "--pid-file", str(pid_file))
    _next_pass(first)
    first.kill()
    first.communicate()
    other = subprocess.Popen(["sleep", "600"])
    try:
        pid_file.write_text(f"{other.pid}\n")  # the reuse, as the file sees it
        second = _producer(slurm, "--interval", "600", "--pid-file", str(pid_file))
        try:
            _next_pass(second)
            assert pid_file.read_text() == f"{second.pid}\n"
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=AT_ONCE_BOUND) == 0
        finally:
            second.kill()
            second.communicate()
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
    assert not pid_file.exists()


def test_a_pid_file_removed_while_running_is_reported_once(slurm):
    """The producer checks after each pass that its pid file still finds it."""
    pid_file = slurm.root / "producer.pid"
    process = _producer(slurm, "--interval", "600", "--pid-file", str(pid_file))
    try:
        _next_pass(process)
        pid_file.unlink()  # a cleaner of old files, an operator
        for _ in range(2):
            process.send_signal(signal.SIGUSR1)
            _next_pass(process)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=AT_ONCE_BOUND) == 0
    finally:
        process.kill()
        _out, err = process.communicate()
    assert err.count(f"warning: --pid-file {pid_file} was removed") == 1, err


def test_once_ignores_sigusr1(slurm):
    """A signal meant for a long-running producer does not kill a single pass."""
    started, go = _block_call(slurm, 1)
    process = _producer(slurm, "--once")
    try:
        wait_until(started.exists, timeout=60)
        process.send_signal(signal.SIGUSR1)
        go.write_text("go\n")
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
        process.communicate()
    assert [e["event"] for e in slurm.audit_events()] == ["published"]


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--states", "drain,bogus"],
            "unknown state(s) bogus; choose from drain, down, fail, no_respond",
        ),
        (["--once", "--interval", "5"], "not allowed with argument"),
        (["--interval", "0"], "argument --interval:"),
        (["--interval", "1e12"], "argument --interval:"),  # more than a wait can take
        (["--slurm-timeout", "inf"], "argument --slurm-timeout:"),
        (["--slurm-timeout", "1e12"], "argument --slurm-timeout:"),
        (["--clear-after-failing", "0"], "argument --clear-after-failing:"),
        (["--clear-after-failing", "nan"], "argument --clear-after-failing:"),
        (["--passes", "no_respond=0"], "'no_respond=0' is not STATE=N"),
        (["--passes", "flaky=2"], "'flaky=2' is not STATE=N"),
        (["--producer-id", "a/b"], "'a/b' is not a producer id"),
        (["--fs-timeout", "0"], "argument --fs-timeout:"),
        (["--once", "--pid-file", "p.pid"], "--pid-file needs --interval"),
        (
            ["--job-id", "500_3"],
            "'500_3' is one task of array job 500: give the array job id (--job-id 500)",
        ),
    ],
)
def test_usage_errors_exit_2(slurm, args, message):
    done = slurm.run(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert list(slurm.shc.iterdir()) == [] and not slurm.audit.exists()


def test_the_directory_must_exist(tmp_path):
    done = nvrx_seghealth("publish-drained", "--dir", str(tmp_path / "no"), "--job-id", "5")
    assert done.returncode == 2
    assert f"{tmp_path / 'no'} does not exist: create it first (mkdir -p " in done.stderr


def test_no_decision_directory_is_a_usage_error(tmp_path):
    done = nvrx_seghealth("publish-drained", "--job-id", "5", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("nvrx-seghealth publish-drained: error: ")
    assert "--dir" in done.stderr and list(tmp_path.iterdir()) == []
