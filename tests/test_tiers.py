"""The test tiers: a folder is a tier, every whole job is on the written list, the tiers
stay within their written budgets, and a run says what ran (its closing line, each tier's
coverage)."""

from __future__ import annotations

import re

import pytest
from coverage import CoverageData

from conftest import ROOT, TIERS, marks_for
from harness.docs import ci_commands, section
from harness.session.summary import OUTCOMES, closing_line
from harness.session.tiercoverage import redundant, tiers

SCENARIOS = section("docs/contributing.md", "Whole-job scenarios")
BUDGETS = section("docs/contributing.md", "Budgets")
#: The test code, weighed against the package: the tiers and what serves them.
TEST_CODE = ("tests", "integration", "harness", "conftest.py")


def test_tiers_lists_folders_only():
    for folder in TIERS:
        assert folder.endswith("/") and (ROOT / folder).is_dir(), folder


def test_no_unit_test_is_a_whole_job():
    for path in (ROOT / "tests").rglob("test_*.py"):
        assert "integration" not in marks_for(path), path
        if path.name != "test_tiers.py":  # this file names the mark
            assert "mark.integration" not in path.read_text(), path


def test_no_unit_test_is_serial():
    # ./dev test runs no serial part; conftest.py refuses such a test when it is collected.
    for path in (ROOT / "tests").rglob("test_*.py"):
        assert "serial" not in marks_for(path), path
        if path.name != "test_tiers.py":  # this file names the mark
            assert "mark.serial" not in path.read_text(), path


def test_every_whole_job_test_is_on_the_written_list():
    listed = set(re.findall(r"`(integration/[\w/]+\.py)`", SCENARIOS))
    found = {p.relative_to(ROOT).as_posix() for p in (ROOT / "integration").rglob("test_*.py")}
    assert found - listed == set(), "add each to a row of docs/contributing.md"
    assert listed - found == set(), "the list names files that are gone"


def budget(figure: str) -> float:
    """The budget of the row of docs/contributing.md's "Budgets" table that names
    ``figure`` first: the number of its second cell."""
    rows = [line.split("|")[1:3] for line in BUDGETS.splitlines() if line.startswith("| ")]
    (cell,) = [limit for name, limit in rows if figure in name]
    return float(re.sub(r"[^\d.]", "", cell))


def lines_of(*names: str) -> int:
    """The lines of the Python files under each of ``names`` (a folder or a file)."""
    total = 0
    for name in names:
        path = ROOT / name
        files = [path] if path.is_file() else path.rglob("*.py")
        total += sum(len(f.read_text().splitlines()) for f in files)
    return total


def test_ci_fails_under_the_written_coverage_floor_of_the_fast_tier():
    floors = re.findall(r"--fail-under=(\d+)", "\n".join(ci_commands()))
    assert [float(f) for f in floors] == [budget("branch coverage")]


def test_the_whole_job_tier_stays_within_its_budget():
    """The whole jobs are the slow tier: a new one replaces one, or raises the budget in
    docs/contributing.md with its reason."""
    files = len(list((ROOT / "integration").rglob("test_*.py")))
    assert files <= budget("whole-job test files"), files
    lines = lines_of("integration")
    assert lines <= budget("lines of `integration/`"), lines


def test_the_test_code_stays_within_its_weight_against_the_package():
    weight = lines_of(*TEST_CODE) / lines_of("nvrx_seghealth")
    assert weight <= budget("test code per package line"), f"{weight:.2f}"


def counts(exit: int, **given: int) -> dict[str, int]:
    return {**dict.fromkeys(OUTCOMES, 0), **given, "exit": exit}


def test_the_closing_line_gives_each_part_then_the_verdict():
    line = closing_line(
        "./dev test",
        {
            "xdist": counts(0, passed=900, skipped=3, deselected=40),
            "serial": counts(5, deselected=943),
        },
    )
    assert line == (
        "./dev test: 900 passed, 0 failed, 3 skipped (xdist part 900 passed, 3 skipped, "
        "40 deselected; serial part 943 deselected): PASS"
    )


@pytest.mark.parametrize(
    "xdist,serial",
    [
        (counts(1, passed=9, failed=1), counts(0, passed=2)),
        (counts(0, passed=9), counts(1, error=1)),
        (counts(5), counts(5)),  # nothing ran
        (counts(0, passed=9), counts(-1)),  # a part that did not finish
    ],
)
def test_a_failed_or_missing_part_fails_the_run(xdist, serial):
    assert closing_line("./dev test-all", {"xdist": xdist, "serial": serial}).endswith(": FAIL")


def test_a_whole_job_whose_lines_a_unit_test_runs_is_named(tmp_path):
    data = CoverageData(str(tmp_path / ".coverage"))
    for context, lines in [
        ("", [1]),  # at import
        ("tests/test_a.py::test_one|run", [2, 3]),
        ("integration/test_b.py::test_same|run", [1, 2]),
        ("integration/test_b.py::test_same", [3]),  # in a process the test started
        ("integration/test_b.py::test_more|run", [2, 4]),
    ]:
        data.set_context(context)
        data.add_lines({"/pkg/mod.py": lines})
    data.write()

    assert tiers(data) == ["integration", "tests"]
    assert redundant(data) == ["integration/test_b.py::test_same"]
