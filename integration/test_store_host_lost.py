"""A store host that dies under a running job ends the job: what docs/services.md says.

Two array tasks of one launcher train (``--nnodes=2``, ``--max-restarts=3``) through
``nvrx-seghealth store-host`` and ``is_host=false``, and a spare task waits in the
rendezvous. Once the world trains, the store host gets SIGKILL (a crash) or SIGTERM (a
``systemctl stop``). Every launcher, the spare's included, then exits 1 with torch's
``RendezvousConnectionError``: the agent's next look at the rendezvous state fails, and
no restart is tried. No worker trains to the end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from harness.jobs.launcherjob import launcher_env, slurm_task
from harness.ports import free_port
from harness.waits import AT_ONCE_BOUND, wait_until

WORKER = Path(__file__).resolve().parents[1] / "harness" / "programs" / "watch_train.py"
#: Seconds the launchers have to end once the store is gone: torch's agent looks at the
#: rendezvous every ``--monitor-interval`` (0.1 s); 2-4 s measured on 2 busy cores.
END_BOUND = 120.0
LOST = "RendezvousConnectionError"
FORMED = "watch-train formed"


def _store_host(port: int) -> subprocess.Popen[str]:
    """``nvrx-seghealth store-host`` on 127.0.0.1:``port``, once it serves."""
    server = subprocess.Popen(
        ["nvrx-seghealth", "store-host", "--host", "127.0.0.1", "--port", str(port)],
        env=launcher_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert server.stdout is not None
    ready = server.stdout.readline()  # printed once the port is bound
    assert f"serving on 127.0.0.1:{port}" in ready, ready
    return server


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["crash", "stop"])
def test_every_launcher_exits_1_when_the_store_host_dies(tmp_path, stop) -> None:
    decisions = tmp_path / "decisions"
    decisions.mkdir()
    port = free_port()
    server = _store_host(port)
    argv = [
        "torchrun",
        "--nnodes=2",
        "--nproc-per-node=1",
        "--max-restarts=3",
        "--rdzv-backend=segment-health",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=store-lost",
        f"--rdzv-conf=is_host=false,segment_health_check_dir={decisions}",
        str(WORKER),
    ]
    launchers: dict[int, subprocess.Popen[bytes]] = {}

    def log(task: int) -> Path:
        return tmp_path / f"task{task}.log"

    def start(task: int) -> None:
        env = launcher_env(
            **slurm_task(task),
            WATCH_TRAIN_STOP_FILE=str(tmp_path / "never"),
            TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
            LOGLEVEL="INFO",  # torch's agent says when it rendezvouses
        )
        with log(task).open("wb") as sink:
            launchers[task] = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(task: int) -> str:
        return log(task).read_text(errors="replace")

    try:
        for task in (0, 2):
            start(task)
        wait_until(lambda: all(FORMED in output(t) for t in (0, 2)), timeout=4 * AT_ONCE_BOUND)
        start(3)  # the world is full: the spare waits in the rendezvous
        wait_until(lambda: "Rendezvous'ing worker group" in output(3), timeout=AT_ONCE_BOUND)
        time.sleep(2)  # the spare has joined as a redundant member
        server.send_signal(stop)
        server.wait(timeout=30)
        for process in launchers.values():
            process.wait(timeout=END_BOUND)
    finally:
        for process in launchers.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # the launcher's workers too
            process.wait()
        if server.poll() is None:
            server.kill()
        server.communicate()  # closes its stdout
    outputs = {task: output(task) for task in launchers}
    tails = {task: text[-3000:] for task, text in outputs.items()}
    assert {t: p.returncode for t, p in launchers.items()} == {0: 1, 2: 1, 3: 1}, tails
    assert all(LOST in text for text in outputs.values()), tails
    assert [t for t, text in outputs.items() if "watch-train done" in text] == [], tails
    assert FORMED not in outputs[3], tails  # the spare never trained
