"""The backends' key tables (docs/reference/backend.md, etcd-v3.md) are the keys the code
reads, with the defaults and ranges it applies.

- ``segment-health``: the keys are ``OUR_KEYS``; each default is what
  :meth:`BackendSettings.from_rdzv_config` makes of a directory alone.
- ``etcd-v3``: the keys are those :meth:`EtcdV3Settings.from_conf` asks its ``--rdzv-conf``
  for, on every path through it (a recording mapping), and the defaults are its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from harness.docs import section
from nvrx_seghealth._rendezvous import registry
from nvrx_seghealth._rendezvous.etcd_v3.settings import PASSWORD_ENV, EtcdV3Settings
from nvrx_seghealth._settings import durations
from nvrx_seghealth._settings.rdzv_conf import (
    DIRECTORY_KEY,
    HANDOFF_TIMEOUT_KEY,
    INNER_BACKEND_KEY,
    OUR_KEYS,
    STAT_TIMEOUT_KEY,
    WATCH_INTERVAL_KEY,
    BackendSettings,
)

_CODE = re.compile(r"`([^`]+)`")


def _keys(page: str, heading: str) -> dict[str, tuple[str, str]]:
    """The ``| key | meaning | default |`` table of ``page``: (meaning, default) by key;
    a row of two keys (``a``, ``b``) gives both."""
    text = section(page, heading)
    lines = text[text.index("| key | meaning | default |") :].split("\n\n", 1)[0].splitlines()
    rows = {}
    for line in lines[2:]:
        keys, meaning, default = [c.strip() for c in line.strip().strip("|").split(" | ")]
        for key in _CODE.findall(keys):
            rows[key] = (meaning, default)
    return rows


def _number(cell: str) -> float:
    return float(next(code for code in _CODE.findall(cell) if re.fullmatch(r"[0-9.]+", code)))


def test_the_segment_health_keys_are_the_code_s():
    rows = _keys("docs/reference/backend.md", "The torchrun backend")
    assert set(rows) == set(OUR_KEYS)
    check = BackendSettings.from_rdzv_config({DIRECTORY_KEY: "/shared/job"}, environ={}).check
    assert check is not None
    assert _number(rows[STAT_TIMEOUT_KEY][1]) == check.stat_timeout
    assert _number(rows[HANDOFF_TIMEOUT_KEY][1]) == check.handoff_timeout
    assert _number(rows[WATCH_INTERVAL_KEY][1]) == check.watch_interval
    for key, setting in (
        (STAT_TIMEOUT_KEY, durations.STAT_TIMEOUT),
        (HANDOFF_TIMEOUT_KEY, durations.HANDOFF_TIMEOUT),
        (WATCH_INTERVAL_KEY, durations.WATCH_INTERVAL),
    ):
        assert setting.range_text.removeprefix("0, or ") in _CODE.findall(rows[key][0]), key
    meaning, default = rows[INNER_BACKEND_KEY]
    assert _CODE.findall(default) == [registry.names()[0]]
    assert set(registry.names()) <= set(_CODE.findall(meaning))


class _Asked(Mapping[str, Any]):
    """A ``--rdzv-conf`` that records every key asked of it."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._given = values
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.asked.add(key)
        return self._given[key]

    def __contains__(self, key: object) -> bool:
        self.asked.add(str(key))
        return key in self._given

    def get(self, key: str, default: Any = None) -> Any:
        self.asked.add(key)
        return self._given.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._given)

    def __len__(self) -> int:
        return len(self._given)


def test_the_etcd_v3_keys_are_those_its_settings_read(tmp_path):
    password = tmp_path / "password"
    password.write_text("secret\n")
    conf = _Asked(
        {
            "protocol": "https",
            "ca_cert": "ca.pem",
            "ssl_cert": "c.pem",
            "ssl_cert_key": "k.pem",
            "user": "u",
            "password_file": str(password),
        }
    )
    EtcdV3Settings.from_conf("etcd1:2379", conf, environ={})
    plain = _Asked({"user": "u"})
    defaults = EtcdV3Settings.from_conf("etcd1:2379", plain, environ={PASSWORD_ENV: "x"})
    asked = conf.asked | plain.asked
    rows = _keys("docs/reference/etcd-v3.md", "Settings")
    # password= is read only to be refused; the page says so below the table
    assert set(rows) == asked - {"password"}
    assert "`password=` is refused" in section("docs/reference/etcd-v3.md", "Settings")
    assert _number(rows["read_timeout"][1]) == defaults.read_timeout
    assert _number(rows["lease_ttl"][1]) == defaults.lease_ttl
    assert _CODE.findall(rows["protocol"][1]) == [defaults.protocol]
