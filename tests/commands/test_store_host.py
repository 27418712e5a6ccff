"""``nvrx-seghealth store-host``: a real TCPStore that launchers reach, stopped by SIGTERM."""

from __future__ import annotations

import datetime
import os
import signal
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from harness.commands import COMMAND, clean_environment, nvrx_seghealth

pytestmark = pytest.mark.torch  # the command serves a torch TCPStore


def _serve(*args: str, stdin: int = subprocess.DEVNULL) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*COMMAND, "store-host", "--host", "127.0.0.1", *args],
        env=clean_environment(),
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stopped(server: subprocess.Popen[str], stdin: str | None = None) -> tuple[int, str]:
    """The exit status and stderr of ``server``, killed if it still runs; ``stdin`` is
    written to a pipe, which is then closed. The bound is for a hang only: on a loaded
    machine, torch's import and the interpreter's exit have taken 30 s."""
    try:
        _, errors = server.communicate(stdin, timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return server.returncode, errors


def test_port_0_serves_a_free_port_named_in_the_port_file_until_sigterm(tmp_path):
    from torch.distributed import TCPStore

    port_file = tmp_path / "store.port"
    port_file.write_text("1\n")  # an earlier run's: replaced
    server = _serve("--port", "0", "--port-file", str(port_file))
    try:
        assert server.stdout is not None
        ready = server.stdout.readline()  # printed once the port is bound and written
        port = int(port_file.read_text())
        assert port_file.read_text() == f"{port}\n"
        assert f"127.0.0.1:{port};" in ready and "is_host=false" in ready
        client = TCPStore(
            "127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=10)
        )
        client.set("key", "value")
        assert client.get("key") == b"value"
        del client
        server.send_signal(signal.SIGTERM)
    finally:
        code, errors = _stopped(server)
    assert code == 0 and "(SIGTERM)" in errors  # stdin was at its end all along
    assert port_file.read_text() == f"{port}\n"  # never deleted
    assert [path.name for path in tmp_path.iterdir()] == ["store.port"]  # no temporary left


def test_stop_on_stdin_eof_stops_when_the_parent_closes_its_pipe(tmp_path):
    port_file = tmp_path / "store.port"
    server = _serve(
        "--port", "0", "--port-file", str(port_file), "--stop-on-stdin-eof", stdin=subprocess.PIPE
    )
    assert server.stdout is not None
    assert "serving on" in server.stdout.readline()  # still serving, its pipe open
    code, errors = _stopped(server, stdin="")  # then the pipe closes
    assert code == 0 and "(stdin ended)" in errors


def _listing(directory: Path) -> list[tuple[str, int, bytes | None]]:
    """Each entry of ``directory``: its name, its mode and a regular file's content."""
    return sorted(
        (entry.name, mode, entry.read_bytes() if stat.S_ISREG(mode) else None)
        for entry in directory.iterdir()
        for mode in [entry.lstat().st_mode]
    )


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda path: path.write_text("my notes\n"), "does not hold a port"),
        (lambda path: path.write_text("8" * 20), "does not hold a port"),
        (lambda path: path.mkdir(), "not a regular file"),
        (lambda path: path.symlink_to(path.with_name("target")), "not a regular file"),
        (lambda path: os.mkfifo(path), "not a regular file"),
    ],
    ids=["text", "long-number", "directory", "symlink", "fifo"],
)
def test_a_port_file_that_is_not_a_port_file_is_refused_untouched(tmp_path, make, why):
    port_file = tmp_path / "store.port"
    make(port_file)
    before = _listing(tmp_path)
    refused = nvrx_seghealth("store-host", "--port", "0", "--port-file", str(port_file))
    assert refused.returncode == 2 and refused.stdout == ""
    assert why in refused.stderr and str(port_file) in refused.stderr
    assert _listing(tmp_path) == before


def test_a_port_file_in_a_missing_directory_is_refused(tmp_path):
    port_file = tmp_path / "missing" / "store.port"
    refused = nvrx_seghealth("store-host", "--port", "0", "--port-file", str(port_file))
    assert refused.returncode == 2 and "directory does not exist" in refused.stderr
    assert not port_file.parent.exists()


def test_an_empty_port_file_receives_the_port(tmp_path):
    port_file = tmp_path / "store.port"
    port_file.touch()
    server = _serve("--port", "0", "--port-file", str(port_file), "--stop-on-stdin-eof")
    code, _ = _stopped(server)  # stdin is /dev/null: it stops once it has served
    assert code == 0 and int(port_file.read_text()) > 0


def test_a_port_in_use_exits_2_before_serving(tmp_path):
    port_file = tmp_path / "store.port"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = nvrx_seghealth(
            "store-host", "--host", "127.0.0.1", "--port", str(port), "--port-file", str(port_file)
        )
    assert refused.returncode == 2
    assert "--port" in refused.stderr and refused.stdout == ""
    assert not port_file.exists()


def test_a_port_out_of_range_is_a_usage_error():
    refused = nvrx_seghealth("store-host", "--port", "70000")
    assert refused.returncode == 2 and "--port" in refused.stderr


def test_help_documents_port_0_and_the_port_file():
    helped = nvrx_seghealth("store-host", "--help")
    text = " ".join(helped.stdout.split())
    assert "0 takes any free port" in text and "--port-file FILE" in text
    assert "never deleted" in text and "--stop-on-stdin-eof" in text
