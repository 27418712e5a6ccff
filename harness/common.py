"""What every kind of test uses: a free port on 127.0.0.1 (the demo's), a Slurm-like
environment, a condition awaited instead of a fixed sleep, the bound of a wait that must
end at once, a store that counts its calls, and the mark of torch's race for a port."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

# A port chosen below the kernel's ephemeral range: the process that binds it does so
# seconds later, and nothing the kernel hands out meanwhile can take it.
from nvrx_seghealth._demo.ports import unclaimed_port as free_port

if TYPE_CHECKING:
    from torch.distributed import Store

    _StandIn = Store  # what type checkers see: a CountingStore stands in for a Store
else:
    _StandIn = object  # torch is not imported to count calls

__all__ = ["AT_ONCE_BOUND", "PORT_TAKEN", "CountingStore", "free_port", "slurm_env", "wait_until"]

#: Seconds of bound given to a wait that must end at once (a refused call, an answer
#: already there, a signal that ends the wait): it ends in well under half of it, or it
#: waited for its bound. Long, so that a loaded node's scheduling delays cannot pass for
#: a wait.
AT_ONCE_BOUND = 30.0

#: What a worker prints when the port that its agent chose for the workers' store was
#: taken before the worker could listen on it. torch's agent picks a free port and closes
#: it; rank 0's worker binds it after importing torch, seconds later on a busy node, and
#: any socket of the machine may take that port in between (an outgoing connection's
#: local port included). A worker failure, which the agent restarts and counts. Workers
#: bind that port under plain torch with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``; the
#: backend serves their store on a port it holds instead (``_launcher/agentstore.py``).
PORT_TAKEN = "EADDRINUSE"


def slurm_env(
    task: int | None = None, procid: int = 0, *, array_job: int = 1000, job: int | None = None
) -> dict[str, str]:
    """A Slurm-like environment: an array task when ``task`` is given, else a regular job."""
    env = {"SLURM_PROCID": str(procid)}
    if task is None:
        env["SLURM_JOB_ID"] = str(job if job is not None else array_job)
    else:
        env["SLURM_ARRAY_JOB_ID"] = str(array_job)
        env["SLURM_ARRAY_TASK_ID"] = str(task)
        env["SLURM_JOB_ID"] = str(job if job is not None else array_job + 1 + task)
    return env


def wait_until(predicate: Callable[[], object], timeout: float = 30) -> None:
    """Return once ``predicate()`` is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


class CountingStore(_StandIn):
    """Forwards to a real store and counts the calls by method (``calls``); it goes
    wherever a torch ``Store`` goes."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.store, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return method(*args, **kwargs)

        return counted
