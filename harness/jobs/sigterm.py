"""SIGTERM to one real ``torchrun`` launcher at a chosen point, on segment-health and c10d.

A signal that stops a launcher passes through the wrapper unchanged: the launcher
leaves as plain torchrun does. :func:`compare_terminations` runs one job twice, on plain
``c10d`` first and then on ``segment-health`` (same launchers, same worker, the same
store outside every unit), brings each run to the same point, sends SIGTERM to one
launcher's process group (as ``slurmstepd`` signals a step's tasks) and measures the
seconds from the signal to the launcher's exit. :func:`assert_exits_as_with_c10d` then
holds the wrapped launcher to c10d's exit: within c10d's time plus :data:`MARGIN`,
torch's exit code (:data:`TORCH_EXIT_CODE`, which c10d's own launcher at times misses:
:data:`KEEP_ALIVE_ABORT`), torch's own exit path in its log, no ``fail_open`` event of
the wrapper after the signal and no worker started after it.

Every point is reached through recorded facts (log tokens, worker records, the store);
a point not reached in :data:`REACH_TIMEOUT` seconds fails the test.
"""

from __future__ import annotations

import dataclasses
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.session.summary import SIGTERM_EXIT
from nvrx_seghealth._demo import JobResult, JobSpec, SimulatedJob
from nvrx_seghealth._demo.outcome import LauncherOutcome
from nvrx_seghealth._launcher import exiting
from nvrx_seghealth._launcher.events import EventName

from .portrace import clear_of_port_race
from .simjob import JOINING, report

__all__ = [
    "BOTH",
    "C10D_PATIENCE",
    "DEATH_SIGNAL",
    "KEEP_ALIVE_ABORT",
    "LONG_BOUND",
    "MARGIN",
    "PROCESS_ZERO",
    "SIGNAL_EXCEPTION",
    "TORCH_EXIT_CODE",
    "Termination",
    "assert_exits_as_with_c10d",
    "compare_terminations",
    "job_spec",
    "joinings",
    "terminate",
    "wait_for_joinings",
    "wait_for_round",
]

#: The two launchers of the one array task of :func:`job_spec`.
PROCESS_ZERO = "task0.proc0"
BOTH = (PROCESS_ZERO, "task0.proc1")

#: torch's agent logs this when a ``SignalException`` for SIGTERM reaches its run loop
#: (``SimpleElasticAgent.run``), right before it stops its workers.
DEATH_SIGNAL = f"Received {signal.SIGTERM.value} death signal"
#: The exception torch's signal handler raises; torchrun exits with its traceback.
SIGNAL_EXCEPTION = "torch.distributed.elastic.multiprocessing.api.SignalException"
#: torchrun's exit code after SIGTERM: that exception leaves torchrun's ``main``
#: uncaught, and Python exits 1.
TORCH_EXIT_CODE = 1
#: How plain c10d's launcher ends instead, at times (seen once in eleven runs of the
#: whole suite): it prints that exception and dies by SIGABRT, as a launcher does when a
#: thread returns from a store call while the interpreter finalizes (torch's rendezvous
#: keep-alive is such a thread).
#: The wrapper's exit prevents it (:mod:`nvrx_seghealth._launcher.exiting`,
#: ``tests/launcher/test_exiting.py``).
KEEP_ALIVE_ABORT = -signal.SIGABRT
#: Seconds the wrapped launcher may take beyond c10d's exit. torch's own exit path
#: takes under a second here (0.4-0.8 s measured); a launcher that swallowed the signal
#: goes on: it waits out a :data:`LONG_BOUND` or trains a 100 s round.
MARGIN = 10.0
#: A bound far beyond the test's patience (c10d's exit plus :data:`MARGIN`): the hand-off,
#: the stat or the rendezvous join that a launcher swallowing the signal would wait for.
LONG_BOUND = 120
#: Seconds plain c10d may take to exit after SIGTERM before the test gives up on it.
C10D_PATIENCE = 60.0
#: Seconds a run may take to reach the point where the signal is sent.
REACH_TIMEOUT = 90.0
#: Seconds between reaching the point and sending the signal: the launcher is then
#: surely inside the wait the point leads into, not on its way there.
SETTLE = 1.0
#: The order of the two runs: c10d's time bounds the wrapper's.
BACKENDS = ("c10d", "segment-health")


