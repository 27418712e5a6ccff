"""A client of etcd's v3 JSON gateway over the standard library: :class:`EtcdClient`.

It speaks to the gateway every etcd member serves (``/v3/...``, JSON, base64 keys and
values, 64-bit integers as strings, default fields left out) over ``http.client``.
The rules it keeps, so that its callers can reason about a lost answer:

- each call sends one HTTP request per attempt, and never sends it again on its own;
- a call that a member could not answer moves :attr:`EtcdClient.member` to the next
  endpoint and raises :class:`EtcdUnavailable`; the caller's retry policy runs it again;
- every call and watch requires a leader (:data:`REQUIRE_LEADER`): a member cut from
  its peers answers "no leader", which moves on too;
- the cluster id of the first answer is pinned: a member of another cluster is one
  that does not answer, named in one WARNING;
- an answer that asking again cannot change raises :class:`EtcdRefused`, with a stable
  ``cause`` token and a message that names the fix;
- with credentials, each member gets its own token, fetched when first needed there; a
  token the member no longer knows is fetched again once, and the call sent again;
- calls are thread-safe: a small pool of connections per member, a watch on its own.

One module, over the package's 400 lines: the wire format, the error mapping and the
connections of one protocol, not yet split by concern. Standard library only.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..._errors import ConfigurationError, SegmentHealthError
from ..._logfmt import format_fields
from ..retry import time_left

__all__ = [
    "Credentials",
    "Endpoint",
    "EtcdClient",
    "EtcdError",
    "EtcdRefused",
    "EtcdUnavailable",
    "Event",
    "KeyValue",
    "Range",
    "Tls",
    "TxnResult",
    "create_revision_is",
    "delete",
    "error_from_answer",
    "get",
    "mod_revision_is",
    "parse_endpoints",
    "prefix_end",
    "put",
    "value_is",
]

log = logging.getLogger(__name__)

#: etcd's client port, when an endpoint names none.
DEFAULT_PORT = 2379
#: Idle connections kept per member.
IDLE_PER_MEMBER = 4
#: etcd's require-leader metadata, through the gateway: a member cut from its leader
#: refuses the call at once ("no leader"), and ends a watch when it loses its leader.
REQUIRE_LEADER = "Grpc-Metadata-hasleader"

#: A compare of a transaction, as the gateway takes it (:func:`mod_revision_is`, ...).
Compare = dict[str, Any]
#: An operation of a transaction, as the gateway takes it (:func:`put`, :func:`get`, ...).
Op = dict[str, Any]

# gRPC status codes that etcd's answers carry.
_DEADLINE_EXCEEDED = 4
_PERMISSION_DENIED = 7
_UNAVAILABLE = 14
_UNAUTHENTICATED = 16
#: Calls etcd 3.4 may answer ``{}``, without a header (alarms, to a user not root).
_HEADLESS = ("/v3/maintenance/alarm",)
#: gRPC code names, as a watch's ``cancel_reason`` spells them.
_CODE_NAMES = {
    "Canceled": 1,
    "Unknown": 2,
    "InvalidArgument": 3,
    "DeadlineExceeded": 4,
    "NotFound": 5,
    "PermissionDenied": 7,
    "ResourceExhausted": 8,
    "FailedPrecondition": 9,
    "OutOfRange": 11,
    "Internal": 13,
    "Unavailable": 14,
    "Unauthenticated": 16,
}
#: Words of etcd's messages for a refusal that may pass if asked again.
_TRANSIENT_WORDS = ("leader changed", "no leader", "timed out", "too many requests")
#: Words of etcd's messages -> the refusal's cause, the first match wins.
_CAUSE_WORDS = (
    ("database space exceeded", "nospace"),
    ("permission denied", "permission"),
    ("invalid auth token", "auth"),
    ("authentication failed", "auth"),
    ("user name is empty", "auth"),
    ("auth store is old", "auth"),
    ("lease not found", "lease-not-found"),
    ("compacted", "compacted"),
    ("too large", "too-large"),
    ("larger than max", "too-large"),
    ("too many operations", "too-large"),
)
#: What each cause asks of the user.
_FIXES = {
    "nospace": "etcd's database is over its space quota (NOSPACE alarm): compact old "
    "revisions, defragment each member, then run `etcdctl alarm disarm` (or raise "
    "--quota-backend-bytes)",
    "auth": "etcd refused the credentials: check rdzv-conf user and password_file "
    "(or NVRX_SEGHEALTH_ETCD_PASSWORD)",
    "permission": "the etcd user may not use these keys: grant its role readwrite on "
    "the run's key prefix (etcdctl role grant-permission --prefix)",
    "lease-not-found": "the lease expired or was revoked",
    "compacted": "the revision was compacted: read again from the current revision",
    "too-large": "the request is larger than etcd accepts (--max-request-bytes, --max-txn-ops)",
    "other": "etcd refused the request",
}


class EtcdError(SegmentHealthError):
    """The base of the etcd-v3 room's errors."""


