"""A hung filesystem cannot hold a launcher's exit (docs/concepts.md, "A hung decision directory").

Every test stats the decision file on a real hung FUSE mount (the ``hung_mount``
fixture): the stat blocks in the kernel, as on a hung Lustre or NFS client, and no
signal makes it return (once signalled, it sleeps uninterruptibly). A process with a
thread stuck there cannot finish exiting, so the bound on the stat must both release the caller (fail open, outcome
``unreadable``) and leave the process free to exit.

Each run is bounded: a process that is not done in time fails its test, and the mount's
FUSE connection is aborted, which releases whatever is stuck so that nothing outlives
the test.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import IO, TYPE_CHECKING

import pytest

from harness.ports import free_port
from harness.services.fuse import RELEASE_TIMEOUT, kill_session, pipe_holders, run_bounded
from nvrx_seghealth._decision.decision_file import DEFAULT_STAT_TIMEOUT
from nvrx_seghealth._settings.check_settings import DIRECTORY_ENV

if TYPE_CHECKING:
    from harness.services.fuse import HungMount

pytestmark = pytest.mark.hungmount

HERE = Path(__file__).parent
#: The decision file of job 1, task 1 (a regular job: both ids are SLURM_JOB_ID).
DECISION_FILE = "segment_health_check.1.1"

EVALUATE = (
    "import sys\n"
    "from nvrx_seghealth._decision.decision_file import evaluate\n"
    "print(evaluate(sys.argv[1], float(sys.argv[2])).outcome.value, flush=True)\n"
)


def _read_line(stream: IO[bytes], timeout: float) -> str:
    """The next line the process writes to ``stream`` (and nothing after it), or fail."""
    deadline = time.monotonic() + timeout
    data = b""
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([stream], [], [], remaining)[0]:
            pytest.fail(f"no line within {timeout:g} s; got {data!r}")
        chunk = os.read(stream.fileno(), 65536)
        if not chunk:
            pytest.fail(f"end of output before a full line; got {data!r}")
        data += chunk
    return data.decode()


@pytest.mark.timeout(60)
def test_a_process_whose_stat_hung_exits(hung_mount: HungMount) -> None:
    """A process that calls ``evaluate`` on a hung path gets ``unreadable`` after the
    bound (1 s) and then exits, with its stat still stuck in the kernel, and leaves no
    process behind holding its stdout or stderr. A stat stuck on a thread of its own
    would keep it from ever exiting."""
    path = hung_mount.path / DECISION_FILE
    done = run_bounded([sys.executable, "-c", EVALUATE, str(path), "1.0"], hung_mount, 15.0)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["unreadable"]
    assert done.seconds >= 1.0  # the stat was held for the whole bound: it hung


@pytest.mark.timeout(90)
def test_check_command_fails_open_and_exits(hung_mount: HungMount) -> None:
    """``nvrx-seghealth check`` on a hung decision directory reports ``unreadable`` and
    exits 0 (the unit proceeds) once the default bound has passed, with its output
    through pipes: no process it leaves behind holds its stdin, stdout or stderr."""
    cli = Path(sys.executable).with_name("nvrx-seghealth")
    command = [str(cli), "check", "--dir", str(hung_mount.path), "--job-id", "1",
               "--task-id", "1", "--json"]  # fmt: skip
    read_end, write_end = os.pipe()  # a stdin of its own, to look for afterwards
    stdin_pipe = os.fstat(read_end).st_ino
    try:
        done = run_bounded(command, hung_mount, DEFAULT_STAT_TIMEOUT + 20, stdin=read_end)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["outcome"] == "unreadable"
    assert report["proceed"] is True
    assert done.seconds >= DEFAULT_STAT_TIMEOUT
    assert pipe_holders(stdin_pipe) == []


@pytest.mark.timeout(120)
def test_torchrun_fails_open_trains_and_exits(hung_mount: HungMount, tmp_path: Path) -> None:
    """A real ``torchrun`` agent (process 0 of a regular Slurm job) whose decision
    directory hangs logs a fail-open WARNING for its decision file after the 2 s bound,
    runs its worker (one gloo ``all_reduce``) and exits 0, with its output through pipes:
    the stuck stat holds neither the agent's exit nor its stdout/stderr."""
    path = hung_mount.path / DECISION_FILE
    conf = f"segment_health_check_dir={hung_mount.path},segment_health_check_stat_timeout=2"
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--rdzv-backend=segment-health", "--nnodes=1", "--nproc-per-node=1",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}", f"--rdzv-id=hungmount-{uuid.uuid4().hex}",
        f"--rdzv-conf={conf}", "--max-restarts=0", "--monitor-interval=0.5",
        "--local-addr=127.0.0.1", f"--log-dir={tmp_path / 'elastic'}",
        str(HERE / "allreduce_worker.py"),
    ]  # fmt: skip
    foreign = ("SLURM", "TORCHELASTIC_", DIRECTORY_ENV)
    env = {k: v for k, v in os.environ.items() if not k.startswith(foreign)} | {
        "SLURM_PROCID": "0",
        "SLURM_JOB_ID": "1",
        # As for every simulated launcher (nvrx_seghealth._demo.launcher): restarted
        # workers otherwise read stale gloo addresses from the agent's store.
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        "GLOO_SOCKET_IFNAME": "lo",
        "PYTHONUNBUFFERED": "1",
    }
    done = run_bounded(command, hung_mount, 60.0, env=env)
    assert done.returncode == 0, done.stderr
    warning = rf"^\[W [^]]*\] nvrx_seghealth\.\S+: .*{re.escape(str(path))}"
    assert re.search(warning, done.stderr, re.MULTILINE), done.stderr
    assert "all_reduce=1 world_size=1" in done.stdout, done.stdout
    assert done.seconds >= 2.0


