"""A unit test's setting of the shared agent store and of torch's rank exchange stays in it (the fixtures that tests of
more than one folder share, ``tcp_store`` among them: :mod:`harness.session.fixtures`)."""

from __future__ import annotations

import os

import pytest

#: Set by the handler in its own process: the workers' store, torch's rank exchange.
SET_BY_THE_HANDLER = ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "TORCH_ELASTIC_WORKER_IDENTICAL")


@pytest.fixture(autouse=True)
def _handler_settings_stay_in_their_test():
    """What a test's handler set in ``os.environ`` does not reach the next test."""
    before = {name: os.environ.get(name) for name in SET_BY_THE_HANDLER}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
