"""A loopback port for a process that binds it later, out of the kernel's way.

A launcher that hosts the store (``is_host=true``) binds its ``--rdzv-endpoint`` port
seconds after the demo chose it: it imports torch first, longer on a busy node. A port
the kernel handed out (``bind(("127.0.0.1", 0))``) lies in its ephemeral range, where
the kernel keeps handing out ports in that time: to every outgoing connection's local
end and to every other ``bind(0)``, torch's own choice of its workers' store port
included. Measured beside two CPU hogs: such a port was listened on by another process
when the launcher came to bind it, the launcher failed with ``EADDRINUSE`` and the job
with it. :func:`unclaimed_port` chooses below that range, where the kernel never hands
out a port by itself, at random, so that two jobs choosing at once do not meet.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["LOWEST", "ephemeral_range", "unclaimed_port"]

#: The lowest port chosen: above the privileged ports and the ports that services
#: configure (a Slurm controller's and its nodes' included).
LOWEST = 20000

#: Where Linux states its ephemeral range; elsewhere (or unreadable), Linux's default.
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_DEFAULT_RANGE = (32768, 60999)

#: How many ports below the range are tried before the kernel is asked for one.
_TRIES = 64


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range, both ends included."""
    try:
        low, high = (int(field) for field in _RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return _DEFAULT_RANGE
    return low, high


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def unclaimed_port() -> int:
    """A TCP port on 127.0.0.1 that nothing was bound to a moment ago, chosen at random
    from :data:`LOWEST` up to the ephemeral range. Where that span is empty or taken
    (a kernel configured with a low ephemeral range), a port the kernel hands out."""
    below = range(LOWEST, ephemeral_range()[0])
    chooser = random.SystemRandom()  # not the random module's state, which tests seed
    for _ in range(min(_TRIES, len(below))):
        port = chooser.choice(below)
        if _bindable(port):
            return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
