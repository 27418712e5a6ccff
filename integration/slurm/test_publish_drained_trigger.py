"""``publish-drained --interval 600`` woken on real Slurm: by an operator's signal after a
drain, and by a Slurm trigger whose program is ``examples/publish-drained-now.sh``.

A regular two-node job of sleepers runs on the private 4-node cluster, and a producer
with ``--interval 600`` (so its polling cannot explain a decision) and ``--pid-file``
runs beside it. Its first pass finds nothing; each test then drains the job's first node.

Slurm 22.05 (Debian's) raises a ``--drained`` trigger only for a node with no running or
completing job: ``update_node`` calls ``trigger_node_drained`` only when the node's
``run_job_cnt`` and ``comp_job_cnt`` are both 0, so the job's own node, now DRAINING, fires
nothing until the job leaves it (``--fail`` fires nothing after ``scontrol ... state=fail``
at all). The trigger test therefore drains the job's node together with an idle one, as an
operator draining a rack or a switch's nodes does: the idle node fires the trigger, and
the producer's pass publishes the job's decision. Every node is resumed and the trigger
cleared in a ``finally``; the job is cancelled afterwards.

The same permanent trigger, run by root, must signal nothing once its producer is gone:
after a SIGKILL the pid file stays, and its pid may be another process's by then.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.commands import COMMAND
from harness.services.slurm import PROGRAM, drained, running_producer, trigger
from harness.waits import wait_until
from nvrx_seghealth._producer.publisher import producer_tag

if TYPE_CHECKING:
    from harness.services.slurm import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

#: Slurm looks at trigger events about every 15 s; a pass takes a second. Generous.
TRIGGER_BOUND = 120.0
SIGNAL_BOUND = 60.0


@dataclass(frozen=True)
class Producer:
    """A running ``publish-drained --interval 600`` for ``job_id``, found by ``pid_file``."""

    cluster: SlurmCluster
    job_id: str
    nodes: list[str]
    shc: Path
    pid_file: Path
    process: subprocess.Popen[str]

    def decision(self) -> Path:
        return self.shc / f"segment_health_check.{self.job_id}.{self.job_id}"


@pytest.fixture
def producer(slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[Producer]:
    job_id = slurm_cluster.sbatch(
        "-N2",
        "--exclusive",
        "--no-requeue",
        f"--chdir={tmp_path}",
        "--output=/dev/null",
        "--wrap",
        "exec srun sleep 300",
    )
    try:
        wait_until(lambda: slurm_cluster.jobs(job_id)[0].state == "RUNNING", timeout=60)
        nodelist = slurm_cluster.jobs(job_id)[0].fields["NodeList"]
        nodes = slurm_cluster.run("scontrol", "show", "hostnames", nodelist).stdout.split()
        shc = tmp_path / "shc"
        shc.mkdir()
        pid_file = tmp_path / "publish-drained.pid"
        with running_producer(slurm_cluster, job_id, shc, pid_file) as process:
            assert not _any_decision(shc)
            yield Producer(slurm_cluster, job_id, nodes, shc, pid_file, process)
    finally:
        slurm_cluster.run("scancel", job_id, check=False)
        slurm_cluster.wait_job(job_id)


def _any_decision(shc: Path) -> bool:
    """Whether ``shc`` holds a decision file (not the producer's lock or state)."""
    return any(not p.name.startswith(".") for p in shc.iterdir())


def _expected(node: str, reason: str) -> str:
    return f"{producer_tag('t')} unavailable nodes: {node} drng ({reason})\n"


def test_a_signal_after_the_drain_publishes_at_once(producer: Producer) -> None:
    node = producer.nodes[0]
    with drained(producer.cluster, [node], "bad dimm"):
        subprocess.run([str(PROGRAM), str(producer.pid_file)], check=True, timeout=30)
        wait_until(producer.decision().exists, timeout=SIGNAL_BOUND)
        assert producer.decision().read_text() == _expected(node, "bad dimm")


def test_a_drained_trigger_signals_the_producer(producer: Producer) -> None:
    cluster = producer.cluster
    node = producer.nodes[0]
    idle = next(n for n in cluster.nodes if n not in producer.nodes)
    assert cluster.state_of(idle) == "idle"
    with (
        trigger(cluster, "drained", f"{PROGRAM} {producer.pid_file}"),
        drained(cluster, [node, idle], "switch swap"),
    ):
        wait_until(producer.decision().exists, timeout=TRIGGER_BOUND)
        assert producer.decision().read_text() == _expected(node, "switch swap")


def test_a_trigger_after_its_producer_was_killed_signals_no_one(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """The producer is SIGKILLed (the OOM killer); its pid file names, by then, an
    unrelated process. The trigger fires as root: the program finds the file's lock free,
    signals nothing and exits 1 (no producer runs)."""
    shc = tmp_path / "shc"
    shc.mkdir()
    pid_file = tmp_path / "publish-drained.pid"
    command = [
        *COMMAND, "publish-drained", "--dir", str(shc), "--job-id", "999999",
        "--interval", "600", "--pid-file", str(pid_file), "--slurm-timeout", "10",
    ]  # fmt: skip
    producer = subprocess.Popen(
        command, env=slurm_cluster.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    try:
        wait_until(pid_file.exists, timeout=SIGNAL_BOUND)  # claimed (no job: its passes fail)
    finally:
        producer.kill()
        producer.wait()
    wrapper, exits, errors = tmp_path / "now.sh", tmp_path / "exits", tmp_path / "errors"
    wrapper.write_text(f'#!/bin/sh\n{PROGRAM} "$@" 2>>{errors}\necho $? >>{exits}\n')
    wrapper.chmod(0o755)
    victim = subprocess.Popen(["sleep", "600"])
    try:
        pid_file.write_text(f"{victim.pid}\n")  # the pid's reuse, as the file sees it
        idle = [n for n in slurm_cluster.nodes if slurm_cluster.state_of(n) == "idle"][:1]
        assert idle, "no idle node to drain"
        with (
            trigger(slurm_cluster, "drained", f"{wrapper} {pid_file}"),
            drained(slurm_cluster, idle, "switch swap"),
        ):
            wait_until(exits.exists, timeout=TRIGGER_BOUND)
        assert set(exits.read_text().split()) == {"1"}, errors.read_text()
        assert "is stale: no process holds its lock" in errors.read_text()
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()
