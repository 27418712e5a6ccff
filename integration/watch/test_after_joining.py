"""A unit marked while it waits in the rendezvous, the watch off, with real torchrun agents.

The job of :func:`harness.jobs.watchjob.run_join_job`: ``--nnodes=1:2 --max-restarts=0``, the
watch off. Unit 1 joins first and waits for another unit (a long ``last_call_timeout``);
it is marked there, then unit 0 joins, and the round of the two forms at once. Unit 1's
process 0 looks again right after joining and leaves before its workers start.

On fa03698 unit 0 was not told: its worker waited in its process-group init for unit 1's
rank until the timeout (here 20 s) and failed; with no restart left, the job ended (exit
1). Now unit 1 tells the round as it leaves: unit 0's agent restarts its workers as a
membership change, and the job trains on without unit 1 to its end. Plain c10d beside it,
with store sharing off: unit 1 has no check and trains, and the job completes.

The launchers run as the README's torchrun line does: no ``TORCH_ELASTIC_WORKER_IDENTICAL``
in their environment. The handler sets it to 1 in its own process, so torch's agents skip
their rank exchange. Before af8b006, which sets it, unit 0's agent waited there for the
launcher that left until the store read timed out (60 s), and both launchers exited 1.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.jobs.watchjob import MARKED, Variant, run_join_job
from nvrx_seghealth import ExclusionReason
from nvrx_seghealth._demo.logtokens import Exclusion, exclusion
from nvrx_seghealth._logfmt import parse_fields

#: Unit 1 waits this long alone for unit 0, whose torchrun starts meanwhile (a few
#: seconds on two busy cores); unit 0 alone waits it again before its world of one.
LAST_CALL = 30.0
JOIN = Variant(
    "join-off",
    units=(0, MARKED),
    lagged=None,
    min_nodes=1,
    last_call=LAST_CALL,
    gloo_timeout=20,
    window=LAST_CALL + 90,
)
PLAIN = replace(JOIN, name="join-c10d", backend="c10d", sharing_off=True)


def test_a_unit_that_leaves_right_after_joining_is_trained_without(tmp_path: Path) -> None:
    plain = run_join_job(PLAIN, tmp_path / "c10d")
    tail = plain.output_tail()
    assert [plain.returncodes[t] for t in (0, MARKED)] == [0, 0], tail
    assert plain.worlds() == [(0, MARKED)], tail

    outcome = run_join_job(JOIN, tmp_path / "segment-health")
    tail = outcome.output_tail()
    assert not outcome.stopped, tail  # every launcher ended on its own
    assert [outcome.returncodes[t] for t in (0, MARKED)] == [0, 1], tail
    assert exclusion(outcome.outputs[MARKED]) == Exclusion(ExclusionReason.DECISION_FILE, True)
    assert outcome.markers == (str(MARKED),), tail
    assert outcome.worlds() == [(0,)], tail
    assert outcome.starts(0) == 1 and outcome.starts(MARKED) == 0, tail
    assert {record.restart for record in outcome.formed()} == {"0"}, tail  # no failure
    assert "watch-train done" in outcome.outputs[0], tail
    told = [
        fields
        for fields in map(parse_fields, outcome.outputs[0].splitlines())
        if fields.get("when") == "after-joining"
    ]
    assert [f["task_id"] for f in told] == [str(MARKED)], tail
