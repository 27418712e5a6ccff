"""Whole jobs on a three-member etcd that loses members while they run, beside plain torchrun.

Three one-node array tasks run real ``torchrun`` through ``segment-health`` over
``inner_backend=etcd-v3`` (``etcd_v3_cluster``, every member named) or ``etcd-v2``
(``etcd_cluster``: torch's etcd-v2 takes one member, the one that dies). The phases:

- *gather*: the leader is killed in the rendezvous's last call (``--nnodes=3:4``).
- *train*: the leader is killed once every worker trains.
- *exit-barrier*: the leader is killed while tasks 0 and 1 wait in the exit barrier.
- *first-member-mark*: the member named first is killed, then task 1 is marked; the world
  re-forms as tasks 0 and 2.
- *cluster-down*: every member is stopped (SIGSTOP) for :data:`DOWN` seconds.
- *gather-cut*, *exit-barrier-cut*: the member named first is cut from its peers
  (``etcd_v3_partition``), clients still reaching it, in the last call or while tasks 0
  and 1 wait in the exit barrier; *marked-cut*: task 1 is marked, and the member is cut
  while tasks 0 and 2 gather.

On etcd-v3 every launcher of a completing unit exits 0 and no launcher's thread died. So
does plain ``torchrun --rdzv-backend=etcd-v3`` in the phases without a mark (etcd 3.5).
segment-health over etcd-v2 completes too. Plain torchrun runs beside it, cut at
:data:`PLAIN_TIMEOUT`: etcd-v2 in the first three phases, c10d in the last two (its store
host is the member killed or stopped). It ends as docs/cluster.md says (:data:`PLAIN_EXITS`).
Each job prints an ``HA |`` line.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.jobs.launcherjob import MARKED, launcher_env, mark_task, slurm_task
from harness.services.etcd import EtcdCluster
from harness.services.nemesis import PeerCut
from harness.waits import AT_ONCE_BOUND, wait_until
from nvrx_seghealth._demo.store_host import StoreHost

pytestmark = pytest.mark.etcd

WORKER = Path(__file__).with_name("leader_loss_worker.py")
TASKS = (0, 1, 2)
#: Bound for one job: about 20-40 s on two busy cores.
JOB_TIMEOUT = 240.0
#: Seconds a job has to reach a phase (two launchers rendezvousing, a world training).
PHASE_BOUND = 2 * AT_ONCE_BOUND
#: Bound for plain torchrun's job: its launchers can wait out torch's 300 s exit barrier.
PLAIN_TIMEOUT = 45.0
RENDEZVOUS = "Rendezvous'ing worker group"
#: Seconds of the rendezvous's last call (``last_call_timeout``).
LAST_CALL = 10
BARRIER = "Waiting 300 seconds for other agents to finish"
#: Seconds the whole cluster (or c10d's store host) is stopped in *cluster-down*: beyond
#: the 10 s one etcd-v3 request may take (``ATTEMPT_TIMEOUT``), so a request sent as the
#: members stop times out and must be sent again (at 10 s it was answered on SIGCONT).
DOWN = 15.0
FORMED = "leader-loss formed"
#: What Python prints when a thread ends on an exception (``threading.excepthook``).
DIED = "Exception in thread"


@dataclass(frozen=True)
class Outcome:
    """One job's end: each launcher's exit code and output, and its seconds."""

    returncodes: tuple[int | None, ...]
    outputs: tuple[str, ...]
    seconds: float

    def worlds(self) -> list[str]:
        return sorted(w for out in self.outputs for w in re.findall(rf"{FORMED} .*", out))


class Job:
    """Three launchers of one job (started one by one), their logs in ``workdir``.

    Args:
        backend: ``--rdzv-backend``: ``segment-health`` (over ``inner``), or plain
            ``etcd-v3``, ``etcd-v2`` or ``c10d`` (``inner`` is then the same).
        inner: the rendezvous that keeps the state: ``etcd-v2``, ``etcd-v3`` or ``c10d``.
        endpoint: ``--rdzv-endpoint``.
        nnodes: ``--nnodes``.
        watch: turn the check's watch on (a look every second).
    """

    def __init__(
        self,
        backend: str,
        inner: str,
        endpoint: str,
        workdir: Path,
        *,
        nnodes: str = "3:4",
        watch: bool = False,
    ) -> None:
        self.name = f"{backend} over {inner}" if backend == "segment-health" else f"plain {inner}"
        self.workdir = workdir
        self.stop = workdir / "stop"
        self.release = workdir / "release"
        self.started = time.monotonic()
        # --nnodes=3:4 with three launchers: a last call of LAST_CALL seconds once all
        # three joined, each writing its heartbeat every second meanwhile.
        conf = (
            f"join_timeout=120,last_call_timeout={LAST_CALL},"
            "keep_alive_interval=1,keep_alive_max_attempt=20"
        )
        if backend == "segment-health":
            conf = f"inner_backend={inner},segment_health_check_dir={workdir},{conf}"
            if watch:
                conf = f"{conf},segment_health_check_watch_interval=1"
        if inner == "c10d":
            conf = f"is_host=false,{conf}"
        self.argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nnodes={nnodes}",
            "--nproc-per-node=1",
            "--max-restarts=0",
            "--monitor-interval=1",
            f"--rdzv-backend={backend}",
            f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id=run-{uuid.uuid4().hex[:8]}",
            f"--rdzv-conf={conf}",
            str(WORKER),
        ]
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, task: int, hold: bool = False) -> None:
        env = launcher_env(
            **slurm_task(task),
            LEADER_LOSS_STOP=str(self.stop),
            TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
            LOGLEVEL="INFO",
        )
        if hold:
            env["LEADER_LOSS_EXIT"] = str(self.release)
        with self.log(task).open("wb") as sink:
            self.processes[task] = subprocess.Popen(
                self.argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self, task: int) -> Path:
        return self.workdir / f"task{task}.log"

    def said(self, text: str, tasks: tuple[int, ...], times: int = 1) -> bool:
        """Whether each of ``tasks`` printed ``text`` ``times`` times (or ended)."""
        return all(
            self.log(t).read_text(errors="replace").count(text) >= times
            or self.processes[t].poll() is not None
            for t in tasks
        )

    def wait_for(self, text: str, tasks: tuple[int, ...], times: int = 1) -> None:
        """Wait until :meth:`said`, at most :data:`PHASE_BOUND` seconds: a job that
        never gets there goes on, and its end tells."""
        with contextlib.suppress(AssertionError):
            wait_until(lambda: self.said(text, tasks, times), timeout=PHASE_BOUND)

    def end(self, timeout: float = JOB_TIMEOUT) -> Outcome:
        """Each launcher's end; one still running after ``timeout`` seconds in all is
        killed (its exit code is then ``-9``)."""
        deadline = time.monotonic() + timeout
        try:
            for process in self.processes.values():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=max(0.0, deadline - time.monotonic()))
        finally:
            for process in self.processes.values():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)  # the launcher's workers too
                process.wait()
        return Outcome(
            tuple(self.processes[t].returncode for t in TASKS),
            tuple(self.log(t).read_text(errors="replace") for t in TASKS),
            time.monotonic() - self.started,
        )


@dataclass
class Members:
    """What a phase does to the rendezvous's servers: an etcd cluster's members, or
    plain c10d's store host (its one "member", which has no leader)."""

    cluster: EtcdCluster | None = None
    store: StoreHost | None = None
    peers: PeerCut | None = None

    def pids(self) -> list[int]:
        if self.cluster is not None:
            return [m.process.pid for m in self.cluster.members if m.alive]
        assert self.store is not None and self.store.pid is not None
        return [self.store.pid]

    def kill_leader(self) -> None:
        assert self.cluster is not None, "c10d's store host has no leader"
        self.cluster.kill_leader()

    def kill_first(self) -> None:
        """SIGKILL the member named first (c10d: the store host)."""
        if self.cluster is None:
            os.kill(self.pids()[0], signal.SIGKILL)
            return
        first = self.cluster.members[0]
        first.process.kill()
        first.process.wait(timeout=10)

    def cut_first(self) -> None:
        """Cut the member named first from its peers; clients still reach it."""
        assert self.cluster is not None and self.peers is not None, "no peers to cut"
        self.peers.cut(self.cluster.members[0])

    def stop_all(self, seconds: float) -> None:
        """SIGSTOP every member for ``seconds``, then SIGCONT them (resumed in any case)."""
        pids = self.pids()
        try:
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            time.sleep(seconds)
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)


