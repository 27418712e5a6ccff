"""The etcd-v3 client sends each request once per attempt, proved at the socket.

A fake gateway on 127.0.0.1, a plain socket server, records every request with the number
of the connection it came on. It answers from a script: close without answering, a 503,
a 401 for a token the member no longer knows, a token fetch held open.

- Each attempt sends its request once; a forgotten token is fetched once, the call sent
  once more.
- Two threads that need a token at once fetch it once.
- A closed connection never opens again.

A real etcd cannot be made to do these on cue; what the client does against one is in
``integration/etcd/test_v3_client.py``.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest

from nvrx_seghealth._rendezvous.etcd_v3.client import EtcdClient
from nvrx_seghealth._rendezvous.etcd_v3.endpoints import Credentials, Endpoint
from nvrx_seghealth._rendezvous.etcd_v3.errors import UNAUTHENTICATED, EtcdRefused, EtcdUnavailable
from nvrx_seghealth._rendezvous.etcd_v3.transport import Transport

RANGE = "/v3/kv/range"
AUTH = "/v3/auth/authenticate"
HEADER = {"cluster_id": "7", "revision": "3"}
#: Seconds each request may take: a bound on a hang, never reached when all is well.
ATTEMPT = 30.0
#: Seconds a held answer waits for another request.
HOLD = 2.0


@dataclass(frozen=True)
class Reply:
    """One scripted answer: ``status`` and ``body``; ``status`` 0 closes without one.

    ``hold`` is seconds to wait, before answering, for one more request to arrive.
    """

    status: int = 200
    body: dict[str, Any] = field(default_factory=lambda: {"header": HEADER})
    hold: float = 0.0


CLOSE = Reply(0)
TOKEN_UNKNOWN = Reply(401, {"code": 16, "message": "etcdserver: invalid auth token"})


@dataclass(frozen=True)
class Request:
    """What the gateway received: its connection's number (from 1), path and token."""

    connection: int
    path: str
    token: str | None


