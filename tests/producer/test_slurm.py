"""Asking Slurm, strictly and under a timeout: a command run by the producer never
outlives the pass that started it, however the producer is stopped.

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

from harness.common import wait_until
from harness.stopsignals import SignalledChild

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