def _gather(job: Job, members: Members) -> None:
    for task in TASKS:
        job.start(task)
    job.wait_for(RENDEZVOUS, TASKS)
    time.sleep(2)  # all three joined: the last call runs, each writes its heartbeat
    members.kill_leader()
    job.wait_for(FORMED, TASKS)
    job.stop.touch()


def _train(job: Job, members: Members) -> None:
    for task in TASKS:
        job.start(task)
    job.wait_for(FORMED, TASKS)
    members.kill_leader()
    time.sleep(10)  # torchrun's monitor and torch's keep-alive meet the election
    job.stop.touch()


def _exit_barrier(job: Job, members: Members) -> None:
    for task in TASKS:
        job.start(task, hold=task == 2)
    job.wait_for(FORMED, TASKS)
    job.stop.touch()
    job.wait_for(BARRIER, (0, 1))
    members.kill_leader()
    time.sleep(0.5)
    job.release.touch()


def _first_member_mark(job: Job, members: Members) -> None:
    for task in TASKS:
        job.start(task)
    job.wait_for(FORMED, TASKS)
    members.kill_first()
    time.sleep(3)  # the launchers' heartbeats and the watch's looks meet the dead member
    mark_task(job.workdir)
    job.wait_for(FORMED, (0, 2), times=2)  # the world without the marked unit
    job.stop.touch()


