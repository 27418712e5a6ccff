"""Asking Slurm, strictly and under a timeout: ``sinfo``'s and ``squeue``'s answers parsed
or refused, and a command run by the producer never outliving the pass that started it,
however the producer is stopped.

The commands are real processes; SIGTERM is real, sent to a child program that runs the
producer's schedule and one Slurm command.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.services.fakeslurm import NODES, TASKS, FakeSlurm
from harness.services.stopsignals import SignalledChild
from harness.waits import wait_until
from nvrx_seghealth._decision.unit import SlurmId, validate_id
from nvrx_seghealth._producer.slurm import (
    NodeState,
    SlurmError,
    parse_nodes,
    parse_running_tasks,
)

#: The fake Slurm's array job, as the command validates it.
JOB = validate_id("--job-id", "500")

# --- answers -----------------------------------------------------------------------------


def test_parse_nodes_dedupes_partitions_and_keeps_reasons_with_bars():
    nodes = parse_nodes(NODES + "n6|idle*|none\nn7|down~|Not responding\n")
    assert [n.describe() for n in nodes] == [
        "n1 alloc",
        "n2 alloc",
        "n3 drng (disk errors | smart)",
        "n4 alloc",
        "n5 mix",
        "n6 idle*",
        "n7 down~ (Not responding)",
    ]


@pytest.mark.parametrize(
    "state,flags,matches",
    [
        ("drng", "", {"drain"}),
        ("drain", "", {"drain"}),
        ("drain", "*", {"drain", "no_respond"}),
        ("down", "", {"down"}),
        ("down", "*", {"down", "no_respond"}),
        ("fail", "", {"fail"}),
        ("failg", "", {"fail"}),
        ("idle", "*", {"no_respond"}),
        ("alloc", "", set()),
        ("mix", "-", set()),
        ("comp", "", set()),
    ],
)
def test_node_states(state, flags, matches):
    node = NodeState("n1", state, flags, "")
    assert {
        name for name in ("drain", "down", "fail", "no_respond") if node.matches([name])
    } == matches


@pytest.mark.parametrize(
    "text",
    ["", "\n", "n1 alloc none\n", "n1|alloc\n", "n1|ALLOC|x\n", "n1|alloc|none\n|idle|none\n"],
)
def test_parse_nodes_refuses_malformed_or_empty_answers(text):
    with pytest.raises(SlurmError):
        parse_nodes(text)


def test_parse_running_tasks():
    assert [
        (t.job_id, t.task_id, t.partition, t.hosts) for t in parse_running_tasks(TASKS, JOB)
    ] == [
        ("500", "0", "gpu", ("n1", "n2")),
        ("500", "1", "gpu", ("n3", "n4")),
        ("500", "2", "cpu", ("n5",)),
    ]
    [regular] = parse_running_tasks("77|N/A|debug|n[1-2]\n", validate_id("--job-id", "77"))
    assert (regular.job_id, regular.task_id) == ("77", "77")
    assert parse_running_tasks("", JOB) == []
    with pytest.raises(
        SlurmError,
        match=r"job 501 belongs to array job 500: give the array "
        r"job id \(--job-id 500\)",
    ):
        parse_running_tasks("500|1|gpu|n[3-4]\n", validate_id("--job-id", "501"))
    for bad in (
        "500|1|gpu\n",
        "500|x|gpu|n1\n",
        "500|1|gpu|n1 n2\n",
        "500|1|gpu|n[3-\n",
        "500|1|gpu|n[4-3]\n",
        "500|1|n[3-4]\n",
    ):
        with pytest.raises(SlurmError):
            parse_running_tasks(bad, JOB)


def test_the_ids_of_running_tasks_are_validated_where_they_enter():
    """Each task id becomes a ``SlurmId`` when ``squeue``'s answer is parsed; one Slurm
    never writes (leading zeros) fails the pass there, as any unexpected answer does."""
    job = validate_id("--job-id", "500")
    tasks = parse_running_tasks(TASKS + "500|N/A|gpu|n1\n", job)
    assert all(isinstance(t.job_id, SlurmId) and isinstance(t.task_id, SlurmId) for t in tasks)
    with pytest.raises(SlurmError, match="007"):
        parse_running_tasks("500|007|gpu|n1\n", job)


# --- a stopped pass ----------------------------------------------------------------------


#: A pass that runs ``{command}`` (a Slurm command that hangs) and says what stopped it.
STOPPED_PASS = """
import os, signal, subprocess
from nvrx_seghealth._producer.schedule import PassSchedule, Stopped
from nvrx_seghealth._producer.slurm import run_slurm_command
{prepare}
try:
    with PassSchedule(600) as schedule:
        for wake in schedule.passes():
            run_slurm_command({command!r}, 600)
