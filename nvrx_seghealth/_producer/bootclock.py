"""The host's boot clock, which measures how long a producer's passes have failed.

A reading (:class:`BootClock`) names its boot, so that a reading that a state file kept
can be compared with one of a later process: on the same boot the difference is the time
in between, whatever the wall clock did; across a reboot it cannot be known. Standard
library only.
"""

from __future__ import annotations

import functools
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BootClock"]


@functools.cache
def _boot_id() -> str:
    """The kernel's id of the current boot; one of this process alone if it is unreadable."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return f"process-{uuid.uuid4()}"


@dataclass(frozen=True)
class BootClock:
    """A reading of the host's boot clock (``CLOCK_BOOTTIME``): which boot, and seconds
    since it. No one steps this clock, unlike the wall clock (NTP, ``date -s``).

    Attributes:
        boot_id: the kernel's boot id (``/proc/sys/kernel/random/boot_id``).
        uptime: seconds since that boot, suspended time included.
    """

    boot_id: str
    uptime: float

    @classmethod
    def now(cls) -> BootClock:
        """The clock now."""
        return cls(_boot_id(), time.clock_gettime(time.CLOCK_BOOTTIME))

    def since(self, boot_id: str | None, uptime: float | None) -> float:
        """Seconds from an earlier reading to this one; 0 for a reading of another boot
        (or host), or none: the time in between cannot be measured."""
        if boot_id != self.boot_id or uptime is None:
            return 0.0
        return max(0.0, self.uptime - uptime)
