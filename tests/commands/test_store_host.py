"""``nvrx-seghealth store-host``: a real TCPStore that launchers reach, stopped by SIGTERM."""

from __future__ import annotations

import datetime
import signal
import socket
import subprocess

from harness.commands import COMMAND, nvrx_seghealth
from harness.common import free_port


def test_serves_a_store_that_clients_reach_until_sigterm():
    from torch.distributed import TCPStore

    port = free_port()
    server = subprocess.Popen(
        [*COMMAND, "store-host", "--host", "127.0.0.1", "--port", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        ready = server.stdout.readline()  # printed once the port is bound
        assert f"127.0.0.1:{port}" in ready and "is_host=false" in ready
        client = TCPStore(
            "127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=10)
        )
        client.set("key", "value")
        assert client.get("key") == b"value"
        del client
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_a_port_in_use_exits_2_before_serving():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = nvrx_seghealth("store-host", "--host", "127.0.0.1", "--port", str(port))
    assert refused.returncode == 2
    assert "--port" in refused.stderr and refused.stdout == ""


def test_a_port_out_of_range_is_a_usage_error():
    refused = nvrx_seghealth("store-host", "--port", "70000")
    assert refused.returncode == 2 and "--port" in refused.stderr
