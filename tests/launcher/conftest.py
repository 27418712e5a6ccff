"""Fixtures shared by the launcher's tests."""

from __future__ import annotations

import gc

import pytest

from harness.rendezvous import coordinator


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


@pytest.fixture
def make_coordinator(tcp_store, shc):
    """Builds the coordinator of a launcher in a Slurm environment, as its handler would
    (:func:`harness.rendezvous.coordinator`: keyword arguments ``master``, ``directory``,
    and the settings); each one is stopped when the test ends."""
    built = []

    def make(env, *, master=tcp_store, directory=shc, **settings):
        role = coordinator(master, directory, env, **settings)
        built.append(role)
        return role

    yield make
    for role in built:
        if role is not None:
            role.stop()
