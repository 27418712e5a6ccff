"""Row 14: whole torchrun jobs on ``etcd-v3`` against ``c10d`` and ``etcd-v2``.

Each job is ``--nnodes=N`` real ``torchrun`` launchers on 127.0.0.1, one worker each
(``v3_jobs_worker.py``), ``--max-restarts=1``, torch's other defaults; only the rendezvous
differs. c10d's store is served outside the launchers (``nvrx-seghealth store-host``,
``is_host=false``); both etcd backends use one etcd 3.4.23 that serves v2 and v3.
Measured, from the workers' own start times: the healthy formation (launch until every
worker of the first world started), then the recovery after a sibling's worker failure
(the harness SIGKILLs the worker of rank 1; from the kill until every worker of the next
world started: the failed agent restarts, the others see a node waiting and restart).
Variants run job by job, interleaved; the target is etcd-v3 within 10 % of c10d.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.bench.measure import Row, interleaved_samples, median_or_none, ratio_or_none
from harness.jobs.launcherjob import launcher_env, store_host
from harness.ports import free_port
from harness.services.etcd import running_etcd

WORKER = Path(__file__).with_name("v3_jobs_worker.py")
BACKENDS = ("c10d", "etcd-v3", "etcd-v2")
#: Launchers per job, and interleaved jobs per backend, quick and full.
LAUNCHERS = {True: 2, False: 4}
REPETITIONS = {True: 2, False: 5}
TARGET = 1.10
FORMATION = "healthy formation"
#: Seconds the harness waits for a world before it gives the job up.
WORLD_BOUND = 120.0


#: torch's agent logs this, with the time of day, when it starts its rendezvous.
JOINING = re.compile(r"^I\d{4} (\d\d):(\d\d):(\d\d\.\d+) .*Rendezvous'ing worker group")


@dataclass(frozen=True)
class JobTimes:
    """One job: seconds to its first world, and from the kill to the next world
    (``None``: that world never started all its workers).

    ``phases``: where the formation's seconds went: launch until the last agent began its
    rendezvous (from the agents' logs), then until the last worker started (``None`` when
    a log lacks the line).
    """

    formation: float | None
    recovery: float | None
    phases: tuple[float, float] | None = None


def _joining(logs: list[Path], launched: float) -> float | None:
    """Seconds from ``launched`` until the last agent logged :data:`JOINING` (its time of
    day, this machine's local time, as torch logs it)."""
    day = time.localtime(launched)
    midnight = launched - (day.tm_hour * 3600 + day.tm_min * 60 + day.tm_sec)
    firsts = []
    for log in logs:
        found = [m for m in map(JOINING.match, log.read_text().splitlines()) if m]
        if not found:
            return None
        hours, minutes, seconds = found[0].groups()
        firsts.append(int(hours) * 3600 + int(minutes) * 60 + float(seconds))
    return midnight + max(firsts) - launched


def _records(path: Path) -> list[tuple[int, int, float]]:
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines()]
    return [(int(r[0]), int(r[1]), float(r[2])) for r in rows if len(r) == 3]


def _world(path: Path, nodes: int, since: float) -> list[tuple[int, int, float]] | None:
    """The workers that started after ``since``, once ``nodes`` of them did."""
    deadline = time.monotonic() + WORLD_BOUND
    while time.monotonic() < deadline:
        world = [r for r in _records(path) if r[2] >= since]
        if len(world) >= nodes:
            return world
        time.sleep(0.05)
    return None