def _cluster_down(job: Job, members: Members) -> None:
    for task in TASKS:
        job.start(task)
    job.wait_for(FORMED, TASKS)
    members.stop_all(DOWN)
    time.sleep(3)  # training goes on with the cluster back
    job.stop.touch()


def _gather_cut(job: Job, members: Members) -> None:
    for task in TASKS:
        job.start(task)
    job.wait_for(RENDEZVOUS, TASKS)
    time.sleep(2)  # all three joined: the last call runs, each writes its heartbeat
    members.cut_first()
    job.wait_for(FORMED, TASKS)
    job.stop.touch()


def _exit_barrier_cut(job: Job, members: Members) -> None:
    for task in TASKS:
        job.start(task, hold=task == 2)
    job.wait_for(FORMED, TASKS)
    job.stop.touch()
    job.wait_for(BARRIER, (0, 1))
    members.cut_first()
    time.sleep(0.5)
    job.release.touch()


def _marked_cut(job: Job, members: Members) -> None:
    mark_task(job.workdir)
    for task in TASKS:
        job.start(task)
    job.wait_for(RENDEZVOUS, (0, 2))
    members.cut_first()
    job.wait_for(FORMED, (0, 2))
    job.stop.touch()


#: Phases with one member cut from its peers (``etcd_v3_partition``), named first.
CUT_PHASES: dict[str, Callable[[Job, Members], None]] = {
    "gather-cut": _gather_cut,
    "exit-barrier-cut": _exit_barrier_cut,
    "marked-cut": _marked_cut,
}

PHASES: dict[str, Callable[[Job, Members], None]] = {
    "gather": _gather,
    "train": _train,
    "exit-barrier": _exit_barrier,
    "first-member-mark": _first_member_mark,
    "cluster-down": _cluster_down,
    **CUT_PHASES,
}
#: What each phase needs of the job: ``--nnodes`` and the watch.
SHAPES: dict[str, dict[str, Any]] = {
    "first-member-mark": {"nnodes": "2:3", "watch": True},
    "marked-cut": {"nnodes": "2:3"},
}
#: The phases whose member dies while leading.
LEADER_PHASES = ("gather", "train", "exit-barrier")


def _endpoints(cluster: EtcdCluster, phase: str) -> list[str]:
    """Every member, the one that dies first: the leader, else the first member."""
    first = cluster.leader() if phase in LEADER_PHASES else cluster.members[0]
    return [m.server.endpoint for m in [first, *(m for m in cluster.members if m is not first)]]


