"""``nvrx-seghealth store-host``: a rendezvous store that lives outside every allocation unit.

With torch's ``c10d`` rendezvous, the launcher at the ``--rdzv-endpoint`` hosts the
``TCPStore`` in its own process. If that launcher's unit is excluded, the store exits with
it. This command is the store on its own, for a host that belongs to no unit.

Contract:

- The port is bound before anything is printed or written, so ``serving on`` means
  launchers can connect.
- ``--port 0`` takes any free port; ``--port-file`` receives the port atomically.
- A port that cannot be bound, or a port file it must not replace, exits 2 with the reason.
- SIGINT or SIGTERM stops the store and exits 0; so does the end of stdin with
  ``--stop-on-stdin-eof``.
- It keeps every run's keys in memory until it stops, so give each run a new ``--rdzv-id``.
- It never deletes a port file.
"""

from __future__ import annotations

import argparse
import datetime
import os
import secrets
import signal
import socket
import stat
import sys
import threading
from pathlib import Path
from typing import Any

from .._errors import ConfigurationError
from .arguments import add_command, option
from .output import EXIT_OK, usage_error

__all__ = ["DEFAULT_PORT", "register", "store_host_command"]

NAME = "store-host"

#: The port torchrun's documentation uses for the rendezvous endpoint.
DEFAULT_PORT = 29400

#: The most bytes of an existing port file that are read to tell it is one.
_PORT_FILE_MAX = 16


SUMMARY = "serve the rendezvous store (a TCPStore) on a host outside every allocation unit"
DESCRIPTION = """
    Serve torch's TCPStore for the c10d rendezvous until SIGINT or SIGTERM. Run it
    where no allocation unit runs, so that excluding a unit can never take the store
    down, and start every launcher with --rdzv-endpoint=HOST:PORT (this host) and
    --rdzv-conf is_host=false. Give every run a new --rdzv-id: a finished run
    leaves its rendezvous closed in the store.
    """
EXAMPLES = """
    nvrx-seghealth store-host --host 0.0.0.0 --port 29400   # on a service node
    nvrx-seghealth store-host --host 127.0.0.1              # to try it on one machine
    nvrx-seghealth store-host --port 0 --port-file store.port   # any free port
    """
OPTIONS = (
    option(
        "--host",
        default="0.0.0.0",
        help="address to listen on (default: 0.0.0.0, every interface)",
    ),
    option(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port (default: {DEFAULT_PORT}); 0 takes any free port, see --port-file",
    ),
    option(
        "--port-file",
        type=Path,
        metavar="FILE",
        help=(
            "once listening, write the port to FILE atomically, as one line; FILE may be"
            " new, empty or an earlier port file, anything else is refused; it is never"
            " deleted"
        ),
    ),
    option(
        "--stop-on-stdin-eof",
        action="store_true",
        help=(
            "stop also when stdin reaches its end, for a parent that holds a pipe to it:"
            " the store ends when that parent does"
        ),
    ),
)


def register(subparsers: Any) -> None:
    """Add the ``store-host`` subcommand."""
    add_command(subparsers, NAME, SUMMARY, DESCRIPTION, EXAMPLES, OPTIONS, store_host_command)


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


def _port_file_problem(path: Path) -> str | None:
    """Why ``path`` must not receive the port, or None.

    A new path, an empty file or a file that holds only a port may be replaced. Anything
    else is the user's, and a typo must not destroy it.
    """
    if not path.parent.is_dir():
        return f"--port-file {path}: its directory does not exist"
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"--port-file {path}: {error.strerror or error}"
    if not stat.S_ISREG(mode):
        return f"--port-file {path} exists and is not a regular file; give a new path"
    return _content_problem(path)


def _content_problem(path: Path) -> str | None:
    """Why the regular file ``path`` must not be replaced: it holds more than a port."""
    try:
        with path.open("rb") as existing:
            head = existing.read(_PORT_FILE_MAX + 1)
    except OSError as error:
        return f"--port-file {path}: {error.strerror or error}"
    if len(head) <= _PORT_FILE_MAX and (not head.strip() or head.strip().isdigit()):
        return None
    return f"--port-file {path} exists and does not hold a port; give a new path"


def _write_port_file(path: Path, port: int) -> None:
    """Write ``port`` to ``path`` atomically: a new file in its directory, then a rename."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(f"{port}\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _end_stdin_stops(stops: signal.Signals) -> threading.Event:
    """Send ``stops`` to this process when stdin ends; the event is set just before."""
    ended = threading.Event()

    def watch() -> None:
        try:
            while os.read(0, 65536):
                pass
        except OSError:  # no stdin at all: it has ended too
            pass
        ended.set()
        os.kill(os.getpid(), stops)

    threading.Thread(target=watch, name="stdin-eof", daemon=True).start()
    return ended


def store_host_command(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; see the module doc.

    Raises:
        ConfigurationError: ``--port`` is not a TCP port (the dispatcher exits 2).
    """
    if not 0 <= args.port < 65536:
        raise ConfigurationError(f"--port {args.port} is not a TCP port (0-65535)")
    if args.port_file is not None and (problem := _port_file_problem(args.port_file)):
        return usage_error(NAME, problem)
    try:
        listener = _listen(args.host, args.port)
    except OSError as error:
        return usage_error(
            NAME,
            f"cannot listen on {args.host}:{args.port}: {error.strerror or error}"
            " (another store on this port? choose another with --port)",
        )
    return _serve(args, listener)


def _serve(args: argparse.Namespace, listener: socket.socket) -> int:
    """Serve a TCPStore on the bound ``listener`` until a stop; the command's exit code."""
    port = int(listener.getsockname()[1])
    stop = {signal.SIGINT, signal.SIGTERM}
    # Before torch starts a thread: a stop that comes early waits for sigwait, and no
    # thread that lets it through ends the process with the signal's default action.
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    from torch.distributed import TCPStore

    store = TCPStore(
        args.host,
        port,
        is_master=True,
        master_listen_fd=listener.detach(),  # the store owns the socket from here
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=60),
    )
    if args.port_file is not None:
        try:
            _write_port_file(args.port_file, port)
        except OSError as error:
            del store
            return usage_error(NAME, f"--port-file {args.port_file}: {error.strerror or error}")
    print(
        f"rendezvous store serving on {args.host}:{port}; start every launcher with"
        f" --rdzv-endpoint=<this host>:{port} and --rdzv-conf is_host=false",
        flush=True,
    )
    stdin_ended = _end_stdin_stops(signal.SIGTERM) if args.stop_on_stdin_eof else None
    received = signal.Signals(signal.sigwait(stop))
    why = "stdin ended" if stdin_ended is not None and stdin_ended.is_set() else received.name
    print(f"rendezvous store stopped ({why})", file=sys.stderr)
    del store
    return EXIT_OK
