"""Every duration a user can set, with its finite range, validated by one function.

A timeout reaches the package three ways: a ``--rdzv-conf`` string, a launcher flag or
YAML field, or a keyword argument of the composition API. Each goes through
:func:`validate_seconds` with its :class:`DurationSetting`, so the same value is
accepted or refused with the same message whichever way it came, before any
rendezvous. Infinite, NaN, boolean and out-of-range values are refused: an unbounded
wait has no place in a launcher, and a huge value would fail later, inside a lock or
a ``poll``, where the error is no longer the user's to fix.

========================  ==============  ============================================
setting                   range (s)       default
========================  ==============  ============================================
``stat_timeout``          (0, 600]        10
``handoff_timeout``       [0, 3600]       ``stat_timeout`` + 20; ``0``: no hand-off
========================  ==============  ============================================

Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._errors import ConfigurationError

__all__ = [
    "DEFAULT_STAT_TIMEOUT",
    "HANDOFF_MARGIN",
    "HANDOFF_TIMEOUT",
    "STAT_TIMEOUT",
    "DurationSetting",
    "default_handoff_timeout",
    "validate_seconds",
]

#: Seconds one ``stat`` of the artifact may take before the consumer fails open.
#: A healthy Lustre/NFS metadata server answers in milliseconds, a loaded one in
#: well under a second; 10 s leaves a wide margin for a slow but live server and
#: stays small beside a rendezvous round (torch's last-call wait alone is 30 s).
DEFAULT_STAT_TIMEOUT = 10.0

#: Seconds a sibling waits for process 0 beyond process 0's own stat bound: srun starts
#: a step's launchers within about a second, but interpreter and torch start-up take
#: 2-5 s on a loaded node and a first TCPStore connect can stall 5 s.
HANDOFF_MARGIN = 20.0


@dataclass(frozen=True)
class DurationSetting:
    """One user-settable duration.

    Attributes:
        name: the setting's name as the user writes it (composition argument name).
        meaning: what the duration bounds, for messages.
        maximum: the largest accepted value in seconds.
        zero_allowed: whether ``0`` is accepted (it then turns the feature off).
        example: a value to suggest in messages.
    """

    name: str
    meaning: str
    maximum: float
    zero_allowed: bool
    example: float

    @property
    def range_text(self) -> str:
        """The accepted range, e.g. ``0 < s <= 600``."""
        low = "0 <= s" if self.zero_allowed else "0 < s"
        return f"{low} <= {self.maximum:g}"


STAT_TIMEOUT = DurationSetting(
    "stat_timeout", "how long one stat of the decision file may take", 600.0, False, 10.0
)
HANDOFF_TIMEOUT = DurationSetting(
    "handoff_timeout",
    "how long the other launchers of an array task wait for process 0's verdict "
    "(0 turns the hand-off off)",
    3600.0,
    True,
    30.0,
)


def validate_seconds(setting: DurationSetting, value: object, *, given_as: str = "") -> float:
    """Return ``value`` as seconds when it is a number (or a numeric string) in range.

    Args:
        setting: which duration ``value`` is.
        value: a number, or a string as ``--rdzv-conf`` and YAML deliver them.
        given_as: how the user wrote the setting (e.g. ``rdzv-conf
            segment_health_check_stat_timeout``), for the message; default: its name.

    Raises:
        ConfigurationError: ``value`` is not a finite number in the setting's range.
    """
    seconds = math.nan
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except ValueError:
            pass
    low_ok = seconds >= 0 if setting.zero_allowed else seconds > 0
    if not (math.isfinite(seconds) and low_ok and seconds <= setting.maximum):
        raise ConfigurationError(
            f"{given_as or setting.name}={value!r} is not a number of seconds in "
            f"{setting.range_text}; it sets {setting.meaning} (e.g. {setting.example:g})",
            setting=given_as or setting.name,
        )
    return seconds


def default_handoff_timeout(stat_timeout: float) -> float:
    """The default bound of a sibling's wait: process 0's stat bound plus the margin."""
    return stat_timeout + HANDOFF_MARGIN
