"""A world whose launchers differ in the check trains as plain c10d does.

Two launchers of one job on ``--rdzv-backend=segment-health``; only one has a decision
directory (a node that missed the setting, or a partial roll-out), and nothing is marked.
A launcher hosts the rendezvous store (the endpoint on 127.0.0.1, no ``is_host``): each
launcher then decides alone who serves its workers' bootstrap store; with a store host
(``is_host=false``) every launcher served it already. torch ranks the launchers of one
host by process id, so the one started first holds rank 0. Both orders run, beside plain
c10d with store sharing off.

- Before f165357, the checked launcher served a store and the unchecked one used torch's
  shared one. With the checked one at rank 0, the workers got two ``MASTER_PORT`` values.
  With the unchecked one at rank 0, the checked one waited for a port nobody published.
  Both launchers exited 1 either way.
- Since f165357 both serve it: one ``MASTER_PORT``.
- af8b006 made the checked launcher skip torch's rank exchange, and the unchecked one then
  waited for ``assigned_ranks`` (or rank 0 for a ``role_info``) until the store read timed
  out (60 s): both exited 1. Now the backend skips it with the check off too.
"""

from __future__ import annotations

from pathlib import Path

from harness.jobs.launcherjob import (
    Finished,
    Launch,
    launcher_env,
    run_together,
    slurm_task,
)
from harness.ports import free_port
from harness.programs import WATCH_TRAIN
from nvrx_seghealth._logfmt import parse_fields

#: The launcher started first, which torch makes rank 0, and the other.
FIRST, SECOND = 0, 1


def _run(workdir: Path, backend: str, checked: int | None) -> dict[int, Finished]:
    """Run the job once: task ``FIRST`` starts first; ``checked`` has the directory."""
    workdir.mkdir()
    decisions = workdir / "decisions"
    decisions.mkdir()
    stop = workdir / "stop"
    stop.touch()  # the workers stop after one all-reduce
    endpoint = f"127.0.0.1:{free_port()}"
    launches = []
    for task in (FIRST, SECOND):
        argv = [
            "torchrun",
            "--nnodes=2:2",
            "--nproc-per-node=1",
            "--max-restarts=0",
            f"--rdzv-backend={backend}",
            f"--rdzv-endpoint={endpoint}",
            "--rdzv-id=mixed-check",
        ]
        if task == checked:
            argv.append(f"--rdzv-conf=segment_health_check_dir={decisions}")
        env = {"WATCH_TRAIN_STOP_FILE": str(stop), "WATCH_TRAIN_GLOO_TIMEOUT": "60"}
        if backend == "c10d":
            env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        launches.append(
            Launch(task, [*argv, str(WATCH_TRAIN)], launcher_env(**slurm_task(task), **env))
        )
    finished = run_together(launches, workdir / "logs", workdir)
    return {done.task: done for done in finished}


def _records(output: str, event: str) -> list[dict[str, str]]:
    return [
        parse_fields(line)
        for line in output.splitlines()
        if line.startswith(f"watch-train {event} ")
    ]


def _assert_one_world(finished: dict[int, Finished]) -> None:
    """Both launchers exited 0; their workers formed one world of 2 on one ``MASTER_PORT``,
    task ``FIRST`` at rank 0, and trained to the end."""
    tail = {task: done.output[-3000:] for task, done in finished.items()}
    assert [finished[t].returncode for t in (FIRST, SECOND)] == [0, 0], tail
    formed = {task: _records(done.output, "formed") for task, done in finished.items()}
    assert all(len(records) == 1 for records in formed.values()), tail
    assert len({records[0]["port"] for records in formed.values()}) == 1, formed
    assert {task: records[0]["rank"] for task, records in formed.items()} == {
        FIRST: "0",
        SECOND: "1",
    }, formed
    assert all(_records(done.output, "done") for done in finished.values()), tail


def test_one_launcher_without_the_directory_trains_as_plain_c10d(tmp_path: Path) -> None:
    _assert_one_world(_run(tmp_path / "c10d", "c10d", checked=None))
    for checked, name in ((FIRST, "checked-rank-0"), (SECOND, "unchecked-rank-0")):
        finished = _run(tmp_path / name, "segment-health", checked=checked)
        _assert_one_world(finished)
        unchecked = SECOND if checked == FIRST else FIRST
        assert "check=off" in finished[unchecked].output, finished[unchecked].output[-3000:]
        assert "check=off" not in finished[checked].output, finished[checked].output[-3000:]
