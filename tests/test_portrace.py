"""``harness.jobs.portrace``: a whole job that torch's port race struck runs once more, visibly."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.jobs.portrace import clear_of_port_race, port_race_in
from harness.ports import PORT_TAKEN
from harness.session.summary import PORT_RACE

RACE = (
    "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
    f"network address. port: 51209, useIpv6: false, code: -98, name: {PORT_TAKEN}\n"
)


class Job:
    """An attempt that writes a launcher log per run; ``races`` says which runs the race
    strikes, ``fails`` which raise."""

    def __init__(self, races: tuple[int, ...], fails: tuple[int, ...] = ()) -> None:
        self.races, self.fails = races, fails
        self.folders: list[Path] = []

    def __call__(self, folder: Path) -> str:
        run = len(self.folders)
        self.folders.append(folder)
        (folder / "logs").mkdir()
        (folder / "logs" / "task0.proc0.log").write_text(RACE if run in self.races else "ok\n")
        if run in self.fails:
            raise TimeoutError(f"run {run}: the spares never waited")
        return f"result of run {run}"


def retried(request: pytest.FixtureRequest) -> list[object]:
    """The retries this test recorded, taken out of its report: the run's summary lists
    the retries of real jobs only."""
    properties = request.node.user_properties
    lines = [value for key, value in properties if key == PORT_RACE]
    properties[:] = [(key, value) for key, value in properties if key != PORT_RACE]
    return lines


def test_a_job_the_race_spared_runs_once(request, tmp_path):
    job = Job(races=())
    assert clear_of_port_race(request, tmp_path / "run", job) == "result of run 0"
    assert job.folders == [tmp_path / "run"]
    assert retried(request) == []


def test_a_job_the_race_struck_runs_again_in_a_new_folder_and_says_so(request, tmp_path):
    job = Job(races=(0,))
    assert clear_of_port_race(request, tmp_path / "run", job) == "result of run 1"
    assert job.folders == [tmp_path / "run", tmp_path / "run-again"]
    (line,) = retried(request)
    assert PORT_TAKEN in str(line) and str(tmp_path / "run") in str(line)
    assert port_race_in(tmp_path / "run") and not port_race_in(tmp_path / "run-again")


def test_a_job_that_failed_after_the_race_runs_again(request, tmp_path):
    job = Job(races=(0,), fails=(0,))
    assert clear_of_port_race(request, tmp_path / "run", job) == "result of run 1"
    assert len(retried(request)) == 1


def test_a_failure_without_the_race_is_the_tests_failure(request, tmp_path):
    job = Job(races=(), fails=(0,))
    with pytest.raises(TimeoutError, match="run 0"):
        clear_of_port_race(request, tmp_path / "run", job)
    assert len(job.folders) == 1 and retried(request) == []


def test_a_job_runs_at_most_twice_and_the_second_run_is_judged(request, tmp_path):
    struck_twice = Job(races=(0, 1))
    assert clear_of_port_race(request, tmp_path / "a", struck_twice) == "result of run 1"
    failing_again = Job(races=(0,), fails=(0, 1))
    with pytest.raises(TimeoutError, match="run 1"):
        clear_of_port_race(request, tmp_path / "b", failing_again)
    assert len(struck_twice.folders) == len(failing_again.folders) == 2
    assert len(retried(request)) == 2
