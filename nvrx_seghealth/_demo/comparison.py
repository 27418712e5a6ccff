"""One job run two ways, side by side: without and with what is compared.

``nvrx-seghealth demo --compare`` sets the job ungated (plain c10d) against gated
(segment-health), both runs the same :class:`.spec.JobSpec` except the backend (as the
fault matrix runs one spec on several backends, :mod:`harness.jobs.faults`);
``nvrx-seghealth demo --watch`` sets a decision written while the job trains against
the same job with the watch on. Every number comes from the runs' records: the rounds
from the workers' records (:attr:`.outcome.JobResult.round_count`), the time to a
healthy world from when the final world's last worker joined its process group, the
time from a decision written during training to the next world from the recorded fault
(:meth:`.outcome.JobResult.recovery`), who trained in which round from the workers'
launchers, restarts from the workers' ``TORCHELASTIC_RESTART_COUNT`` and the watch's
recorded ``world_restart`` events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .outcome import JobResult, Round
from .report import render_table

__all__ = ["Comparison", "Variant"]

#: The watch's event (``nvrx_seghealth.world_restart``), without the prefix.
_WORLD_RESTART = "world_restart"


def _round_state(round_: Round) -> str:
    """``completed``, ``failed`` (formed, did not finish) or ``not-formed``."""
    if round_.completed:
        return "completed"
    return "failed" if round_.formed else "not-formed"


@dataclass(frozen=True)
class Variant:
    """The facts of one run.

    Attributes:
        title: how the run is named (``ungated: plain c10d``).
        result: the run.
    """

    title: str
    result: JobResult

    @property
    def rounds(self) -> int:
        """Rendezvous rounds up to the final world."""
        return self.result.round_count

    @property
    def healthy_after(self) -> float | None:
        """Seconds from launch until the final world formed, when that world holds no
        task with a decision file and completed; else ``None``."""
        final = self.result.final_round
        if (
            final is None
            or not self.result.completed
            or set(final.units) & set(self.result.decisions)
        ):
            return None
        return self.result.time_to_healthy_world

    @property
    def recovered_after(self) -> float | None:
        """Seconds from the first recorded fault (e.g. a decision written while the job
        trained) until the next world formed; ``None`` without a fault or such a world."""
        faults = self.result.faults
        return self.result.recovery(faults[0]) if faults else None

    @property
    def restarts_charged(self) -> int:
        """The highest ``TORCHELASTIC_RESTART_COUNT`` of any worker: the restarts
        charged to ``--max-restarts`` (membership changes are not)."""
        return max((w.restart_count for w in self.result.workers), default=0)

    @property
    def world_restarts(self) -> int:
        """Launchers that restarted their workers because the watch excluded a unit
        during training (their recorded ``world_restart`` events; 0 without telemetry)."""
        return sum(
            1
            for launcher in self.result.launchers.values()
            for event in launcher.events()
            if event.decision == _WORLD_RESTART
        )

    @property
    def trained(self) -> dict[int, tuple[tuple[int, ...], str]]:
        """By round: the array tasks whose workers started in it, and how it ended
        (``completed``, ``failed``: formed and did not finish, ``not-formed``)."""
        return {r.number: (r.units, _round_state(r)) for r in self.result.rounds}

    def as_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready values."""
        return {
            "backend": self.result.spec.backend,
            "watch_interval": self.result.spec.watch_interval,
            "rounds": self.rounds,
            "time_to_healthy_world": self.healthy_after,
            "recovered_after": self.recovered_after,
            "restarts_charged": self.restarts_charged,
            "world_restarts": self.world_restarts,
            "completed": self.result.completed,
            "trained": {
                str(n): {"tasks": list(units), "state": state}
                for n, (units, state) in self.trained.items()
            },
        }


