"""``nvrx-seghealth demo``: a reused log folder is refused, never read as this run's;
``--compare`` shows what the gate saves."""

from __future__ import annotations

import json

from .runner import nvrx_seghealth


def test_the_demo_twice_into_one_folder_refuses_the_second_run(tmp_path):
    folder = tmp_path / "logs"
    first = nvrx_seghealth("demo", "--keep-logs", str(folder), timeout=240)
    assert first.returncode == 0, first.stdout + first.stderr
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    second = nvrx_seghealth("demo", "--keep-logs", str(folder), timeout=60)
    assert second.returncode == 2 and "--keep-logs" in second.stderr
    assert "Outcome" not in second.stdout  # no report from the first run's files
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before  # untouched


def test_a_file_in_place_of_the_folder_is_refused_and_left_alone(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    refused = nvrx_seghealth("demo", "--keep-logs", str(tmp_path / "file"), timeout=60)
    assert refused.returncode == 2 and "--keep-logs" in refused.stderr
    assert (tmp_path / "file").read_text() == "not a folder"


def test_compare_shows_what_the_gate_saves(tmp_path):
    """The same job ungated (plain c10d) and gated: the marked task's failing node costs
    the ungated job a round the gated job never runs; the exit code is the gated run's."""
    folder = tmp_path / "compare"
    run = nvrx_seghealth("demo", "--compare", "--keep-logs", str(folder), timeout=400)
    assert run.returncode == 0, run.stdout + run.stderr
    numbers = json.loads((folder / "comparison.json").read_text())
    ungated, gated = numbers["ungated"], numbers["gated"]
    assert (ungated["backend"], gated["backend"]) == ("c10d", "segment-health")
    # Gated: task 1 never trains; one round, completed, by tasks 0 and 2.
    assert gated["rounds"] == 1 and gated["completed"]
    assert gated["trained"] == {"0": {"tasks": [0, 2], "state": "completed"}}
    # Ungated: task 1 is in the first round, which is lost with its node (before or after
    # every worker of that world started: on a loaded machine its node may fail first).
    first = ungated["trained"]["0"]
    assert 1 in first["tasks"] and first["state"] in ("failed", "not-formed")
    assert ungated["rounds"] >= 2 and numbers["rounds_saved"] == ungated["rounds"] - 1
    assert 1 not in ungated["trained"][str(ungated["rounds"] - 1)]["tasks"]
    if ungated["completed"]:
        assert (
            numbers["seconds_saved"]
            == ungated["time_to_healthy_world"] - gated["time_to_healthy_world"]
        )
        assert numbers["seconds_saved"] > 0
    # Both timelines list every launcher; the gated one shows the recorded exclusion.
    ungated_timeline, gated_timeline = (
        run.stdout.split("Timeline, ungated")[1].split("Timeline, gated")[0],
        run.stdout.split("Timeline, gated")[1].split("Segment-health decisions")[0],
    )
    labels = [f"task{t}.proc{p}" for t in range(3) for p in range(2)]
    for timeline in (ungated_timeline, gated_timeline):
        assert [line.split()[0] for line in timeline.splitlines()[2:8]] == labels
    (task1,) = [line for line in gated_timeline.splitlines() if line.startswith("  task1.proc0")]
    assert "(decision-file)" in task1 and "excluded" not in ungated_timeline
    assert '"name": "nvrx_seghealth.excluded"' in run.stdout
    assert (folder / "gated" / "telemetry" / "task1.proc0.events.jsonl").exists()