class EtcdUnavailable(EtcdError, ConnectionError):
    """A member did not answer, or answered that it cannot now; asking again may work.

    The client has moved to the next member when it raises this.

    Attributes:
        member: the member that failed (``host:port``).
    """

    def __init__(self, message: str, *, member: str = "") -> None:
        super().__init__(message)
        self.member = member


class EtcdRefused(EtcdError, RuntimeError):
    """The cluster answered no; asking again will not help.

    Attributes:
        code: the gRPC status code of etcd's answer (0 when it had none).
        cause: a stable token: ``nospace``, ``auth``, ``permission``,
            ``lease-not-found``, ``compacted``, ``too-large`` or ``other``.
        member: the member that answered.
        detail: etcd's own message.
    """

    def __init__(
        self,
        message: str,
        *,
        code: int = 0,
        cause: str = "other",
        member: str = "",
        detail: str = "",
    ) -> None:
        super().__init__(message)
        self.code = code
        self.cause = cause
        self.member = member
        self.detail = detail


@dataclass(frozen=True)
class Endpoint:
    """One member's client address."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_endpoints(text: str) -> tuple[Endpoint, ...]:
    """The endpoints of ``h1:p1,h2:p2`` (a scheme prefix is dropped, the port defaults
    to 2379, an IPv6 address is written ``[addr]:port``).

    Raises:
        ConfigurationError: an empty list or item, a bad port, or a duplicate.
    """
    endpoints: list[Endpoint] = []
    for item in text.split(","):
        endpoint = _parse_endpoint(item.strip(), text)
        if endpoint in endpoints:
            raise _bad_endpoints(text, f"{endpoint} is named twice")
        endpoints.append(endpoint)
    return tuple(endpoints)


def _parse_endpoint(item: str, text: str) -> Endpoint:
    scheme, found, rest = item.partition("://")
    if found:
        if scheme.lower() not in ("http", "https"):
            raise _bad_endpoints(text, f"{item!r} has scheme {scheme!r}, not http or https")
        item = rest.rstrip("/")
    if not item:
        raise _bad_endpoints(text, "an endpoint is empty")
    if item.startswith("["):
        host, closed, port = item[1:].partition("]")
        if not closed or (port and not port.startswith(":")):
            raise _bad_endpoints(text, f"{item!r} is not [address]:port")
        port = port[1:]
    elif item.count(":") > 1:
        raise _bad_endpoints(text, f"{item!r}: write an IPv6 address as [address]:port")
    else:
        host, _, port = item.partition(":")
    if not host:
        raise _bad_endpoints(text, f"{item!r} names no host")
    if not port:
        return Endpoint(host, DEFAULT_PORT)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise _bad_endpoints(text, f"{item!r} has port {port!r}, not a number 1-65535")
    return Endpoint(host, int(port))


def _bad_endpoints(text: str, why: str) -> ConfigurationError:
    return ConfigurationError(
        f"etcd endpoints {text!r}: {why}; write host:port[,host:port...]",
        setting="--rdzv-endpoint",
    )


@dataclass(frozen=True)
class Tls:
    """The files of an https connection: a CA to verify the members, a client cert."""

    ca_cert: str | None = None
    cert: str | None = None
    key: str | None = None


@dataclass(frozen=True)
class Credentials:
    """An etcd user and its password."""

    user: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class KeyValue:
    """A key as etcd holds it."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int


