"""Decisions as TorchElastic events and metrics, recorded by real ``torchrun`` agents.

Each launcher's agent routes torch's rendezvous events and the ``nvrx_seghealth``
metrics to files through torch's own configuration (its events destination and
``metrics.configure``; ``nvrx_seghealth._demo.agent``), as an operator's launcher
would route them to a collector. One job of three array tasks for a world of two:
task 1 is marked (excluded), task 2's decision path is a directory (fail open), task 0
is healthy. Every launcher records exactly one event per decision, with torch's own
run id and node fields, and the metrics count what the events say.
"""

from __future__ import annotations

import os

from harness.jobs.simjob import JOB_TIMEOUT, report
from nvrx_seghealth._decision.decision_file import decision_file_path
from nvrx_seghealth._demo import JobSpec, SimulatedJob

#: The decisions of each launcher, in order: one event each, none per responder look.
EXPECTED = {
    "task0.proc0": ["installed", "proceed", "verdict_published"],
    "task0.proc1": ["verdict_waited"],
    "task1.proc0": ["installed", "excluded", "marker_published", "verdict_published"],
    "task1.proc1": ["verdict_waited", "excluded"],
    "task2.proc0": ["installed", "fail_open", "verdict_published"],
    "task2.proc1": ["verdict_waited"],
}


def test_each_decision_is_one_torch_event_with_its_metrics(request, tmp_path) -> None:
    spec = JobSpec(
        tasks=3,
        max_nodes=4,
        marked=frozenset({1}),
        # task 1's sibling ends on its own verdict, not by srun first.
        no_kill_on_bad_exit=frozenset({1}),
        steps=10,  # two seconds of training: ten looks of each process 0's responder
        record_telemetry=True,
    )
    job = SimulatedJob(spec, tmp_path)
    os.mkdir(decision_file_path(str(job.paths.decisions), str(spec.array_job_id), "2"))
    with job:
        result = report(request, "job", job.wait(timeout=JOB_TIMEOUT))

    assert result.completed and result.final_round is not None
    assert result.final_round.units == (0, 2) and result.round_count == 1
    decisions = {label: [e for e in o.events() if e.ours] for label, o in result.launchers.items()}
    assert {label: [e.decision for e in events] for label, events in decisions.items()} == EXPECTED

    for label, outcome in result.launchers.items():
        events = outcome.events()
        if outcome.unit != 1:  # the excluded task never reached torch's rendezvous
            assert any(not e.ours for e in events), f"{label}: torch's events not routed"
        # The node as torch's dynamic rendezvous names it in its own events.
        nodes = {(e.run_id, e.hostname, e.pid, e.local_id) for e in events}
        assert nodes == {(job.run_id, "127.0.0.1", outcome.pid, 0)}, label
        for event in decisions[label]:
            fields = event.fields
            assert (fields["job_id"], fields["task_id"]) == ("1000", str(outcome.unit))
            assert event.rank is None  # every decision here came before its round

    by_name = {label: {e.decision: e for e in events} for label, events in decisions.items()}
    excluded = by_name["task1.proc0"]["excluded"]
    assert excluded.node_state == "FAILED"
    assert excluded.fields["by"] == "decision-file"
    assert excluded.fields["path"] == str(result.decisions[1])
    assert excluded.fields["size"] == str(result.decisions[1].stat().st_size)
    assert by_name["task1.proc0"]["verdict_published"].fields["verdict"] == "excluded"
    assert by_name["task1.proc1"]["verdict_waited"].fields["verdict"] == "excluded"
    assert by_name["task1.proc1"]["excluded"].fields["by"] in ("marker", "verdict")
    fail_open = by_name["task2.proc0"]["fail_open"].fields
    assert (fail_open["reason"], fail_open["trigger"]) == ("not-a-regular-file", "attempt")
    assert by_name["task2.proc0"]["verdict_published"].fields["verdict"] == "unchecked"
    assert by_name["task2.proc1"]["verdict_waited"].fields["verdict"] == "unchecked"
    assert by_name["task0.proc0"]["proceed"].fields["outcome"] == "absent"
    assert by_name["task0.proc1"]["verdict_waited"].fields["verdict"] == "healthy"
    assert by_name["task1.proc0"]["installed"].node_state == "INIT"
    assert by_name["task1.proc0"]["installed"].fields["directory"] == str(result.paths.decisions)

    metrics = {
        label: sorted((m.group, m.name) for m in o.metrics())
        for label, o in result.launchers.items()
    }
    check = ("nvrx_seghealth", "check.duration.us")
    wait = ("nvrx_seghealth", "verdict_wait.duration.ms")
    excluded_metric = ("nvrx_seghealth", "excluded")
    assert metrics == {
        "task0.proc0": [check],
        "task0.proc1": [wait],
        "task1.proc0": [check, excluded_metric],
        "task1.proc1": [excluded_metric, wait],
        "task2.proc0": [check, ("nvrx_seghealth", "fail_open.not-a-regular-file")],
        "task2.proc1": [wait],
    }
    values = {
        (label, m.name): m.value for label, o in result.launchers.items() for m in o.metrics()
    }
    assert values[("task1.proc0", "excluded")] == values[("task1.proc1", "excluded")] == 1
    assert values[("task2.proc0", "fail_open.not-a-regular-file")] == 1
    for label, decision in (("task0.proc0", "proceed"), ("task2.proc0", "fail_open")):
        check_us = values[(label, "check.duration.us")]
        assert check_us == int(by_name[label][decision].fields["check_us"])
    for label in ("task0.proc0", "task1.proc0", "task2.proc0"):
        assert 0 <= values[(label, "check.duration.us")] < 10_000_000  # under the 10 s bound
    for label in ("task0.proc1", "task1.proc1", "task2.proc1"):
        waited = float(by_name[label]["verdict_waited"].fields["waited_s"])
        assert abs(values[(label, "verdict_wait.duration.ms")] - waited * 1000) <= 1
