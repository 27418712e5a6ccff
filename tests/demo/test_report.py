"""How the report tells a launcher's end: from the stable tokens of its log, not its wording."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.rendezvous import launcher
from harness.slurmenv import slurm_env
from harness.telemetry import exclusion_tokens
from nvrx_seghealth import UnhealthyNodeException, publish_decision
from nvrx_seghealth._demo import JobResult, JobSpec, WorkerRecord, render_report
from nvrx_seghealth._demo.logtokens import (
    BROKEN_NODE_FAULT,
    FAULT_FIELD,
    Exclusion,
    exclusion,
)
from nvrx_seghealth._demo.outcome import LauncherOutcome
from nvrx_seghealth._demo.paths import RunPaths
from nvrx_seghealth._demo.report import describe_exit, render_timeline
from nvrx_seghealth._errors import ExclusionReason
from nvrx_seghealth._logfmt import format_fields


def excluded_line(reason: ExclusionReason, after_joining: bool) -> str:
    """An exclusion's ERROR line as the handler logs it (torch's agent log format)."""
    tokens = exclusion_tokens("1000", "1", reason.value, after_joining=after_joining)
    return (
        "[E1201 12:00:00.000 123 nvrx_seghealth/_launcher/coordinator.py:253] Segment health check: "
        f"any words at all: is excluded (before joining); {tokens}"
    )


def ended(tmp_path: Path, *lines: str, returncode: int = 1, unit: int = 1) -> LauncherOutcome:
    """Process 0 of ``unit``, which exited with ``returncode`` after logging ``lines``."""
    label = f"task{unit}.proc0"
    log = tmp_path / f"{label}.log"
    log.write_text("".join(f"{line}\n" for line in ("starting", *lines)))
    return LauncherOutcome(label, unit, 0, 123, returncode, False, log, 1.0, 2.0)


@pytest.mark.parametrize(
    ("reason", "after_joining", "text"),
    [
        (ExclusionReason.DECISION_FILE, False, "exit 1, excluded by its decision file"),
        (ExclusionReason.MARKER, False, "exit 1, refused to join: its task was marked"),
        (ExclusionReason.VERDICT, False, "exit 1, refused to join: its task was marked"),
        (ExclusionReason.MARKER, True, "exit 1, left after joining: its task was marked"),
    ],
)
def test_an_exclusion_is_told_by_its_fields(
    tmp_path: Path, reason: ExclusionReason, after_joining: bool, text: str
) -> None:
    outcome = ended(tmp_path, excluded_line(reason, after_joining), "RendezvousClosedError")
    assert describe_exit(outcome) == text


def test_torch_errors_are_told_by_their_class_names(tmp_path: Path) -> None:
    closed = "torch.distributed.elastic.rendezvous.api.RendezvousClosedError"
    assert describe_exit(ended(tmp_path, closed)) == "exit 1, the rendezvous was closed"
    timed_out = "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError: join"
    assert describe_exit(ended(tmp_path, timed_out)) == "exit 1, the rendezvous join timed out"


def test_a_broken_node_is_told_by_its_fault_field(tmp_path: Path) -> None:
    fields = format_fields({FAULT_FIELD: BROKEN_NODE_FAULT})
    line = f"[default0]:[worker 7] task1.proc0: crashing after joining {fields}"
    outcome = ended(tmp_path, line, returncode=-9)
    assert describe_exit(outcome) == "killed by SIGKILL, its node failed"


def test_wording_without_the_fields_tells_nothing(tmp_path: Path) -> None:
    words = "allocation unit job_id=1000 task_id=1 is excluded (before joining): broken node ("
    assert describe_exit(ended(tmp_path, words)) == "exit 1"
    assert exclusion("reason=marker after_joining=maybe\nreason=other after_joining=true") is None


def test_the_handlers_own_exclusion_line_carries_the_tokens(
    tmp_path: Path, tcp_store, caplog: pytest.LogCaptureFixture
) -> None:
    directory = str(tmp_path)
    publish_decision(directory, "1000", "1", "drained")
    with pytest.raises(UnhealthyNodeException):
        launcher(tcp_store, directory, slurm_env(task=1), 1, 1).next_rendezvous()
    assert exclusion(caplog.text) == Exclusion(ExclusionReason.DECISION_FILE, after_joining=False)


def test_a_worker_of_unknown_round_is_reported_as_such(tmp_path: Path) -> None:
    spec = JobSpec(tasks=1, nodes_per_task=1)
    worker = WorkerRecord("task0.proc0", 0, 0, 7, 0, 1, 0, 1, None, 0, started_at=1.5)
    result = JobResult(
        spec,
        RunPaths(tmp_path / "run"),
        {"task0.proc0": ended(tmp_path, unit=0)},
        [worker],
        {},
        started_at=1.0,
        ended_at=2.0,
        timed_out=False,
    )
    assert result.rounds == [] and result.workers_of_unknown_round == [worker]
    assert "round unknown: 1 worker(s) could not read torch's rendezvous state" in render_report(
        result
    )
    header, row = render_timeline(result).splitlines()
    assert "round unknown" in header and row.split()[:3] == ["task0.proc0", "0.0", "0.5"]
