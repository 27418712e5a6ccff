"""What a user names to reach etcd: the members' endpoints, the TLS files, a user.

- :func:`parse_endpoints` reads ``--rdzv-endpoint`` once, where the setting enters, and
  raises :class:`~..._errors.ConfigurationError` naming the form to write.
- :class:`Endpoint`, :class:`Tls` and :class:`Credentials` are frozen values the
  transport trusts; a password never shows in a ``repr``.

- :func:`ssl_context` checks the TLS files once and builds the context of every
  https connection.

It imports only the standard library and the package's error base.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field

from ..._errors import ConfigurationError

__all__ = ["DEFAULT_PORT", "Credentials", "Endpoint", "Tls", "parse_endpoints", "ssl_context"]

#: etcd's client port, when an endpoint names none.
DEFAULT_PORT = 2379


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


def ssl_context(tls: Tls | None) -> ssl.SSLContext:
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
