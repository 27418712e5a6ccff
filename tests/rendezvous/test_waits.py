"""A store's blocking wait on a real TCPStore: it ends on its keys, on its timeout, and at
once on a signal handler's exception (torch's agent raises one on SIGTERM)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from torch.distributed import TCPStore
from torch.distributed.elastic.multiprocessing.api import SignalException

from harness.rendezvous import tcp_client
from harness.torchsignal import sigterm_after
from nvrx_seghealth._rendezvous.waits import wait_for

#: A wait no test should reach the end of: a signal or a key ends it long before.
LONG = 120.0


@pytest.fixture
def master() -> Iterator[TCPStore]:
    yield TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, use_libuv=True)


def test_keys_that_exist_end_the_wait(master) -> None:
    master.set("a", "1")
    master.set("b", "1")
    assert wait_for(tcp_client(master), ["a", "b"], LONG)


def test_a_timeout_returns_false_and_the_client_goes_on(master) -> None:
    client = tcp_client(master)
    master.set("a", "1")
    assert not wait_for(client, ["a", "missing"], 0.2)
    assert client.get("a") == b"1"


def test_a_key_set_later_ends_the_wait_of_another_thread(master) -> None:
    client = tcp_client(master)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(wait_for, client, ["late"], LONG)
        master.set("late", "1")
        assert waiting.result(timeout=LONG)


def test_a_sigterm_ends_the_main_threads_wait_with_torchs_exception(master) -> None:
    """The wait would last 120 s; torch's handler's exception, sent after 0.2 s, leaves it
    before half of that. The key set afterwards ends the store's own wait in its thread."""
    started = time.monotonic()
    try:
        with sigterm_after(0.2), pytest.raises(SignalException) as raised:
            wait_for(tcp_client(master), ["never"], LONG)
    finally:
        master.set("never", "1")
    assert raised.value.sigval == signal.SIGTERM
    assert time.monotonic() - started < LONG / 2
