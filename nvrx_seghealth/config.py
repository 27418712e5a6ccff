"""Configuration of the registered backend, from ``--rdzv-conf`` and the environment.

Keys read from the rendezvous configuration (``--rdzv-conf k=v,...``), all removed
before the rest is handed to the inner backend:

========================================  ========================================  ==========
key                                       meaning                                   default
========================================  ========================================  ==========
``segment_health_check_dir``              absolute decision directory               see below
``segment_health_check_stat_timeout``     seconds one artifact ``stat`` may take,    10
                                          in (0, 600]
``segment_health_check_handoff_timeout``  seconds a sibling waits for process 0's    stat bound
                                          verdict, in [0, 3600]; ``0`` turns the    + 20
                                          hand-off off
``inner_backend``                         the rendezvous that does the work         ``c10d``
========================================  ========================================  ==========

A key that looks like one of these but is not (``segment_health_chek_dir``, any other
``segment_health*`` key) is refused with the closest valid key: passed on, the inner
backend would ignore it and the check would be off without a word.

Without ``segment_health_check_dir`` the environment variable
``NVRX_SEGMENT_HEALTH_CHECK_DIR`` is used (empty counts as unset); with neither, the
check is disabled and the backend is a pure pass-through. Every value is validated
here, before any rendezvous starts, and a bad one raises :class:`ConfigurationError`
naming the key and the fix.

Does not import torch.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .artifact import require_absolute_directory
from .durations import (
    DEFAULT_STAT_TIMEOUT,
    HANDOFF_TIMEOUT,
    STAT_TIMEOUT,
    DurationSetting,
    validate_seconds,
)
from .errors import ConfigurationError

__all__ = [
    "DIRECTORY_ENV",
    "DIRECTORY_KEY",
    "HANDOFF_TIMEOUT_KEY",
    "INNER_BACKENDS",
    "INNER_BACKEND_KEY",
    "STAT_TIMEOUT_KEY",
    "BackendSettings",
    "ConfigurationError",
    "lookalike",
]

DIRECTORY_KEY = "segment_health_check_dir"
STAT_TIMEOUT_KEY = "segment_health_check_stat_timeout"
HANDOFF_TIMEOUT_KEY = "segment_health_check_handoff_timeout"
INNER_BACKEND_KEY = "inner_backend"
DIRECTORY_ENV = "NVRX_SEGMENT_HEALTH_CHECK_DIR"
INNER_BACKENDS = ("c10d", "etcd-v2")


#: The keys this package reads from ``--rdzv-conf``.
OUR_KEYS = (DIRECTORY_KEY, STAT_TIMEOUT_KEY, HANDOFF_TIMEOUT_KEY, INNER_BACKEND_KEY)


def lookalike(key: str, known: Iterable[str]) -> str | None:
    """The known setting that ``key`` was probably meant to be, or ``None``.

    A key looks like one of ours when it starts with ``segment_health`` or is a close
    misspelling of a known key: passed on, it would be ignored, and the check would be
    off (or differently bound) without a word.
    """
    known = list(known)
    if key in known:
        return None
    matches = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
    if matches:
        return matches[0]
    if key.startswith("segment_health"):
        return difflib.get_close_matches(key, known, n=1, cutoff=0.0)[0]
    return None


def _refuse_lookalikes(config: Mapping[str, Any]) -> None:
    for key in config:
        meant = lookalike(str(key), OUR_KEYS)
        if meant is not None:
            raise ConfigurationError(
                f"rdzv-conf {key} is not a segment-health setting (did you mean {meant}?); "
                f"the settings are {', '.join(OUR_KEYS)}"
            )


def _directory(config: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
    if DIRECTORY_KEY in config:
        value, what = config[DIRECTORY_KEY], f"rdzv-conf {DIRECTORY_KEY}"
        if value in ("", None):
            raise ConfigurationError(
                f"{what} is empty; give the absolute decision directory, or omit the key "
                "to disable the segment health check"
            )
    else:
        value, what = environ.get(DIRECTORY_ENV) or None, f"environment variable {DIRECTORY_ENV}"
        if value is None:
            return None
    try:
        return require_absolute_directory(str(value), what=what)
    except ValueError as error:
        raise ConfigurationError(str(error)) from None


def _seconds(config: Mapping[str, Any], key: str, setting: DurationSetting) -> float:
    return validate_seconds(setting, config[key], given_as=f"rdzv-conf {key}")


def _inner_backend(config: Mapping[str, Any]) -> str:
    value = config.get(INNER_BACKEND_KEY, INNER_BACKENDS[0])
    if value not in INNER_BACKENDS:
        raise ConfigurationError(
            f"rdzv-conf {INNER_BACKEND_KEY}={value!r} is not supported; use one of "
            f"{', '.join(INNER_BACKENDS)} (the inner backend must share its store for "
            "replacement-group markers)"
        )
    return str(value)


@dataclass(frozen=True)
class BackendSettings:
    """The validated settings of one ``segment-health`` rendezvous handler.

    Attributes:
        directory: the decision directory, or ``None`` (check disabled).
        stat_timeout: seconds one artifact ``stat`` may take.
        handoff_timeout: seconds a sibling waits for process 0's verdict; ``None``: the
            default (:func:`~.durations.default_handoff_timeout`); ``0``: no hand-off.
        inner_backend: ``c10d`` or ``etcd-v2``.
        inner_config: the rendezvous configuration without this package's keys.
    """

    directory: str | None
    stat_timeout: float
    handoff_timeout: float | None
    inner_backend: str
    inner_config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_rdzv_config(
        cls, config: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> BackendSettings:
        """Validate ``config`` (``RendezvousParameters.config``) and the environment.

        Raises:
            ConfigurationError: a value is invalid.
        """
        env = os.environ if environ is None else environ
        _refuse_lookalikes(config)
        return cls(
            directory=_directory(config, env),
            stat_timeout=(
                _seconds(config, STAT_TIMEOUT_KEY, STAT_TIMEOUT)
                if STAT_TIMEOUT_KEY in config
                else DEFAULT_STAT_TIMEOUT
            ),
            handoff_timeout=(
                _seconds(config, HANDOFF_TIMEOUT_KEY, HANDOFF_TIMEOUT)
                if HANDOFF_TIMEOUT_KEY in config
                else None
            ),
            inner_backend=_inner_backend(config),
            inner_config={k: v for k, v in config.items() if k not in OUR_KEYS},
        )
