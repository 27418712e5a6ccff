"""Real Slurm: a drain to the decision file written, three ways side by side in one run.

A private 4-node cluster (``integration/slurm/start.sh``, Debian's Slurm; root only) runs
a two-node job. Each repetition starts three ``publish-drained`` producers for it, each
with its own decision directory, and, once each has done its first pass, drains the job's
first node (together with an idle node: Slurm 22.05 raises a ``--drained`` trigger only
for a node with no job, see ``examples/publish-drained-now.sh``) and times until each
decision file holds the decision:

* **signal**: ``--interval 600``, sent SIGUSR1 through its ``--pid-file`` right after the
  drain (``examples/publish-drained-now.sh``, an operator's path; target: under 2 s);
* **trigger**: ``--interval 600``, signalled by a ``strigger --set --node --drained
  --flags=PERM`` whose program is the same script (slurmctld looks at trigger events
  about every 15 s; target: under 20 s);
* **poll**: ``--interval 60``, no signal. Repetition ``i`` of ``n`` drains
  ``60 * (i + 0.5) / n`` seconds after its first pass, so the repetitions spread over
  the polling phase (expected: the remaining part of the interval).

The figures are each variant's median seconds and the ratios of the poll's to the
others'. ``python -m bench.producer_wakeup [--quick]``: 1 repetition (about 1.5 minutes)
or 3 (about 3.5).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from harness.bench.measure import Row, median_or_none, ratio_or_none, table

ROOT = Path(__file__).resolve().parents[1]
SLURM = ROOT / "integration" / "slurm"
PROGRAM = ROOT / "examples" / "publish-drained-now.sh"
CLI = str(Path(sys.executable).with_name("nvrx-seghealth"))
#: Ports away from the integration tests' defaults, so both may run at once.
PORTS = {"NVRX_SEGHEALTH_SLURMCTLD_PORT": "26817", "NVRX_SEGHEALTH_SLURMD_PORT": "27001"}
BOUND_S = 120.0
POLL_S = 60.0
VARIANTS = {"signal": "600", "trigger": "600", "poll": str(POLL_S)}
TARGETS = {"signal": 2.0, "trigger": 20.0}


class Cluster:
    """The private cluster in ``state``: its client environment and commands."""

    def __init__(self, state: Path) -> None:
        subprocess.run(
            [str(SLURM / "start.sh"), str(state), "4"],
            check=True,
            timeout=120,
            capture_output=True,
            env={**os.environ, **PORTS},
        )
        self.state = state
        exported = subprocess.run(
            ["bash", "-c", f'. {state}/env.sh && printf "%s\\0%s" "$SLURM_CONF" "$PATH"'],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split("\0")
        self.env = {**os.environ, "SLURM_CONF": exported[0], "PATH": exported[1]}

    def run(self, *args: str) -> str:
        return subprocess.run(
            args, env=self.env, check=True, capture_output=True, text=True, timeout=30
        ).stdout

    def stop(self) -> None:
        subprocess.run(
            [str(SLURM / "stop.sh"), str(self.state)], timeout=120, check=False, capture_output=True
        )


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` every 20 ms until it holds; raise after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached in {timeout} s")
        time.sleep(0.02)


def _producer(cluster: Cluster, job: str, directory: Path, interval: str) -> subprocess.Popen[str]:
    directory.mkdir()
    process = subprocess.Popen(
        [
            CLI,
            "publish-drained",
            "--dir",
            str(directory),
            "--job-id",
            job,
            "--interval",
            interval,
            "--pid-file",
            str(directory.with_suffix(".pid")),
            "--producer-id",
            "bench",
        ],
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if "pass done" in line:
            return process
    raise RuntimeError(f"the {directory.name} producer ended before its first pass")


def _repetition(
    cluster: Cluster, job: str, nodes: list[str], work: Path, phase: float
) -> dict[str, float | None]:
    producers = {
        name: _producer(cluster, job, work / name, interval) for name, interval in VARIANTS.items()
    }
    decision = {name: work / name / f"segment_health_check.{job}.{job}" for name in VARIANTS}
    trigger = f"{PROGRAM} {(work / 'trigger').with_suffix('.pid')}"
    cluster.run("strigger", "--set", "--node", "--drained", "--flags=PERM", f"--program={trigger}")
    taken: dict[str, float | None] = dict.fromkeys(VARIANTS)  # None: not within BOUND_S
    try:
        time.sleep(phase)
        drained = time.monotonic()
        cluster.run(
            "scontrol", "update", f"nodename={','.join(nodes)}", "state=drain", "reason=bench"
        )
        subprocess.run([str(PROGRAM), str((work / "signal").with_suffix(".pid"))], check=True)
        while time.monotonic() - drained < BOUND_S and None in taken.values():
            for name, path in decision.items():
                if taken[name] is None and path.exists() and path.stat().st_size > 0:
                    taken[name] = time.monotonic() - drained
            time.sleep(0.02)
    finally:
        for row in cluster.run("strigger", "--get", "--noheader").splitlines():
            if row.rstrip().endswith(trigger):
                cluster.run("strigger", "--clear", f"--id={row.split()[0]}")
        cluster.run("scontrol", "update", f"nodename={','.join(nodes)}", "state=resume")
        for process in producers.values():
            process.terminate()
            process.communicate(timeout=30)
        _wait(
            lambda: cluster.run("sinfo", "-h", "-t", "drain,drng", "-o", "%N").strip() == "",
            60,
            "nodes resumed",
        )
    return taken


def _times(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.1f}x"


def rows(quick: bool) -> list[Row]:
    """The three variants' rows (real Slurm, root only)."""
    repetitions = 1 if quick else 3
    state = Path(tempfile.mkdtemp(prefix="nvrx-seghealth-bench-slurm."))
    state.chmod(0o755)  # munged wants every directory above its socket world-executable
    samples: dict[str, list[float | None]] = {name: [] for name in VARIANTS}
    try:
        cluster = Cluster(state)  # start.sh stops what it started if it fails
        try:
            job = cluster.run(
                "sbatch",
                "--parsable",
                "-N2",
                "--exclusive",
                "--output=/dev/null",
                f"--chdir={state}",
                "--wrap",
                "exec srun sleep 3600",
            ).strip()
            _wait(
                lambda: cluster.run("squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING",
                60,
                "job running",
            )
            hostlist = cluster.run("squeue", "-h", "-j", job, "-o", "%N").strip()
            job_node = cluster.run("scontrol", "show", "hostnames", hostlist).split()[0]
            idle = cluster.run("sinfo", "-h", "-N", "-t", "idle", "-o", "%N").split()[0]
            for repetition in range(repetitions):
                with tempfile.TemporaryDirectory(dir=state) as work:
                    phase = POLL_S * (repetition + 0.5) / repetitions
                    taken = _repetition(cluster, job, [job_node, idle], Path(work), phase)
                for name, seconds in taken.items():
                    samples[name].append(seconds)
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(state, ignore_errors=True)
    medians = {name: median_or_none(values) for name, values in samples.items()}

    def shown(values: list[float | None]) -> str:
        return ", ".join("timeout" if v is None else f"{v:.2f}" for v in values)

    result = []
    for name in VARIANTS:
        target = TARGETS.get(name)
        median = medians[name]
        detail = f"seconds per repetition: {shown(samples[name])}"
        if name == "poll":
            detail += (
                f"; poll / signal {_times(ratio_or_none(median, medians['signal']))}, "
                f"poll / trigger {_times(ratio_or_none(median, medians['trigger']))}"
            )
        result.append(
            Row(
                f"drain → decision file, real Slurm, {name} (seconds, median)",
                median,
                "-" if target is None else f"≤ {target:.0f} s",
                None if target is None else median is not None and median <= target,
                detail,
            )
        )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="python -m bench.producer_wakeup", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="one repetition, not three")
    measured = rows(parser.parse_args().quick)
    print(table(measured))
    sys.exit(0 if all(row.met is not False for row in measured) else 1)
