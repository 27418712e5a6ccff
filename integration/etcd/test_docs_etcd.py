"""The documented etcd command line serves what the etcd-v2 rendezvous needs: etcd's v2 API.

The command is read from docs/cluster.md ("When to choose etcd-v2 over c10d") and run as
written, with a private data directory and free loopback ports in place of
``/var/lib/etcd-rdzv``, ``0.0.0.0:2379`` and ``etcd-host:2379`` (and a free peer port, so it
cannot meet another etcd).
"""

from __future__ import annotations

import subprocess
import time

import pytest

from harness.common import free_port
from harness.docs import commands, examples_under

pytestmark = pytest.mark.etcd


def test_the_documented_etcd_command_serves_the_v2_api(etcd_server, tmp_path):
    import etcd

    (argv,) = [
        argv
        for e in examples_under("docs/cluster.md", "When to choose etcd-v2 over c10d")
        for argv in commands(e.text)
        if argv[0] == "etcd"
    ]
    port, peer = free_port(), free_port()
    replaced = [
        arg.replace("/var/lib/etcd-rdzv", str(tmp_path / "data"))
        .replace("0.0.0.0:2379", f"127.0.0.1:{port}")
        .replace("etcd-host:2379", f"127.0.0.1:{port}")
        for arg in argv
    ]
    assert replaced != argv and "--enable-v2=true" in argv
    peer_url = f"http://127.0.0.1:{peer}"
    with open(tmp_path / "etcd.log", "wb") as log:
        server = subprocess.Popen(
            [
                *replaced,
                "--listen-peer-urls",
                peer_url,
                "--initial-advertise-peer-urls",
                peer_url,
                "--initial-cluster",
                f"rdzv={peer_url}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        client = etcd.Client(host="127.0.0.1", port=port, protocol="http")
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None, (tmp_path / "etcd.log").read_text()[-2000:]
            try:
                client.write("/nvrx-seghealth-docs", "v2")
                break
            except etcd.EtcdConnectionFailed:
                assert time.monotonic() < deadline, (tmp_path / "etcd.log").read_text()[-2000:]
                time.sleep(0.2)
        assert client.read("/nvrx-seghealth-docs").value == "v2"
    finally:
        server.terminate()
        server.wait(timeout=20)