@dataclass(frozen=True)
class Range:
    """What a range read found; ``revision`` is the store's revision it read at."""

    kvs: tuple[KeyValue, ...]
    count: int
    revision: int


@dataclass(frozen=True)
class TxnResult:
    """What a transaction did: which branch ran, the revision after it, and one entry
    per op of that branch (a :class:`Range` for a range op, else ``None``)."""

    succeeded: bool
    revision: int
    ranges: tuple[Range | None, ...]


@dataclass(frozen=True)
class Event:
    """A change of a watched key: ``kind`` is ``put`` or ``delete``."""

    kind: str
    kv: KeyValue


def mod_revision_is(key: bytes, revision: int) -> Compare:
    """A compare: ``key`` was last modified at ``revision``."""
    return {"key": _b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


def create_revision_is(key: bytes, revision: int) -> Compare:
    """A compare: ``key`` was created at ``revision`` (0: it does not exist)."""
    return {
        "key": _b64(key),
        "target": "CREATE",
        "result": "EQUAL",
        "create_revision": str(revision),
    }


def value_is(key: bytes, value: bytes) -> Compare:
    """A compare: ``key`` holds ``value``."""
    return {"key": _b64(key), "target": "VALUE", "result": "EQUAL", "value": _b64(value)}


def put(key: bytes, value: bytes, lease: int = 0) -> Op:
    """An op: write ``value`` to ``key`` (on ``lease`` when not 0)."""
    request: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        request["lease"] = str(lease)
    return {"request_put": request}


def get(key: bytes, range_end: bytes | None = None) -> Op:
    """An op: read ``key`` (or ``[key, range_end)``)."""
    return {"request_range": _span(key, range_end)}


def delete(key: bytes, range_end: bytes | None = None) -> Op:
    """An op: delete ``key`` (or ``[key, range_end)``)."""
    return {"request_delete_range": _span(key, range_end)}


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that covers every key starting with ``prefix``."""
    end = bytearray(prefix.rstrip(b"\xff"))
    if not end:
        return b"\0"  # etcd's "every key from the start key on"
    end[-1] += 1
    return bytes(end)


def error_from_answer(member: str, status: int, body: bytes) -> EtcdUnavailable | EtcdRefused:
    """The error of an HTTP answer that is not 200: the status, the body's ``code`` and
    ``message`` (etcd 3.4 and 3.5 also send ``error``; 3.6 does not, etcd-io/etcd#21100)."""
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or not {"code", "error", "message"} & answer.keys():
        return EtcdUnavailable(  # a proxy's page, a member with its gateway off
            f"etcd at {member} answered HTTP {status} without etcd's error: "
            f"{body.decode('utf-8', 'replace')[:200]!r} (is it an etcd member's client URL?)",
            member=member,
        )
    error = answer.get("error")
    if isinstance(error, dict):  # an error inside a stream: {"error": {...}}
        answer, status = error, int(error.get("http_code", status) or status)
    code = int(answer.get("grpc_code", answer.get("code", 0)) or 0)
    message = answer.get("message") or (error if isinstance(error, str) else "") or ""
    if not message:
        message = body.decode("utf-8", "replace")[:200] or f"HTTP {status}"
    return _error(member, status, code, str(message))


def _error(member: str, status: int, code: int, message: str) -> EtcdUnavailable | EtcdRefused:
    """Classify etcd's refusal: a cause it names wins; else whether it is transient."""
    lowered = message.lower()
    cause = next((cause for words, cause in _CAUSE_WORDS if words in lowered), None)
    if cause is None and code == _UNAUTHENTICATED:
        cause = "auth"
    elif cause is None and code == _PERMISSION_DENIED:
        cause = "permission"
    if cause is None and (
        status >= 500
        or code in (_DEADLINE_EXCEEDED, _UNAVAILABLE)
        or any(words in lowered for words in _TRANSIENT_WORDS)
    ):
        return EtcdUnavailable(
            f"etcd at {member} cannot answer now: {message} (HTTP {status}, code {code})",
            member=member,
        )
    cause = cause or "other"
    return EtcdRefused(
        f"{_FIXES[cause]}: etcd at {member} answered {message!r} (HTTP {status}, code {code})",
        code=code,
        cause=cause,
        member=member,
        detail=message,
    )


class EtcdClient:
    """A thread-safe client of etcd's v3 gateway on several members; see the module
    documentation.

    Args:
        endpoints: the members, asked in this order (the first one first).
        attempt_timeout: seconds each HTTP request may take (a watch has its own).
        tls: the files of an https connection.
        protocol: ``http`` or ``https``.
        credentials: an etcd user, when the cluster has auth enabled.

    Raises:
        ConfigurationError: no endpoint, a bad protocol, or an unreadable TLS file.
    """

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
        self._context = _ssl_context(tls) if protocol == "https" else None
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
        self._cluster: str | None = None  # the cluster id of the first answer
        self._strangers: set[Endpoint] = set()  # members of another cluster, warned of
        self._members: set[Endpoint] = set()  # members that answered with its id

    @property
    def member(self) -> str:
        """The member asked now (``host:port``)."""
        return str(self._endpoints[self._index])

    def range(
        self,
        key: bytes,
        range_end: bytes | None = None,
        *,
        revision: int = 0,
        count_only: bool = False,
        keys_only: bool = False,
        limit: int = 0,
    ) -> Range:
        """Read ``key`` (or ``[key, range_end)``), at ``revision`` when not 0."""
        request = _span(key, range_end)
        for name, value in (("revision", revision), ("limit", limit)):
            if value:
                request[name] = str(value)
        if count_only:
            request["count_only"] = True
        if keys_only:
            request["keys_only"] = True
        answer = self._call("/v3/kv/range", request)
        return _range(answer, _revision(answer))

    def txn(
        self, compare: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        """Run ``success`` if every compare holds, else ``failure``, as one transaction."""
        answer = self._call(
            "/v3/kv/txn",
            {"compare": list(compare), "success": list(success), "failure": list(failure)},
        )
        revision = _revision(answer)
        ranges = tuple(
            _range(response["response_range"], revision) if "response_range" in response else None
            for response in answer.get("responses", ())
        )
        return TxnResult(bool(answer.get("succeeded", False)), revision, ranges)

    def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        """Write ``value`` to ``key``; returns the revision of the write."""
        return _revision(self._call("/v3/kv/put", put(key, value, lease)["request_put"]))

    def delete(self, key: bytes, range_end: bytes | None = None) -> int:
        """Delete ``key`` (or ``[key, range_end)``); returns how many keys went."""
        return int(self._call("/v3/kv/deleterange", _span(key, range_end)).get("deleted", 0))

    def grant(self, ttl: int) -> int:
        """A new lease of ``ttl`` seconds; returns its id."""
        return int(self._call("/v3/lease/grant", {"TTL": str(ttl)})["ID"])

    def keep_alive(self, lease: int) -> int:
        """Renew ``lease``; returns its remaining TTL in seconds, 0 when it is gone."""
        return int(self._call("/v3/lease/keepalive", {"ID": str(lease)}).get("TTL", 0))

    def revoke(self, lease: int) -> None:
        """Revoke ``lease`` and delete its keys; a lease already gone is no error."""
        try:
            self._call("/v3/lease/revoke", {"ID": str(lease)})
        except EtcdRefused as error:
            if error.cause != "lease-not-found":
                raise

    def status(self) -> dict[str, Any]:
        """The status of :attr:`member` (its version, db size, leader, raft indices)."""
        return self._call("/v3/maintenance/status", {})

    def members(self) -> list[dict[str, Any]]:
        """The cluster's members as :attr:`member` knows them (``name``, ``clientURLs``)."""
        return list(self._call("/v3/cluster/member/list", {}).get("members", []))

    def alarms(self) -> list[str]:
        """The alarms raised in the cluster (``NOSPACE``, ``CORRUPT``), as :attr:`member`
        tells them."""
        answer = self._call("/v3/maintenance/alarm", {"action": "GET"})
        return [str(alarm.get("alarm", "NONE")) for alarm in answer.get("alarms", [])]

    def watch(
        self, key: bytes, start_revision: int, timeout: float, range_end: bytes | None = None
    ) -> tuple[Event, ...]:
        """The events on ``key`` (or ``[key, range_end)``) from ``start_revision`` on:
        those in history at once, else the first to come within ``timeout`` seconds,
        else ``()``.

        Raises:
            EtcdRefused: cause ``compacted`` when ``start_revision`` was compacted.
        """
        request = _span(key, range_end)
        request["start_revision"] = str(start_revision)
        deadline = time.monotonic() + timeout
        endpoint = self._endpoints[self._index]
        try:
            return self._watch_once(endpoint, {"create_request": request}, deadline)
        except EtcdRefused as refused:
            if not self._stale_token(endpoint, refused, watch=True):
                raise
        return self._watch_once(endpoint, {"create_request": request}, deadline)

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

    def _call(self, path: str, request: dict[str, Any]) -> dict[str, Any]:
        """POST ``request`` to :attr:`member`; its answer, or the error it maps to."""
        with self._lock:
            self._check_open()
        endpoint = self._endpoints[self._index]
        self._vouch(endpoint)
        for attempt in (1, 2):
            headers = self._auth_headers(endpoint)
            status, body = self._exchange(endpoint, path, request, headers)
            if status == 200:
                return self._answer(endpoint, body, path)
            error = error_from_answer(str(endpoint), status, body)
            if attempt == 2 or not self._stale_token(endpoint, error):
                break
        raise self._failed(endpoint, error)

    def _answer(self, endpoint: Endpoint, body: bytes, path: str = "") -> dict[str, Any]:
        """The JSON of a 200 answer; a stream's (keep-alive's) first message."""
        first = body.strip().split(b"\n", 1)[0]
        try:
            answer = json.loads(first)
        except ValueError as error:
            broken = EtcdUnavailable(
                f"etcd at {endpoint} sent a broken answer: {error}", member=str(endpoint)
            )
            raise self._failed(endpoint, broken) from None
        if isinstance(answer, dict) and "error" in answer:  # a stream's: {"error": {...}}
            raise self._failed(endpoint, error_from_answer(str(endpoint), 200, first))
        result = answer.get("result", answer) if isinstance(answer, dict) else None
        if not isinstance(result, dict) or not (
            "header" in result or (not result and path in _HEADLESS)
        ):
            stranger = EtcdUnavailable(  # every answer of etcd's gateway has a header
                f"etcd at {endpoint} sent an answer etcd does not send: {first[:200]!r}",
                member=str(endpoint),
            )
            raise self._failed(endpoint, stranger)
        self._same_cluster(endpoint, result)
        return result

    def _vouch(self, endpoint: Endpoint) -> None:
        """Before the first call to ``endpoint`` once a cluster is pinned: its status, so
        that a member of another cluster is never sent a write."""
        with self._lock:
            if self._cluster is None or endpoint in self._members:
                return
        status, body = self._exchange(endpoint, "/v3/maintenance/status", {}, {})
        if status != 200:
            raise self._failed(endpoint, error_from_answer(str(endpoint), status, body))
        self._answer(endpoint, body)

    def _same_cluster(self, endpoint: Endpoint, answer: dict[str, Any]) -> None:
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
        raise self._failed(
            endpoint,
            EtcdUnavailable(
                f"etcd at {endpoint} is a member of cluster {cluster}, not of cluster "
                f"{pinned} that answered first: name only one cluster's members in "
                "--rdzv-endpoint",
                member=str(endpoint),
            ),
        )

    def _exchange(
        self, endpoint: Endpoint, path: str, request: dict[str, Any], headers: dict[str, str]
    ) -> tuple[int, bytes]:
        """One HTTP request on a pooled connection: the status and the body."""
        timeout = self._time_for(endpoint)
        connection = self._take(endpoint)
        fresh = connection.sock is None
        connection.timeout = timeout
        if connection.sock is not None:
            connection.sock.settimeout(timeout)
        try:
            connection.request("POST", path, json.dumps(request).encode(), _headers(headers))
            response = connection.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException) as error:
            asked = fresh and self._asked_for_a_certificate(error)
            connection.close()
            raise self._failed(endpoint, _unreachable(endpoint, error, asked)) from error
        except BaseException:
            connection.close()
            raise
        self._give_back(endpoint, connection, response)
        return response.status, body

    def _watch_once(
        self, endpoint: Endpoint, request: dict[str, Any], deadline: float
    ) -> tuple[Event, ...]:
        """One watch on its own connection, closed at the end."""
        self._vouch(endpoint)
        headers = self._auth_headers(endpoint)
        connection = self._connect(endpoint)
        connection.timeout = self._time_for(endpoint)
        try:
            connection.connect()
            connection.auto_open = 0  # once close() closed it, it stays closed
            with self._lock:
                self._check_open()
                self._watches.add(connection)
            body = json.dumps(request).encode()
            connection.request("POST", "/v3/watch", body, _headers(headers))
            response = connection.getresponse()
            if response.status != 200:
                error = error_from_answer(str(endpoint), response.status, response.read())
                raise self._failed(endpoint, error)
            return self._events(endpoint, connection.sock, response, deadline)
        except EtcdError:
            raise
        except (OSError, http.client.HTTPException, ValueError) as error:
            with self._lock:
                self._check_open()  # close() ended the watch
            asked = self._asked_for_a_certificate(error)  # a watch has a fresh connection
            raise self._failed(endpoint, _unreachable(endpoint, error, asked)) from error
        finally:
            with self._lock:
                self._watches.discard(connection)
            connection.close()

    def _events(
        self,
        endpoint: Endpoint,
        sock: socket.socket | None,
        response: http.client.HTTPResponse,
        deadline: float,
    ) -> tuple[Event, ...]:
        """Read a watch's messages until one has events, or ``deadline``: ``()``.

        The member's ``created`` message must come within the attempt's timeout.
        """
        created = False
        while True:
            wait = deadline - time.monotonic() if created else time_left(self._timeout)
            if wait <= 0:
                return ()
            if sock is None:  # closed by close()
                raise http.client.IncompleteRead(b"")
            sock.settimeout(wait)
            try:
                line = response.readline()
            except TimeoutError:
                if created:
                    return ()
                raise
            if not line:  # the member ended the stream
                raise http.client.IncompleteRead(b"")
            if not line.strip():
                continue
            message = json.loads(line)
            if "error" in message:
                raise self._failed(endpoint, error_from_answer(str(endpoint), 200, line))
            result = message.get("result", {})
            self._same_cluster(endpoint, result)
            created = created or bool(result.get("created"))
            if result.get("canceled"):
                raise self._failed(endpoint, _canceled(str(endpoint), result))
            if result.get("events"):
                return tuple(_event(event) for event in result["events"])

    def _asked_for_a_certificate(self, error: BaseException) -> bool:
        """Whether a member ended a new TLS connection of this client, which has no
        certificate: it wants one. A member that dies just then is rarer than this
        mistake, which asking again cannot mend."""
        return (
            self._context is not None
            and not self._client_cert
            and isinstance(error, (ssl.SSLEOFError, ssl.SSLZeroReturnError))
        )

    def _time_for(self, endpoint: Endpoint) -> float:
        """Seconds one request may take: the attempt's timeout, or what is left of the
        caller's deadline (:func:`~..retry.time_left`)."""
        seconds = time_left(self._timeout)
        if seconds <= 0:
            raise EtcdUnavailable(
                f"no time left to ask etcd at {endpoint}: the call's deadline passed",
                member=str(endpoint),
            )
        return seconds

    def _check_open(self) -> None:
        """Raise if :meth:`close` was called (with the lock held)."""
        if self._closed:
            raise EtcdError("the etcd client is closed")

    def _auth_headers(self, endpoint: Endpoint) -> dict[str, str]:
        """The ``Authorization`` header for ``endpoint``, authenticating first if needed."""
        if self._credentials is None:
            return {}
        token = self._tokens.get(endpoint)
        if token is None:
            token = self._authenticate(endpoint, self._credentials)
            self._tokens[endpoint] = token
        return {"Authorization": token} if token else {}

    def _authenticate(self, endpoint: Endpoint, credentials: Credentials) -> str:
        """A new token of ``endpoint`` ("" when its cluster has auth off)."""
        request = {"name": credentials.user, "password": credentials.password}
        status, body = self._exchange(endpoint, "/v3/auth/authenticate", request, {})
        if status == 200:
            return str(self._answer(endpoint, body).get("token", ""))
        error = error_from_answer(str(endpoint), status, body)
        if isinstance(error, EtcdRefused):
            if "authentication is not enabled" in error.detail:
                return ""
            error = EtcdRefused(
                f"{_FIXES['auth']}: etcd at {endpoint} refused user {credentials.user!r}: "
                f"{error.detail!r} (HTTP {status}, code {error.code})",
                code=error.code,
                cause="auth",
                member=str(endpoint),
                detail=error.detail,
            )
        raise self._failed(endpoint, error)

    def _stale_token(self, endpoint: Endpoint, error: EtcdError, *, watch: bool = False) -> bool:
        """Whether ``error`` refused this member's token; if so, forget the token.

        etcd 3.5.1 cancels the watch of an expired token as ``permission denied``: for a
        watch, that refusal counts as a stale token too (the watch is sent once more).
        """
        if self._credentials is None or not isinstance(error, EtcdRefused):
            return False
        stale = error.cause == "auth" and (
            error.code == _UNAUTHENTICATED or "auth store is old" in error.detail
        )
        if not stale and not (watch and error.cause == "permission"):
            return False
        log.debug("etcd at %s no longer knows this client's token; authenticating again", endpoint)
        self._tokens.pop(endpoint, None)
        return True

    def _failed(self, endpoint: Endpoint, error: EtcdError) -> EtcdError:
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
            return http.client.HTTPSConnection(
                endpoint.host, endpoint.port, timeout=self._timeout, context=self._context
            )
        return http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=self._timeout)


def _ssl_context(tls: Tls | None) -> ssl.SSLContext:
    """The https context of ``tls``: its CA verifies the members, its cert is ours."""
    tls = tls or Tls()
    for setting, path in (
        ("ca_cert", tls.ca_cert),
        ("ssl_cert", tls.cert),
        ("ssl_cert_key", tls.key),
    ):
        if path is not None and not os.access(path, os.R_OK):
            raise ConfigurationError(
                f"etcd TLS file {path!r} is not readable: give a readable PEM file",
                setting=setting,
            )
    if (tls.cert is None) != (tls.key is None):
        raise ConfigurationError(
            "an etcd client certificate needs both ssl_cert and ssl_cert_key", setting="ssl_cert"
        )
    try:
        context = ssl.create_default_context(cafile=tls.ca_cert)
        if tls.cert is not None:
            context.load_cert_chain(tls.cert, tls.key)
    except (ssl.SSLError, OSError) as error:
        raise ConfigurationError(
            f"etcd TLS files cannot be used: {error}", setting="ca_cert"
        ) from None
    return context


def _still_open(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle connection is open: a member that closed it made it readable."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        return not select.select([sock], [], [], 0)[0]
    except (OSError, ValueError):
        return False


#: OpenSSL's verify code of a certificate for another name than the one asked.
_NAME_MISMATCH = 62
#: The TLS alerts of a member that refuses this client's certificate, or its lack of one.
_CLIENT_CERT_REFUSED = frozenset(
    {
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "TLSV1_ALERT_UNKNOWN_CA",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
    }
)


def _unreachable(
    endpoint: Endpoint, error: BaseException, asked_for_a_certificate: bool = False
) -> EtcdUnavailable | EtcdRefused:
    """The error of a connection that failed: transient, unless this client rejected the
    member's certificate (asking again cannot change that)."""
    what = f"{type(error).__name__}: {error}"
    if isinstance(error, ssl.SSLCertVerificationError) and error.verify_code == _NAME_MISMATCH:
        return EtcdRefused(
            f"etcd at {endpoint} shows a certificate for another name ({what}): name the "
            "member in --rdzv-endpoint as its certificate does",
            cause="other",
            member=str(endpoint),
            detail=what,
        )
    if asked_for_a_certificate or (
        isinstance(error, ssl.SSLError) and error.reason in _CLIENT_CERT_REFUSED
    ):
        return EtcdRefused(
            f"etcd at {endpoint} refused this client's certificate ({what}): give one its "
            "CA signed (rdzv-conf ssl_cert and ssl_cert_key)",
            cause="other",
            member=str(endpoint),
            detail=what,
        )
    if isinstance(error, ssl.SSLCertVerificationError):
        return EtcdRefused(
            f"this client does not trust etcd at {endpoint} ({what}): give the CA that "
            "signed the members' certificates (rdzv-conf ca_cert)",
            cause="other",
            member=str(endpoint),
            detail=what,
        )
    hint = ""
    if isinstance(error, ssl.SSLError):
        hint = " (a member that wants a client certificate ends the handshake: check ssl_cert)"
    return EtcdUnavailable(f"etcd at {endpoint} did not answer: {what}{hint}", member=str(endpoint))


def _canceled(member: str, result: dict[str, Any]) -> EtcdUnavailable | EtcdRefused:
    """The error of a watch the member canceled: compacted, or its ``cancel_reason``."""
    compacted = int(result.get("compact_revision", 0))
    if compacted:
        return EtcdRefused(
            f"{_FIXES['compacted']}: etcd at {member} compacted through revision {compacted}",
            code=11,
            cause="compacted",
            member=member,
            detail=f"compacted through revision {compacted}",
        )
    reason = str(result.get("cancel_reason", "the watch was canceled"))
    # "rpc error: code = PermissionDenied desc = etcdserver: permission denied"
    name = reason.partition("code = ")[2].partition(" ")[0]
    message = reason.partition("desc = ")[2] or reason
    return _error(member, 200, _CODE_NAMES.get(name, 0), message)


def _headers(extra: dict[str, str]) -> dict[str, str]:
    return {"Content-Type": "application/json", REQUIRE_LEADER: "true", **extra}


def _span(key: bytes, range_end: bytes | None) -> dict[str, Any]:
    span = {"key": _b64(key)}
    if range_end is not None:
        span["range_end"] = _b64(range_end)
    return span


def _revision(answer: dict[str, Any]) -> int:
    return int(answer.get("header", {}).get("revision", 0))


def _range(answer: dict[str, Any], revision: int) -> Range:
    kvs = tuple(_key_value(kv) for kv in answer.get("kvs", ()))
    return Range(kvs, int(answer.get("count", 0)), _revision(answer) or revision)


def _key_value(kv: dict[str, Any]) -> KeyValue:
    return KeyValue(
        key=_unb64(kv.get("key", "")),
        value=_unb64(kv.get("value", "")),
        create_revision=int(kv.get("create_revision", 0)),
        mod_revision=int(kv.get("mod_revision", 0)),
        version=int(kv.get("version", 0)),
        lease=int(kv.get("lease", 0)),
    )


def _event(event: dict[str, Any]) -> Event:
    return Event("delete" if event.get("type") == "DELETE" else "put", _key_value(event["kv"]))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)
