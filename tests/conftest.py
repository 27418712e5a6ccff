"""Shared fixtures: real torch stores on 127.0.0.1."""

from __future__ import annotations

import datetime
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


@pytest.fixture
def tcp_store():
    """A real TCPStore server on 127.0.0.1 (any free port); yields the master store."""
    from torch.distributed import TCPStore

    store = TCPStore(
        "127.0.0.1",
        0,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=30),
    )
    yield store
    del store
