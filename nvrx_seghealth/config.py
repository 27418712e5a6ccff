"""Configuration of the registered backend, from ``--rdzv-conf`` and the environment.

Keys read from the rendezvous configuration (``--rdzv-conf k=v,...``), all removed
before the rest is handed to the inner backend:

========================================  ========================================  ==========
key                                       meaning                                   default
========================================  ========================================  ==========
``segment_health_check_dir``              absolute decision directory               see below
``segment_health_check_stat_timeout``     seconds one artifact ``stat`` may take     10
``segment_health_check_handoff_timeout``  seconds a sibling waits for process 0's    stat bound
                                          verdict; ``0`` turns the hand-off off     + 20
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

from .artifact import DEFAULT_STAT_TIMEOUT, require_absolute_directory
from .handoff import validate_handoff_timeout

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


class ConfigurationError(ValueError):
    """A segment-health setting is invalid; the message names the setting and the fix."""


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


def _stat_timeout(config: Mapping[str, Any]) -> float:
    value = config.get(STAT_TIMEOUT_KEY, DEFAULT_STAT_TIMEOUT)
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ConfigurationError(
            f"rdzv-conf {STAT_TIMEOUT_KEY}={value!r} must be a positive, finite number of "
            f"seconds (e.g. {STAT_TIMEOUT_KEY}={DEFAULT_STAT_TIMEOUT:g})"
        )
    return seconds


def _handoff_timeout(config: Mapping[str, Any]) -> float | None:
    if HANDOFF_TIMEOUT_KEY not in config:
        return None
    value = config[HANDOFF_TIMEOUT_KEY]
    try:
        return validate_handoff_timeout(float(value))
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"rdzv-conf {HANDOFF_TIMEOUT_KEY}={value!r} must be a finite number of seconds "
            f">= 0: how long the other launchers of an array task wait for process 0's "
            f"verdict (e.g. {HANDOFF_TIMEOUT_KEY}=30; 0 turns the hand-off off)"
        ) from None


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
            default (:func:`~.handoff.default_handoff_timeout`); ``0``: no hand-off.
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
            stat_timeout=_stat_timeout(config),
            handoff_timeout=_handoff_timeout(config),
            inner_backend=_inner_backend(config),
            inner_config={k: v for k, v in config.items() if k not in ours},
        )
