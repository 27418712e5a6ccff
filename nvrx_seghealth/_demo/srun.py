"""``srun --kill-on-bad-exit=1`` for one allocation unit (one job step).

When a launcher of the unit exits non-zero, srun ends the step: the unit's other
launchers get SIGTERM at once and SIGKILL after ``kill_wait`` seconds (Slurm's
``KillWait``), and launchers not started yet never start. With
``--kill-on-bad-exit=0`` the other launchers run on.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Sequence

from .launcher import Launcher

__all__ = ["KILL_WAIT", "Step"]

log = logging.getLogger(__name__)

#: Seconds between SIGTERM and SIGKILL. Slurm's default KillWait is 30 s; torchrun
#: stops its workers within a second or two, so 5 s (the test cluster's value) is ample.
KILL_WAIT = 5.0


class Step:
    """The srun step of one unit.

    Args:
        name: the unit's name (``task1``, ``job``).
        launchers: the unit's launchers.
        kill_on_bad_exit: srun's ``--kill-on-bad-exit`` (1 or 0).
        kill_wait: seconds between SIGTERM and SIGKILL.
    """

    def __init__(
        self,
        name: str,
        launchers: Sequence[Launcher],
        *,
        kill_on_bad_exit: bool = True,
        kill_wait: float = KILL_WAIT,
    ) -> None:
        self.name = name
        self.launchers = list(launchers)
        self.kill_on_bad_exit = kill_on_bad_exit
        self.kill_wait = kill_wait
        self.ended = False
        self._kill_at: float | None = None

    def exited(self, launcher: Launcher) -> None:
        """Tell the step that ``launcher`` (one of its own) has exited."""
        if launcher.returncode == 0 or not self.kill_on_bad_exit or self.ended:
            return
        self.ended = True
        victims = [other for other in self.launchers if other.running]
        log.info(
            "srun %s: %s exited with code %s; --kill-on-bad-exit ends the step%s",
            self.name,
            launcher.label,
            launcher.returncode,
            f", SIGTERM to {', '.join(v.label for v in victims)}" if victims else "",
        )
        for victim in victims:
            victim.killed_by_srun = True
            victim.signal(signal.SIGTERM)
        self._kill_at = time.monotonic() + self.kill_wait

    def poll(self) -> None:
        """SIGKILL the step's remaining launchers once ``kill_wait`` has passed."""
        if self._kill_at is None or time.monotonic() < self._kill_at:
            return
        self._kill_at = None
        for victim in self.launchers:
            if victim.running:
                log.info("srun %s: %s ignored SIGTERM; SIGKILL", self.name, victim.label)
                victim.signal(signal.SIGKILL)
