"""What stops a launcher: never a failure of the wrapper's own work.

torch's elastic agent turns SIGTERM, SIGINT, SIGHUP and SIGQUIT into
``SignalException`` once it has started workers, from a signal handler that raises
wherever the main thread is, a rendezvous included. ``SignalException`` derives from
``Exception`` (``KeyboardInterrupt`` and ``SystemExit`` do not), so every catch-all of
this package that keeps a launcher going (the fail-open funnel, the recording of events)
asks :func:`stops_the_launcher` first and re-raises: a launcher told to stop leaves
through torch's own exit path as fast as plain torchrun's, as torch's own catch-alls
do (its exit barrier and ``launch_agent`` re-raise the same exception).
"""

from __future__ import annotations

from torch.distributed.elastic.multiprocessing.api import SignalException

__all__ = ["stops_the_launcher"]


def stops_the_launcher(error: Exception) -> bool:
    """Whether ``error`` is a request to stop the launcher (torch's ``SignalException``),
    which must pass through unchanged."""
    return isinstance(error, SignalException)
