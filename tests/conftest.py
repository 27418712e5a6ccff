"""Shared fixtures: real torch stores on 127.0.0.1."""

from __future__ import annotations

import datetime

import pytest


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