def run_job(backend: str, endpoint: str, nodes: int) -> JobTimes:
    """One job on ``backend`` at ``endpoint``: its formation and its recovery."""
    with tempfile.TemporaryDirectory(prefix="nvrx-bench-v3-job-") as workdir:
        records = Path(workdir) / "records"
        conf = "is_host=false" if backend == "c10d" else "read_timeout=60"
        argv = [
            "torchrun",
            f"--nnodes={nodes}",
            "--nproc-per-node=1",
            "--max-restarts=1",
            f"--rdzv-backend={backend}",
            f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id={Path(workdir).name}",
            f"--rdzv-conf={conf}",
            "--local-addr=127.0.0.1",
            str(WORKER),
        ]
        launched = time.time()
        logs = [Path(workdir) / f"launcher{index}.log" for index in range(nodes)]
        launchers = []
        for log in logs:
            with log.open("w") as output:
                launchers.append(
                    subprocess.Popen(
                        argv,
                        cwd=workdir,
                        env=launcher_env(V3_JOB_RECORDS=str(records), LOGLEVEL="INFO"),
                        stdin=subprocess.DEVNULL,
                        stdout=output,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        try:
            first = _world(records, nodes, launched)
            if first is None:
                return JobTimes(None, None)
            formation = max(started for _, _, started in first) - launched
            joining = _joining(logs, launched)
            phases = None if joining is None else (joining, formation - joining)
            victim = next(pid for rank, pid, _ in first if rank == 1)
            killed = time.time()
            os.kill(victim, signal.SIGKILL)
            second = _world(records, nodes, killed)
            recovery = None if second is None else max(s for _, _, s in second) - killed
            return JobTimes(formation, recovery, phases)
        finally:
            for launcher in launchers:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(launcher.pid, signal.SIGKILL)
                launcher.wait()


def _describe(backend: str, values: list[float | None]) -> str:
    median = median_or_none(values)
    runs = ", ".join("never" if v is None else f"{v:.1f}" for v in values)
    return f"{backend} {'n/a' if median is None else f'{median:.2f} s'} ({runs})"


def rows(quick: bool) -> list[Row]:
    nodes = LAUNCHERS[quick]
    with (
        running_etcd("v3-jobs", release="3.4", v2=True) as etcd,
        store_host("127.0.0.1", free_port()) as store,
    ):
        endpoints = {"c10d": store.endpoint, "etcd-v3": etcd.endpoint, "etcd-v2": etcd.endpoint}
        variants: dict[str, Callable[[], JobTimes]] = {
            b: functools.partial(run_job, b, endpoints[b], nodes) for b in BACKENDS
        }
        samples = interleaved_samples(variants, REPETITIONS[quick])
    result = []
    for what, pick in (
        (FORMATION, lambda t: t.formation),
        ("recovery after a sibling's worker failure", lambda t: t.recovery),
    ):
        values = {b: [pick(t) for t in samples[b]] for b in BACKENDS}
        medians = {b: median_or_none(v) for b, v in values.items()}
        detail = "; ".join(_describe(b, values[b]) for b in BACKENDS) + (
            f" ({len(samples['c10d'])} interleaved jobs each); etcd-v2 / c10d "
            f"{_ratio(medians['etcd-v2'], medians['c10d'])}"
        )
        if what == FORMATION:
            detail += "; " + _phases(samples)
        for other in ("c10d", "etcd-v2"):
            ratio = ratio_or_none(medians["etcd-v3"], medians[other])
            complete = all(v is not None for b in ("etcd-v3", other) for v in values[b])
            result.append(
                Row(
                    f"{what}, {nodes} torchrun launchers: etcd-v3 vs {other}",
                    ratio,
                    f"<= {TARGET:.2f}" if other == "c10d" else "-",
                    (None if ratio is None else complete and ratio <= TARGET)
                    if other == "c10d"
                    else None,
                    detail,
                )
            )
    return result


def _phases(samples: dict[str, list[JobTimes]]) -> str:
    """Median seconds of each phase of the formation, by backend (from the agents' logs)."""
    parts = []
    for backend, jobs in samples.items():
        known = [job.phases for job in jobs if job.phases is not None]
        if known:
            start, rest = (median_or_none(p[i] for p in known) for i in range(2))
            parts.append(f"{backend} {start:.2f} + {rest:.2f} s")
    return (
        "formation = agents' start-up (launch until the last agent began its rendezvous, "
        "from their logs) + rendezvous and workers' start, medians: " + ", ".join(parts)
    )


def _ratio(numerator: float | None, denominator: float | None) -> str:
    ratio = ratio_or_none(numerator, denominator)
    return "n/a" if ratio is None else f"{ratio:.3f}"
