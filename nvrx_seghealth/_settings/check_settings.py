"""The segment health check's settings, validated once, where they enter.

A setting reaches the package by one of three entry paths, and each validates what it
was given into one :class:`CheckSettings` (or ``None``: the check is off) before any
rendezvous starts:

* ``--rdzv-conf`` keys of the registered backend: :mod:`.rdzv_conf`;
* the launcher's flag, YAML field and environment: :mod:`.launcher_options` (``run`` then
  hands the directory to the backend as an ``--rdzv-conf`` key: text, to another
  process, whose backend validates it as any key);
* the composition API's arguments: ``SegmentHealthRendezvousHandler(...)``,
  ``SegmentHealthCheck(...)`` and ``get_segment_health_check(...)``, each one's
  constructor (or function) the door for its raw values.

Below the entry, every layer takes the :class:`CheckSettings` as it is (the registered
backend hands it to the handler's ``from_settings``, the handler to the coordinator and
the check's ``from_settings``): nothing is checked twice, and no layer reaches back up for a
default. ``tests/launcher/test_backend.py`` counts the validations from the backend's
creator to the stat.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from .._errors import ConfigurationError
from .durations import (
    DEFAULT_STAT_TIMEOUT,
    HANDOFF_TIMEOUT,
    STAT_TIMEOUT,
    WATCH_INTERVAL,
    default_handoff_timeout,
    validate_seconds,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "DIRECTORY_ENV",
    "ENVIRONMENT_SOURCE",
    "CheckSettings",
    "SettingsAsGiven",
    "check_settings",
    "directory_from_environment",
    "require_absolute_directory",
]

#: The environment variable every entry path falls back to for the directory.
DIRECTORY_ENV = "NVRX_SEGMENT_HEALTH_CHECK_DIR"
#: How the environment variable is named in messages.
ENVIRONMENT_SOURCE = f"environment variable {DIRECTORY_ENV}"


def directory_from_environment(environ: Mapping[str, str] | None = None) -> str | None:
    """The directory :data:`DIRECTORY_ENV` gives (``environ``, default ``os.environ``),
    as written; ``None`` when it is unset or empty."""
    return (os.environ if environ is None else environ).get(DIRECTORY_ENV) or None


def require_absolute_directory(directory: object, *, what: str = "directory") -> str:
    """Return ``directory`` as a ``str`` when it is an absolute path (a ``str`` or an
    ``os.PathLike`` of one, e.g. ``pathlib.Path``), else raise ``ConfigurationError``.

    ``what`` names the setting in the message (a CLI flag, an rdzv-conf key, ...).
    """
    if isinstance(directory, os.PathLike):
        directory = os.fspath(directory)
    if not isinstance(directory, str) or not directory:
        raise ConfigurationError(
            f"{what} must be a non-empty absolute path, got {directory!r}", setting=what
        )
    if "\0" in directory:
        raise ConfigurationError(f"{what} contains a NUL byte: {directory!r}", setting=what)
    if not os.path.isabs(directory):
        raise ConfigurationError(
            f"{what} must be an absolute path that every launcher can reach, got "
            f"{directory!r}; pass e.g. {os.path.abspath(directory)!r}",
            setting=what,
        )
    return directory


@dataclass(frozen=True)
class CheckSettings:
    """The validated settings of one launcher's segment health check.

    Built by :meth:`validate` (or :func:`check_settings`); every layer that receives
    one trusts it.

    Attributes:
        directory: the absolute decision directory.
        stat_timeout: seconds one ``stat`` of the decision file may take.
        handoff_timeout: seconds a sibling waits for process 0's verdict; ``0``: no
            hand-off.
        watch_interval: seconds between two looks of process 0 at its decision file
            while its workers run; ``0``: no watch (:mod:`..._launcher.watch`).
    """

    directory: str
    stat_timeout: float
    handoff_timeout: float
    watch_interval: float = 0.0

    @classmethod
    def validate(cls, directory: object, **given: Unpack[SettingsAsGiven]) -> CheckSettings:
        """:func:`check_settings` (the same keywords), where the check cannot be off:
        ``None`` or ``""`` as ``directory`` is refused like any other unusable directory.

        Raises:
            ConfigurationError: a value is invalid; the message names the setting.
        """
        settings = check_settings(directory, **given)
        if settings is None:  # None or "": refused as any unusable directory is
            require_absolute_directory(directory, what=given.get("directory_as", "directory"))
            raise AssertionError(f"directory {directory!r} turned the check off")
        return settings

    @property
    def handoff_enabled(self) -> bool:
        """Whether the siblings of an array task wait for process 0's verdict."""
        return self.handoff_timeout > 0

    @property
    def watch_enabled(self) -> bool:
        """Whether a decision is also acted on while the workers run."""
        return self.watch_interval > 0


class SettingsAsGiven(TypedDict, total=False):
    """The keywords of :func:`check_settings` and :meth:`CheckSettings.validate`."""

    stat_timeout: object
    handoff_timeout: object
    watch_interval: object
    directory_as: str
    stat_timeout_as: str
    handoff_timeout_as: str
    watch_interval_as: str


def check_settings(
    directory: object,
    *,
    stat_timeout: object = DEFAULT_STAT_TIMEOUT,
    handoff_timeout: object = None,
    watch_interval: object = 0.0,
    directory_as: str = "directory",
    stat_timeout_as: str = "",
    handoff_timeout_as: str = "",
    watch_interval_as: str = "",
) -> CheckSettings | None:
    """Validate the settings as the user gave them; ``None`` or ``""`` as ``directory``
    turns the check off (returns ``None``).

    The durations are validated all the same: a bad value is an error the day the
    directory is set, so it is one today.

    Args:
        directory: an absolute path.
        stat_timeout: seconds, in the range of :data:`~.durations.STAT_TIMEOUT`.
        handoff_timeout: seconds, in the range of
            :data:`~.durations.HANDOFF_TIMEOUT`; ``None``: ``stat_timeout`` plus
            :data:`~.durations.HANDOFF_MARGIN`.
        watch_interval: seconds, in the range of :data:`~.durations.WATCH_INTERVAL`;
            ``0``: no watch.
        directory_as, stat_timeout_as, handoff_timeout_as, watch_interval_as: how the
            user wrote each
            setting (a flag, an ``rdzv-conf`` key, ...), for messages; default: the
            argument's name.

    Raises:
        ConfigurationError: a value is invalid; the message names the setting.
    """
    stat, handoff = _timeouts(stat_timeout, handoff_timeout, stat_timeout_as, handoff_timeout_as)
    watch = validate_seconds(WATCH_INTERVAL, watch_interval, given_as=watch_interval_as)
    if directory is None or directory == "":
        return None
    directory = require_absolute_directory(directory, what=directory_as)
    return CheckSettings(directory, stat, handoff, watch)


def _timeouts(
    stat_timeout: object, handoff_timeout: object, stat_as: str, handoff_as: str
) -> tuple[float, float]:
    stat = validate_seconds(STAT_TIMEOUT, stat_timeout, given_as=stat_as)
    if handoff_timeout is None:
        return stat, default_handoff_timeout(stat)
    return stat, validate_seconds(HANDOFF_TIMEOUT, handoff_timeout, given_as=handoff_as)
