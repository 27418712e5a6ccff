"""etcd's v3 JSON gateway, as data: the shapes of requests and answers, no I/O.

- Keys and values travel base64-encoded, 64-bit integers as strings, and the gateway
  leaves default fields out: the readers here default them.
- :func:`put`, :func:`get`, :func:`delete` and the compares build a transaction's
  parts; :func:`span` and :func:`headers` build a call's body and headers.
- Every call requires a leader (:data:`REQUIRE_LEADER`): a member cut from its peers
  refuses at once instead of answering from a stale copy.
- :func:`range_of` and :func:`event_of` read answers into frozen values.

It imports only the standard library.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

__all__ = [
    "REQUIRE_LEADER",
    "Compare",
    "Event",
    "KeyValue",
    "Op",
    "Range",
    "TxnResult",
    "create_revision_is",
    "delete",
    "event_of",
    "get",
    "headers",
    "mod_revision_is",
    "prefix_end",
    "put",
    "range_of",
    "revision_of",
    "span",
    "value_is",
]

#: etcd's require-leader metadata, through the gateway: a member cut from its leader
#: refuses the call at once ("no leader"), and ends a watch when it loses its leader.
REQUIRE_LEADER = "Grpc-Metadata-hasleader"

#: A compare of a transaction, as the gateway takes it (:func:`mod_revision_is`, ...).
Compare = dict[str, Any]
#: An operation of a transaction, as the gateway takes it (:func:`put`, :func:`get`, ...).
Op = dict[str, Any]


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
    return {"request_range": span(key, range_end)}


def delete(key: bytes, range_end: bytes | None = None) -> Op:
    """An op: delete ``key`` (or ``[key, range_end)``)."""
    return {"request_delete_range": span(key, range_end)}


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that covers every key starting with ``prefix``."""
    end = bytearray(prefix.rstrip(b"\xff"))
    if not end:
        return b"\0"  # etcd's "every key from the start key on"
    end[-1] += 1
    return bytes(end)


def headers(extra: dict[str, str]) -> dict[str, str]:
    """A call's headers: JSON, a leader required, and ``extra`` (a token)."""
    return {"Content-Type": "application/json", REQUIRE_LEADER: "true", **extra}


def span(key: bytes, range_end: bytes | None) -> dict[str, Any]:
    """The body of a call on ``key`` (or ``[key, range_end)``)."""
    body = {"key": _b64(key)}
    if range_end is not None:
        body["range_end"] = _b64(range_end)
    return body


def revision_of(answer: dict[str, Any]) -> int:
    """The store's revision an answer's header names (0 without one)."""
    return int(answer.get("header", {}).get("revision", 0))


def range_of(answer: dict[str, Any], revision: int) -> Range:
    """The :class:`Range` of a range answer; ``revision`` when it has no header."""
    kvs = tuple(_key_value(kv) for kv in answer.get("kvs", ()))
    return Range(kvs, int(answer.get("count", 0)), revision_of(answer) or revision)


def _key_value(kv: dict[str, Any]) -> KeyValue:
    return KeyValue(
        key=_unb64(kv.get("key", "")),
        value=_unb64(kv.get("value", "")),
        create_revision=int(kv.get("create_revision", 0)),
        mod_revision=int(kv.get("mod_revision", 0)),
        version=int(kv.get("version", 0)),
        lease=int(kv.get("lease", 0)),
    )


def event_of(event: dict[str, Any]) -> Event:
    """The :class:`Event` of one of a watch's events."""
    return Event("delete" if event.get("type") == "DELETE" else "put", _key_value(event["kv"]))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)
