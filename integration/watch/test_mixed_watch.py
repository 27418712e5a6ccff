"""A launcher without the watch in a watched world, with real torchrun agents (:mod:`harness.jobs.watchjob`).

The review's job (finding 3): an ``nvrx-seghealth store-host``, ``--nnodes=2:2
--max-restarts=0``; task 0 runs with ``segment_health_check_watch_interval=0``, task 1 and
the spare, task 2, with ``1``; task 1 is marked while the world trains. On 95c00c4 task 1's
launcher waited 10 s in the watch's barrier for task 0, then restarted its workers alone:
task 0's agent saw a worker failure and ended the job, and every launcher exited 1, the
spare's too. Now the job ends as the same job with the watch nowhere: it trains on to its
end; task 1's process 0 excluded it and says, in one WARNING, that task 0 has no watch.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.jobs.watchjob import MARKED, Variant, run_job
from nvrx_seghealth import ExclusionReason
from nvrx_seghealth._demo.logtokens import Exclusion, exclusion
from nvrx_seghealth._logfmt import parse_fields

#: Long enough for the 10 s barrier that failed the job before, with a margin.
MIXED = Variant(
    "mixed",
    watch_interval=1,
    unwatched=(0,),
    units=(0, 1),
    spare=2,
    lagged=None,
    window=30,
)
NOWHERE = replace(MIXED, name="mixed-nowhere", watch_interval=0, unwatched=(), window=12)


def test_a_member_without_the_watch_leaves_the_job_training_as_without_the_watch(
    tmp_path: Path,
) -> None:
    nowhere = run_job(NOWHERE, tmp_path / "nowhere")
    mixed = run_job(MIXED, tmp_path / "mixed")
    tail = mixed.output_tail()
    assert mixed.returncodes == nowhere.returncodes, (tail, nowhere.output_tail())
    assert mixed.returncodes[0] == mixed.returncodes[MARKED] == 0, tail
    assert mixed.worlds() == nowhere.worlds() == [MIXED.units], tail
    assert [mixed.starts(task) for task in MIXED.tasks] == [1, 1, 0], tail
    assert {record.restart for record in mixed.formed()} == {"0"}, tail
    assert "watch-train done" in mixed.outputs[MARKED], tail
    assert mixed.markers == (str(MARKED),), tail
    assert exclusion(mixed.outputs[MARKED]) == Exclusion(ExclusionReason.DECISION_FILE, True)
    warned = [
        fields
        for fields in map(parse_fields, mixed.outputs[MARKED].splitlines())
        if "without_watch" in fields
    ]
    assert [(f["member_task_id"], f["member_watch_interval"]) for f in warned] == [("0", "0")]
