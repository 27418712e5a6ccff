"""The demo's rendezvous store: ``nvrx-seghealth store-host`` in a child process.

A store hosted by a launcher dies when that launcher's unit is excluded. So the demo keeps
its c10d store in a process outside every unit, and launchers get ``is_host=false``.
:class:`StoreHost` starts the command on a free port, reads its port file, connects to it
and stops it. The command also stops when the demo's pipe to its stdin closes, so a demo
that dies leaves no store behind.
"""

from __future__ import annotations

import datetime
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .processes import spawn, stop_all

if TYPE_CHECKING:
    from torch.distributed import TCPStore

__all__ = ["STORE_TIMEOUT", "StoreHost"]

log = logging.getLogger(__name__)

#: How long a store operation of the harness may wait: the occasional 5 s TCPStore
#: connect stall, with a wide margin.
STORE_TIMEOUT = datetime.timedelta(seconds=30)

#: The package to run with ``python -m``: its console script, by module name.
_PACKAGE = __name__.partition(".")[0]


class StoreHost:
    """An ``nvrx-seghealth store-host`` process on 127.0.0.1, owned by the demo.

    Args:
        log_path: where the server process writes its output.
    """

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None
        self._client: TCPStore | None = None
        self.port: int | None = None

    @property
    def endpoint(self) -> str:
        """``127.0.0.1:PORT``; only after :meth:`start`."""
        assert self.port is not None, "the store host is not started"
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server process id, while it runs."""
        return None if self._process is None else self._process.pid

    def start(self, timeout: float) -> None:
        """Start the server and wait up to ``timeout`` seconds for its port.

        Raises:
            RuntimeError: the server exited or did not report a port in time.
        """
        port_file = self.log_path.with_suffix(".port")
        port_file.unlink(missing_ok=True)  # this demo's own, from an earlier run
        command = [
            *(sys.executable, "-m", _PACKAGE, "store-host", "--host", "127.0.0.1"),
            *("--port", "0", "--port-file", str(port_file), "--stop-on-stdin-eof"),
        ]
        self._process = spawn(command, os.environ, self.log_path, stdin=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while not port_file.exists():
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the rendezvous store did not start; see {self.log_path}")
            time.sleep(0.05)
        self.port = int(port_file.read_text())  # written whole, by a rename
        log.info("rendezvous store listening on %s (pid %d)", self.endpoint, self._process.pid)

    def client(self) -> TCPStore:
        """A client connection for the harness (created once, on first use)."""
        if self._client is None:
            from torch.distributed import TCPStore

            assert self.port is not None, "the store host is not started"
            self._client = TCPStore("127.0.0.1", self.port, is_master=False, timeout=STORE_TIMEOUT)
        return self._client

    def stop(self) -> None:
        """Close the client and stop the server process (by its PID)."""
        self._client = None
        if self._process is not None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            stop_all([self._process], grace=5)
            self._process = None
