"""A client of etcd's v3 JSON gateway over the standard library: :class:`EtcdClient`.

It speaks to the gateway every etcd member serves (``/v3/...``) and keeps these rules,
so that its callers can reason about a lost answer:

- each call sends one HTTP request per attempt, and never sends it again on its own
  (:mod:`.transport`);
- a call that a member could not answer moves :attr:`EtcdClient.member` to the next
  endpoint and raises :class:`EtcdUnavailable`; the caller's retry policy runs it again;
- every call and watch requires a leader: a member cut from its peers answers
  "no leader", which moves on too;
- an answer that asking again cannot change raises :class:`EtcdRefused`, with a stable
  ``cause`` token and a message that names the fix (:mod:`.errors`);
- with credentials, a token the member no longer knows is fetched again once, and the
  call sent again once;
- calls are thread-safe; a watch has a connection of its own.

This module holds the calls; the wire format is :mod:`.wire`, the addresses
:mod:`.endpoints`.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Sequence
from typing import Any

from ..retry import time_left
from .endpoints import Credentials, Endpoint, Tls
from .errors import (
    EtcdError,
    EtcdRefused,
    canceled,
    error_from_answer,
    unreachable,
)
from .transport import Transport
from .wire import (
    Compare,
    Event,
    Op,
    Range,
    TxnResult,
    event_of,
    headers,
    put,
    range_of,
    revision_of,
    span,
)

__all__ = ["EtcdClient"]


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
        self._transport = Transport(
            endpoints,
            attempt_timeout=attempt_timeout,
            tls=tls,
            protocol=protocol,
            credentials=credentials,
        )

    @property
    def member(self) -> str:
        """The member asked now (``host:port``)."""
        return str(self._transport.endpoint)

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
        request = span(key, range_end)
        for name, value in (("revision", revision), ("limit", limit)):
            if value:
                request[name] = str(value)
        if count_only:
            request["count_only"] = True
        if keys_only:
            request["keys_only"] = True
        answer = self._call("/v3/kv/range", request)
        return range_of(answer, revision_of(answer))

    def txn(
        self, compare: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        """Run ``success`` if every compare holds, else ``failure``, as one transaction."""
        answer = self._call(
            "/v3/kv/txn",
            {"compare": list(compare), "success": list(success), "failure": list(failure)},
        )
        revision = revision_of(answer)
        ranges = tuple(
            range_of(response["response_range"], revision) if "response_range" in response else None
            for response in answer.get("responses", ())
        )
        return TxnResult(bool(answer.get("succeeded", False)), revision, ranges)

    def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        """Write ``value`` to ``key``; returns the revision of the write."""
        return revision_of(self._call("/v3/kv/put", put(key, value, lease)["request_put"]))

    def delete(self, key: bytes, range_end: bytes | None = None) -> int:
        """Delete ``key`` (or ``[key, range_end)``); returns how many keys went."""
        return int(self._call("/v3/kv/deleterange", span(key, range_end)).get("deleted", 0))

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
        request = span(key, range_end)
        request["start_revision"] = str(start_revision)
        deadline = time.monotonic() + timeout
        transport = self._transport
        endpoint = transport.endpoint
        transport.vouch(endpoint)
        extra = transport.auth_headers(endpoint)
        try:
            return self._watch_once(endpoint, {"create_request": request}, deadline, extra)
        except EtcdRefused as refused:
            if not transport.stale_token(endpoint, refused, extra, watch=True):
                raise
        extra = transport.auth_headers(endpoint)
        return self._watch_once(endpoint, {"create_request": request}, deadline, extra)

    def close(self) -> None:
        """Close every connection; a call after it, a blocked watch too, raises
        :class:`EtcdError` (not transient)."""
        self._transport.close()

    def _call(self, path: str, request: dict[str, Any]) -> dict[str, Any]:
        """POST ``request`` to :attr:`member`; its answer, or the error it maps to."""
        transport = self._transport
        transport.check_open()
        endpoint = transport.endpoint
        transport.vouch(endpoint)
        for attempt in (1, 2):
            extra = transport.auth_headers(endpoint)
            status, body = transport.exchange(endpoint, path, request, extra)
            if status == 200:
                return transport.answer_of(endpoint, body, path)
            error = error_from_answer(str(endpoint), status, body)
            if attempt == 2 or not transport.stale_token(endpoint, error, extra):
                break
        raise transport.failed(endpoint, error)

    def _watch_once(
        self, endpoint: Endpoint, request: dict[str, Any], deadline: float, extra: dict[str, str]
    ) -> tuple[Event, ...]:
        """One watch on its own connection with the headers ``extra``, closed at the end."""
        transport = self._transport
        try:
            with transport.watching(endpoint) as connection:
                body = json.dumps(request).encode()
                connection.request("POST", "/v3/watch", body, headers(extra))
                response = connection.getresponse()
                if response.status != 200:
                    error = error_from_answer(str(endpoint), response.status, response.read())
                    raise transport.failed(endpoint, error)
                return self._events(endpoint, connection.sock, response, deadline)
        except EtcdError:
            raise
        except (OSError, http.client.HTTPException, ValueError) as error:
            transport.check_open()  # close() ended the watch
            asked = transport.asked_for_a_certificate(error)  # a watch's connection is new
            raise transport.failed(endpoint, unreachable(endpoint, error, asked)) from error

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
            wait = deadline - time.monotonic() if created else time_left(self._transport.timeout)
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
                raise self._transport.failed(endpoint, error_from_answer(str(endpoint), 200, line))
            result = message.get("result", {})
            self._transport.same_cluster(endpoint, result)
            created = created or bool(result.get("created"))
            if result.get("canceled"):
                raise self._transport.failed(endpoint, canceled(str(endpoint), result))
            if result.get("events"):
                return tuple(event_of(event) for event in result["events"])
