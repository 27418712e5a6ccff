"""Fixtures shared by the launcher's tests."""

from __future__ import annotations

import gc

import pytest


@pytest.fixture
def release_handlers():
    """Collect each test's handlers: their keep-alive timers hold only weak references.
    A module that builds real dynamic handlers uses it for every test (``pytestmark``)."""
    yield
    gc.collect()


@pytest.fixture
def shc(tmp_path):
    """An empty decision directory."""
    directory = tmp_path / "shc"
    directory.mkdir()
    return str(directory)
