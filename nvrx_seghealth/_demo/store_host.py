"""The rendezvous store, hosted by a process outside every allocation unit.

c10d normally hosts its TCPStore inside the launcher whose address matches the
endpoint; if that launcher's unit is excluded and exits, the store dies with it and
every node loses the rendezvous (docs/cluster.md, "When to choose etcd over c10d"). The
simulation therefore runs
the store in a separate process, and launchers get ``is_host=false``.

:class:`StoreHost` starts the server process (:mod:`.store_server`), waits for its
port, connects to it and stops it.
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

# Run as a module by name, not imported here: importing it from the package before
# ``python -m`` runs it would make runpy warn.
_SERVER_MODULE = f"{__package__}.store_server"


class StoreHost:
    """A TCPStore server process on 127.0.0.1, owned by the harness.

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
        command = [sys.executable, "-m", _SERVER_MODULE, str(port_file)]
        self._process = spawn(command, os.environ, self.log_path, stdin=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while not port_file.exists():
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the rendezvous store did not start; see {self.log_path}")
            time.sleep(0.05)
        self.port = int(port_file.read_text())
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
