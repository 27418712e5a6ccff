"""Helpers shared by the unit and integration tests (fixtures live in conftest.py)."""

from __future__ import annotations

import datetime
import socket
import threading
import time
from collections import Counter


def slurm_env(
    task: int | None = None, procid: int = 0, *, array_job: int = 1000, job: int | None = None
) -> dict[str, str]:
    """A Slurm-like environment: an array task when ``task`` is given, else a regular job."""
    env = {"SLURM_PROCID": str(procid)}
    if task is None:
        env["SLURM_JOB_ID"] = str(job if job is not None else array_job)
    else:
        env["SLURM_ARRAY_JOB_ID"] = str(array_job)
        env["SLURM_ARRAY_TASK_ID"] = str(task)
        env["SLURM_JOB_ID"] = str(job if job is not None else array_job + 1 + task)
    return env


def exclusion_tokens(
    job_id: str, task_id: str, reason: str = "decision-file", *, after_joining: bool = False
) -> str:
    """The stable tokens an exclusion's ERROR line carries (``reason=... job_id=...``)."""
    from nvrx_seghealth import ExclusionReason, UnhealthyNodeException
    from nvrx_seghealth._logfmt import format_fields

    error = UnhealthyNodeException(
        "",
        job_id=job_id,
        task_id=task_id,
        reason=ExclusionReason(reason),
        after_joining=after_joining,
    )
    return format_fields(error.fields())


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (free when this returns)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def tcp_client(master) -> object:
    """A new client connection to ``master``'s TCPStore server."""
    from torch.distributed import TCPStore

    return TCPStore(
        "127.0.0.1", master.port, is_master=False, timeout=datetime.timedelta(seconds=30)
    )


class Join:
    """``next_rendezvous()`` of one handler on its own thread; keeps the outcome."""

    def __init__(self, handler):
        self.handler = handler
        self.result = None
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.result = self.handler.next_rendezvous()
        except BaseException as error:  # noqa: BLE001  (inspected by the test)
            self.error = error

    def wait(self, timeout=60):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "next_rendezvous() did not return"
        return self


def join_all(handlers, timeout=60):
    """Start ``next_rendezvous()`` on every handler at once; wait for all of them."""
    joins = [Join(h) for h in handlers]
    return [j.wait(timeout) for j in joins]


def wait_until(predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def publish_concurrently(store_for_thread, run_id: str, array_job_id: str, groups):
    """Publish one marker per group, each from its own thread with its own store client.

    ``store_for_thread()`` returns a new client. All threads start publishing together;
    returns the errors raised (none expected).
    """
    from nvrx_seghealth._launcher.markers import ReplacementGroupMarkers

    barrier = threading.Barrier(len(groups))
    errors = []

    def publish(group):
        try:
            markers = ReplacementGroupMarkers(store_for_thread(), run_id, array_job_id)
            barrier.wait(timeout=60)
            markers.publish(group, f"detail {group}")
        except Exception as error:  # noqa: BLE001  (returned to the test)
            errors.append(error)

    threads = [threading.Thread(target=publish, args=(g,)) for g in groups]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return errors


def require_root(reason: str) -> None:
    """Skip unless running as root, and fail instead under ``CI=true`` (CI runs as root,
    so a test that needs it must run there): ``reason`` says what root is needed for."""
    import os

    import pytest

    if os.geteuid() == 0:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true runs as root: {reason}", pytrace=False)
    pytest.skip(reason)


class CountingStore:
    """Forwards to a real store and counts the calls by method (``calls``)."""

    def __init__(self, store) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name):
        method = getattr(self._store, name)

        def counted(*args, **kwargs):
            self.calls[name] += 1
            return method(*args, **kwargs)

        return counted
