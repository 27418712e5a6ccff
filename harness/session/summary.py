"""The end of a test run: what the whole-job tests recorded, listed once, by kind.

A whole-job test records a line per fact worth seeing after the run, as a *user property*
of its test item (``request.node.user_properties``): :data:`SIMULATED_JOB` (each simulated
job: its duration, rounds and final world), :data:`MATRIX` (each configuration-matrix
cell beside plain c10d), :data:`SIGTERM_EXIT` (each launcher told to stop, beside
c10d's) and :data:`PORT_RACE` (each job run once more after torch's port race,
:mod:`harness.jobs.portrace`). Reports carry user properties from pytest-xdist's workers
to the controller, so :func:`pytest_terminal_summary` lists them whether or not the tests
ran in workers.
Registered by the root ``conftest.py``.
"""

from __future__ import annotations

import pytest

__all__ = [
    "MATRIX",
    "PORT_RACE",
    "SECTIONS",
    "SIGTERM_EXIT",
    "SIMULATED_JOB",
    "pytest_terminal_summary",
]

SIMULATED_JOB = "simulated job"
MATRIX = "matrix"
SIGTERM_EXIT = "sigterm_exit_seconds"
PORT_RACE = "port race"
#: The sections of the summary: (user property, title), in order.
SECTIONS = (
    (SIMULATED_JOB, "simulated jobs: duration and rendezvous rounds"),
    (MATRIX, "configuration matrix: each cell beside plain c10d"),
    (SIGTERM_EXIT, "SIGTERM: exit seconds beside plain c10d"),
    (PORT_RACE, "whole jobs run once more: torch's port race struck them"),
)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """List the recorded lines of every test that ran, one section per kind."""
    reports = [
        report
        for outcome in ("passed", "failed", "error")
        for report in terminalreporter.stats.get(outcome, [])
        if getattr(report, "when", None) == "call"
    ]
    for name, title in SECTIONS:
        lines = sorted(
            {
                str(value)
                for report in reports
                for key, value in report.user_properties
                if key == name
            }
        )
        if lines:
            terminalreporter.section(title)
            for line in lines:
                terminalreporter.write_line(line)
