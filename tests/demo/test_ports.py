"""The port of a launcher that hosts the store: chosen below the kernel's ephemeral range,
where nothing the kernel hands out (an outgoing connection's local end, another
``bind(0)``) can take it before that launcher binds it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from nvrx_seghealth._demo import ports
from nvrx_seghealth._demo.ports import LOWEST, ephemeral_range, unclaimed_port


def test_a_port_is_chosen_below_the_ephemeral_range_and_is_free() -> None:
    low = ephemeral_range()[0]
    assert low > LOWEST  # this machine leaves room below the range
    for _ in range(50):
        port = unclaimed_port()
        assert LOWEST <= port < low
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", port))


def test_a_port_something_is_bound_to_is_never_chosen(monkeypatch, tmp_path: Path) -> None:
    # A span of one port below a stated range: while that port is bound, the kernel's
    # choice is the answer.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        held = holder.getsockname()[1]
        stated = tmp_path / "ip_local_port_range"
        stated.write_text(f"{held + 1}\t{held + 100}\n")
        monkeypatch.setattr(ports, "LOWEST", held)
        monkeypatch.setattr(ports, "_RANGE_FILE", stated)
        assert ephemeral_range() == (held + 1, held + 100)
        assert {unclaimed_port() for _ in range(10)}.isdisjoint({held})
    assert unclaimed_port() == held  # free again, and the only port of the span


@pytest.mark.parametrize("content", [None, "", "32768", "low high"])
def test_an_unreadable_range_is_linux_default(monkeypatch, tmp_path: Path, content) -> None:
    stated = tmp_path / "ip_local_port_range"
    if content is not None:
        stated.write_text(content)
    monkeypatch.setattr(ports, "_RANGE_FILE", stated)
    assert ephemeral_range() == (32768, 60999)
