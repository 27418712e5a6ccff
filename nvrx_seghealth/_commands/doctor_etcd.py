"""``nvrx-seghealth doctor --etcd``: the findings about an etcd-v3 endpoint list.

Each member the list names is asked alone (:func:`etcd_findings`): whether it answers, its
version and database size, and whether it can authenticate the user the settings give.
A member of another cluster than the first that answered is a ``FAIL`` (a launcher that
fails over to it splits the run). Then, from the first member that answers: the
cluster's alarms (``NOSPACE`` stops every write: a ``FAIL`` with the fix), named
endpoints no member advertises (a ``warn``), and members the list does not name (a
launcher cannot reach them once the named ones die: a ``hint``). No member answering is a ``FAIL``; some
not answering is a ``warn`` (the job lives while a majority answers). Nothing is written.

The settings are the launchers' own ``--rdzv-conf`` keys (``protocol``, ``ca_cert``,
``user``, ``password_file``, ...), validated by the etcd-v3 room's settings.
"""

from __future__ import annotations

from typing import Any

from .._decision.preflight import Finding, Level
from .._errors import ConfigurationError
from .._rendezvous.etcd_v3 import ATTEMPT_TIMEOUT
from .._rendezvous.etcd_v3.client import EtcdClient
from .._rendezvous.etcd_v3.errors import EtcdError, EtcdRefused
from .._rendezvous.etcd_v3.keys import ROOT
from .._rendezvous.etcd_v3.settings import EtcdV3Settings

__all__ = ["etcd_findings", "parse_conf"]


def parse_conf(text: str) -> dict[str, str]:
    """``key=value,key=value`` (torchrun's ``--rdzv-conf`` format) as a dict.

    Raises:
        ConfigurationError: an item has no ``=``.
    """
    conf: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise ConfigurationError(
                f"--etcd-conf {item!r} is not KEY=VALUE (as torchrun's --rdzv-conf)",
                setting="--etcd-conf",
            )
        conf[key.strip()] = value.strip()
    return conf


def etcd_findings(endpoints: str, conf_text: str) -> list[Finding]:
    """The findings about the etcd cluster ``endpoints`` names (see the module)."""
    try:
        settings = EtcdV3Settings.from_conf(endpoints, parse_conf(conf_text))
    except ConfigurationError as error:
        return [Finding(Level.FAIL, str(error))]
    findings: list[Finding] = []
    answering: list[EtcdClient] = []
    clusters: dict[str, str] = {}  # endpoint -> the cluster id it answered with
    for endpoint in settings.endpoints:
        client = EtcdClient(
            (endpoint,),
            attempt_timeout=min(settings.read_timeout, ATTEMPT_TIMEOUT),
            tls=settings.tls,
            protocol=settings.protocol,
            credentials=settings.credentials,
        )
        finding, cluster = _member_finding(client, settings)
        findings.append(finding)
        if finding.level is Level.OK:
            answering.append(client)
            clusters[str(endpoint)] = cluster
        else:
            client.close()
    if not answering:
        findings.append(
            Finding(
                Level.FAIL,
                (
                    f"no etcd member of {endpoints} answers: start etcd, or fix "
                    "--rdzv-endpoint and the TLS and user settings"
                ),
            )
        )
        return findings
    if len(answering) < len(settings.endpoints):
        findings.append(
            Finding(
                Level.WARN,
                (
                    f"{len(answering)} of {len(settings.endpoints)} named members answer: the "
                    "job runs while a majority of the cluster answers"
                ),
            )
        )
    findings += _other_clusters(clusters)
    findings += _cluster_findings(answering[0], settings)
    for client in answering:
        client.close()
    return findings


def _member_finding(client: EtcdClient, settings: EtcdV3Settings) -> tuple[Finding, str]:
    """Whether one member answers a status and, with a user, an authenticated read; the
    cluster id it answered with."""
    try:
        status = client.status()
        if settings.credentials is not None:  # a read needs the user's token
            _read_as_user(client)
    except EtcdError as error:
        finding = Finding(Level.WARN, f"etcd member {client.member} does not answer: {error}")
        return finding, ""
    size = int(status.get("dbSize", 0)) / 2**20
    as_user = f", user {settings.credentials.user} logged in" if settings.credentials else ""
    cluster = str(status.get("header", {}).get("cluster_id", ""))
    return Finding(
        Level.OK,
        (
            f"etcd member {client.member} answers: etcd {status.get('version', '?')}, database "
            f"{size:.1f} MiB{as_user}, cluster {cluster}"
        ),
    ), cluster


def _read_as_user(client: EtcdClient) -> None:
    """A read with the user's token: a user confined to its run's keys may not read the
    others, and that refusal still proves its credentials."""
    try:
        client.range(ROOT, count_only=True)
    except EtcdRefused as refused:
        if refused.cause != "permission":
            raise


def _other_clusters(clusters: dict[str, str]) -> list[Finding]:
    """A ``FAIL`` for each named member of another cluster than the first that answered:
    launchers that fail over to it would split the run in two."""
    first, pinned = next(iter(clusters.items()))
    return [
        Finding(
            Level.FAIL,
            (
                f"etcd member {endpoint} belongs to cluster {cluster}, not to cluster {pinned} "
                f"of {first}: name only one cluster's members in --rdzv-endpoint"
            ),
        )
        for endpoint, cluster in clusters.items()
        if cluster != pinned
    ]


def _cluster_findings(client: EtcdClient, settings: EtcdV3Settings) -> list[Finding]:
    """The cluster's alarms and the members the endpoint list leaves out."""
    findings: list[Finding] = []
    try:
        alarms = client.alarms()
        members = client.members()
    except EtcdError as error:
        return [
            Finding(Level.WARN, f"etcd member {client.member} did not list the cluster: {error}")
        ]
    if "NOSPACE" in alarms:
        findings.append(
            Finding(
                Level.FAIL,
                (
                    "etcd raised NOSPACE: every write fails until an operator compacts, "
                    "defragments and disarms it (etcdctl compact, etcdctl defrag, etcdctl alarm "
                    "disarm; docs/cluster.md)"
                ),
            )
        )
    elif alarms:
        findings.append(Finding(Level.WARN, f"etcd alarms raised: {', '.join(alarms)}"))
    else:
        findings.append(Finding(Level.OK, f"etcd has no alarm; {len(members)} members"))
    named = {str(endpoint) for endpoint in settings.endpoints}
    missing = [_name(member) for member in members if not _client_urls(member) & named]
    listed = set().union(*(_client_urls(member) for member in members))
    strangers = sorted(named - listed)
    if strangers:
        findings.append(
            Finding(
                Level.WARN,
                (
                    f"named etcd endpoints {', '.join(strangers)} are no client URL of a "
                    f"member of {client.member}'s cluster: name each member by a client URL "
                    "it advertises"
                ),
            )
        )
    if missing:
        findings.append(
            Finding(
                Level.HINT,
                (
                    f"--rdzv-endpoint leaves out etcd members {', '.join(missing)}: name every "
                    "member, or the launchers lose etcd when the named ones die"
                ),
            )
        )
    return findings


def _client_urls(member: dict[str, Any]) -> set[str]:
    """A member's client URLs as ``host:port``."""
    return {url.split("://", 1)[-1].rstrip("/") for url in member.get("clientURLs", [])}


def _name(member: dict[str, Any]) -> str:
    urls = ",".join(sorted(_client_urls(member)))
    return f"{member.get('name', '?')} ({urls})"
