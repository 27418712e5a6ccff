"""torchrun's door to the barrier rendezvous: torch's keys read once, a bad one refused
with its name before any store is opened, and the entry point torchrun loads."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

import pytest
from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous import RendezvousParameters

from nvrx_seghealth._errors import ConfigurationError
from nvrx_seghealth._rendezvous.barrier.creator import create_handler, inner, settings_from
from nvrx_seghealth._rendezvous.etcd_v3.store import EtcdV3Store


def params(**conf: str) -> RendezvousParameters:
    # port 1: nothing listens there, so a store opened by mistake fails the test
    return RendezvousParameters("barrier", "127.0.0.1:1", "job", 2, 4, is_host=False, **conf)


def test_torchs_keys_and_defaults_are_read() -> None:
    settings = settings_from(params(last_call_timeout="7", local_addr="10.0.0.5"))
    assert (settings.min_nodes, settings.max_nodes, settings.run_id) == (2, 4, "job")
    assert (settings.join_timeout, settings.last_call_timeout) == (600, 7)
    assert (settings.keep_alive_interval, settings.dead_after) == (5, 15)
    assert settings.local_addr == "10.0.0.5"


@pytest.mark.parametrize(
    ("key", "value"),
    [("join_timeout", "soon"), ("keep_alive_interval", "0"), ("last_call_timeout", "-1")],
)
def test_a_bad_key_is_refused_by_name_before_the_store(key: str, value: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        create_handler(params(**{key: value}))
    assert refused.value.setting == f"rdzv-conf {key}"


def test_a_store_of_no_known_kind_is_refused_by_name() -> None:
    with pytest.raises(ConfigurationError) as refused:
        create_handler(params(store="redis"))
    assert refused.value.setting == "rdzv-conf store"


def test_store_etcd_v3_runs_on_the_etcd_v3_store_of_every_member() -> None:
    # nothing is asked of etcd until the first rendezvous: no member need listen
    conf = {"store": "etcd-v3", "read_timeout": "5"}
    endpoint = "127.0.0.1:1,127.0.0.1:2"
    handler = create_handler(RendezvousParameters("barrier", endpoint, "job", 2, 4, **conf))
    assert isinstance(handler.store, EtcdV3Store)


def test_store_etcd_v3_refuses_a_bad_etcd_key_by_name() -> None:
    conf = {"store": "etcd-v3", "protocol": "gopher"}
    with pytest.raises(ConfigurationError) as refused:
        create_handler(RendezvousParameters("barrier", "127.0.0.1:1", "job", 2, 4, **conf))
    assert refused.value.setting == "rdzv-conf protocol"


def test_torchrun_finds_the_entry_point() -> None:
    (point,) = [e for e in entry_points(group="torchrun.handlers") if e.name == "barrier"]
    assert point.load()() is create_handler


def test_the_package_imported_before_torchs_registry_still_registers() -> None:
    # torch loads the entry point while it imports its rendezvous package: a handler
    # imported at module level made that a circular import (a WARNING, no backend)
    code = (
        "import nvrx_seghealth._rendezvous.barrier\n"
        "from torch.distributed.elastic.rendezvous.registry import handler_registry\n"
        "print('barrier' in handler_registry._registry)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["True"], run.stderr[-2000:]
    assert "circular import" not in run.stderr


def test_the_inner_creator_gives_the_handler_and_the_store_the_check_shares() -> None:
    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, use_libuv=True)
    endpoint = f"127.0.0.1:{master.port}"
    handler, store = inner(RendezvousParameters("barrier", endpoint, "job", 1, 1, is_host="false"))
    store.set("marker", "seen")
    assert master.get("marker") == b"seen"
    assert handler.get_backend() == "barrier" and handler.store is store
