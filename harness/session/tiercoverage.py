"""What each test tier covers of the package, read from a run's coverage data.

``./dev`` measures a run with one coverage context per test (pytest-cov's
``--cov-context=test`` in the pytest process, the test's id as the static context of the
processes it starts: ``conftest.py``), so a context's first folder is its tier. Lines run
at import, before any test, have the empty context and count for every tier.

``python -m harness.session.tiercoverage tiers DATA`` prints the tiers whose tests ran;
``python -m harness.session.tiercoverage redundant DATA`` prints the whole-job tests (under
``integration/``) each of whose covered lines a unit test (under ``tests/``) covers too:
each is either a scenario's proof that a unit test cannot give, or should move down.
"""

from __future__ import annotations

import sys
from collections import defaultdict

from coverage import CoverageData

__all__ = ["covered_lines", "main", "redundant", "tier_of", "tiers"]

UNIT, WHOLE_JOB = "tests", "integration"


def tier_of(context: str) -> str:
    """The tier of a context: the first folder of its test's id, ``""`` for import."""
    return context.split("/", 1)[0] if "/" in context else ""


def test_of(context: str) -> str:
    """The test's id of a context, without pytest-cov's ``|setup``, ``|run``, ``|teardown``."""
    return context.split("|", 1)[0]


def tiers(data: CoverageData) -> list[str]:
    """The tiers whose tests ran, sorted."""
    return sorted({tier_of(c) for c in data.measured_contexts()} - {""})


def covered_lines(data: CoverageData) -> dict[str, set[tuple[str, int]]]:
    """Each test's covered ``(file, line)`` pairs; the key ``""`` holds the lines run at
    import, before any test."""
    lines: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for path in data.measured_files():
        for line, contexts in data.contexts_by_lineno(path).items():
            for context in contexts:
                lines[test_of(context)].add((path, line))
    return lines


def redundant(data: CoverageData) -> list[str]:
    """The whole-job tests whose covered lines the unit tier (with import) covers too."""
    lines = covered_lines(data)
    unit = set(lines.get("", set()))
    for test, covered in lines.items():
        if tier_of(test) == UNIT:
            unit |= covered
    return sorted(
        test
        for test, covered in lines.items()
        if tier_of(test) == WHOLE_JOB and covered and covered <= unit
    )


def main(argv: list[str]) -> int:
    """``tiers DATA`` or ``redundant DATA``: see the module's docstring."""
    command, path = argv
    data = CoverageData(path)
    data.read()
    found = tiers(data) if command == "tiers" else redundant(data)
    print("\n".join(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
