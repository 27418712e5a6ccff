"""The test tiers: every test is marked by what it needs, from where it lives.

``./dev test`` runs the fast tier, ``-m "not integration"``: unit tests with real files,
real torch stores and real in-process handlers, no whole job. ``./dev test-all`` (what CI
runs) runs everything. The markers come from :data:`TIERS`, one table, so a new test
gets its marks by the folder it is put in: a folder is a tier. A module may add marks of
its own (``pytestmark``), never ``integration``.

Tests that share something machine-wide (the private Slurm cluster on its fixed ports,
the count of ``./dev loaded-test``'s CPU hogs) are marked ``serial``: ``./dev`` runs
them in one process of their own, beside ``pytest-xdist`` workers that run everything else.
The whole jobs run first, spread over those workers (:func:`harness.session.schedule.heavy_first`),
so that the run ends on short tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.session import coverage_startup
from harness.session.schedule import heavy_first

ROOT = Path(__file__).resolve().parent

#: Fixtures that tests of more than one folder use (the etcd servers), from the harness.
pytest_plugins = ["harness.session.fixtures", "harness.session.summary"]

#: Folder (relative to the repository, ``/``-separated, ending in ``/``) -> marks. Every
#: folder that holds a test's file applies; a module adds a mark of its own with
#: ``pytestmark``.
TIERS: dict[str, tuple[str, ...]] = {
    # Whole jobs: real torchrun agents, Slurm, etcd, FUSE, other launchers.
    "integration/": ("integration", "torch"),
    "integration/slurm/": ("slurm", "serial"),
    "integration/etcd/": ("etcd",),
    "integration/hungmount/": ("hungmount",),
    "integration/launchers/": ("launchers",),
    "integration/dev/": ("serial",),  # counts the CPU hogs of ./dev loaded-test
    # Unit tests of what imports torch: what a second torch version must pass.
    "tests/launcher/": ("torch",),
    "tests/rendezvous/": ("torch",),
    "tests/demo/": ("torch",),
}


def marks_for(path: Path) -> list[str]:
    """The tier marks of a test file, from :data:`TIERS`."""
    relative = path.resolve().relative_to(ROOT).as_posix()
    marks: list[str] = []
    for prefix, names in TIERS.items():
        if relative.startswith(prefix):
            marks.extend(name for name in names if name not in marks)
    return marks


#: Names the static coverage context of the processes a test starts ([tool.coverage.run]).
CONTEXT_ENV = "SEGHEALTH_TEST_CONTEXT"


@pytest.fixture(autouse=True)
def _measure_started_processes(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``--cov``, the Python processes this test starts measure themselves too (the
    ``.pth`` file coverage installs reads ``COVERAGE_PROCESS_START``), in the test's
    context: ``./dev`` reports each tier from the contexts of its tests. Their start-up
    pauses coverage while torch imports (:mod:`harness.session.coverage_startup`)."""
    if not request.config.getoption("cov_source", default=None):
        return
    monkeypatch.setenv("COVERAGE_PROCESS_START", str(ROOT / "pyproject.toml"))
    monkeypatch.setenv(CONTEXT_ENV, request.node.nodeid)
    path = [str(coverage_startup.FOLDER), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, path)))


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark each test by its folder as it is collected (:data:`TIERS`)."""
    for name in marks_for(item.path):
        item.add_marker(name)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the selected tests (after ``-m`` deselected the others): the whole jobs
    (marked ``integration``) first in each xdist worker's share, each share starting at
    another module, the rest after them.

    A test marked ``serial`` outside ``integration/`` is a usage error: the fast tier
    runs no serial part (``./dev``)."""
    misplaced = [
        item.nodeid
        for item in items
        if item.get_closest_marker("serial") and not item.get_closest_marker("integration")
    ]
    if misplaced:
        raise pytest.UsageError(
            f"{misplaced[0]} is marked serial outside integration/: ./dev test runs no "
            "serial part; move it to an integration/ folder"
        )
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    items[:] = heavy_first(
        items,
        lambda item: item.get_closest_marker("integration") is not None,
        workers,
        group=lambda item: item.path,
    )
