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

Without ``segment_health_check_dir`` the environment variable
``NVRX_SEGMENT_HEALTH_CHECK_DIR`` is used (empty counts as unset); with neither, the
check is disabled and the backend is a pure pass-through. Every value is validated
here, before any rendezvous starts, and a bad one raises :class:`ConfigurationError`
naming the key and the fix.

Does not import torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
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
]

DIRECTORY_KEY = "segment_health_check_dir"
STAT_TIMEOUT_KEY = "segment_health_check_stat_timeout"
HANDOFF_TIMEOUT_KEY = "segment_health_check_handoff_timeout"
INNER_BACKEND_KEY = "inner_backend"
DIRECTORY_ENV = "NVRX_SEGMENT_HEALTH_CHECK_DIR"
INNER_BACKENDS = ("c10d", "etcd-v2")


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
        ours = (DIRECTORY_KEY, STAT_TIMEOUT_KEY, HANDOFF_TIMEOUT_KEY, INNER_BACKEND_KEY)
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
            inner_config={k: v for k, v in config.items() if k not in ours},
        )