@dataclass(frozen=True)
class Comparison:
    """The runs without (``off``) and with (``on``) what is compared, side by side.

    Attributes:
        off, on: the two runs.
        keys: their names in :meth:`as_dict` (``ungated``, ``gated``).
        subject: what ``on`` has, as the verdict names it (``The gate``).
    """

    off: Variant
    on: Variant
    keys: tuple[str, str] = ("ungated", "gated")
    subject: str = "The gate"

    @property
    def rounds_saved(self) -> int:
        """Rounds the ``on`` run did not need (negative: rounds it added)."""
        return self.off.rounds - self.on.rounds

    @property
    def seconds_saved(self) -> float | None:
        """Seconds sooner to a healthy world with it (negative: later, as measured);
        ``None`` unless both reached one."""
        off, on = self.off.healthy_after, self.on.healthy_after
        return None if off is None or on is None else off - on

    def as_dict(self) -> dict[str, Any]:
        """The comparison as JSON-ready values."""
        return {
            self.keys[0]: self.off.as_dict(),
            self.keys[1]: self.on.as_dict(),
            "rounds_saved": self.rounds_saved,
            "seconds_saved": self.seconds_saved,
        }

    def render(self) -> str:
        """The side-by-side table and one line saying what ``on`` changed."""
        spec = self.on.result.spec
        variants = (self.off, self.on)

        def seconds(value: float | None) -> str:
            return "never" if value is None else f"{value:.1f} s"

        def trained(variant: Variant, number: int) -> str:
            units, state = variant.trained.get(number, ((), ""))
            names = ", ".join(spec.unit_name(u) for u in units)
            return f"{names} ({state})" if units else "-"

        numbers = sorted({n for v in variants for n in v.trained})
        # The watch's rows only where a run had it: a decision written while the job
        # trained (a recorded fault), a run with the watch on.
        watched = [
            *(
                [["decision to the next world", *(seconds(v.recovered_after) for v in variants)]]
                if any(v.result.faults for v in variants)
                else []
            ),
            *(
                [
                    ["restarts charged", *(str(v.restarts_charged) for v in variants)],
                    ["watch restarts (launchers)", *(str(v.world_restarts) for v in variants)],
                ]
                if any(v.result.spec.watch_interval for v in variants)
                else []
            ),
        ]
        rows = [
            ["", *(v.title for v in variants)],
            ["rounds to the final world", *(str(v.rounds) for v in variants)],
            ["time to a healthy world", *(seconds(v.healthy_after) for v in variants)],
            *watched,
            ["job completed", *("yes" if v.result.completed else "no" for v in variants)],
            *([f"round {n} trained", *(trained(v, n) for v in variants)] for n in numbers),
        ]
        return f"{render_table(rows)}\n\n{self._verdict()}"

    def _verdict(self) -> str:
        saved, off = self.seconds_saved, self.off.healthy_after
        if self.on.healthy_after is None:
            return f"The {self.keys[1]} run did not reach a healthy world."
        if self.rounds_saved < 0:
            added = -self.rounds_saved
            rounds = f"{added} more round{'' if added == 1 else 's'}"
            sooner = "" if saved is None else f", {saved:.1f} s sooner"
            never = f"; the {self.keys[0]} run never did" if off is None else ""
            return f"{self.subject} reached a healthy world in {rounds}{sooner}{never}."
        rounds = f"{self.rounds_saved} round{'' if self.rounds_saved == 1 else 's'}"
        if saved is not None and saved < 0:
            # The runs ran one after the other: load that changed in between can outweigh
            # the round saved. Say what was measured, not a negative saving.
            return (
                f"{self.subject} saved {rounds}, yet its healthy world formed {-saved:.1f} s "
                f"later than the {self.keys[0]} run's: the two runs ran one after the other "
                "and the machine's load changed in between."
            )
        if saved is not None:
            return f"{self.subject} saved {rounds} and {saved:.1f} s to a healthy world."
        return (
            f"{self.subject} saved {rounds}; the {self.keys[0]} run never reached a healthy world."
        )
