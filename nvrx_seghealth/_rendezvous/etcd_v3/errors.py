"""The etcd-v3 room's errors, and the mapping of an answer or a failure to them.

- :class:`EtcdUnavailable`: a member did not answer, or cannot now; asking again, on
  the next member, may work.
- :class:`EtcdRefused`: the cluster answered no; its ``cause`` is a stable token and
  its message names the fix.
- :func:`error_from_answer` reads an HTTP answer that is not 200, as etcd 3.4, 3.5 and
  3.6 write it; :func:`unreachable` reads a connection that failed; :func:`canceled`
  reads a watch the member ended.
- A cause etcd names wins; else a 5xx status, a gRPC code or words of etcd's message
  make an error transient.

It does no I/O and imports only the package's error base.
"""

from __future__ import annotations

import json
import ssl
from typing import Any

from ..._errors import SegmentHealthError
from .endpoints import Endpoint

__all__ = [
    "FIXES",
    "PERMISSION_DENIED",
    "UNAUTHENTICATED",
    "EtcdError",
    "EtcdRefused",
    "EtcdUnavailable",
    "canceled",
    "error_from_answer",
    "unreachable",
]

# gRPC status codes that etcd's answers carry.
_DEADLINE_EXCEEDED = 4
PERMISSION_DENIED = 7
_UNAVAILABLE = 14
UNAUTHENTICATED = 16
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
FIXES = {
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
    if cause is None and code == UNAUTHENTICATED:
        cause = "auth"
    elif cause is None and code == PERMISSION_DENIED:
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
        f"{FIXES[cause]}: etcd at {member} answered {message!r} (HTTP {status}, code {code})",
        code=code,
        cause=cause,
        member=member,
        detail=message,
    )


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


def unreachable(
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


def canceled(member: str, result: dict[str, Any]) -> EtcdUnavailable | EtcdRefused:
    """The error of a watch the member canceled: compacted, or its ``cancel_reason``."""
    compacted = int(result.get("compact_revision", 0))
    if compacted:
        return EtcdRefused(
            f"{FIXES['compacted']}: etcd at {member} compacted through revision {compacted}",
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
