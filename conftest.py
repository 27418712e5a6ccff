"""The test tiers: every test is marked by what it needs, from where it lives.

``./dev test`` runs the fast tier, ``-m "not integration"``: unit tests with real files,
real torch stores and real in-process handlers, no whole job. ``./dev test-all`` (what CI
runs) runs everything. The markers come from :data:`TIERS`, one table, so a new test
gets its marks by the folder (or, for the few whole-job tests under ``tests/``, the file)
it is put in; a module may add more marks of its own.

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

from harness.session.schedule import heavy_first

ROOT = Path(__file__).resolve().parent

#: Fixtures that tests of more than one folder use (the etcd servers), from the harness.
pytest_plugins = ["harness.session.fixtures", "harness.session.summary"]

#: Path prefix (relative to the repository, ``/``-separated) -> marks. Every prefix that
#: matches a test's file applies.
TIERS: dict[str, tuple[str, ...]] = {
    # Whole jobs: real torchrun agents, Slurm, etcd, FUSE, other launchers.
    "integration/": ("integration", "torch"),
    "integration/slurm/": ("slurm", "serial"),
    "integration/etcd/": ("etcd",),
    "integration/hungmount/": ("hungmount",),
    "integration/launchers/": ("launchers",),
    # Whole jobs that live beside the unit tests they belong to.
    "tests/test_docs_runs.py": ("integration", "torch"),
    "tests/test_dev.py": ("integration", "serial"),
    "tests/commands/test_demo.py": ("integration", "torch"),
    "tests/commands/test_run.py": ("integration", "torch"),
    # Unit tests of what imports torch: what a second torch version must pass.
    "tests/launcher/": ("torch",),
    "tests/settings/": ("torch",),
    "tests/demo/": ("torch",),
    "tests/commands/test_store_host.py": ("torch",),
    "tests/commands/test_doctor.py": ("torch",),
    "tests/test_public_api.py": ("torch",),
    "tests/test_docs.py": ("torch",),
    "tests/test_docs_launchers.py": ("torch",),
    "tests/test_errors.py": ("torch",),
}


def marks_for(path: Path) -> list[str]:
    """The tier marks of a test file, from :data:`TIERS`."""
    relative = path.resolve().relative_to(ROOT).as_posix()
    marks: list[str] = []
    for prefix, names in TIERS.items():
        if relative.startswith(prefix):
            marks.extend(name for name in names if name not in marks)
    return marks


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark each test by its folder as it is collected (:data:`TIERS`)."""
    for name in marks_for(item.path):
        item.add_marker(name)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the selected tests (after ``-m`` deselected the others): the whole jobs
    (marked ``integration``) first in each xdist worker's share, the rest after them."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    items[:] = heavy_first(
        items, lambda item: item.get_closest_marker("integration") is not None, workers
    )
