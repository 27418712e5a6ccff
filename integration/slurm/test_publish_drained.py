"""``nvrx-seghealth publish-drained`` against real Slurm: node states to decision files.

A two-task job array (``--no-requeue``, ``--exclusive``, 2 nodes each) of sleepers runs
on the private 4-node cluster; each test changes one node's state and runs single
passes of the producer, as an operator's cron job would. Every node is resumed in a
``finally`` and the array is cancelled afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from nvrx_seghealth.commands.publish_drained import PRODUCER_TAG
from tests.commands.runner import nvrx_seghealth
from tests.support import wait_until

if TYPE_CHECKING:
    from conftest import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(90)]


@dataclass(frozen=True)
class Array:
    """The running array, its decision directory and audit log."""

    cluster: SlurmCluster
    job_id: str
    nodes: dict[str, list[str]]  # task id -> its nodes
    shc: Path
    audit: Path

    def publish(self) -> str:
        """One pass of the producer; returns its stdout (the pass must succeed)."""
        done = nvrx_seghealth(
            "publish-drained", "--dir", str(self.shc), "--job-id", self.job_id, "--once",
            "--slurm-timeout", "10", "--audit-log", str(self.audit), env=self.cluster.env)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def decision(self, task: str) -> Path:
        return self.shc / f"segment_health_check.{self.job_id}.{task}"

    def events(self) -> list[tuple[str, str]]:
        lines = self.audit.read_text().splitlines() if self.audit.exists() else []
        return [(event["event"], event["task_id"]) for event in map(json.loads, lines)]


def _node_state(cluster: SlurmCluster, node: str) -> str:
    return cluster.run("sinfo", "-h", "-N", "-n", node, "-o", "%t").stdout.strip()


def _running(cluster: SlurmCluster, job_id: str) -> dict[str, list[str]]:
    out = cluster.run("squeue", "-j", job_id, "-r", "-h", "-t", "R", "-o", "%K %N").stdout
    return {
        task: cluster.run("scontrol", "show", "hostnames", hostlist).stdout.split()
        for task, hostlist in (line.split() for line in out.splitlines())
    }


@pytest.fixture
def array(slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[Array]:
    script = tmp_path / "sleep.sbatch"
    script.write_text("#!/bin/sh\nexec srun --kill-on-bad-exit=1 sleep 120\n")
    script.chmod(0o755)
    job_id = slurm_cluster.sbatch(
        "--array=0-1", "--no-requeue", "--exclusive", "-N2", "--ntasks-per-node=1",
        f"--chdir={tmp_path}", "--output=/dev/null", str(script))
    try:
        wait_until(lambda: len(_running(slurm_cluster, job_id)) == 2)  # both tasks running
        nodes = _running(slurm_cluster, job_id)
        assert not set(nodes["0"]) & set(nodes["1"]), nodes
        shc = tmp_path / "shc"
        shc.mkdir()
        yield Array(slurm_cluster, job_id, nodes, shc, tmp_path / "audit.jsonl")
    finally:
        slurm_cluster.run("scancel", job_id, check=False)
        slurm_cluster.wait_job(job_id)


@contextmanager
def node_state(cluster: SlurmCluster, node: str, state: str, reason: str) -> Iterator[None]:
    """Put ``node`` in ``state``; always resume it and wait until it responds again."""
    try:
        cluster.run("scontrol", "update", f"nodename={node}", f"state={state}",
                    f"reason={reason}")
        yield
    finally:
        cluster.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)
        # A resumed node reads "not responding" (*) for a moment; that is unavailable too.
        wait_until(lambda: _node_state(cluster, node) in ("idle", "alloc", "mix"))


def test_drain_publishes_only_the_affected_task_and_resume_clears_it(array: Array) -> None:
    node = array.nodes["1"][0]
    assert "0 published" in array.publish()
    assert list(array.shc.iterdir()) == []
    with node_state(array.cluster, node, "drain", "disk errors"):
        assert _node_state(array.cluster, node) == "drng"  # the task still runs there
        out = array.publish()
        text = array.decision("1").read_text()
        assert text == f"{PRODUCER_TAG} unavailable nodes: {node} drng (disk errors)\n"
        assert not array.decision("0").exists()
        assert "1 published" in out
        before = array.decision("1").stat()
        array.publish()  # unchanged: no write
        assert array.decision("1").stat().st_mtime_ns == before.st_mtime_ns
    out = array.publish()
    assert array.decision("1").read_bytes() == b""
    assert not array.decision("0").exists()
    assert "1 cleared" in out
    assert array.events() == [("published", "1"), ("cleared", "1")]


def test_a_failing_node_is_published(array: Array) -> None:
    node = array.nodes["0"][1]
    with node_state(array.cluster, node, "fail", "ecc errors"):
        assert _node_state(array.cluster, node) == "failg"  # the task still runs there
        array.publish()
        assert array.decision("0").read_text() == (
            f"{PRODUCER_TAG} unavailable nodes: {node} failg (ecc errors)\n")
        assert not array.decision("1").exists()


def test_down_ends_the_task_and_its_decision_is_kept(array: Array) -> None:
    """Slurm itself ends a task whose node goes DOWN (it is then no longer running with that
    node), so a DOWN node never maps to a running task. The producer keeps the decision
    it published before: it never clears a task that is not running."""
    node = array.nodes["1"][1]
    with node_state(array.cluster, node, "drain", "flapping link"):
        array.publish()
        published = array.decision("1").read_text()
        assert published.endswith(f"{node} drng (flapping link)\n")
        array.cluster.run("scontrol", "update", f"nodename={node}", "state=down",
                          "reason=link down")
        wait_until(lambda: "1" not in _running(array.cluster, array.job_id))
        out = array.publish()
        assert "1 running tasks" in out
        assert array.decision("1").read_text() == published
        assert not array.decision("0").exists()
    assert array.events() == [("published", "1")]
