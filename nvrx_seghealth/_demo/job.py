"""Run a whole simulated job: store, decisions, launchers, srun steps, progress.

:class:`SimulatedJob` is a context manager. Entering it starts the rendezvous store
(for c10d; etcd-v2 and etcd-v3 use an etcd the caller runs), publishes the decisions of
the marked units and starts the launchers; leaving it stops every process it started, by PID,
whatever happened. The job advances only while the caller waits in
:meth:`SimulatedJob.wait_until` or :meth:`SimulatedJob.wait` (a single thread polls:
held-back launchers start, srun steps end, progress is logged), and every wait is bounded.
A decision written while the job trains (:meth:`SimulatedJob.mark_while_training`) is
recorded as a fault (:meth:`SimulatedJob.record_fault`, :class:`.outcome.FaultEvent`) for
the recovery time (:meth:`.outcome.JobResult.recovery`); the tests' other faults record
themselves the same way.
"""

from __future__ import annotations

import datetime
import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from .._decision.decision_file import publish_decision
from .._launcher.markers import ReplacementGroupMarkers
from .launcher import Launcher
from .outcome import FaultEvent, JobResult, LauncherOutcome, Round
from .paths import RunPaths
from .ports import unclaimed_port
from .processes import kill_if_running, stop_all
from .records import WorkerRecord, read_records
from .rendezvous_state import etcd_rendezvous
from .slurm import allocation_unit
from .spec import JobSpec
from .srun import KILL_WAIT, Step
from .store_host import StoreHost

__all__ = ["SimulatedJob"]

log = logging.getLogger(__name__)

#: Seconds between two looks at the processes and the results directory.
POLL_INTERVAL = 0.2
#: Seconds the store host may take to report its port (a cold torch import is ~3 s).
STORE_START_TIMEOUT = 60.0


