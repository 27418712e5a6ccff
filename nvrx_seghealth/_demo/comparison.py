"""What the gate saves: one job run ungated (plain c10d) and gated (segment-health).

Both runs are the same :class:`.spec.JobSpec` except the backend (as the fault matrix
runs one spec on both, :mod:`harness.faults`). Every number comes from the runs' records: the
rounds from the workers' records (:attr:`.outcome.JobResult.round_count`), the time to
a healthy world from when the final world's last worker joined its process group, who
trained in which round from the workers' launchers.

Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .outcome import JobResult, Round
from .report import render_table

__all__ = ["Comparison", "Variant"]


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
        marked task and completed; else ``None``."""
        final = self.result.final_round
        if final is None or not self.result.completed or set(final.units) & self.result.spec.marked:
            return None
        return self.result.time_to_healthy_world

    @property
    def trained(self) -> dict[int, tuple[tuple[int, ...], str]]:
        """By round: the array tasks whose workers started in it, and how it ended
        (``completed``, ``failed``: formed and did not finish, ``not-formed``)."""
        return {r.number: (r.units, _round_state(r)) for r in self.result.rounds}

    def as_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready values."""
        return {
            "backend": self.result.spec.backend,
            "rounds": self.rounds,
            "time_to_healthy_world": self.healthy_after,
            "completed": self.result.completed,
            "trained": {
                str(n): {"tasks": list(units), "state": state}
                for n, (units, state) in self.trained.items()
            },
        }


@dataclass(frozen=True)
class Comparison:
    """The ungated and the gated run of one job, side by side."""

    ungated: Variant
    gated: Variant

    @property
    def rounds_saved(self) -> int:
        """Rounds the gated run did not need."""
        return self.ungated.rounds - self.gated.rounds

    @property
    def seconds_saved(self) -> float | None:
        """Seconds sooner to a healthy world gated; ``None`` unless both reached one."""
        ungated, gated = self.ungated.healthy_after, self.gated.healthy_after
        return None if ungated is None or gated is None else ungated - gated

    def as_dict(self) -> dict[str, Any]:
        """The comparison as JSON-ready values."""
        return {
            "ungated": self.ungated.as_dict(),
            "gated": self.gated.as_dict(),
            "rounds_saved": self.rounds_saved,
            "seconds_saved": self.seconds_saved,
        }

    def render(self) -> str:
        """The side-by-side table and one line saying what the gate saved."""
        spec = self.gated.result.spec
        variants = (self.ungated, self.gated)

        def seconds(value: float | None) -> str:
            return "never" if value is None else f"{value:.1f} s"

        def trained(variant: Variant, number: int) -> str:
            units, state = variant.trained.get(number, ((), ""))
            names = ", ".join(spec.unit_name(u) for u in units)
            return f"{names} ({state})" if units else "-"

        numbers = sorted({n for v in variants for n in v.trained})
        rows = [
            ["", *(v.title for v in variants)],
            ["rounds to the final world", *(str(v.rounds) for v in variants)],
            ["time to a healthy world", *(seconds(v.healthy_after) for v in variants)],
            ["job completed", *("yes" if v.result.completed else "no" for v in variants)],
            *([f"round {n} trained", *(trained(v, n) for v in variants)] for n in numbers),
        ]
        saved = self.seconds_saved
        rounds = f"{self.rounds_saved} round{'' if self.rounds_saved == 1 else 's'}"
        if saved is not None:
            verdict = f"The gate saved {rounds} and {saved:.1f} s to a healthy world."
        elif self.gated.healthy_after is not None:
            verdict = f"The gate saved {rounds}; the ungated run never reached a healthy world."
        else:
            verdict = "The gated run did not reach a healthy world."
        return f"{render_table(rows)}\n\n{verdict}"
