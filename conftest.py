"""The test tiers: every test is marked by what it needs, from where it lives.

``./dev test`` runs the fast tier, ``-m "not integration"``: unit tests with real files,
real torch stores and real in-process handlers, no whole job. ``./dev test-all`` (what CI
runs) runs everything. The markers come from :data:`TIERS`, one table, so a new test
gets its marks by the folder (or, for the few whole-job tests under ``tests/``, the file)
it is put in; a module may add more marks of its own.

Tests that share something machine-wide (:data:`SHARED_FIXTURES`) run in one
``pytest-xdist`` worker per mark (``xdist_group``): ``--dist loadgroup`` keeps them
together while other tests run beside them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent

#: Path prefix (relative to the repository, ``/``-separated) -> marks. Every prefix that
#: matches a test's file applies.
TIERS: dict[str, tuple[str, ...]] = {
    # Whole jobs: real torchrun agents, Slurm, etcd, FUSE, other launchers.
    "integration/": ("integration", "torch"),
    "integration/slurm/": ("slurm",),
    "integration/etcd/": ("etcd",),
    "integration/hungmount/": ("hungmount",),
    "integration/launchers/": ("launchers",),
    # Whole jobs that live beside the unit tests they belong to.
    "tests/test_readme.py": ("integration", "torch"),
    "tests/test_dev.py": ("integration", "cpu_hogs"),
    "tests/commands/test_demo.py": ("integration", "torch"),
    "tests/commands/test_run.py": ("integration", "torch"),
    # Unit tests of what imports torch: what a second torch version must pass.
    "tests/launcher/": ("torch",),
    "tests/settings/": ("torch",),
    "tests/demo/": ("torch",),
    "tests/commands/test_store_host.py": ("torch",),
    "tests/commands/test_doctor.py": ("torch",),
    "tests/test_public_api.py": ("torch",),
    "tests/test_errors.py": ("torch",),
}

#: Marks whose tests share something machine-wide (the private Slurm cluster, the etcd
#: server, the count of ``./dev loaded-test``'s CPU hogs): one xdist worker each.
SHARED_FIXTURES = ("slurm", "etcd", "cpu_hogs")


def marks_for(path: Path) -> list[str]:
    """The tier marks of a test file, from :data:`TIERS`."""
    relative = path.resolve().relative_to(ROOT).as_posix()
    marks: list[str] = []
    for prefix, names in TIERS.items():
        if relative.startswith(prefix):
            marks.extend(name for name in names if name not in marks)
    return marks


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for name in marks_for(item.path):
            item.add_marker(name)
        for name in SHARED_FIXTURES:
            if item.get_closest_marker(name) is not None:
                item.add_marker(pytest.mark.xdist_group(name))
                break
