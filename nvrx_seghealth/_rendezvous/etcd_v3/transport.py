"""The connections of an etcd-v3 client to its members: :class:`Transport`.

Its rules, so that a caller can reason about a lost answer:

- :meth:`Transport.exchange` sends one HTTP request per call and never sends it again
  on its own; a connection is never opened a second time;
- a member that could not answer moves :attr:`Transport.endpoint` to the next member
  (:meth:`Transport.failed`);
- the cluster id of the first answer is pinned: a member of another cluster is one that
  does not answer, named in one WARNING, and a new member is vouched for first;
- with credentials, each member gets its own token, fetched when first needed there,
  once however many threads need it (its member's token lock);
- it is thread-safe: a small pool of idle connections per member, TLS from :class:`Tls`.

It maps failures through :mod:`.errors` and speaks :mod:`.wire`; it knows no call.
"""

from __future__ import annotations

import http.client
import json
import logging
import select
import socket
import ssl
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..._errors import ConfigurationError
from ..._logfmt import format_fields
from ..retry import time_left
from .endpoints import Credentials, Endpoint, Tls, ssl_context
from .errors import (
    FIXES,
    UNAUTHENTICATED,
    EtcdError,
    EtcdRefused,
    EtcdUnavailable,
    error_from_answer,
    unreachable,
)
from .wire import headers

__all__ = ["IDLE_PER_MEMBER", "Transport"]

#: The client's logger: its messages keep the name operators filter on.
log = logging.getLogger(f"{__package__}.client")

#: Idle connections kept per member.
IDLE_PER_MEMBER = 4
#: Calls etcd 3.4 may answer ``{}``, without a header (alarms, to a user not root).
_HEADLESS = ("/v3/maintenance/alarm",)