class FakeGateway:
    """A socket server on 127.0.0.1 that answers each path from its own script.

    A path whose script ran out gets a 200 with a header.
    """

    def __init__(self, script: dict[str, list[Reply]]) -> None:
        self._script = {path: list(replies) for path, replies in script.items()}
        self._server = socket.create_server(("127.0.0.1", 0))
        self.endpoint = Endpoint("127.0.0.1", self._server.getsockname()[1])
        self.requests: list[Request] = []
        self._arrived = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)
        self._accept.start()

    def paths(self) -> list[tuple[int, str]]:
        """Each request's connection and path, in the order they arrived."""
        with self._arrived:
            return [(request.connection, request.path) for request in self.requests]

    def wait_for(self, count: int) -> None:
        """Return once ``count`` requests arrived."""
        with self._arrived:
            assert self._arrived.wait_for(lambda: len(self.requests) >= count, ATTEMPT)

    def _more_than(self, count: int) -> bool:
        return len(self.requests) > count

    def close(self) -> None:
        self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept; close() alone does not
        self._server.close()
        self._accept.join()
        for thread in self._threads:
            thread.join()

    def _serve(self) -> None:
        number = 0
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return  # closed
            number += 1
            thread = threading.Thread(
                target=self._answer_all, args=(connection, number), daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def _answer_all(self, connection: socket.socket, number: int) -> None:
        with connection, connection.makefile("rb") as stream:
            while True:
                request = _read_request(stream, number)
                if request is None:
                    return  # the client closed the connection
                with self._arrived:
                    self.requests.append(request)
                    seen = len(self.requests)
                    self._arrived.notify_all()
                    replies = self._script.get(request.path)
                    reply = replies.pop(0) if replies else Reply()
                    if reply.hold:
                        self._arrived.wait_for(partial(self._more_than, seen), reply.hold)
                if not reply.status:
                    connection.shutdown(socket.SHUT_RDWR)
                    return
                body = json.dumps(reply.body).encode()
                head = f"HTTP/1.1 {reply.status} X\r\nContent-Length: {len(body)}\r\n\r\n"
                connection.sendall(head.encode() + body)


def _read_request(stream: Any, number: int) -> Request | None:
    """One HTTP request from ``stream``; ``None`` at its end."""
    line = stream.readline()
    if not line:
        return None
    path = line.split()[1].decode()
    headers: dict[str, str] = {}
    while (header := stream.readline()) not in (b"\r\n", b""):
        name, _, value = header.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    stream.read(int(headers.get("content-length", 0)))
    return Request(number, path, headers.get("authorization"))


@contextmanager
def serving(script: dict[str, list[Reply]]) -> Iterator[FakeGateway]:
    """A fake gateway answering from ``script``, closed at the end."""
    fake = FakeGateway(script)
    try:
        yield fake
    finally:
        fake.close()


def client_of(gateway: FakeGateway, credentials: Credentials | None = None) -> EtcdClient:
    return EtcdClient([gateway.endpoint], attempt_timeout=ATTEMPT, credentials=credentials)


def test_a_member_that_closes_without_answering_was_sent_the_request_once():
    with serving({RANGE: [CLOSE]}) as gateway:
        with closing(client_of(gateway)) as client:
            with pytest.raises(EtcdUnavailable):
                client.range(b"k")
            assert gateway.paths() == [(1, RANGE)]
            client.range(b"k")  # the caller's next attempt: once more, on a new connection
        assert gateway.paths() == [(1, RANGE), (2, RANGE)]


def test_a_member_that_answers_503_was_sent_the_request_once():
    with serving(
        {RANGE: [Reply(503, {"code": 14, "message": "etcdserver: leader changed"})]}
    ) as gateway:
        with closing(client_of(gateway)) as client:
            with pytest.raises(EtcdUnavailable):
                client.range(b"k")
            assert gateway.paths() == [(1, RANGE)]
            client.range(b"k")
        assert gateway.paths() == [(1, RANGE), (2, RANGE)]


def test_a_token_the_member_forgot_is_fetched_once_and_the_call_sent_once_more():
    with serving(
        {
            AUTH: [
                Reply(body={"header": HEADER, "token": "t1"}),
                Reply(body={"header": HEADER, "token": "t2"}),
            ],
            RANGE: [TOKEN_UNKNOWN],
        }
    ) as gateway:
        with closing(client_of(gateway, Credentials("alice", "secret"))) as client:
            client.range(b"k")
        assert [(r.path, r.token) for r in gateway.requests] == [
            (AUTH, None),
            (RANGE, "t1"),
            (AUTH, None),
            (RANGE, "t2"),
        ]


def test_a_token_refused_twice_ends_the_call_after_two_sends():
    with (
        serving({RANGE: [TOKEN_UNKNOWN, TOKEN_UNKNOWN]}) as gateway,
        closing(client_of(gateway, Credentials("alice", "secret"))) as client,
        pytest.raises(EtcdRefused) as raised,
    ):
        client.range(b"k")
    assert raised.value.cause == "auth"
    assert [path for _, path in gateway.paths()] == [AUTH, RANGE, AUTH, RANGE]


def test_two_threads_that_need_a_token_at_once_fetch_it_once():
    # The first fetch is held until another request comes, or for HOLD seconds: a second
    # thread that fetched on its own would come at once, and both would be answered.
    first_token = Reply(body={"header": HEADER, "token": "t1"}, hold=HOLD)
    with (
        serving({AUTH: [first_token]}) as gateway,
        closing(client_of(gateway, Credentials("alice", "secret"))) as client,
    ):
        threads = [threading.Thread(target=client.range, args=(b"k",)) for _ in range(2)]
        threads[0].start()
        gateway.wait_for(1)  # the first thread's fetch is held
        threads[1].start()
        for thread in threads:
            thread.join()
    assert Counter((r.path, r.token) for r in gateway.requests) == {
        (AUTH, None): 1,
        (RANGE, "t1"): 2,
    }


def test_a_refusal_of_an_older_token_keeps_the_one_fetched_since():
    # Another thread's request went out with "t0" and was refused after this client had
    # fetched "t1": forgetting "t1" would cost one more fetch.
    with serving({}) as gateway:
        transport = Transport(
            [gateway.endpoint], attempt_timeout=ATTEMPT, credentials=Credentials("a", "s")
        )
        try:
            assert transport.auth_headers(gateway.endpoint) == {}  # auth off: token ""
            refused = EtcdRefused("x", code=UNAUTHENTICATED, cause="auth", member="m", detail="d")
            assert transport.stale_token(gateway.endpoint, refused, {"Authorization": "t0"})
            transport.auth_headers(gateway.endpoint)
            assert [path for _, path in gateway.paths()] == [AUTH]
            assert transport.stale_token(gateway.endpoint, refused, {})
            transport.auth_headers(gateway.endpoint)
            assert [path for _, path in gateway.paths()] == [AUTH, AUTH]
        finally:
            transport.close()


def test_a_closed_connection_is_never_opened_again():
    with serving({}) as gateway:
        transport = Transport([gateway.endpoint], attempt_timeout=ATTEMPT)
        with transport.watching(gateway.endpoint) as connection:
            connection.request("POST", RANGE, b"{}")
            connection.getresponse().read()
            connection.close()
            with pytest.raises(http.client.NotConnected):
                connection.request("POST", RANGE, b"{}")  # http.client would connect again
        transport.close()
    assert gateway.paths() == [(1, RANGE)]
