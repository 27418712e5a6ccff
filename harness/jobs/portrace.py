"""A whole job that torch's port race struck runs once more.

torch's agent picks a free port for its workers' bootstrap store and closes it; the rank-0
worker binds it after importing torch, seconds later on a busy node, and any socket of the
machine may take it in between (:data:`harness.ports.PORT_TAKEN`). Plain c10d is exposed
whenever its launchers set ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, as the simulated jobs
do by default (``JobSpec.disable_shared_store``). segment-health is not: the launcher
holding rank 0 serves its workers' store on a port it holds
(``nvrx_seghealth._launcher.agentstore``), unless starting that store failed and the round
fell back to torch's port. When the race strikes, the worker fails, and its agent restarts
the world. That restart is not the scenario a job was built to show: it can pull a waiting spare into the
world before the scenario acts, or spend the restart the scenario planned. A test whose
job the race struck therefore runs that job once more in a fresh folder, and the run's
summary lists it (:data:`PORT_RACE`), so a retry is never silent. A job the race strikes
twice is judged as it ran.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from harness.ports import PORT_TAKEN
from harness.session.summary import PORT_RACE

__all__ = ["clear_of_port_race", "port_race_in"]

T = TypeVar("T")


def port_race_in(folder: Path) -> bool:
    """Whether a log under ``folder`` (a job's launchers and workers) shows the race."""
    return any(
        PORT_TAKEN in log.read_text(errors="replace") for log in sorted(folder.rglob("*.log"))
    )


def clear_of_port_race(
    request: pytest.FixtureRequest, folder: Path, attempt: Callable[[Path], T]
) -> T:
    """``attempt(folder)``, a whole job run in the new folder ``folder``; when the race
    struck it, whether ``attempt`` returned or raised, ``attempt`` once more in the new
    folder ``folder``-again, and that answer.

    Raises:
        Exception: what ``attempt`` raised, when the race did not strike it, or what the
            second attempt raised.
    """
    folder.mkdir()
    try:
        value = attempt(folder)
    except Exception:
        if not port_race_in(folder):
            raise
    else:
        if not port_race_in(folder):
            return value
    line = f"{request.node.nodeid}: {PORT_TAKEN} in {folder}; the job ran once more"
    print(f"--- {line}")
    request.node.user_properties.append((PORT_RACE, line))
    again = folder.with_name(f"{folder.name}-again")
    again.mkdir()
    return attempt(again)