class Transport:
    """The members of one client, their connections, tokens and cluster pin; its
    arguments and errors are :class:`~.client.EtcdClient`'s."""

    def __init__(
        self,
        endpoints: Sequence[Endpoint],
        *,
        attempt_timeout: float,
        tls: Tls | None = None,
        protocol: str = "http",
        credentials: Credentials | None = None,
    ) -> None:
        if not endpoints:
            raise ConfigurationError("no etcd endpoint", setting="--rdzv-endpoint")
        if protocol not in ("http", "https"):
            raise ConfigurationError(
                f"etcd protocol {protocol!r} is neither http nor https", setting="protocol"
            )
        if not attempt_timeout > 0:
            raise ValueError(f"attempt_timeout must be positive, not {attempt_timeout!r}")
        self._endpoints = tuple(endpoints)
        self._timeout = attempt_timeout
        self._context = ssl_context(tls) if protocol == "https" else None
        self._client_cert = tls is not None and tls.cert is not None
        if self._context is None and tls is not None and any(vars(tls).values()):
            raise ConfigurationError(
                "TLS files are given but protocol is http: set protocol=https",
                setting="protocol",
            )
        self._credentials = credentials
        self._lock = threading.Lock()
        self._index = 0
        self._idle: dict[Endpoint, list[http.client.HTTPConnection]] = {}
        self._watches: set[http.client.HTTPConnection] = set()
        self._closed = False
        self._tokens: dict[Endpoint, str] = {}  # "" where auth is off
        #: A member's token is read, fetched and forgotten only under its lock.
        self._token_locks = {endpoint: threading.Lock() for endpoint in self._endpoints}
        self._cluster: str | None = None  # the cluster id of the first answer
        self._strangers: set[Endpoint] = set()  # members of another cluster, warned of
        self._members: set[Endpoint] = set()  # members that answered with its id

    @property
    def endpoint(self) -> Endpoint:
        """The member asked now."""
        return self._endpoints[self._index]

    @property
    def timeout(self) -> float:
        """Seconds each HTTP request may take."""
        return self._timeout

    def close(self) -> None:
        """Close every connection; a call after it, a blocked watch too, raises
        :class:`EtcdError` (not transient)."""
        with self._lock:
            self._closed = True
            idle = [c for connections in self._idle.values() for c in connections]
            watches = [*self._watches]
            self._idle.clear()
        for connection in watches:  # wake each blocked watch; its own thread closes it
            sock = connection.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # not connected yet, or gone already
        for connection in idle:
            connection.close()

    def answer_of(self, endpoint: Endpoint, body: bytes, path: str = "") -> dict[str, Any]:
        """The JSON of a 200 answer; a stream's (keep-alive's) first message."""
        first = body.strip().split(b"\n", 1)[0]
        try:
            answer = json.loads(first)
        except ValueError as error:
            broken = EtcdUnavailable(
                f"etcd at {endpoint} sent a broken answer: {error}", member=str(endpoint)
            )
            raise self.failed(endpoint, broken) from None
        if isinstance(answer, dict) and "error" in answer:  # a stream's: {"error": {...}}
            raise self.failed(endpoint, error_from_answer(str(endpoint), 200, first))
        result = answer.get("result", answer) if isinstance(answer, dict) else None
        if not isinstance(result, dict) or not (
            "header" in result or (not result and path in _HEADLESS)
        ):
            stranger = EtcdUnavailable(  # every answer of etcd's gateway has a header
                f"etcd at {endpoint} sent an answer etcd does not send: {first[:200]!r}",
                member=str(endpoint),
            )
            raise self.failed(endpoint, stranger)
        self.same_cluster(endpoint, result)
        return result

    def vouch(self, endpoint: Endpoint) -> None:
        """Before the first call to ``endpoint`` once a cluster is pinned: its status, so
        that a member of another cluster is never sent a write."""
        with self._lock:
            if self._cluster is None or endpoint in self._members:
                return
        status, body = self.exchange(endpoint, "/v3/maintenance/status", {}, {})
        if status != 200:
            raise self.failed(endpoint, error_from_answer(str(endpoint), status, body))
        self.answer_of(endpoint, body)

    def same_cluster(self, endpoint: Endpoint, answer: dict[str, Any]) -> None:
        """Pin the cluster of the first answer; a member of another cluster is one that
        does not answer (one WARNING per member), so that a run never splits in two."""
        header = answer.get("header")
        cluster = str(header.get("cluster_id", "")) if isinstance(header, dict) else ""
        if not cluster:
            return
        with self._lock:
            if self._cluster is None:
                self._cluster = cluster
            pinned = self._cluster
            first = cluster != pinned and endpoint not in self._strangers
            if first:
                self._strangers.add(endpoint)
        if cluster == pinned:
            with self._lock:
                self._members.add(endpoint)
            return
        if first:
            log.warning(
                "etcd at %s belongs to another cluster than the first member that "
                "answered; it is left: %s",
                endpoint,
                format_fields(
                    {
                        "etcd": "other-cluster",
                        "member": str(endpoint),
                        "cluster_id": cluster,
                        "pinned": pinned,
                    }
                ),
            )
        raise self.failed(
            endpoint,
            EtcdUnavailable(
                f"etcd at {endpoint} is a member of cluster {cluster}, not of cluster "
                f"{pinned} that answered first: name only one cluster's members in "
                "--rdzv-endpoint",
                member=str(endpoint),
            ),
        )

    def exchange(
        self, endpoint: Endpoint, path: str, request: dict[str, Any], extra: dict[str, str]
    ) -> tuple[int, bytes]:
        """One HTTP request on a pooled connection: the status and the body."""
        timeout = self.time_for(endpoint)
        connection = self._take(endpoint)
        fresh = connection.sock is None
        connection.timeout = timeout
        if connection.sock is not None:
            connection.sock.settimeout(timeout)
        try:
            connection.request("POST", path, json.dumps(request).encode(), headers(extra))
            response = connection.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException) as error:
            asked = fresh and self.asked_for_a_certificate(error)
            connection.close()
            raise self.failed(endpoint, unreachable(endpoint, error, asked)) from error
        except BaseException:
            connection.close()
            raise
        self._give_back(endpoint, connection, response)
        return response.status, body

    def asked_for_a_certificate(self, error: BaseException) -> bool:
        """Whether a member ended a new TLS connection of this client, which has no
        certificate: it wants one. A member that dies just then is rarer than this
        mistake, which asking again cannot mend."""
        return (
            self._context is not None
            and not self._client_cert
            and isinstance(error, (ssl.SSLEOFError, ssl.SSLZeroReturnError))
        )

    def time_for(self, endpoint: Endpoint) -> float:
        """Seconds one request may take: the attempt's timeout, or what is left of the
        caller's deadline (:func:`~..retry.time_left`)."""
        seconds = time_left(self._timeout)
        if seconds <= 0:
            raise EtcdUnavailable(
                f"no time left to ask etcd at {endpoint}: the call's deadline passed",
                member=str(endpoint),
            )
        return seconds

    def check_open(self) -> None:
        """Raise :class:`EtcdError` if :meth:`close` was called."""
        with self._lock:
            if self._closed:
                raise EtcdError("the etcd client is closed")

    @contextmanager
    def watching(self, endpoint: Endpoint) -> Iterator[http.client.HTTPConnection]:
        """A new connection to ``endpoint`` for one watch, which :meth:`close` wakes;
        closed at the end."""
        connection = self._connect(endpoint)
        connection.timeout = self.time_for(endpoint)
        try:
            connection.connect()
            with self._lock:
                if self._closed:
                    raise EtcdError("the etcd client is closed")
                self._watches.add(connection)
            yield connection
        finally:
            with self._lock:
                self._watches.discard(connection)
            connection.close()

    def auth_headers(self, endpoint: Endpoint) -> dict[str, str]:
        """The ``Authorization`` header for ``endpoint``, authenticating first if needed."""
        if self._credentials is None:
            return {}
        with self._token_locks[endpoint]:  # held while fetching: one fetch per member at once
            token = self._tokens.get(endpoint)
            if token is None:
                token = self._authenticate(endpoint, self._credentials)
                self._tokens[endpoint] = token
        return {"Authorization": token} if token else {}

    def _authenticate(self, endpoint: Endpoint, credentials: Credentials) -> str:
        """A new token of ``endpoint`` ("" when its cluster has auth off)."""
        request = {"name": credentials.user, "password": credentials.password}
        status, body = self.exchange(endpoint, "/v3/auth/authenticate", request, {})
        if status == 200:
            return str(self.answer_of(endpoint, body).get("token", ""))
        error = error_from_answer(str(endpoint), status, body)
        if isinstance(error, EtcdRefused):
            if "authentication is not enabled" in error.detail:
                return ""
            error = EtcdRefused(
                f"{FIXES['auth']}: etcd at {endpoint} refused user {credentials.user!r}: "
                f"{error.detail!r} (HTTP {status}, code {error.code})",
                code=error.code,
                cause="auth",
                member=str(endpoint),
                detail=error.detail,
            )
        raise self.failed(endpoint, error)

    def stale_token(
        self, endpoint: Endpoint, error: EtcdError, sent: dict[str, str], *, watch: bool = False
    ) -> bool:
        """Whether ``error`` refused the token sent in the headers ``sent``; if so, forget
        it, unless another thread has fetched a newer one since.

        etcd 3.5.1 cancels the watch of an expired token as ``permission denied``: for a
        watch, that refusal counts as a stale token too (the watch is sent once more).
        """
        if self._credentials is None or not isinstance(error, EtcdRefused):
            return False
        stale = error.cause == "auth" and (
            error.code == UNAUTHENTICATED or "auth store is old" in error.detail
        )
        if not stale and not (watch and error.cause == "permission"):
            return False
        log.debug("etcd at %s no longer knows this client's token; authenticating again", endpoint)
        with self._token_locks[endpoint]:
            if self._tokens.get(endpoint) == sent.get("Authorization", ""):
                self._tokens.pop(endpoint, None)
        return True

    def failed(self, endpoint: Endpoint, error: EtcdError) -> EtcdError:
        """``error``, after moving on to the next member if it is transient."""
        if isinstance(error, EtcdUnavailable):
            with self._lock:
                if self._endpoints[self._index] == endpoint:
                    self._index = (self._index + 1) % len(self._endpoints)
                stale = self._idle.pop(endpoint, [])
            for connection in stale:
                connection.close()
        return error

    def _take(self, endpoint: Endpoint) -> http.client.HTTPConnection:
        """An idle connection to ``endpoint`` the member has not closed, or a new one."""
        while True:
            with self._lock:
                idle = self._idle.get(endpoint)
                connection = idle.pop() if idle else None
            if connection is None:
                return self._connect(endpoint)
            if _still_open(connection):
                return connection
            connection.close()

    def _give_back(
        self,
        endpoint: Endpoint,
        connection: http.client.HTTPConnection,
        response: http.client.HTTPResponse,
    ) -> None:
        with self._lock:
            idle = self._idle.setdefault(endpoint, [])
            if not response.will_close and len(idle) < IDLE_PER_MEMBER:
                idle.append(connection)
                return
        connection.close()

    def _connect(self, endpoint: Endpoint) -> http.client.HTTPConnection:
        if self._context is not None:
            return _TlsConnection(
                endpoint.host, endpoint.port, timeout=self._timeout, context=self._context
            )
        return _Connection(endpoint.host, endpoint.port, timeout=self._timeout)


class _ConnectsOnce:
    """A connection that connects once. ``http.client`` opens a closed connection again
    on its next request: a request sent on it would be a second send."""

    _connected = False

    def connect(self) -> None:
        if self._connected:
            raise http.client.NotConnected("a closed connection to etcd is never opened again")
        self._connected = True
        super().connect()  # type: ignore[misc]


class _Connection(_ConnectsOnce, http.client.HTTPConnection):
    """An http connection that connects once."""


class _TlsConnection(_ConnectsOnce, http.client.HTTPSConnection):
    """An https connection that connects once."""


def _still_open(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle connection is open: a member that closed it made it readable."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        return not select.select([sock], [], [], 0)[0]
    except (OSError, ValueError):
        return False
