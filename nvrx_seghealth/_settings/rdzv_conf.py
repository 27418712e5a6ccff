"""Configuration of the registered backend, from ``--rdzv-conf`` and the environment.

The keys, their ranges and defaults are in docs/reference/backend.md:
``segment_health_check_dir``, ``segment_health_check_stat_timeout``,
``segment_health_check_handoff_timeout``, ``segment_health_check_watch_interval`` and
``inner_backend``. The rules:

- Every key of ours is removed before the rest reaches the inner backend.
- Without ``segment_health_check_dir``, ``NVRX_SEGMENT_HEALTH_CHECK_DIR`` is used; an empty
  value counts as unset.
- With no directory at all, the check is off and the backend passes everything through.
- Every value is validated here, once, before any rendezvous; the layers below trust the
  :class:`~.check_settings.CheckSettings` they get.
- A bad value raises :class:`ConfigurationError` naming the key and the fix.
- A key that looks like ours but is not is refused with the closest valid key. Passed on,
  the inner backend would ignore it, and the check would be off without a word.
- A ``segment_health_check_*`` key without any directory is refused too. The usual cause is
  ``NVRX_SEGMENT_HEALTH_CHECK_DIR`` not exported by srun.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import ConfigurationError
from .._rendezvous import registry
from .._rendezvous.registry import INNER_BACKEND_KEY
from .check_settings import (
    DIRECTORY_ENV,
    ENVIRONMENT_SOURCE,
    CheckSettings,
    check_settings,
    directory_from_environment,
)
from .durations import DEFAULT_STAT_TIMEOUT

__all__ = [
    "DIRECTORY_KEY",
    "HANDOFF_TIMEOUT_KEY",
    "INNER_BACKEND_KEY",
    "STAT_TIMEOUT_KEY",
    "WATCH_INTERVAL_KEY",
    "BackendSettings",
    "lookalike",
]

DIRECTORY_KEY = "segment_health_check_dir"
STAT_TIMEOUT_KEY = "segment_health_check_stat_timeout"
HANDOFF_TIMEOUT_KEY = "segment_health_check_handoff_timeout"
WATCH_INTERVAL_KEY = "segment_health_check_watch_interval"


#: The keys this package reads from ``--rdzv-conf``.
OUR_KEYS = (
    DIRECTORY_KEY,
    STAT_TIMEOUT_KEY,
    HANDOFF_TIMEOUT_KEY,
    WATCH_INTERVAL_KEY,
    INNER_BACKEND_KEY,
)


#: The keys that set up a check, which no directory turns on.
_CHECK_KEYS = (STAT_TIMEOUT_KEY, HANDOFF_TIMEOUT_KEY, WATCH_INTERVAL_KEY)


#: The composition API's names of the rdzv-conf keys, refused there with the key meant.
_ARGUMENT_NAMES = {
    "stat_timeout": STAT_TIMEOUT_KEY,
    "handoff_timeout": HANDOFF_TIMEOUT_KEY,
    "watch_interval": WATCH_INTERVAL_KEY,
}


def lookalike(key: str, known: Iterable[str]) -> str | None:
    """The known setting that ``key`` was probably meant to be, or ``None``.

    A key looks like one of ours when, compared without regard to case or to ``-``
    against ``_``, it is a close misspelling of a known key, contains
    ``segment_health``, or is a composition argument's name for one (see the module
    documentation): passed on, it would be ignored, and the check would be off (or
    differently bound) without a word.
    """
    known = list(known)
    if key in known:
        return None
    folded = key.lower().replace("-", "_")
    by_folded = {name.lower().replace("-", "_"): name for name in known}
    if folded in by_folded:
        return by_folded[folded]
    if folded in _ARGUMENT_NAMES and _ARGUMENT_NAMES[folded] in known:
        return _ARGUMENT_NAMES[folded]
    matches = difflib.get_close_matches(folded, list(by_folded), n=1, cutoff=0.8)
    if matches:
        return by_folded[matches[0]]
    if "segment_health" in folded:
        return by_folded[difflib.get_close_matches(folded, list(by_folded), n=1, cutoff=0.0)[0]]
    return None


def _refuse_lookalikes(config: Mapping[str, Any]) -> None:
    for key in config:
        meant = lookalike(str(key), OUR_KEYS)
        if meant is not None:
            raise ConfigurationError(
                f"rdzv-conf {key} is not a segment-health setting (did you mean {meant}?); "
                f"the settings are {', '.join(OUR_KEYS)}",
                setting=f"rdzv-conf {key}",
            )


def _directory(config: Mapping[str, Any], environ: Mapping[str, str] | None) -> tuple[Any, str]:
    """The directory as written (``None``: nothing gives one) and how it was given."""
    if DIRECTORY_KEY not in config:
        return directory_from_environment(environ), ENVIRONMENT_SOURCE
    value = config[DIRECTORY_KEY]
    if value in ("", None):
        raise ConfigurationError(
            f"rdzv-conf {DIRECTORY_KEY} is empty; give the absolute decision directory, or "
            "omit the key to disable the segment health check",
            setting=f"rdzv-conf {DIRECTORY_KEY}",
        )
    return value, f"rdzv-conf {DIRECTORY_KEY}"


def _refuse_keys_without_directory(config: Mapping[str, Any]) -> None:
    """Refuse the check's keys in ``config`` when no directory turns the check on."""
    given = [key for key in _CHECK_KEYS if key in config]
    if given:
        keys = ",".join(f"{key}={config[key]}" for key in given)
        raise ConfigurationError(
            f"rdzv-conf {keys} would do nothing: the segment health check is off, since "
            f"neither rdzv-conf {DIRECTORY_KEY} nor {DIRECTORY_ENV} gives a directory (is "
            f"{DIRECTORY_ENV} exported to the launchers, e.g. by srun --export?); give "
            f"{DIRECTORY_KEY}=DIR, export {DIRECTORY_ENV}, or drop the keys",
            setting=f"rdzv-conf {given[0]}",
        )


