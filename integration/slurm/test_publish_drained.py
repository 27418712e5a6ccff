"""``nvrx-seghealth publish-drained`` against real Slurm: node states to decision files.

A two-task job array (``--no-requeue``, ``--exclusive``, 2 nodes each) of sleepers runs
on the private 4-node cluster; each test changes one node's state and runs single
passes of the producer, as an operator's cron job would (the counts of consecutive
passes live in the producer's state file). ``no_respond`` is made real by stopping a
node's slurmd (SIGSTOP) and making slurmctld ping it. Every node is resumed (and every
slurmd continued) in a ``finally`` and the array is cancelled afterwards.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.commands import nvrx_seghealth
from harness.services.slurm import node_state, running_nodes
from harness.waits import wait_until
from nvrx_seghealth._producer.hostlist import expand
from nvrx_seghealth._producer.publisher import producer_tag

if TYPE_CHECKING:
    from harness.services.slurm import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(120)]

TAG = producer_tag("t")


@dataclass(frozen=True)
class Array:
    """The running array, its decision directory and audit log."""

    cluster: SlurmCluster
    job_id: str
    nodes: dict[str, list[str]]  # task id -> its nodes
    shc: Path
    audit: Path

    def publish(self, *options: str, producer: str = "t") -> str:
        """One pass of the producer; returns its stdout (the pass must succeed)."""
        done = nvrx_seghealth(
            "publish-drained",
            "--dir",
            str(self.shc),
            "--job-id",
            self.job_id,
            "--once",
            "--slurm-timeout",
            "10",
            "--audit-log",
            str(self.audit),
            "--producer-id",
            producer,
            *options,
            env=self.cluster.env,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def decision(self, task: str) -> Path:
        return self.shc / f"segment_health_check.{self.job_id}.{task}"

    def events(self) -> list[tuple[str, str]]:
        lines = self.audit.read_text().splitlines() if self.audit.exists() else []
        return [(event["event"], event["task_id"]) for event in map(json.loads, lines)]


@pytest.fixture
def array(slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[Array]:
    script = tmp_path / "sleep.sbatch"
    script.write_text("#!/bin/sh\nexec srun --kill-on-bad-exit=1 sleep 120\n")
    script.chmod(0o755)
    job_id = slurm_cluster.sbatch(
        "--array=0-1",
        "--no-requeue",
        "--exclusive",
        "-N2",
        "--ntasks-per-node=1",
        f"--chdir={tmp_path}",
        "--output=/dev/null",
        str(script),
    )
    try:
        wait_until(lambda: len(running_nodes(slurm_cluster, job_id)) == 2)  # both tasks running
        nodes = running_nodes(slurm_cluster, job_id)
        assert not set(nodes["0"]) & set(nodes["1"]), nodes
        shc = tmp_path / "shc"
        shc.mkdir()
        yield Array(slurm_cluster, job_id, nodes, shc, tmp_path / "audit.jsonl")
    finally:
        slurm_cluster.run("scancel", job_id, check=False)
        slurm_cluster.wait_job(job_id)


def test_drain_publishes_only_the_affected_task_and_resume_clears_it(array: Array) -> None:
    node = array.nodes["1"][0]
    assert "0 published" in array.publish()
    assert [p.name for p in array.shc.iterdir() if not p.name.startswith(".")] == []
    with node_state(array.cluster, node, "drain", "disk errors"):
        assert array.cluster.state_of(node) == "drng"  # the task still runs there
        out = array.publish()
        text = array.decision("1").read_text()
        assert text == f"{TAG} unavailable nodes: {node} drng (disk errors)\n"
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
        assert array.cluster.state_of(node) == "failg"  # the task still runs there
        array.publish()
        assert array.decision("0").read_text() == (
            f"{TAG} unavailable nodes: {node} failg (ecc errors)\n"
        )
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
        array.cluster.run(
            "scontrol", "update", f"nodename={node}", "state=down", "reason=link down"
        )
        wait_until(lambda: "1" not in running_nodes(array.cluster, array.job_id))
        out = array.publish()
        assert "1 running tasks" in out
        assert array.decision("1").read_text() == published
        assert not array.decision("0").exists()
    assert array.events() == [("published", "1")]


@contextmanager
def not_responding(cluster: SlurmCluster, node: str) -> Iterator[None]:
    """Stop ``node``'s slurmd and make slurmctld ping it, until the node reads ``*``.

    slurmctld pings a node every SlurmdTimeout/3 (100 s by default); a resume pings it at
    once, so the node is drained and resumed (no pass runs in between). Always continued.
    """
    pid = int((cluster.state_dir / "run" / f"slurmd-{node}.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        cluster.run("scontrol", "update", f"nodename={node}", "state=drain", "reason=ping")
        cluster.run("scontrol", "update", f"nodename={node}", "state=resume")
        wait_until(lambda: cluster.state_of(node).endswith("*"))
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until(lambda: not cluster.state_of(node).endswith("*"))


def test_not_responding_counts_only_after_three_passes_and_clears_after_three(array: Array) -> None:
    """A node that stops responding for one pass (a slurmd restart, a blip) excludes
    nothing; three passes in a row (the default ``no_respond=3``) publish its task, and
    the decision is cleared only after three passes in a row without it."""
    node = array.nodes["1"][0]
    watch = ("--states", "no_respond")
    with not_responding(array.cluster, node):
        assert f"not counted yet: {node}" in array.publish(*watch)
    assert "0 published" in array.publish(*watch)  # the blip is over: nothing published
    assert not array.decision("1").exists()
    with not_responding(array.cluster, node):
        for _ in range(2):
            array.publish(*watch)
            assert not array.decision("1").exists()
        assert "1 published" in array.publish(*watch)
        published = array.decision("1").read_text()
        assert published == f"{TAG} unavailable nodes: {node} {array.cluster.state_of(node)}\n"
    for _ in range(2):
        array.publish(*watch)
        assert array.decision("1").read_text() == published
    assert "1 cleared" in array.publish(*watch)
    assert array.decision("1").read_bytes() == b""
    assert array.events() == [("published", "1"), ("cleared", "1")]


def test_two_producers_never_clear_each_others_decisions(array: Array) -> None:
    """Producer ``a`` watches drain, ``b`` every state (other ids, as two operators'
    producers): neither clears or rewrites the other's decision."""
    node = array.nodes["0"][0]
    with node_state(array.cluster, node, "drain", "bad dimm"):
        assert "1 published" in array.publish("--states", "drain", producer="a")
        by_a = array.decision("0").read_text()
        assert by_a.startswith(producer_tag("a"))
        assert "0 published" in array.publish(producer="b")  # a's decision stands
    assert "0 cleared" in array.publish(producer="b")  # not b's to clear
    assert array.decision("0").read_text() == by_a
    assert "1 cleared" in array.publish("--states", "drain", producer="a")
    assert array.decision("0").read_bytes() == b""


@pytest.mark.parametrize(
    "hostlist", ["n[1-2]", "n[1-4]", "n1,n3", "n[1,3-4]", "n[01-03]", "r[1-2]n[1,3]", "n[8-11]"]
)
def test_host_lists_expand_as_slurm_expands_them(
    slurm_cluster: SlurmCluster, hostlist: str
) -> None:
    slurm = slurm_cluster.run("scontrol", "show", "hostnames", hostlist).stdout.split()
    assert expand(hostlist) == slurm
