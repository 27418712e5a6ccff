"""The producers' lines of ``nvrx-seghealth status``: each ``publish-drained`` state file of
a directory, read and judged (:meth:`~.._producer.state.ProducerState.health`).

Every read is bounded by the caller's timeout; a file that cannot be read in time or is
not valid is a row saying why. The text is printed through
:func:`~.._decision.listing.printable`.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any

from .._decision.boundedstat import stat_within
from .._decision.listing import printable
from .._producer.state import (
    STATE_FILE,
    ProducerHealth,
    ProducerState,
    StateFileError,
    read_state_file,
)
from .output import format_age

__all__ = ["ProducerRow", "producers"]


@dataclass(frozen=True)
class ProducerRow:
    """One producer's state file: its :class:`ProducerHealth`, and the state read
    (``None`` when unreadable, ``problem`` then says why)."""

    producer_id: str
    job_id: str
    health: ProducerHealth
    state: ProducerState | None = None
    problem: str | None = None
    written: float | None = None

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "producer_id": self.producer_id,
            "job_id": self.job_id,
            "state": self.health.value,
        }
        if self.state is None:
            row["unreadable"] = self.problem
        else:
            fields = ("last_pass", "last_ok", "failing_since", "failed_passes", "last_error")
            row.update({name: getattr(self.state, name) for name in (*fields, "interval")})
        return row

    def line(self, now: float) -> str:
        who = f"producer {printable(self.producer_id)} (job {self.job_id})"
        state = self.state
        if state is None:
            return f"{who}: state file unreadable ({printable(self.problem or '')})"
        quiet = state.quiet_for(now, self.written)
        ahead = state.last_pass - now  # more than 1 s: the clocks differ, say by how much
        skew = f" (its clock is {format_age(ahead)} ahead of this host's)" if ahead > 1 else ""
        if state.failing_since is None:
            line = f"{who}: last pass {format_age(quiet)} ago{skew}, ok"
        else:
            good = "never" if state.last_ok is None else f"{_age(now, state.last_ok)} ago"
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(state.failing_since))
            line = (
                f"{who}: FAILING since {since} ({_age(now, state.failing_since)}, "
                f"{state.failed_passes} passes; last good pass {good}){skew}; its decisions "
                f"are kept as they were: {printable(state.last_error or '')}"
            )
        if self.health is ProducerHealth.STOPPED:
            line += (
                f"; STOPPED? no pass for {format_age(quiet)} by this host's clock though it "
                f"runs one every {state.interval:g} s: its decisions are not kept up to "
                "date, restart it (or, if it runs, set the clocks right)"
            )
        return line


def _age(now: float, then: float) -> str:
    """How long ago ``then`` (a producer's clock) was at ``now`` (this host's): a time
    stamped ahead of this host's clock is ``0s`` old, never a negative age."""
    return format_age(max(0.0, now - then))


def producers(
    names: list[str], directory: str, job_id: str | None, timeout: float, now: float
) -> list[ProducerRow]:
    """The state of each ``publish-drained`` producer that keeps it in ``directory``.

    Each state file is checked (:func:`~.._producer.state.read_state_file`) and, for a
    producer that runs every ``interval``, looked at once more for its last change
    (:meth:`~.._producer.state.ProducerState.quiet_for`); one that cannot be read in time or is not valid is an
    :attr:`ProducerHealth.UNREADABLE` row saying why.
    """
    producers = []
    for name in sorted(names):
        match = STATE_FILE.fullmatch(name)
        if match is None or job_id not in (None, match["job"]):
            continue
        path = os.path.join(directory, name)
        try:
            state = read_state_file(path, timeout)
        except (OSError, StateFileError) as error:  # HelperTimeout is an OSError
            problem = str(error) or type(error).__name__
            producers.append(
                ProducerRow(match["id"], match["job"], ProducerHealth.UNREADABLE, None, problem)
            )
            continue
        if state is not None:  # else removed since the directory was listed
            written = None
            if state.interval:  # the file's last change (quiet_for)
                with contextlib.suppress(OSError, ValueError):  # HelperTimeout too
                    written = stat_within(path, timeout).st_mtime
            health = state.health(now, written)
            row = ProducerRow(match["id"], match["job"], health, state, written=written)
            producers.append(row)
    return producers