def _run(job: Job, phase: str, members: Members, timeout: float = JOB_TIMEOUT) -> Outcome:
    PHASES[phase](job, members)
    outcome = job.end(timeout)
    print(f"HA | {phase} | {job.name} | exits {outcome.returncodes} | {outcome.seconds:.1f} s")
    for task, output in zip(TASKS, outcome.outputs):
        errors = re.findall(r"\w*(?:Error|Exception)\b: .{0,160}", output)
        print(f"--- task{task}: {sorted(set(errors))[:3]}")
        print("\n".join(line[-300:] for line in output.splitlines() if "retry=" in line))
    return outcome


def _assert_completed(phase: str, outcome: Outcome) -> None:
    """Every launcher of a unit that stays exits 0, and the worlds are the phase's."""
    three = [f"{FORMED} rank={r} world=3" for r in range(3)]
    two = [f"{FORMED} rank={r} world=2" for r in (0, 1)]
    if phase == "marked-cut":
        assert outcome.returncodes[MARKED] not in (None, 0), outcome.returncodes
        assert [outcome.returncodes[t] for t in TASKS if t != MARKED] == [0, 0]
        assert outcome.worlds() == two
        return
    if phase == "first-member-mark":
        assert outcome.returncodes[MARKED] not in (None, 0), outcome.returncodes
        assert [outcome.returncodes[t] for t in TASKS if t != MARKED] == [0, 0]
        assert outcome.worlds() == sorted([*three, *(f"{FORMED} rank={r} world=2" for r in (0, 1))])
        return
    assert outcome.returncodes == (0, 0, 0)
    assert outcome.worlds() == three


def _assert_no_thread_died(outcome: Outcome) -> None:
    """No launcher lost a thread to an exception: torch's keep-alive timer, for one, dies
    silently on an error it cannot handle, and the job goes on without heartbeats."""
    died = [t for t, output in zip(TASKS, outcome.outputs) if DIED in output]
    assert not died, f"a thread died in task(s) {died}"


def _segment_health(
    phase: str, inner: str, endpoint: str, members: Members, workdir: Path
) -> Outcome:
    job = Job("segment-health", inner, endpoint, workdir, **SHAPES.get(phase, {}))
    return _run(job, phase, members)


@pytest.mark.parametrize("phase", list(CUT_PHASES))
def test_the_job_completes_through_a_member_cut_from_its_peers(
    phase, etcd_v3_partition, tmp_path
) -> None:
    """segment-health over etcd-v3, the member named first cut from the other two while
    clients still reach it: the job completes, without the marked unit where one is."""
    cluster, peers = etcd_v3_partition
    endpoint = ",".join(m.server.endpoint for m in cluster.members)
    members = Members(cluster, peers=peers)
    outcome = _segment_health(phase, "etcd-v3", endpoint, members, tmp_path)
    _assert_completed(phase, outcome)
    _assert_no_thread_died(outcome)


@pytest.mark.parametrize("etcd_v3_partition", ["3.5"], indirect=True, ids=["etcd3.5"])
@pytest.mark.parametrize("phase", [phase for phase in CUT_PHASES if phase != "marked-cut"])
def test_plain_torchrun_on_etcd_v3_through_a_member_cut_from_its_peers(
    phase, etcd_v3_partition, tmp_path
) -> None:
    """Plain ``torchrun --rdzv-backend=etcd-v3`` beside it: the backend alone leaves the
    cut member (etcd 3.5 only; the mark needs the check)."""
    cluster, peers = etcd_v3_partition
    endpoint = ",".join(m.server.endpoint for m in cluster.members)
    job = Job("etcd-v3", "etcd-v3", endpoint, tmp_path)
    outcome = _run(job, phase, Members(cluster, peers=peers))
    _assert_completed(phase, outcome)
    _assert_no_thread_died(outcome)


