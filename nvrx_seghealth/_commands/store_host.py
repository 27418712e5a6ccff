"""``nvrx-seghealth store-host``: a rendezvous store that lives outside every allocation unit.

With torch's ``c10d`` rendezvous the launcher whose address is the ``--rdzv-endpoint``
hosts the ``TCPStore`` in its own process; if that launcher's unit is excluded, the store
exits with it and every launcher loses the rendezvous. This command is the store on its
own: run it on a host that belongs to no unit (a login or service node), and give every
launcher ``--rdzv-endpoint=THAT_HOST:PORT`` and ``--rdzv-conf is_host=false``.

Contract: the port is bound before anything is printed, so ``serving on`` means
launchers can connect; a port that cannot be bound exits 2 with the reason; SIGINT or
SIGTERM stops the store and exits 0. It keeps every run's keys in memory until it stops
(a few kilobytes per run), so give each run a new ``--rdzv-id``.
"""

from __future__ import annotations

import argparse
import datetime
import signal
import socket
import sys
from typing import Any

from .._errors import ConfigurationError
from .arguments import add_command
from .output import EXIT_OK, usage_error

__all__ = ["DEFAULT_PORT", "register", "store_host_command"]

NAME = "store-host"

#: The port torchrun's documentation uses for the rendezvous endpoint.
DEFAULT_PORT = 29400


def register(subparsers: Any) -> None:
    """Add the ``store-host`` subcommand."""
    parser = add_command(
        subparsers,
        NAME,
        "serve the rendezvous store (a TCPStore) on a host outside every allocation unit",
        """
        Serve torch's TCPStore for the c10d rendezvous until SIGINT or SIGTERM. Run it
        where no allocation unit runs, so that excluding a unit can never take the store
        down, and start every launcher with --rdzv-endpoint=HOST:PORT (this host) and
        --rdzv-conf is_host=false. Give every run a new --rdzv-id: a finished run
        leaves its rendezvous closed in the store.
        """,
        """
        nvrx-seghealth store-host --host 0.0.0.0 --port 29400   # on a service node
        nvrx-seghealth store-host --host 127.0.0.1              # to try it on one machine
        """,
    )
    parser.add_argument(
        "--host",
        default="0.0.0.0",
        help="address to listen on (default: 0.0.0.0, every interface)",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT})"
    )
    parser.set_defaults(func=store_host_command)


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv4 or IPv6, as ``host`` resolves)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(socket.SOMAXCONN)
    except OSError:
        listener.close()
        raise
    return listener


def store_host_command(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; see the module doc.

    Raises:
        ConfigurationError: ``--port`` is not a TCP port (the dispatcher exits 2).
    """
    if not 0 < args.port < 65536:
        raise ConfigurationError(f"--port {args.port} is not a TCP port (1-65535)")
    try:
        listener = _listen(args.host, args.port)
    except OSError as error:
        return usage_error(
            NAME,
            f"cannot listen on {args.host}:{args.port}: {error.strerror or error}"
            " (another store on this port? choose another with --port)",
        )
    from torch.distributed import TCPStore

    stop = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # the store's threads inherit the mask
    store = TCPStore(
        args.host,
        args.port,
        is_master=True,
        master_listen_fd=listener.detach(),  # the store owns the socket from here
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=60),
    )
    print(
        f"rendezvous store serving on {args.host}:{args.port}; start every launcher with"
        f" --rdzv-endpoint=<this host>:{args.port} and --rdzv-conf is_host=false",
        flush=True,
    )
    received = signal.sigwait(stop)
    print(f"rendezvous store stopped ({signal.Signals(received).name})", file=sys.stderr)
    del store
    return EXIT_OK
