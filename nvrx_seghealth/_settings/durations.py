"""Every duration a user can set is a :class:`DurationSetting`, validated by one function.

A timeout reaches the package four ways: a ``--rdzv-conf`` string, a launcher flag or
YAML field, a keyword argument of the composition API, or an option of an operator
command (``--fs-timeout``; ``publish-drained`` declares its own three beside its
options). Each goes through
:func:`validate_seconds` with its :class:`DurationSetting`, so the same value is
accepted or refused with the same message whichever way it came, before any
rendezvous. Infinite, NaN, boolean and out-of-range values are refused: an unbounded
wait has no place in a launcher, and a huge value would fail later, inside a lock or
a ``poll``, where the error is no longer the user's to fix.

========================  ==============  ============================================
setting                   range (s)       default
========================  ==============  ============================================
``stat_timeout``          [0.1, 600]      10
``handoff_timeout``       [0, 3600]       ``stat_timeout`` + 20; ``0``: no hand-off
``watch_interval``        0, or           ``0``: no watch (process 0 stats only before
                          [0.5, 3600]     joining)
``--fs-timeout``          [0.1, 600]      10 (the operator commands' calls)
========================  ==============  ============================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._errors import ConfigurationError

__all__ = [
    "DEFAULT_STAT_TIMEOUT",
    "FS_TIMEOUT",
    "HANDOFF_MARGIN",
    "HANDOFF_TIMEOUT",
    "MINIMUM_STAT_TIMEOUT",
    "MINIMUM_WATCH_INTERVAL",
    "STAT_TIMEOUT",
    "WATCH_INTERVAL",
    "DurationSetting",
    "default_handoff_timeout",
    "validate_seconds",
]

#: Seconds one ``stat`` of the decision file may take before the consumer fails open.
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
        minimum: the smallest accepted value in seconds, ``0`` included.
        maximum: the largest accepted value in seconds.
        example: a value to suggest in messages.
        minimum_reason: why a positive minimum is the smallest that works.
        zero_is_off: ``0`` is accepted too, below a positive ``minimum``: it turns off
            what the setting times.
    """

    name: str
    meaning: str
    minimum: float
    maximum: float
    example: float
    minimum_reason: str = ""
    zero_is_off: bool = False

    @property
    def range_text(self) -> str:
        """The accepted range, e.g. ``0.1 <= s <= 600`` or ``0, or 0.5 <= s <= 3600``."""
        span = f"{self.minimum:g} <= s <= {self.maximum:g}"
        return f"0, or {span}" if self.zero_is_off and self.minimum > 0 else span

    def accepts(self, seconds: float) -> bool:
        """Whether ``seconds`` is in the range."""
        return (self.zero_is_off and seconds == 0) or self.minimum <= seconds <= self.maximum


#: The smallest stat bound: a ready stat helper answers a live filesystem in well under
#: a millisecond, but a loaded node can keep a process off the CPU for tens of
#: milliseconds, and a bound below that would fail open on a healthy filesystem.
MINIMUM_STAT_TIMEOUT = 0.1

STAT_TIMEOUT = DurationSetting(
    "stat_timeout",
    "how long one stat of the decision file may take",
    MINIMUM_STAT_TIMEOUT,
    600.0,
    10.0,
    "a smaller bound fails open on a healthy but loaded node",
)
#: The operator commands' bound of one read, list or write in the decision directory:
#: the same helper processes as the launcher's stat, so the same smallest bound.
FS_TIMEOUT = DurationSetting(
    "--fs-timeout",
    "how long one read, list or write in the decision directory may take",
    MINIMUM_STAT_TIMEOUT,
    600.0,
    DEFAULT_STAT_TIMEOUT,
    "a smaller bound reports a healthy but loaded filesystem as hung",
)
HANDOFF_TIMEOUT = DurationSetting(
    "handoff_timeout",
    "how long the other launchers of an array task wait for process 0's verdict "
    "(0 turns the hand-off off)",
    0.0,
    3600.0,
    30.0,
)

#: The shortest watch: each look is one bounded stat on the shared filesystem, from
#: process 0 of every unit (1,000 units at 0.5 s: 2,000 stats a second on one metadata
#: server), and the next look starts ``watch_interval`` seconds after the last one ended.
MINIMUM_WATCH_INTERVAL = 0.5

WATCH_INTERVAL = DurationSetting(
    "watch_interval",
    "how often process 0 re-checks its decision file while its workers run (0 turns the watch off)",
    MINIMUM_WATCH_INTERVAL,
    3600.0,
    5.0,
    "each look is a stat on the shared filesystem from every unit's process 0; a shorter "
    "interval loads its metadata server for no gain (0 turns the watch off)",
    zero_is_off=True,
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
    if not (math.isfinite(seconds) and setting.accepts(seconds)):
        why = (
            f" ({setting.minimum:g} s is the smallest that works: {setting.minimum_reason})"
            if setting.minimum_reason and 0 < seconds < setting.minimum
            else ""
        )
        raise ConfigurationError(
            f"{given_as or setting.name}={value!r} is not a number of seconds in "
            f"{setting.range_text}{why}; it sets {setting.meaning} (e.g. {setting.example:g})",
            setting=given_as or setting.name,
        )
    return seconds


def default_handoff_timeout(stat_timeout: float) -> float:
    """The default bound of a sibling's wait: process 0's stat bound plus the margin."""
    return stat_timeout + HANDOFF_MARGIN