def _run_pileup_probe(mount: HungMount, tmp_path: Path) -> tuple[dict, dict]:
    """Run :mod:`pileup_probe` (30 stats of the hung decision file, 0.2 s bound each),
    abort ``mount`` once it has reported, and return its two reports."""
    normal = tmp_path / "segment_health_check.2.2"
    normal.touch()
    command = [sys.executable, str(HERE / "pileup_probe.py"), str(mount.path / DECISION_FILE),
               str(normal), "30", "0.2", "5"]  # fmt: skip
    with open(tmp_path / "probe.stderr", "wb") as stderr:
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
    assert process.stdin is not None and process.stdout is not None  # both are pipes
    try:
        first = json.loads(_read_line(process.stdout, 30.0))
        print(f"probe, before the abort: {first}")
        mount.abort()
        process.stdin.write(b"aborted\n")
        process.stdin.close()
        second = json.loads(_read_line(process.stdout, 20.0))
        print(f"probe, after the abort: {second}")
        assert process.wait(timeout=15.0) == 0
    finally:
        if process.poll() is None:
            mount.abort()
            kill_session(process)
            process.wait(timeout=RELEASE_TIMEOUT)
        process.stdout.close()
        print(f"probe stderr: {(tmp_path / 'probe.stderr').read_text()}")
    return first, second


def _stuck_helper(first: dict) -> int:
    children = first["children"]
    stuck = [child["pid"] for child in children if child["stuck"]]
    assert len(stuck) == 1, children
    return stuck[0]


@pytest.mark.timeout(90)
def test_repeated_hung_stats_pile_up_nothing(hung_mount: HungMount, tmp_path: Path) -> None:
    """30 bounded (0.2 s) stats of one hung path in one process all fail open and leave
    exactly one stat stuck, in a child process, at most one other child (a spare), and
    no thread more than the first round did. Once the mount answers (aborted), the stuck
    child exits within seconds, a stat of a normal file works again (``clear``), and
    after it nothing is left but at most one live helper."""
    first, second = _run_pileup_probe(hung_mount, tmp_path)
    assert first["outcomes"] == ["unreadable"] * 30
    assert first["threads"][0] == first["threads"][1]
    stuck = _stuck_helper(first)
    assert len(first["children"]) <= 2, first["children"]

    exited = {child["pid"]: child for child in second["exited"]}
    assert stuck not in exited or exited[stuck]["state"] == "Z", second["exited"]
    assert not [child for child in second["exited"] if child["stuck"]], second["exited"]
    assert second["fresh"] == "clear"
    after = second["children_after_fresh"]
    assert len(after) <= 1, after
    assert all(child["state"] != "Z" and not child["stuck"] for child in after), after


@pytest.mark.timeout(90)
def test_a_released_stat_helper_is_reaped_without_another_stat(
    hung_mount: HungMount, tmp_path: Path
) -> None:
    """Once the hung mount answers (aborted), the helper whose stat was stuck exits and
    is reaped within seconds, without waiting for another stat: no zombie is left with
    the caller, only at most one live helper."""
    first, second = _run_pileup_probe(hung_mount, tmp_path)
    stuck = _stuck_helper(first)
    reaped = second["reaped"]
    assert stuck not in [child["pid"] for child in reaped], reaped
    assert len(reaped) <= 1, reaped
    assert all(child["state"] != "Z" and not child["stuck"] for child in reaped), reaped