class SimulatedJob:
    """One simulated Slurm job of real ``torchrun`` agents on 127.0.0.1.

    Args:
        spec: what to simulate.
        workdir: an existing directory for logs, decisions and results.
    """

    def __init__(self, spec: JobSpec, workdir: Path) -> None:
        self.spec = spec
        self.paths = RunPaths(workdir)
        self.run_id = f"sim-{uuid.uuid4().hex[:8]}"
        self.store = StoreHost(self.paths.logs / "store.log")
        #: Every launcher's ``--rdzv-endpoint``; set by :meth:`start`.
        self.endpoint = ""
        self.decisions: dict[int, Path] = {}
        self.launchers: dict[str, Launcher] = {}
        self._steps: dict[str, Step] = {}
        self._reported: set[tuple[int, str]] = set()
        self.faults: list[FaultEvent] = []
        self.started_at = time.time()

    def __enter__(self) -> SimulatedJob:  # noqa: PYI034  (never subclassed)
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start the store, publish the marked units' decisions, start the launchers.

        The harness starts its store only when it hosts the c10d store
        (:attr:`JobSpec.harness_hosts_store`); etcd-v2 and etcd-v3 keep their state in
        the etcd at :attr:`JobSpec.etcd_endpoint`, and a launcher-hosted store starts
        with that launcher.
        """
        if self.spec.harness_hosts_store:
            self.store.start(STORE_START_TIMEOUT)
        self.endpoint = self._rendezvous_endpoint()
        for unit in sorted(self.spec.marked):
            self.publish_decision(unit)
        for unit in self.spec.units:
            launchers = [
                Launcher(self.spec, unit, procid, self.paths, self.endpoint, self.run_id)
                for procid in range(self.spec.nodes_per_task)
            ]
            step = Step(
                self.spec.unit_name(unit),
                launchers,
                kill_on_bad_exit=unit not in self.spec.no_kill_on_bad_exit,
            )
            for launcher in launchers:
                self.launchers[launcher.label] = launcher
                self._steps[launcher.label] = step
        self.started_at = time.time()
        self._poll()

    def _rendezvous_endpoint(self) -> str:
        """The ``--rdzv-endpoint`` of every launcher."""
        if self.spec.etcd_endpoint is not None:
            return self.spec.etcd_endpoint
        if self.spec.harness_hosts_store:
            return self.store.endpoint
        # For the launcher that hosts the store, which binds it seconds later.
        return f"127.0.0.1:{unclaimed_port()}"

    def publish_decision(self, unit: int, text: str | None = None) -> Path:
        """Mark ``unit`` unhealthy now, as a producer would; returns the decision file."""
        identity = allocation_unit(self.spec, unit)
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        text = text or f"marked unhealthy by the simulation at {now}\n"
        path = Path(
            publish_decision(str(self.paths.decisions), identity.job_id, identity.task_id, text)
        )
        self.decisions[unit] = path
        log.info("decision published for %s: %s", self.spec.unit_name(unit), path)
        return path

    def mark_while_training(self, unit: int, after_steps: int, timeout: float) -> FaultEvent:
        """Publish ``unit``'s decision while it trains; record it as a fault.

        Waits until a world holding ``unit`` has formed and every worker of it has done
        ``after_steps`` steps, then publishes the decision (:meth:`publish_decision`) and
        records the fault into that world's round: :meth:`.outcome.JobResult.recovery`
        then measures the time until the next world formed.

        Raises:
            TimeoutError: no such world trained that far within ``timeout`` seconds, or
                the job ended first.
        """
        name = self.spec.unit_name(unit)

        def training() -> Round | None:
            return next(
                (
                    r
                    for r in self.result().rounds
                    if r.formed
                    and unit in r.units
                    and all(w.steps_done >= after_steps for w in r.workers)
                ),
                None,
            )

        what = f"a world with {name} trained {after_steps} steps"
        self.wait_until(lambda: self.ended or training() is not None, timeout, what)
        world = training()
        if world is None:
            raise TimeoutError(f"the job ended before {what}; files: {self.paths.workdir}")
        self.publish_decision(unit)
        return self.record_fault(f"decision published for {name} while it trains", world.number)

    def workers(self) -> list[WorkerRecord]:
        """The worker records written so far."""
        return read_records(self.paths.results)

    def record_fault(self, what: str, in_round: int | None, at: float | None = None) -> FaultEvent:
        """Record a fault injected ``at`` (default: now) into the world of ``in_round``
        (``None``: before any world)."""
        event = FaultEvent(what, time.time() if at is None else at, in_round)
        self.faults.append(event)
        log.info("fault: %s (round %s)", what, "none yet" if in_round is None else in_round)
        return event

    def markers(self) -> ReplacementGroupMarkers:
        """The job's replacement-group markers, read through the live store.

        That is the harness's TCPStore, or for etcd-v2 and etcd-v3 the backend's store in
        etcd (opened by the backend's own ``create_backend``, so under its key prefix).

        Raises:
            ValueError: a launcher hosts the store (it lives and dies with that launcher).
        """
        if self.spec.etcd_endpoint is not None:
            store = etcd_rendezvous(self.spec.rendezvous, self.endpoint, self.run_id)[1]
        elif self.spec.harness_hosts_store:
            store = self.store.client()
        else:
            raise ValueError(f"the store lives in launcher {self.spec.store_in_launcher}")
        return ReplacementGroupMarkers(store, self.run_id, str(self.spec.array_job_id))

    def wait_until(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """Advance the job until ``condition()`` holds.

        Raises:
            TimeoutError: ``what`` did not happen within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            self._poll()
            if condition():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not happen within {timeout:.0f} s")
            time.sleep(POLL_INTERVAL)

    def wait(self, timeout: float) -> JobResult:
        """Advance the job until no launcher runs (or ``timeout``), stop it, return the result.

        Launchers still running after ``timeout`` seconds are stopped and the result
        says ``timed_out``.
        """
        try:
            self.wait_until(lambda: self.ended, timeout, "the end of the job")
            timed_out = False
        except TimeoutError:
            log.warning("job still running after %.0f s; stopping it", timeout)
            timed_out = True
        self._stop_launchers()
        return self._result(timed_out)

    def stop_now(self) -> JobResult:
        """Stop the job on purpose (the caller has what it came for) and return the result.

        As :meth:`wait` at its time limit, without the warning: the result says
        ``timed_out`` when a launcher was still running.
        """
        self._poll()
        timed_out = not self.ended
        self._stop_launchers()
        return self._result(timed_out)

    def result(self) -> JobResult:
        """What the job did so far; launchers still running have no exit code yet."""
        return self._result(timed_out=False)

    @property
    def ended(self) -> bool:
        """No launcher runs any more (as of the last poll, which starts every launcher
        that may start)."""
        return not any(launcher.running for launcher in self.launchers.values())

    def stop(self) -> None:
        """Stop every launcher (with its workers) and the store; safe to call twice."""
        self._stop_launchers()
        self.store.stop()

    def _poll(self) -> None:
        for label, launcher in self.launchers.items():
            if launcher.poll():
                self._steps[label].exited(launcher)
                self._kill_leftover_workers(label)
        for step in set(self._steps.values()):
            step.poll()
        for label, launcher in self.launchers.items():
            if launcher.started_at is None and not self._steps[label].ended and self._ready(label):
                launcher.start()
        self._log_progress()

    def _ready(self, label: str) -> bool:
        if label in self.spec.never_started:
            return False
        if time.time() - self.started_at < self.spec.start_delays.get(label, 0.0):
            return False
        after = self.spec.start_after.get(label)
        if after is None:
            return True
        other = self.launchers[after.label]
        if after.pattern is None:
            return other.ended_at is not None
        if after.or_gone and (
            other.ended_at is not None
            or (other.started_at is None and self._steps[after.label].ended)
        ):
            return True
        return other.log_has(after.pattern)

    def _log_progress(self) -> None:
        result = self._result(timed_out=False)
        for round_ in result.rounds:
            for milestone, reached in (("formed", round_.formed), ("completed", round_.completed)):
                if reached and (round_.number, milestone) not in self._reported:
                    self._reported.add((round_.number, milestone))
                    log.info(
                        "round %d: world of %d %s (%s)",
                        round_.number,
                        round_.world_size,
                        milestone,
                        ", ".join(self.spec.unit_name(u) for u in round_.units),
                    )

    def _stop_launchers(self) -> None:
        for launcher in self.launchers.values():
            if launcher.running:
                log.info("stopping %s", launcher.label)
        processes = [launcher.process for launcher in self.launchers.values()]
        stop_all([process for process in processes if process is not None], KILL_WAIT)
        for label, launcher in self.launchers.items():
            launcher.poll()
            self._kill_leftover_workers(label)

    def _kill_leftover_workers(self, label: str) -> None:
        """SIGKILL the workers launcher ``label`` left behind when it exited.

        torchrun starts each worker in a session of its own: an agent killed by a signal
        it cannot handle (SIGKILL) leaves its workers running, and no signal to its
        process group reaches them. In Slurm the step's end kills every process of the
        step; here the harness kills them by the PIDs they recorded, once it has seen
        their agent exit.
        """
        marker = f"--results-dir={self.paths.results}"
        for record in self.workers():
            if record.launcher == label and kill_if_running(record.pid, marker):
                log.info("killed pid %d, a worker %s left behind", record.pid, label)

    def _result(self, timed_out: bool) -> JobResult:
        outcomes = {
            label: LauncherOutcome(
                label=label,
                unit=launcher.unit,
                procid=launcher.procid,
                pid=launcher.pid,
                returncode=launcher.returncode,
                killed_by_srun=launcher.killed_by_srun,
                log_path=launcher.log_path,
                started_at=launcher.started_at,
                ended_at=launcher.ended_at,
                events_path=launcher.events_path,
                metrics_path=launcher.metrics_path,
            )
            for label, launcher in self.launchers.items()
        }
        ended = [launcher.ended_at for launcher in self.launchers.values() if launcher.ended_at]
        return JobResult(
            spec=self.spec,
            paths=self.paths,
            launchers=outcomes,
            workers=self.workers(),
            decisions=dict(self.decisions),
            started_at=self.started_at,
            ended_at=max(ended, default=time.time()),
            timed_out=timed_out,
            faults=tuple(self.faults),
        )
