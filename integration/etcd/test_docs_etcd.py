"""The documented etcd command line starts a three-member cluster that serves what the
etcd-v3 rendezvous needs, with the v2 API off.

The command is read from docs/cluster.md ("When to choose etcd over c10d") and run as
written, once per member (``NAME`` as the page sets it), with private data directories
and free loopback ports in place of ``/var/lib/etcd-rdzv``, the hosts and their ports.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
import uuid

import pytest

from harness.docs import commands, examples_under
from harness.ports import free_port
from harness.services.etcd_v3 import open_v3_launcher, raw_v3

pytestmark = pytest.mark.etcd

NAMES = ("etcd1", "etcd2", "etcd3")


def _documented() -> tuple[list[str], list[str]]:
    """The page's ``NAME=...`` assignment and its etcd command."""
    lines = [
        argv
        for e in examples_under("docs/cluster.md", "When to choose etcd over c10d")
        for argv in commands(e.text)
        if argv[0] == "etcd" or argv[0].startswith("NAME=")
    ]
    (assignment,), (etcd,) = (
        [a for a in lines if a[0] != "etcd"],
        [a for a in lines if a[0] == "etcd"],
    )
    return assignment, etcd


def test_the_documented_etcd_command_starts_a_cluster_for_etcd_v3(tmp_path):
    assignment, argv = _documented()
    assert assignment == ["NAME=etcd1"] and "--enable-v2=true" not in argv
    client = {name: free_port() for name in NAMES}
    peer = {name: free_port() for name in NAMES}
    members = []
    try:
        for name in NAMES:
            replaced = []
            for arg in argv:
                arg = arg.replace("/var/lib/etcd-rdzv", str(tmp_path / name))
                arg = arg.replace("0.0.0.0:2379", f"127.0.0.1:{client[name]}")
                arg = arg.replace("0.0.0.0:2380", f"127.0.0.1:{peer[name]}")
                arg = arg.replace("$NAME:2379", f"127.0.0.1:{client[name]}")
                arg = arg.replace("$NAME:2380", f"127.0.0.1:{peer[name]}")
                for other in NAMES:
                    arg = arg.replace(f"{other}:2380", f"127.0.0.1:{peer[other]}")
                replaced.append(arg.replace("$NAME", name))
            assert not any("0.0.0.0" in arg or "$NAME" in arg for arg in replaced)
            with open(tmp_path / f"{name}.log", "wb") as log:
                members.append(
                    subprocess.Popen(
                        replaced, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
                    )
                )
        endpoints = [f"127.0.0.1:{client[name]}" for name in NAMES]
        deadline = time.monotonic() + 60
        while True:
            for name, member in zip(NAMES, members, strict=True):
                assert member.poll() is None, (tmp_path / f"{name}.log").read_text()[-2000:]
            try:
                raw_v3(endpoints[0], "kv/put", {"key": "ZG9jcw==", "value": "djM="})
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "the documented cluster did not form"
                time.sleep(0.3)
        with pytest.raises(urllib.error.HTTPError) as refused:  # the v2 API is off
            urllib.request.urlopen(f"http://{endpoints[0]}/v2/keys", timeout=10)
        refused.value.close()
        with open_v3_launcher(",".join(endpoints), f"docs-{uuid.uuid4().hex[:8]}") as (backend, _):
            assert backend.set_state(b"state") is not None
    finally:
        for member in members:
            member.kill()
            member.wait(timeout=20)
