"""One simulated node: a real ``torchrun`` agent with its own Slurm-like environment.

:func:`rendezvous_config` holds the rendezvous settings every launcher gets, each with
the reason for its value; :class:`Launcher` starts one agent, follows it and stops it.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .._rendezvous import registry
from .._settings.check_settings import DIRECTORY_ENV
from .._settings.rdzv_conf import WATCH_INTERVAL_KEY
from .paths import RunPaths, read_log
from .processes import signal_group, spawn
from .records import LAUNCHER_ENV
from .slurm import slurm_environment
from .spec import JobSpec
from .telemetry import EVENTS_FILE_ENV, METRICS_FILE_ENV

__all__ = ["Launcher", "rendezvous_config"]

log = logging.getLogger(__name__)

# Inherited variables that would give a launcher a second identity: the harness may
# itself run under Slurm or torchrun, or with the segment-health directory set.
_FOREIGN_PREFIXES = ("SLURM", "TORCHELASTIC_", DIRECTORY_ENV)
#: torch's switch between sharing the agent's store with the workers or not; set as
#: :attr:`JobSpec.disable_shared_store` says, never inherited.
SHARED_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
#: What a handler sets in its own process, never inherited: a launcher decides it alone.
_SET_BY_A_HANDLER = (SHARED_STORE_ENV, "TORCH_ELASTIC_WORKER_IDENTICAL")


def rendezvous_config(
    spec: JobSpec, decision_dir: Path, label: str | None = None
) -> dict[str, str]:
    """The ``--rdzv-conf`` of launcher ``label`` of ``spec`` (the same for every launcher
    except ``is_host`` of :attr:`JobSpec.store_in_launcher`)."""
    config = {
        # How long a launcher waits for quorum. It must outlast the slowest launcher's
        # start on a loaded 2-core machine (python + torch import take 2-5 s, a TCPStore
        # connect sometimes stalls 5 s, StartAfter holds some back); scenarios that want
        # it to fire lower it.
        "join_timeout": str(spec.join_timeout),
        # Once min_nodes have joined, wait 1 s for more. The default 30 s would dominate
        # every elastic round (measured: ~31 s instead of ~2 s for 2 of 3 nodes).
        "last_call_timeout": "1",
        # A heartbeat every second; a node is dead once its last heartbeat is 5 s old.
        # A launcher that srun killed thus leaves the rendezvous after ~5 s instead of
        # 15 s (5 s x 3), so a spare moves up quickly. Not 2 attempts: a live node's
        # heartbeat is routinely 2-3 s old right after a round completes (the join loop
        # syncs once a second and refreshes only heartbeats older than the interval;
        # the heartbeat timer first fires one interval after joining). With a 2 s
        # tolerance, live nodes were declared dead, each false death promoted a spare
        # into the wait list, and every agent restarted its workers again and again.
        "keep_alive_interval": "1",
        "keep_alive_max_attempt": "5",
        # shutdown()/set_closed() stop trying to close after 10 s rather than 30 s;
        # still twice the occasional 5 s TCPStore connect stall.
        "close_timeout": "10",
    }
    if spec.rendezvous not in registry.etcd_names():  # c10d's TCPStore, or barrier's
        # The store is hosted by a harness process outside every allocation unit: an
        # excluded unit hosting it would take the rendezvous down, since the TCPStore
        # lives in its host launcher and dies when that launcher exits.
        # Only a scenario showing exactly that has a launcher host it.
        hosts = label is not None and label == spec.store_in_launcher
        config["is_host"] = "true" if hosts else "false"
    if spec.backend == "segment-health":
        config["inner_backend"] = spec.inner_backend
        if spec.check_directory:
            config["segment_health_check_dir"] = str(decision_dir)
        if spec.watch_interval:
            config[WATCH_INTERVAL_KEY] = f"{spec.watch_interval:g}"
    return config | dict(spec.rdzv_conf)


class Launcher:
    """One ``torchrun`` agent, started at most once and stopped by its PID.

    Args:
        spec: the job. unit, procid: which launcher of which unit.
        paths: the job's directories. endpoint: ``--rdzv-endpoint`` (the c10d store or
        etcd). run_id: ``--rdzv-id``.
    """

    def __init__(
        self, spec: JobSpec, unit: int, procid: int, paths: RunPaths, endpoint: str, run_id: str
    ) -> None:
        self.unit = unit
        self.procid = procid
        self.label = spec.label(unit, procid)
        self.log_path = paths.logs / f"{self.label}.log"
        self.killed_by_srun = False
        #: Where its agent records its telemetry; ``None`` when the job records none.
        self.events_path: Path | None = None
        self.metrics_path: Path | None = None
        if spec.record_telemetry:
            self.events_path = paths.telemetry / f"{self.label}.events.jsonl"
            self.metrics_path = paths.telemetry / f"{self.label}.metrics.jsonl"
        self.started_at: float | None = None
        #: When its process exited, as a thread waiting for it saw it (not when the
        #: job next looked); set by :meth:`poll`.
        self.ended_at: float | None = None
        self._exited_at: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        low, high = spec.nnodes
        first_round_steps = spec.steps if spec.first_round_steps is None else spec.first_round_steps
        config = rendezvous_config(spec, paths.decisions, self.label)
        conf = ",".join(f"{k}={v}" for k, v in config.items())
        agent = "torch.distributed.run" if self.events_path is None else f"{__package__}.agent"
        self.command = [
            sys.executable, "-m", agent,
            f"--nnodes={low}:{high}", "--nproc-per-node=1",
            f"--rdzv-backend={spec.backend}", f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id={run_id}", f"--rdzv-conf={conf}",
            f"--max-restarts={spec.max_restarts}",
            # React to a failed worker or a waiting node within 0.5 s, while keeping
            # eight agents' store polling light on two cores.
            "--monitor-interval=0.5",
            # The node address every peer dials (rank 0's becomes MASTER_ADDR): loopback.
            "--local-addr=127.0.0.1",
            f"--log-dir={paths.elastic / self.label}",
            "-m", f"{__package__}.worker",
            f"--results-dir={paths.results}", f"--rdzv-endpoint={endpoint}",
            f"--rdzv-backend={spec.rendezvous}",
            f"--steps={spec.steps}", f"--step-seconds={spec.step_seconds}",
            f"--first-round-steps={first_round_steps}",
            f"--compute-seconds={spec.compute_seconds}",
            f"--compute-rounds={spec.compute_rounds}",
            f"--timeout={spec.worker_timeout}",
        ]  # fmt: skip
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(_FOREIGN_PREFIXES) and k not in _SET_BY_A_HANDLER
        }
        if spec.disable_shared_store is not None:
            env[SHARED_STORE_ENV] = spec.disable_shared_store
        self.env = (
            env
            | slurm_environment(spec, unit, procid)
            | {
                LAUNCHER_ENV: self.label,
                # torch's agent logs its rendezvous steps at INFO; scenarios read them.
                "LOGLEVEL": "INFO",
                # gloo talks over loopback only.
                "GLOO_SOCKET_IFNAME": "lo",
                "PYTHONUNBUFFERED": "1",
            }
            | self._telemetry_env()
            | dict(spec.agent_env)
        )

    def _telemetry_env(self) -> dict[str, str]:
        if self.events_path is None or self.metrics_path is None:
            return {}
        return {EVENTS_FILE_ENV: str(self.events_path), METRICS_FILE_ENV: str(self.metrics_path)}

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The agent's process, once started."""
        return self._process

    @property
    def pid(self) -> int | None:
        """The agent's process id, once started."""
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        """Started and not yet seen to exit."""
        return self._process is not None and self.ended_at is None

    @property
    def returncode(self) -> int | None:
        """The exit code once it exited (negative: killed by that signal)."""
        return None if self.ended_at is None or self._process is None else self._process.returncode

    def start(self) -> None:
        """Start the agent; its output goes to :attr:`log_path`."""
        assert self._process is None, f"{self.label} was already started"
        self._process = spawn(self.command, self.env, self.log_path)
        self.started_at = time.time()
        log.info("%s started (pid %d)", self.label, self._process.pid)
        threading.Thread(
            target=self._await_exit, args=(self._process,), name=f"{self.label}-exit", daemon=True
        ).start()

    def _await_exit(self, process: subprocess.Popen[bytes]) -> None:
        process.wait()
        self._exited_at = time.time()

    def poll(self) -> bool:
        """Notice an exit; returns True exactly once, when the exit is first seen."""
        if not self.running or self._exited_at is None:
            return False
        assert self._process is not None
        self.ended_at = self._exited_at
        log.info("%s exited with code %d", self.label, self._process.returncode)
        return True

    def log_has(self, pattern: str) -> bool:
        """Whether the log contains a match of the regular expression ``pattern``."""
        return re.search(pattern, read_log(self.log_path), re.MULTILINE) is not None

    def signal(self, sig: signal.Signals) -> None:
        """Signal the agent's whole process group (agent and workers)."""
        if self._process is not None:
            signal_group(self._process, sig)
