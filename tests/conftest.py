"""A unit test's setting of the shared agent store stays in it (the fixtures that tests of
more than one folder share, ``tcp_store`` among them: :mod:`harness.session.fixtures`)."""

from __future__ import annotations

import os

import pytest

#: Set by the backend in its own process when the store is outside the launchers.
SHARED_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


@pytest.fixture(autouse=True)
def _shared_store_setting_stays_in_its_test():
    """What a test's backend set in ``os.environ`` does not reach the next test."""
    before = os.environ.get(SHARED_STORE_ENV)
    yield
    if before is None:
        os.environ.pop(SHARED_STORE_ENV, None)
    else:
        os.environ[SHARED_STORE_ENV] = before
