"""One pass of the producer (:class:`~nvrx_seghealth._producer.publisher.DrainedPublisher`)
against a fake Slurm: what it writes, and what it trusts.

The fake Slurm (``harness/services/fakeslurm.py``) is shell scripts put first on PATH; the
decisions are real files, and an operator's ``mark`` is the real command. The command
around the passes (its options, its output, its signals) is tested in
``tests/commands/test_publish_drained.py``.
"""

from __future__ import annotations

import pytest

from harness.commands import nvrx_seghealth
from harness.services.fakeslurm import NODES, PRODUCER, TASK1_DRAINED, FakeSlurm
from nvrx_seghealth._decision import decision_file
from nvrx_seghealth._decision.unit import validate_id
from nvrx_seghealth._producer.audit import EventKind
from nvrx_seghealth._producer.publisher import DrainedPublisher, producer_tag
from nvrx_seghealth._producer.slurm import SlurmClient

TAG = producer_tag(PRODUCER)
MARK = "ops: bad psu (ticket 7)\n"


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    fake = FakeSlurm(tmp_path)
    monkeypatch.setenv("PATH", fake.env["PATH"])
    return fake


def publisher(slurm, before_write):
    return DrainedPublisher(
        str(slurm.shc),
        validate_id("--job-id", "500"),
        ("drain",),
        SlurmClient(10.0),
        producer_id="t1",
        before_write=before_write,
    )


def mark_in_the_window(slurm, task):
    """A ``before_write`` hook: while the producer waits between its read and its
    write of ``task``'s decision, run a real ``nvrx-seghealth mark`` to its end."""
    held = []

    def hook(path):
        if path == str(slurm.decision(task)):
            done = nvrx_seghealth(
                "mark",
                "--dir",
                str(slurm.shc),
                "--job-id",
                "500",
                "--task-id",
                str(task),
                "--reason",
                MARK.strip(),
            )
            assert done.returncode == 0, done.stderr
            held.append(path)

    return hook, held


@pytest.mark.parametrize(
    "before,sinfo,intended",
    [
        (None, NODES, "published"),  # absent -> publish
        (f"{TAG} unavailable nodes: n3 drng (old)\n", NODES, "updated"),  # ours -> rewrite
        (f"{TAG} unavailable nodes: n3 drng (x)\n", NODES.replace("drng", "alloc"), "cleared"),
    ],
)
def test_a_mark_landing_between_read_and_write_survives(slurm, before, sinfo, intended):
    if before is not None:
        slurm.decision(1).write_text(before)
    slurm.answer("sinfo", sinfo)
    hook, held = mark_in_the_window(slurm, 1)
    result = publisher(slurm, hook).run_pass()
    assert held, "the window was not reached"
    assert slurm.decision(1).read_text() == MARK
    [event] = [e for e in result.events if e.task_id == "1"]
    assert (event.kind, event.intended, event.found) == (
        EventKind.CONFLICT,
        EventKind(intended),
        MARK.strip(),
    )
    assert result.ok
    # the next pass sees the operator's decision and leaves it alone
    again = publisher(slurm, None).run_pass()
    assert slurm.decision(1).read_text() == MARK
    assert [e for e in again.events if e.task_id == "1"] == []


def test_a_pass_trusts_the_ids_and_the_directory_it_was_given(slurm, monkeypatch):
    """The producer's ids are ``SlurmId`` s and its directory was validated by the command:
    no pass validates them again for each task (counted: the validators behind
    ``decision_file_path``)."""
    calls = []
    for name in ("validate_id", "require_absolute_directory"):
        real = getattr(decision_file, name)

        def counted(*args, real=real, name=name):
            calls.append(name)
            return real(*args)

        monkeypatch.setattr(decision_file, name, counted)
    producer = DrainedPublisher(
        str(slurm.shc), validate_id("--job-id", "500"), ("drain",), SlurmClient(10.0),
        producer_id=PRODUCER, passes={"drain": 1},
    )  # fmt: skip
    for _ in range(2):
        result = producer.run_pass()
        assert result.error is None and result.running == 3
    assert slurm.decision(1).read_text() == TASK1_DRAINED
    assert calls == []


def test_a_replica_that_wrote_the_same_decision_meanwhile_is_no_conflict(slurm):
    """Two producers with one ``--producer-id`` (replicas): the other's pass, a real
    ``publish-drained --once``, writes the identical decision between this pass's read
    and its write. The file already holds what this pass wanted: nothing to report."""
    ran: list[str] = []

    def replica(path):
        if path == str(slurm.decision(1)) and not ran:
            done = slurm.run("--once")
            assert done.returncode == 0, done.stderr
            ran.append(path)

    result = publisher(slurm, replica).run_pass()
    assert ran, "the window was not reached"
    assert slurm.decision(1).read_text() == TASK1_DRAINED
    assert [e for e in result.events if e.task_id == "1"] == []
    assert result.ok and result.unchanged == 3
