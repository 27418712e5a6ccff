"""The operators' commands on a real hung mount: each gives up within its bound, says so,
and exits; ``publish-drained --interval`` stops on SIGTERM even in the middle of a pass.

The ``hung_mount`` fixture's mount point answers a ``stat``; every name below it hangs
in the kernel (as on a hung Lustre or NFS client), so ``--dir <mount>/shc`` hangs at its
first lookup, and ``--dir <mount>`` at the first decision file, lock or state file. Each
run is bounded (:func:`test_hung_mount.run_bounded`): a command that does not exit in
time fails its test, and the output is read through pipes, so a helper left stuck in the
mount that still held them would hold the run too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.services.fakeslurm import FakeSlurm
from harness.services.fuse import LISTED, kill_session, pipe_holders, run_bounded
from harness.waits import AT_ONCE_BOUND, wait_until
from nvrx_seghealth._decision.helperprocess import STUCK_TAG

if TYPE_CHECKING:
    from collections.abc import Iterator

    from harness.services.fuse import HungMount

pytestmark = pytest.mark.hungmount

CLI = str(Path(sys.executable).with_name("nvrx-seghealth"))
UNIT = ["--job-id", "500", "--task-id", "1"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "command",
    [
        ["mark", *UNIT, "--reason", "n3: ECC"],
        ["clear", *UNIT],
        ["clear", *UNIT, "--remove"],
        ["status"],
        ["status", "--json"],
    ],
)
def test_a_command_on_a_hung_directory_gives_up_says_so_and_exits_1(
    hung_mount: HungMount, command: list[str]
) -> None:
    shc = hung_mount.path / "shc"
    read_end, write_end = os.pipe()  # a stdin of its own, to look for afterwards
    stdin_pipe = os.fstat(read_end).st_ino
    try:
        done = run_bounded(
            [CLI, *command, "--dir", str(shc), "--fs-timeout", "1"],
            hung_mount,
            2 * AT_ONCE_BOUND,
            stdin=read_end,
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    assert done.returncode == 1, done.stderr
    # The call says how long it waited, as it measured it: what was left of the command's
    # 1 s (other calls spent some), or more on a loaded node.
    waited = re.search(
        rf"{re.escape(str(shc))}: no answer after \d+\.\d s",
        done.stderr,
    )
    assert waited is not None or f"{shc} did not answer within 1 s" in done.stderr, done.stderr
    if command[0] != "status":
        assert "whether the decision was written is unknown" in done.stderr
    assert 1.0 <= done.seconds < AT_ONCE_BOUND  # the 1 s bound and the start-up
    assert pipe_holders(stdin_pipe) == []


@pytest.mark.timeout(120)
def test_publish_drained_on_a_hung_directory_fails_its_writes_piles_up_nothing_and_stops(
    hung_mount: HungMount, tmp_path: Path
) -> None:
    """Passes every 0.3 s with a 1 s bound: the first read (the producer's state file)
    does not answer and is reported; later calls are refused at once (one stuck helper,
    not one per pass) and each pass then skips the directory; SIGTERM stops the loop and
    the process exits."""
    options = [
        "--interval",
        "0.3",
        "--fs-timeout",
        "1",
        "--audit-log",
        str(tmp_path / "audit.jsonl"),
    ]
    with _producer_on(hung_mount, tmp_path, *options) as (process, slurm):
        # Four passes asked Slurm: three of them are done.
        wait_until(lambda: slurm.calls("squeue") >= 4, timeout=60)
        helpers = _fs_helpers(process.pid)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=10)
    assert process.returncode == 0, err
    assert err.count("did not answer within 1 s") >= 1, err
    assert "is still not answering" in err, err  # later passes: refused, not sent
    assert "the rest of this pass was skipped" in err  # one line a pass, not one a task
    assert len(helpers) <= 2, helpers  # at most the stuck one and a spare
    assert out.count("pass done") >= 3, out


@pytest.mark.timeout(120)
def test_sigterm_stops_publish_drained_while_a_call_hangs(
    hung_mount: HungMount, tmp_path: Path
) -> None:
    """SIGTERM while the first read into the directory (the producer's state file) hangs
    for its bound (60 s) ends the producer at once."""
    options = ("--interval", "30", "--fs-timeout", f"{2 * AT_ONCE_BOUND:g}")
    with _producer_on(hung_mount, tmp_path, *options) as (process, slurm):
        wait_until(lambda: hung_mount.waiting() >= 1, timeout=60)  # the read is stuck
        assert process.poll() is None and slurm.calls("squeue") == 0
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=AT_ONCE_BOUND)  # half the read's bound
    assert process.returncode == 0, err
    assert "stopped by SIGTERM during start-up" in err  # no pass ran yet


@contextlib.contextmanager
def _producer_on(
    hung_mount: HungMount, tmp_path: Path, *options: str
) -> Iterator[tuple[subprocess.Popen[str], FakeSlurm]]:
    """``publish-drained`` for job 500 on the hung directory, and its fake Slurm; if the
    test fails, the mount is made to answer and the producer's session is killed."""
    slurm = FakeSlurm(tmp_path)
    command = [CLI, "publish-drained", "--dir", str(hung_mount.path), "--job-id", "500"]
    process = subprocess.Popen(
        [*command, "--producer-id", "t1", *options],
        env={**os.environ, **slurm.env},
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield process, slurm
    except BaseException:
        hung_mount.abort()
        kill_session(process)
        process.communicate(timeout=30)
        raise


def _fs_helpers(pid: int) -> list[int]:
    """Children of ``pid`` that are filesystem helpers (by their tag)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat_fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat_fields[1]) == pid and cmdline.split(b"\0")[-2:-1] == [
            b"nvrx-seghealth-fs-helper"
        ]:
            found.append(int(proc.name))
    return found


def _stuck_records(key: Path) -> list[int]:
    """The pids of the stuck helpers that live stuck records name for ``key``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        if len(argv) >= 4 and argv[-4] == STUCK_TAG.encode() and argv[-3] == bytes(key):
            found.append(int(argv[-2]))
    return found


def _live(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in "ZX"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("as_json", [False, True])
def test_status_on_a_directory_whose_files_hang_gives_up_after_the_first_one(
    hung_listing: HungMount, as_json: bool
) -> None:
    """The directory lists 6 decision files whose stats hang: the first one is given
    the bound, the other 5 are not looked at (state unknown); exit 1 within about one
    --fs-timeout, and one helper left stuck, not 6."""
    json_option = ["--json"] if as_json else []
    done = run_bounded(
        [CLI, "status", "--dir", str(hung_listing.path), "--fs-timeout", "4", *json_option],
        hung_listing,
        60.0,
    )
    assert done.returncode == 1, done.stderr
    first = str(hung_listing.path / "segment_health_check.42.1")
    assert first in done.stderr and "unknown" in done.stderr
    assert 4.0 <= done.seconds < 14  # one --fs-timeout and the start-up, not 6 (24 s)
    if as_json:
        rows = json.loads(done.stdout)["decisions"]
        assert [row["state"] for row in rows] == ["unreadable"] + ["unknown"] * (LISTED - 1)
        assert rows[0]["path"] == first
    else:
        states = [line.split()[2] for line in done.stdout.splitlines()[1 : LISTED + 1]]
        assert states == ["unreadable"] + ["unknown"] * (LISTED - 1)
    stuck = _stuck_records(hung_listing.path)
    assert len(stuck) == 1 and _live(stuck[0])


@pytest.mark.timeout(180)
def test_one_shot_commands_on_a_hung_directory_leave_one_stuck_helper_between_them(
    hung_mount: HungMount,
) -> None:
    """Three `mark` runs: the first waits its bound and leaves its helper stuck; the
    2nd and 3rd find it and refuse at once (no wait for their 30 s bound), exit 1."""
    command = [CLI, "mark", *UNIT, "--reason", "n3: ECC", "--dir", str(hung_mount.path)]
    first = run_bounded([*command, "--fs-timeout", "1"], hung_mount, 15.0)
    assert first.returncode == 1, first.stderr
    assert len(_stuck_records(hung_mount.path)) == 1
    for _ in range(2):
        later = run_bounded(
            [*command, "--fs-timeout", f"{AT_ONCE_BOUND:g}"], hung_mount, 2 * AT_ONCE_BOUND
        )
        assert later.returncode == 1, later.stderr
        assert later.seconds < AT_ONCE_BOUND / 2, later.stderr  # refused, not sent
        assert "is still not answering" in later.stderr
    stuck = _stuck_records(hung_mount.path)
    assert len(stuck) == 1 and _live(stuck[0])


STATS_AFTER_ABANDONING = """
import sys
from nvrx_seghealth._decision.decision_file import judge
from nvrx_seghealth._decision.boundedstat import stat_within
from nvrx_seghealth._decision.helperprocess import HelperTimeout
try:
    stat_within(sys.argv[1], 0.5)
except HelperTimeout:
    print("abandoned")
print(" ".join(judge(sys.argv[2], 0.05).outcome.value for _ in range(6)))
"""


@pytest.mark.timeout(120)
def test_after_an_abandoned_stat_a_short_bound_still_gives_the_real_result(
    hung_mount: HungMount, tmp_path: Path
) -> None:
    """The stat after an abandoned one starts a new helper: outside its 0.05 s bound."""
    decision = tmp_path / "segment_health_check.1.1"
    decision.write_text("n1: ECC\n")
    done = run_bounded(
        [sys.executable, "-c", STATS_AFTER_ABANDONING, str(hung_mount.path / "x"), str(decision)],
        hung_mount,
        30.0,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["abandoned"] + ["unhealthy"] * 6
