"""The demo's processes: a stop signal that lands while one starts leaves none behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from harness.commands import in_the_foreground
from harness.waits import wait_until

#: PATH entries that each cost the starting child about a millisecond: ``l`` is a
#: symbolic link whose 4 kB target leads back to it, so each exec through it walks
#: 40 such links before ELOOP. The real ``sleep`` comes after them.
_SLOW_ENTRIES = 3000
_LOOP_TARGET = "./" * 2000 + "l"
_SLEEP = ["sleep", "300"]

#: The demo's stop (``stop_signals``) around one ``spawn`` whose exec searches the slow PATH.
_SPAWN = f"""
from pathlib import Path
from nvrx_seghealth._demo.processes import spawn
from nvrx_seghealth._producer.schedule import Stopped, stop_signals

path = ":".join(["l"] * {_SLOW_ENTRIES} + ["/usr/bin", "/bin"])
try:
    with stop_signals():
        process = spawn({_SLEEP!r}, {{"PATH": path}}, Path("spawn.log"))
        print("spawned", process.pid, flush=True)
except Stopped as stopped:
    print("stopped by", stopped.signal.name, flush=True)
"""


def _children(pid: int) -> list[int]:
    try:
        return [
            int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        ]
    except FileNotFoundError:
        return []


def _session_leader(pid: int) -> bool:
    """Whether process ``pid`` exists and leads its own session, as ``spawn`` makes it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return int(stat.rsplit(")", 1)[1].split()[3]) == pid


def test_a_stop_signal_while_a_process_starts_leaves_no_process_behind(tmp_path: Path) -> None:
    """SIGTERM lands while ``spawn``'s child searches PATH for its program (about 3 s,
    after the fork and before the exec, where ``subprocess.Popen`` waits): the demo is
    stopped, and the process it was starting is gone with it, not orphaned."""
    (tmp_path / "l").symlink_to(_LOOP_TARGET)
    demo = subprocess.Popen(
        in_the_foreground([sys.executable, "-c", _SPAWN]),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
    )
    started: list[int] = []

    def forked() -> bool:
        started[:] = _children(demo.pid)
        return bool(started)

    try:
        wait_until(forked, timeout=60)
        demo.send_signal(signal.SIGTERM)  # the child exists; its exec has not happened
        out, _ = demo.communicate(timeout=120)
        assert out == "stopped by SIGTERM\n"
        [child] = started
        assert not Path(f"/proc/{child}").exists(), f"pid {child} was left running"
    finally:
        demo.kill()
        demo.wait()
        for child in started:
            if _session_leader(child):
                os.killpg(child, signal.SIGKILL)