@dataclass(frozen=True)
class Termination:
    """One run: SIGTERM to launcher ``label`` and how it ended.

    Attributes:
        backend: ``c10d`` or ``segment-health``.
        label: the signalled launcher.
        signalled_at: wall-clock time of the signal.
        seconds: from the signal to the launcher's exit; ``None``: still running when
            the run's patience ran out (the harness then stopped it).
        result: the whole job.
    """

    backend: str
    label: str
    signalled_at: float
    seconds: float | None
    result: JobResult

    @property
    def launcher(self) -> LauncherOutcome:
        """The signalled launcher's outcome."""
        return self.result.launchers[self.label]

    @property
    def shown(self) -> str:
        """The exit time for a report line."""
        return "no exit" if self.seconds is None else f"{self.seconds:.1f} s"


def job_spec(backend: str, **overrides: Any) -> JobSpec:
    """One array task of two launchers on ``backend``, both needed (``--nnodes=2:2``),
    one restart allowed, rounds that train for 100 s, a join timeout of
    :data:`LONG_BOUND`, telemetry recorded; ``overrides`` are further
    :class:`JobSpec` fields."""
    spec = JobSpec(
        backend=backend,
        tasks=1,
        max_restarts=1,
        steps=400,
        step_seconds=0.25,
        join_timeout=LONG_BOUND,
        record_telemetry=True,
    )
    return dataclasses.replace(spec, **overrides)


def joinings(job: SimulatedJob, label: str) -> int:
    """How often launcher ``label``'s agent has called ``next_rendezvous()`` so far."""
    path = job.launchers[label].log_path
    return len(re.findall(JOINING, path.read_text(errors="replace"))) if path.exists() else 0


def wait_for_joinings(job: SimulatedJob, label: str, count: int) -> None:
    """Advance ``job`` until ``label``'s agent has entered the rendezvous ``count`` times."""
    job.wait_until(
        lambda: joinings(job, label) >= count,
        REACH_TIMEOUT,
        f"{label} entering the rendezvous {count} times",
    )


def wait_for_round(job: SimulatedJob, number: int, labels: tuple[str, ...]) -> None:
    """Advance ``job`` until every launcher of ``labels`` has a worker of round
    ``number`` in its process group (training)."""

    def training() -> bool:
        joined = {
            w.launcher for w in job.workers() if w.round == number and w.initialized_at is not None
        }
        return set(labels) <= joined

    job.wait_until(training, REACH_TIMEOUT, f"round {number}'s workers on {', '.join(labels)}")


def terminate(
    spec: JobSpec,
    workdir: Path,
    label: str,
    reach: Callable[[SimulatedJob], None],
    patience: float,
) -> Termination:
    """Run ``spec`` in the new folder ``workdir``, ``reach`` the point, SIGTERM
    ``label``, wait ``patience`` s for it (one run, not retried when torch's port race
    strikes it: :func:`compare_terminations` retries)."""
    with SimulatedJob(spec, workdir) as job:
        reach(job)
        time.sleep(SETTLE)
        launcher = job.launchers[label]
        assert launcher.running, f"{label} exited before the signal"
        signalled_at = time.time()
        launcher.signal(signal.SIGTERM)
        try:
            job.wait_until(lambda: not launcher.running, patience, f"{label}'s exit")
        except TimeoutError:
            seconds = None
        else:
            assert launcher.ended_at is not None
            seconds = launcher.ended_at - signalled_at
        result = job.stop_now()
    return Termination(spec.backend, label, signalled_at, seconds, result)


