"""The fixtures of the tests marked ``hungmount``: a real hung FUSE mount per test
(:func:`harness.services.fuse.hung_mount`: a ``stat`` of the mount point answers, one of any name
below it blocks in the kernel, as on a hung Lustre or NFS client), or a slow one
(:func:`harness.services.fuse.slow_mount`: each request answers late, until the test makes it
hang). Teardown always aborts the mount's own FUSE connection, which releases whatever
a test left stuck.

Needs ``/dev/fuse``, Debian's ``fuse3``, the ``mfusepy`` binding and root; without them
the tests skip and say why, and with ``CI=true`` they fail instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.services import fuse
from harness.services.fuse import HungMount


@pytest.fixture
def hung_mount(tmp_path: Path) -> Iterator[HungMount]:
    """A fresh hung FUSE mount for one test; its connection is aborted at teardown."""
    yield from fuse.hung_mount(tmp_path)


@pytest.fixture
def hung_listing(tmp_path: Path) -> Iterator[HungMount]:
    """Like ``hung_mount``, but the root lists :data:`~harness.services.fuse.LISTED` decision files
    of job 42, whose stats hang: a directory that lists but whose files do not answer."""
    yield from fuse.hung_mount(tmp_path, "--listing", str(fuse.LISTED))


@pytest.fixture
def slow_mount(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[HungMount]:
    """A fresh slow FUSE mount for one test, each request answered ``request.param``
    seconds late (``@pytest.mark.parametrize("slow_mount", [SECONDS], indirect=True)``);
    the decision files live in its ``backing`` folder."""
    yield from fuse.slow_mount(tmp_path, request.param)
