"""The helper-process client on its own, with an echo helper that can be made to hang
(``sleep``) or to die (``exit``) in the middle of a call."""

from __future__ import annotations

import time

import pytest

from nvrx_seghealth._helperprocess import HelperClient

ECHO = r"""
import os, sys, time
for line in sys.stdin.buffer:
    if line.startswith(b"sleep "):
        time.sleep(float(line.split()[1]))
    if line == b"exit\n":
        os._exit(3)
    os.write(1, line)
"""


class Late(Exception):
    def __init__(self, key: str, waited: float, earlier: bool) -> None:
        super().__init__(key, waited, earlier)
        self.key, self.waited, self.earlier = key, waited, earlier


@pytest.fixture
def client() -> HelperClient:
    return HelperClient("echo", ["-c", ECHO], "nvrx-seghealth-test-helper", Late)


def helper_pid(client: HelperClient) -> int:
    assert client._helper is not None
    return client._helper.process.pid


def test_replies_come_back_from_one_reused_helper(client):
    assert client.call("a", b"one\n", 5) == b"one"
    pid = helper_pid(client)
    assert client.call("b", b"two\n", 5) == b"two"
    assert helper_pid(client) == pid


def test_a_late_call_abandons_its_helper_and_holds_only_its_key(client):
    client.call("a", b"warm\n", 5)
    started = time.monotonic()
    with pytest.raises(Late) as late:
        client.call("a", b"sleep 1.5\n", 0.3)
    assert (late.value.key, late.value.earlier) == ("a", False)
    assert 0.3 <= late.value.waited < 1.5
    with pytest.raises(Late) as refused:
        client.call("a", b"x\n", 5)
    assert refused.value.earlier and time.monotonic() - started < 1.5
    assert client.call("b", b"other\n", 5) == b"other"  # a new helper, meanwhile
    deadline = time.monotonic() + 10
    while True:  # the abandoned helper's sleep ends, it exits, its reaper forgets it
        try:
            assert client.call("a", b"again\n", 5) == b"again"
            break
        except Late:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_a_helper_that_dies_in_a_call_is_an_oserror_and_is_replaced(client):
    client.call("a", b"warm\n", 5)
    dead = helper_pid(client)
    with pytest.raises(OSError, match="the echo helper process exited"):
        client.call("a", b"exit\n", 5)
    deadline = time.monotonic() + 10
    while True:  # refused only until the reaper has seen it exit
        try:
            assert client.call("a", b"back\n", 5) == b"back"
            break
        except Late:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert helper_pid(client) != dead
