"""The end of a test run: what the whole-job tests recorded, listed once, by kind.

A whole-job test records a line per fact worth seeing after the run, as a *user property*
of its test item (``request.node.user_properties``): :data:`SIMULATED_JOB` (each simulated
job: its duration, rounds and final world), :data:`MATRIX` (each configuration-matrix
cell beside plain c10d), :data:`SIGTERM_EXIT` (each launcher told to stop, beside
c10d's) and :data:`PORT_RACE` (each job run once more after torch's port race,
``harness.jobs.portrace``). Reports carry user properties from pytest-xdist's workers to the
controller, so :func:`pytest_terminal_summary` lists them whether or not the tests ran in
workers. Registered by the root ``conftest.py``.

``./dev`` runs a suite in two parts (xdist workers, and the ``serial`` tests beside them):
each part writes its counts to the file that :data:`COUNTS_ENV` names, and
``python -m harness.session.summary`` reads them and prints the run's one closing line
(:func:`closing_line`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

__all__ = [
    "COUNTS_ENV",
    "MATRIX",
    "PORT_RACE",
    "SECTIONS",
    "SIGTERM_EXIT",
    "SIMULATED_JOB",
    "closing_line",
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


#: The environment variable naming the file a run writes its counts to (JSON).
COUNTS_ENV = "NVRX_SEGHEALTH_COUNTS"
#: The outcomes counted, in the order the closing line gives them.
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "deselected")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    """List the recorded lines of every test that ran, one section per kind; write the
    run's counts where :data:`COUNTS_ENV` says."""
    target = os.environ.get(COUNTS_ENV)
    if target:
        counts = {name: len(terminalreporter.stats.get(name, [])) for name in OUTCOMES}
        Path(target).write_text(json.dumps({**counts, "exit": int(exitstatus)}))
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


def closing_line(label: str, parts: dict[str, dict[str, int]]) -> str:
    """One line for a run of several parts: the totals, each part's counts, then PASS or
    FAIL. A part passes when pytest exited 0, or 5 (none selected) while another ran."""
    ran = any(part["passed"] + part["failed"] + part["error"] for part in parts.values())

    def said(counts: dict[str, int]) -> str:
        shown = [f"{counts[name]} {name}" for name in OUTCOMES if counts[name]]
        return ", ".join(shown) or "nothing selected"

    totals = {name: sum(part[name] for part in parts.values()) for name in OUTCOMES}
    failed = any(part["exit"] not in (0, 5) for part in parts.values()) or not ran
    each = "; ".join(f"{name} part {said(part)}" for name, part in parts.items())
    return (
        f"{label}: {totals['passed']} passed, {totals['failed'] + totals['error']} failed, "
        f"{totals['skipped']} skipped ({each}): {'FAIL' if failed else 'PASS'}"
    )


def main(argv: list[str]) -> int:
    """``python -m harness.session.summary LABEL NAME=COUNTS.json...``: print :func:`closing_line`;
    a part whose file is missing (its pytest did not finish) fails the run."""
    label, *given = argv
    parts = {}
    for pair in given:
        name, _, path = pair.partition("=")
        try:
            parts[name] = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            parts[name] = {**dict.fromkeys(OUTCOMES, 0), "exit": -1}
    print(closing_line(label, parts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