def compare_terminations(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    spec_for: Callable[[str], JobSpec],
    label: str,
    reach: Callable[[SimulatedJob], None],
    c10d_once: Callable[[Callable[[], Termination]], Termination] | None = None,
) -> dict[str, Termination]:
    """SIGTERM ``label`` at the point ``reach`` brings each run to, on c10d then on
    segment-health (``spec_for(backend)``); print both exit times side by side.

    The wrapped run waits for c10d's time plus :data:`MARGIN`, and a little more, so
    that a late exit is measured rather than cut off at the bound. ``c10d_once(run)``,
    when given, returns c10d's run: ``run()``, or the same job's run made for another
    test (the configuration matrix shares one per job).
    """
    runs: dict[str, Termination] = {}
    for backend in BACKENDS:
        spec = spec_for(backend)
        assert spec.backend == backend and spec.record_telemetry
        c10d = runs.get("c10d")
        patience = C10D_PATIENCE if c10d is None else (c10d.seconds or 0.0) + MARGIN + 5.0

        def run_once(spec: JobSpec = spec, patience: float = patience) -> Termination:
            run = clear_of_port_race(
                request,
                tmp_path / spec.backend,
                lambda workdir: terminate(spec, workdir, label, reach, patience),
            )
            report(request, spec.backend, run.result)
            return run

        runs[backend] = (
            c10d_once(run_once) if backend == "c10d" and c10d_once is not None else run_once()
        )
    c10d, wrapped = runs["c10d"], runs["segment-health"]
    line = (
        f"SIGTERM {request.node.name} {label}: c10d {c10d.shown} (exit {c10d.launcher.returncode}),"
        f" segment-health {wrapped.shown} (exit {wrapped.launcher.returncode})"
    )
    print(line)
    request.node.user_properties.append((SIGTERM_EXIT, line))
    return runs


def assert_exits_as_with_c10d(runs: dict[str, Termination]) -> None:
    """The wrapped launcher left on SIGTERM as the plain c10d one did.

    c10d itself must have exited through torch's exit path, with torch's exit code or by
    :data:`KEEP_ALIVE_ABORT`; the wrapped launcher then within c10d's time plus
    :data:`MARGIN`, with torch's exit code (never the abort), torch's
    ``DEATH_SIGNAL`` line and ``SignalException`` in its log, no ``fail_open`` event
    recorded after the signal, no store call holding its exit (:mod:`exiting
    <nvrx_seghealth._launcher.exiting>` logs nothing), and no worker started after the
    signal.
    """
    c10d, wrapped = runs["c10d"], runs["segment-health"]
    for run in (c10d, wrapped):
        text = run.launcher.log()
        late_workers = [
            w
            for w in run.result.workers
            if w.launcher == run.label and w.started_at > run.signalled_at
        ]
        assert run.seconds is not None, f"{run.backend}: {run.label} still ran after SIGTERM"
        assert DEATH_SIGNAL in text, f"{run.backend}: torch's agent never got the signal"
        assert SIGNAL_EXCEPTION in text, f"{run.backend}: no SignalException in the log"
        assert not late_workers, f"{run.backend}: workers started after SIGTERM: {late_workers}"
    assert c10d.seconds is not None and wrapped.seconds is not None
    assert wrapped.seconds <= c10d.seconds + MARGIN
    assert c10d.launcher.returncode in (TORCH_EXIT_CODE, KEEP_ALIVE_ABORT), c10d.launcher
    assert wrapped.launcher.returncode == TORCH_EXIT_CODE, wrapped.launcher
    fail_opens = [
        e
        for e in wrapped.launcher.events()
        if e.name == EventName.FAIL_OPEN.value and e.time >= wrapped.signalled_at
    ]
    assert not fail_opens, f"the wrapper failed open after SIGTERM: {fail_opens}"
    # The wrapper's exit logs only when a store call held it (its bounded wait, then the
    # connections shut): the exit here waited for none.
    exit_records = [
        line for line in wrapped.launcher.log().splitlines() if f"{exiting.__name__}:" in line
    ]
    assert not exit_records, f"a store call held the exit: {exit_records}"
