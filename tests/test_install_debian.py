"""``.ci/install-debian`` (through :func:`harness.services.debian.install`) installs one
caller at a time, as pytest's workers call it at once on a fresh machine.

``apt-get`` and ``dpkg-query`` are stand-ins on ``PATH``: the test must not install.
The stand-in ``apt-get`` holds a directory while it runs and fails when another holds it,
as dpkg's own lock makes a second install fail on a real machine.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness.services import debian

_APT_GET = """#!/bin/sh
mkdir "$STANDIN/busy" 2>/dev/null || { echo "E: Could not get lock" >&2; exit 100; }
echo "$*" >>"$STANDIN/calls"
sleep 0.3
rmdir "$STANDIN/busy"
"""
#: Every package is missing until the stand-in apt-get has run once.
_DPKG_QUERY = """#!/bin/sh
grep -q ' install ' "$STANDIN/calls" 2>/dev/null && printf 'install ok installed'
exit 0
"""


@pytest.fixture
def standins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("apt-get", _APT_GET), ("dpkg-query", _DPKG_QUERY)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("STANDIN", str(tmp_path))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("INSTALL_DEBIAN_POLICY", str(tmp_path / "policy-rc.d"))
    return tmp_path


def test_workers_installing_at_once_take_turns(standins: Path) -> None:
    with ThreadPoolExecutor(4) as pool:
        failures = list(pool.map(lambda _: debian.install("etcd-server"), range(4)))
    assert failures == [None] * 4
    # The first caller installed; the others found the package installed.
    assert (standins / "calls").read_text().split("\n")[:-1] == [
        "-o DPkg::Lock::Timeout=600 update -qq",
        "-o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends etcd-server",
    ]
    assert not (standins / "policy-rc.d").exists()


def test_a_failed_install_says_why(standins: Path) -> None:
    (standins / "busy").mkdir()
    failure = debian.install("etcd-server")
    assert failure is not None
    assert "exited 100" in failure
    assert "Could not get lock" in failure
