"""What stops a launcher: never a failure of the wrapper's own work.

torch's elastic agent turns SIGTERM, SIGINT, SIGHUP and SIGQUIT into
``SignalException`` once it has started workers, from a signal handler that raises
wherever the main thread is, a rendezvous included. ``SignalException`` derives from
``Exception`` (``KeyboardInterrupt`` and ``SystemExit`` do not), so every catch-all of
this package that keeps a launcher going (the fail-open funnel, the recording of events)
asks :func:`stops_the_launcher` first and re-raises: a launcher told to stop leaves
through torch's own exit path as fast as plain torchrun's, as torch's own catch-alls
do (its exit barrier and ``launch_agent`` re-raise the same exception).

It imports no torch: a process that never loaded torch's agent holds no such exception, and
the operators' commands (``doctor --etcd``) run on nodes without torch.
"""

from __future__ import annotations

import sys

__all__ = ["stops_the_launcher"]

#: The torch module that defines ``SignalException``.
_AGENT_API = "torch.distributed.elastic.multiprocessing.api"


def stops_the_launcher(error: Exception) -> bool:
    """Whether ``error`` is a request to stop the launcher (torch's ``SignalException``),
    which must pass through unchanged."""
    api = sys.modules.get(_AGENT_API)
    return api is not None and isinstance(error, api.SignalException)