except Stopped as stopped:
    print("stopped", stopped.signal.name, flush=True)
"""


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended and been reaped."""
    return not Path(f"/proc/{pid}").exists()


@contextlib.contextmanager
def ended_afterwards(pid_file: Path):
    """Whatever the test found, end the command whose pid ``pid_file`` holds (it runs in
    its own session: its process group is its pid)."""
    try:
        yield
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)


def test_sigterm_that_lands_as_the_wait_for_a_command_begins_stops_the_pass_at_once(tmp_path):
    """The main thread waits for a command that hangs (its timeout 600 s) when SIGTERM
    arrives beside it: the pass is stopped at once all the same, the command killed."""
    pid_file = tmp_path / "command.pid"
    command = ["sh", "-c", f"echo $$ > {pid_file}; exec sleep 600"]
    with (
        ended_afterwards(pid_file),
        SignalledChild(STOPPED_PASS.format(prepare="", command=command)) as child,
    ):
        wait_until(lambda: pid_file.exists() and pid_file.read_text().strip())
        wait_until(child.waiting)
        child.send(signal.SIGTERM)
        assert child.next_line() == "stopped SIGTERM"
        assert gone(int(pid_file.read_text()))
        assert child.process.wait(60) == 0


#: Injected: SIGTERM arrives as ``subprocess.Popen`` returns, the command just started.
SIGNALLED_AS_IT_STARTS = """
class SignalledAsItStarts(subprocess.Popen):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        with open({pid_file!r}, "w") as handle:
            handle.write(str(self.pid))
        os.kill(os.getpid(), signal.SIGTERM)
subprocess.Popen = SignalledAsItStarts
"""


def test_sigterm_as_a_command_starts_kills_the_command(tmp_path):
    """Stopped while the command is being started, the pass does not leave it running:
    the signal takes effect once the command has started, and the command is killed."""
    pid_file = tmp_path / "command.pid"
    code = STOPPED_PASS.format(
        prepare=SIGNALLED_AS_IT_STARTS.format(pid_file=str(pid_file)), command=["sleep", "600"]
    )
    with ended_afterwards(pid_file):
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
        assert (done.returncode, done.stdout) == (0, "stopped SIGTERM\n"), done.stderr
        assert gone(int(pid_file.read_text()))


def test_a_command_whose_output_outlives_its_kill_fails_the_pass_within_a_bound(tmp_path):
    """``squeue`` answers, but a process it started in another session holds its output
    open for 600 s, so its output never ends, not even once its group is killed (as a
    command in uninterruptible sleep would not end). The pass fails as Slurm unreachable
    after ``--slurm-timeout`` plus ``KILL_WAIT``, and leaves that process behind with a
    WARNING."""
    slurm = FakeSlurm(tmp_path)
    pid_file = tmp_path / "holder.pid"
    slurm.script(
        "squeue",
        f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 600' &\ncat <<'EOF'\n{TASKS}EOF\n",
    )
    with ended_afterwards(pid_file):
        done = slurm.run("--once", "--slurm-timeout", "1", timeout=60)
        assert done.returncode == 1, done.stderr
        assert [event["event"] for event in slurm.audit_events()] == ["pass-failed"]
        assert "left behind" in done.stderr
