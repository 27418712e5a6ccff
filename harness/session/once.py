"""A value computed once per test session and shared by every test that needs it, across
pytest-xdist workers.

The configuration matrix runs plain c10d beside each cell, and c10d's job does not depend
on where the cell's store lives or whether its watch is on: ten such jobs answer 28 cells.
:func:`once_per_session` runs the first ``compute`` for a key while holding an exclusive
``flock`` on that key's lock file in the session's base folder (the parent of every
worker's ``basetemp``, or ``basetemp`` itself without xdist), stores its value there
(pickled), and hands the stored value to every later caller, which waits on the lock
while the first one computes. A ``compute`` that raises stores nothing: the next caller
computes again.

The folder is the test session's own (pytest creates it, mode 0700): a pickle from it is
this session's.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import pytest

__all__ = ["Shared", "once_per_session"]

T = TypeVar("T")


@dataclass(frozen=True)
class Shared(Generic[T]):
    """A value, and the node id of the test whose ``compute`` made it."""

    value: T
    computed_by: str


def _session_folder(request: pytest.FixtureRequest) -> Path:
    factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    base = factory.getbasetemp()
    folder = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    shared = folder / "shared-once"
    shared.mkdir(mode=0o700, exist_ok=True)
    return shared


def once_per_session(
    request: pytest.FixtureRequest, key: str, compute: Callable[[], T]
) -> Shared[T]:
    """The value of ``compute()`` for ``key``, computed by the first test of the session
    that asks and shared with every later one (see the module documentation).

    Raises:
        whatever ``compute`` raises (nothing is stored then).
    """
    folder = _session_folder(request)
    name = hashlib.sha256(key.encode()).hexdigest()[:24]
    stored = folder / f"{name}.pickle"
    with open(folder / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if stored.exists():
            with open(stored, "rb") as file:
                value, computed_by = pickle.load(file)
            return Shared(value, computed_by)
        value = compute()
        partial = stored.with_suffix(".partial")
        with open(partial, "wb") as file:
            pickle.dump((value, request.node.nodeid), file)
        partial.replace(stored)
        return Shared(value, request.node.nodeid)
