"""Row 13: torch's port race, per 100 rounds, beside two CPU hogs: torch's shared store,
torch's ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, and segment-health's served store.

Each job is two real ``torchrun`` launchers on 127.0.0.1 (``--nnodes=2``, one worker
each, the c10d store outside them, served by ``nvrx-seghealth store-host``). Its worker
(``port_race_worker.py``) records each round's outcome and fails, so the agents start the
next round, until :data:`ROUNDS` rounds are recorded. Variants, interleaved job by job:
plain ``c10d`` with the variable unset (torch's shared store), plain ``c10d`` with ``1``
(what this package set until it served the store itself), and ``segment-health`` with the
check on and no decision. Two ``python3 -c 'while True: pass'`` hogs run throughout, so the
rank-0 worker starts late, as on a busy node. Measured: rounds whose rank-0 worker found
its port taken (``EADDRINUSE``) per 100 rounds, and rounds whose rank-0 worker failed
otherwise (pytorch#135712's stale addresses). Target for segment-health: none of either.
``--port-race-rounds N`` makes it a long run.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.bench.measure import Row, interleaved_samples
from harness.jobs.launcherjob import launcher_env, slurm_task, store_host
from harness.ports import PORT_TAKEN, free_port

WORKER = Path(__file__).with_name("port_race_worker.py")
#: Rounds recorded per job, by ``--quick``; ``--port-race-rounds`` sets its own.
ROUNDS = {True: 4, False: 10}
#: Jobs per variant, interleaved.
REPETITIONS = {True: 1, False: 3}
#: Seconds without a new round before the harness stops a job (a round takes 5-15 s on a
#: loaded node; torch's shared store can stall a job for good).
STALL = 90.0
#: The two launchers: array tasks 0 and 2, one node each.
TASKS = (0, 2)
#: The variants: backend and the launchers' ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE``.
VARIANTS: dict[str, tuple[str, str | None]] = {
    "c10d, shared store": ("c10d", None),
    "c10d, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1": ("c10d", "1"),
    "segment-health": ("segment-health", None),
}


@dataclass(frozen=True)
class Rounds:
    """What one job's rank-0 workers recorded: rounds, and how many ended how."""

    rounds: int
    taken: int
    failed: int

    def __add__(self, other: Rounds) -> Rounds:
        return Rounds(
            self.rounds + other.rounds, self.taken + other.taken, self.failed + other.failed
        )

    def per_100(self, count: int) -> float | None:
        return None if not self.rounds else 100 * count / self.rounds


def read_rounds(records: Path) -> Rounds:
    """The rank-0 workers' records in ``records`` (one line per worker and round)."""
    outcomes = [
        line.split()[2]
        for line in (records.read_text().splitlines() if records.exists() else [])
        if line.startswith("0 ")
    ]
    taken = outcomes.count(PORT_TAKEN)
    return Rounds(len(outcomes), taken, len(outcomes) - taken - outcomes.count("ok"))


def command(backend: str, endpoint: str, run_id: str, decisions: Path, rounds: int) -> list[str]:
    conf = "is_host=false,last_call_timeout=1"
    if backend == "segment-health":
        conf = f"segment_health_check_dir={decisions},{conf}"
    return [
        "torchrun",
        "--nnodes=2",
        "--nproc-per-node=1",
        f"--max-restarts={3 * rounds + 10}",
        f"--rdzv-backend={backend}",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={run_id}",
        f"--rdzv-conf={conf}",
        str(WORKER),
    ]


def run_job(variant: str, rounds: int) -> Rounds:
    """One job of ``variant`` until its rank-0 workers recorded ``rounds`` rounds, its
    launchers ended, or no round came for :data:`STALL` seconds."""
    backend, shared = VARIANTS[variant]
    with tempfile.TemporaryDirectory(prefix="nvrx-bench-port-race-") as workdir:
        folder = Path(workdir)
        records = folder / "records"
        decisions = folder / "decisions"
        decisions.mkdir()
        settings = {"PORT_RACE_RECORDS": str(records)}
        if shared is not None:
            settings["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = shared
        with store_host("127.0.0.1", free_port()) as store:
            argv = command(backend, store.endpoint, folder.name, decisions, rounds)
            launchers = [
                subprocess.Popen(
                    argv,
                    cwd=folder,
                    env=launcher_env(**slurm_task(task), **settings),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
                for task in TASKS
            ]
            try:
                seen, last = 0, time.monotonic()
                while seen < rounds and time.monotonic() - last < STALL:
                    if all(launcher.poll() is not None for launcher in launchers):
                        break
                    time.sleep(0.5)
                    if (now := read_rounds(records).rounds) > seen:
                        seen, last = now, time.monotonic()
            finally:
                for launcher in launchers:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(launcher.pid, signal.SIGKILL)
                    launcher.wait()
        return read_rounds(records)


@contextlib.contextmanager
def cpu_hogs(count: int = 2) -> Iterator[None]:
    """``count`` processes that spin on a core each until the block ends."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _describe(name: str, jobs: list[Rounds]) -> str:
    total = sum(jobs, Rounds(0, 0, 0))
    return (
        f"{name}: {total.rounds} rounds, {total.taken} EADDRINUSE, {total.failed} failed "
        f"otherwise (jobs: {', '.join(f'{j.taken}+{j.failed}/{j.rounds}' for j in jobs)})"
    )


def rows(quick: bool, rounds: int | None = None) -> list[Row]:
    per_job = ROUNDS[quick] if rounds is None else rounds
    with cpu_hogs():
        samples = interleaved_samples(
            {name: functools.partial(run_job, name, per_job) for name in VARIANTS},
            REPETITIONS[quick],
        )
    totals = {name: sum(jobs, Rounds(0, 0, 0)) for name, jobs in samples.items()}
    ours = totals["segment-health"]
    return [
        Row(
            f"port race beside 2 CPU hogs, {name}: EADDRINUSE per 100 rounds",
            totals[name].per_100(totals[name].taken),
            "0" if name == "segment-health" else "-",
            (ours.rounds > 0 and ours.taken == 0) if name == "segment-health" else None,
            _describe(name, samples[name]),
        )
        for name in VARIANTS
    ] + [
        Row(
            "port race beside 2 CPU hogs, segment-health: rounds failed otherwise per 100",
            ours.per_100(ours.failed),
            "0",
            ours.rounds > 0 and ours.failed == 0,
            f"c10d, shared store: {totals['c10d, shared store'].failed} of "
            f"{totals['c10d, shared store'].rounds} rounds failed otherwise (pytorch#135712)",
        )
    ]