def _inner_backend(config: Mapping[str, Any]) -> str:
    backends = registry.names()
    value = config.get(INNER_BACKEND_KEY, backends[0])
    if value not in backends:
        raise ConfigurationError(
            f"rdzv-conf {INNER_BACKEND_KEY}={value!r} is not supported; use one of "
            f"{', '.join(backends)} (the inner backend must share its store for "
            "replacement-group markers)",
            setting=f"rdzv-conf {INNER_BACKEND_KEY}",
        )
    return str(value)


@dataclass(frozen=True)
class BackendSettings:
    """The validated settings of one ``segment-health`` rendezvous handler.

    Attributes:
        check: the check's settings, or ``None`` (no directory: the check is off).
        inner_backend: ``c10d``, ``etcd-v2`` or ``etcd-v3``.
        inner_config: the rendezvous configuration without this package's keys.
    """

    check: CheckSettings | None
    inner_backend: str
    inner_config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_rdzv_config(
        cls, config: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> BackendSettings:
        """Validate ``config`` (``RendezvousParameters.config``) and the environment
        (``environ``, default ``os.environ``).

        Raises:
            ConfigurationError: a value is invalid, or a key of the check is given without
                any directory.
        """
        _refuse_lookalikes(config)
        directory, directory_as = _directory(config, environ)
        check = check_settings(
            directory,
            stat_timeout=config.get(STAT_TIMEOUT_KEY, DEFAULT_STAT_TIMEOUT),
            handoff_timeout=config.get(HANDOFF_TIMEOUT_KEY),
            watch_interval=config.get(WATCH_INTERVAL_KEY, 0.0),
            directory_as=directory_as,
            stat_timeout_as=f"rdzv-conf {STAT_TIMEOUT_KEY}",
            handoff_timeout_as=f"rdzv-conf {HANDOFF_TIMEOUT_KEY}",
            watch_interval_as=f"rdzv-conf {WATCH_INTERVAL_KEY}",
        )
        if check is None:
            _refuse_keys_without_directory(config)
        return cls(
            check=check,
            inner_backend=_inner_backend(config),
            inner_config={k: v for k, v in config.items() if k not in OUR_KEYS},
        )
