"""The settings of an etcd-v3 rendezvous, validated once: :class:`EtcdV3Settings`.

They come from torchrun's ``--rdzv-endpoint`` and ``--rdzv-conf`` (torch's
``RendezvousParameters``). The keys torch's etcd-v2 takes mean the same here:

- ``--rdzv-endpoint``: one ``host:port`` or a comma-separated list, every member of the
  cluster (etcd's own convention); the port defaults to 2379;
- ``read_timeout`` (seconds, default 60): how long a call is retried across the members;
- ``protocol`` (``http`` or ``https``), ``ca_cert``, ``ssl_cert``, ``ssl_cert_key``;
- ``user``: etcd's authentication; the password comes from ``password_file`` or the
  environment variable :data:`PASSWORD_ENV`, never from the command line, where every
  account on the node could read it;
- ``lease_ttl`` (seconds, default 600): how long a run's keys outlive its last launcher.

Anything else in ``--rdzv-conf`` is torch's (``join_timeout``, ...) and left to it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..._errors import ConfigurationError
from .endpoints import Credentials, Endpoint, Tls, parse_endpoints

__all__ = ["DEFAULT_LEASE_TTL", "DEFAULT_READ_TIMEOUT", "PASSWORD_ENV", "EtcdV3Settings"]

#: Seconds a call to etcd is retried across the members, as torch's etcd-v2 default.
DEFAULT_READ_TIMEOUT = 60.0
#: Seconds the keys of a run outlive its last launcher.
DEFAULT_LEASE_TTL = 600
#: The environment variable holding the etcd user's password (without ``password_file``).
PASSWORD_ENV = "NVRX_SEGHEALTH_ETCD_PASSWORD"


@dataclass(frozen=True)
class EtcdV3Settings:
    """What an etcd-v3 rendezvous connects to and how; see the module documentation."""

    endpoints: tuple[Endpoint, ...]
    read_timeout: float
    protocol: str
    tls: Tls | None
    credentials: Credentials | None
    lease_ttl: int

    @classmethod
    def from_conf(
        cls, endpoint: str, conf: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> EtcdV3Settings:
        """Validate ``--rdzv-endpoint`` and ``--rdzv-conf`` (``conf``) and the environment
        (``environ``, default ``os.environ``).

        Raises:
            ConfigurationError: a value is invalid; the message names it and the fix.
        """
        environ = os.environ if environ is None else environ
        if "password" in conf:
            raise ConfigurationError(
                "rdzv-conf password would put the etcd password on the command line, where "
                f"every account on the node can read it; give password_file=PATH or export "
                f"{PASSWORD_ENV}",
                setting="rdzv-conf password",
            )
        protocol = str(conf.get("protocol", "http")).strip().lower()
        if protocol not in ("http", "https"):
            raise ConfigurationError(
                f"rdzv-conf protocol={conf['protocol']!r} is not http or https",
                setting="rdzv-conf protocol",
            )
        tls = _tls(conf, protocol)
        return cls(
            endpoints=parse_endpoints(endpoint),
            read_timeout=_positive(conf, "read_timeout", DEFAULT_READ_TIMEOUT),
            protocol=protocol,
            tls=tls,
            credentials=_credentials(conf, environ),
            lease_ttl=int(_positive(conf, "lease_ttl", DEFAULT_LEASE_TTL)),
        )


def _positive(conf: Mapping[str, Any], key: str, default: float) -> float:
    value = conf.get(key, default)
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not number > 0 or number == float("inf"):
        raise ConfigurationError(
            f"rdzv-conf {key}={value!r} is not a positive number of seconds",
            setting=f"rdzv-conf {key}",
        )
    return number


def _tls(conf: Mapping[str, Any], protocol: str) -> Tls | None:
    """The TLS files; the client checks that it can read and use them when it starts."""
    paths = {key: conf.get(key) or None for key in ("ca_cert", "ssl_cert", "ssl_cert_key")}
    given = [key for key, path in paths.items() if path]
    if not given:
        return None
    if protocol != "https":
        raise ConfigurationError(
            f"rdzv-conf {given[0]} needs protocol=https (the certificates are unused over http)",
            setting=f"rdzv-conf {given[0]}",
        )
    return Tls(ca_cert=paths["ca_cert"], cert=paths["ssl_cert"], key=paths["ssl_cert_key"])


def _credentials(conf: Mapping[str, Any], environ: Mapping[str, str]) -> Credentials | None:
    user = conf.get("user")
    path = conf.get("password_file")
    if not user:
        if path:
            raise ConfigurationError(
                "rdzv-conf password_file needs user=NAME", setting="rdzv-conf password_file"
            )
        return None
    if path:
        try:
            with open(path, encoding="utf-8") as file:
                password = file.read().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigurationError(
                f"rdzv-conf password_file={path} cannot be read: {error}",
                setting="rdzv-conf password_file",
            ) from None
    elif PASSWORD_ENV in environ:
        password = environ[PASSWORD_ENV]
    else:
        raise ConfigurationError(
            f"rdzv-conf user={user} has no password: give password_file=PATH (readable by "
            f"this account alone) or export {PASSWORD_ENV}",
            setting="rdzv-conf user",
        )
    return Credentials(user=str(user), password=password)
