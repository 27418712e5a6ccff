"""``--clear-after-failing S`` against a wall clock that steps: the producer counts how
long its passes fail on the host's boot clock, also across a restart, so a forward step
larger than S never clears its decisions early.

The wall clock cannot be stepped safely on a shared machine, so the one the producer
reads (``publisher._now``, ``time.time()``) is set here; the boot clock is the real one.
Slurm is the fake of ``harness/services/fakeslurm.py``, unreachable (``squeue`` exits 1).
"""

from __future__ import annotations

import time

import pytest

from harness.services.fakeslurm import PRODUCER, TASK1_DRAINED, FakeSlurm
from nvrx_seghealth._decision.unit import validate_id
from nvrx_seghealth._producer import publisher
from nvrx_seghealth._producer.audit import EventKind
from nvrx_seghealth._producer.slurm import SlurmClient

#: The clock step: two hours forward, twice ``WINDOW``.
STEP = 7200.0
WINDOW = 3600.0


class WallClock:
    """The wall clock the producer reads, which the test steps."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    fake = FakeSlurm(tmp_path)
    fake.script(
        "squeue", "echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1\n"
    )
    fake.decision(1).write_text(TASK1_DRAINED)  # its own decision, from before Slurm failed
    monkeypatch.setenv("PATH", fake.env["PATH"])
    return fake


@pytest.fixture
def wall(monkeypatch):
    clock = WallClock()
    monkeypatch.setattr(publisher, "_now", clock)
    return clock


def producer(slurm: FakeSlurm, window: float) -> publisher.DrainedPublisher:
    """A producer of job 500 that clears its decisions after ``window`` s of failures,
    with the counts of its state file, as one that starts does."""
    made = publisher.DrainedPublisher(
        str(slurm.shc),
        validate_id("--job-id", "500"),
        ("drain",),
        SlurmClient(10.0),
        producer_id=PRODUCER,
        clear_after_failing=window,
    )
    assert made.load_state() is None
    return made


def cleared(result: publisher.PassResult) -> bool:
    return any(event.kind is EventKind.STALE_CLEARED for event in result.events)


def test_a_forward_step_between_two_failed_passes_does_not_clear(slurm, wall):
    running = producer(slurm, WINDOW)
    assert running.run_pass().error is not None
    wall.offset += STEP
    second = running.run_pass()
    assert second.error is not None and not cleared(second)
    assert slurm.decision(1).read_text() == TASK1_DRAINED  # kept: Slurm is still unknown
    assert running.streak.failed_passes == 2 and running.streak.failing_for < WINDOW


def test_a_forward_step_across_a_restart_does_not_clear(slurm, wall):
    """The producer stops after a failed pass and starts again (``--once`` from cron, a
    restarted service) once the clock has stepped: the boot clock, read against the one
    its state file kept, spans the restart."""
    assert producer(slurm, WINDOW).run_pass().error is not None
    wall.offset += STEP
    restarted = producer(slurm, WINDOW)
    assert restarted.streak.failed_passes == 1  # the state file's streak goes on
    result = restarted.run_pass()
    assert result.error is not None and not cleared(result)
    assert slurm.decision(1).read_text() == TASK1_DRAINED


def test_passes_that_fail_for_the_window_on_the_boot_clock_clear_across_a_restart(slurm):
    """The counterpart: the window measured on the boot clock, across a restart, clears
    the producer's own decision (fail open), as ``--clear-after-failing`` promises."""
    window = 0.2
    assert producer(slurm, window).run_pass().error is not None
    time.sleep(2 * window)
    result = producer(slurm, window).run_pass()
    assert cleared(result)
    assert slurm.decision(1).read_bytes() == b""