@pytest.mark.parametrize("phase", [phase for phase in PHASES if phase not in CUT_PHASES])
def test_the_job_completes_on_etcd_v3(phase, etcd_v3_cluster, tmp_path) -> None:
    """segment-health over etcd-v3, every member named: the job completes as said."""
    endpoint = ",".join(_endpoints(etcd_v3_cluster, phase))
    outcome = _segment_health(phase, "etcd-v3", endpoint, Members(etcd_v3_cluster), tmp_path)
    _assert_completed(phase, outcome)
    _assert_no_thread_died(outcome)


@pytest.mark.parametrize("etcd_v3_cluster", ["3.5"], indirect=True, ids=["etcd3.5"])
@pytest.mark.parametrize(
    "phase", [phase for phase in PHASES if phase != "first-member-mark" and phase not in CUT_PHASES]
)
def test_plain_torchrun_on_etcd_v3(phase, etcd_v3_cluster, tmp_path) -> None:
    """Plain ``torchrun --rdzv-backend=etcd-v3``, without segment-health's own retries:
    the backend alone rides out each loss (etcd 3.5 only; the mark needs the check)."""
    endpoint = ",".join(_endpoints(etcd_v3_cluster, phase))
    job = Job("etcd-v3", "etcd-v3", endpoint, tmp_path)
    outcome = _run(job, phase, Members(etcd_v3_cluster))
    _assert_completed(phase, outcome)
    _assert_no_thread_died(outcome)


@pytest.mark.parametrize("phase", [phase for phase in PHASES if phase not in CUT_PHASES])
def test_etcd_v2_beside_it(phase, etcd_cluster, tmp_path) -> None:
    """segment-health over etcd-v2 (one member named: the one that dies first) completes
    as over etcd-v3: its own retries ride out what plain etcd-v2 does not."""
    endpoint = _endpoints(etcd_cluster, phase)[0]
    outcome = _segment_health(phase, "etcd-v2", endpoint, Members(etcd_cluster), tmp_path)
    _assert_completed(phase, outcome)


def _lost(codes: tuple[int | None, ...]) -> bool:
    """Every launcher failed: the job is lost."""
    return all(code not in (None, 0) for code in codes)


def _completed(codes: tuple[int | None, ...]) -> bool:
    return codes == (0, 0, 0)


#: What plain torchrun does in each phase beside segment-health, as docs/cluster.md says
#: ("When etcd loses its leader or a member"): the launchers' exit codes it allows. -9:
#: still waiting at :data:`PLAIN_TIMEOUT`, and killed.
PLAIN_EXITS: dict[str, Callable[[tuple[int | None, ...]], bool]] = {
    # etcd-v2, its one member the leader killed
    "gather": _lost,
    "train": _completed,  # training needs no store
    "exit-barrier": lambda codes: set(codes) <= {0, -9},  # done, or waiting out 300 s
    # c10d, its store host killed (it never reads the mark) or stopped
    "first-member-mark": _lost,
    "cluster-down": _completed,
}


@pytest.mark.parametrize("phase", list(LEADER_PHASES))
def test_plain_torchrun_beside_it(phase, etcd_cluster, tmp_path) -> None:
    """Plain torchrun on etcd-v2 in the same scenario ends as docs/cluster.md says
    (:data:`PLAIN_EXITS`). segment-health over etcd-v3 completes in every phase."""
    job = Job("etcd-v2", "etcd-v2", _endpoints(etcd_cluster, phase)[0], tmp_path)
    outcome = _run(job, phase, Members(etcd_cluster), PLAIN_TIMEOUT)
    assert PLAIN_EXITS[phase](outcome.returncodes), outcome.returncodes


@pytest.mark.parametrize("phase", ["first-member-mark", "cluster-down"])
def test_plain_c10d_beside_it(phase, tmp_path) -> None:
    """Plain torchrun on c10d, its store in a host process outside every unit: the host is
    killed (first-member-mark: c10d never reads the mark) and the job is lost, or stopped
    and the job rides it out (:data:`PLAIN_EXITS`)."""
    store = StoreHost(tmp_path / "store.log")
    store.start(60)
    try:
        job = Job("c10d", "c10d", store.endpoint, tmp_path)
        outcome = _run(job, phase, Members(store=store), PLAIN_TIMEOUT)
    finally:
        store.stop()
    assert PLAIN_EXITS[phase](outcome.returncodes), outcome.returncodes
