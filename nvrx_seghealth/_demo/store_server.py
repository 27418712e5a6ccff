"""The rendezvous store server process (run by :class:`.store_host.StoreHost`).

``python -m nvrx_seghealth._demo.store_server PORT_FILE`` binds a listening socket
to ``127.0.0.1`` port 0 (the kernel picks a free port, and nothing can take it between
choosing and binding), hands it to a ``TCPStore`` server, writes the port to
``PORT_FILE`` (atomically) and serves until stdin reaches end-of-file (the harness
closed the pipe or died) or a signal ends it.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Serve a TCPStore on 127.0.0.1 until stdin closes; see the module doc."""
    from torch.distributed import TCPStore

    (port_file,) = sys.argv[1:] if argv is None else argv
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(socket.SOMAXCONN)
    port = listener.getsockname()[1]
    server = TCPStore(
        "127.0.0.1",
        port,
        is_master=True,
        master_listen_fd=listener.fileno(),
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=30),
    )
    temp = f"{port_file}.tmp"
    Path(temp).write_text(str(port))
    os.replace(temp, port_file)
    print(f"rendezvous store serving on 127.0.0.1:{port}", flush=True)
    sys.stdin.buffer.read()  # until the harness closes the pipe or goes away
    del server  # the store serves until here
    return 0


if __name__ == "__main__":
    sys.exit(main())
