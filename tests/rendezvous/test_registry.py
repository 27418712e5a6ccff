"""The one table of inner backends (:mod:`nvrx_seghealth._rendezvous.registry`): a backend
added as one row is accepted, named and created everywhere.

The added backend is real: torch's own c10d over a real TCPStore, under another name, so
the handler it ends in joins a real round.
"""

from __future__ import annotations

import importlib

import pytest
from torch.distributed.elastic.rendezvous import RendezvousParameters

from harness.ports import free_port
from nvrx_seghealth._commands.run import launch_parser
from nvrx_seghealth._demo.spec import JobSpec
from nvrx_seghealth._launcher.backend import BACKEND_NAME, create_segment_health_handler
from nvrx_seghealth._rendezvous import creators, registry
from nvrx_seghealth._rendezvous.registry import INNER_BACKEND_KEY, InnerBackend
from nvrx_seghealth._settings.rdzv_conf import BackendSettings

#: What the added backend's creator was asked for, by name.
CREATED: list[str] = []


def create_renamed_c10d(params: RendezvousParameters):
    """The creator the added row names: torch's c10d under the row's name."""
    CREATED.append(params.backend)
    c10d = RendezvousParameters(
        "c10d", params.endpoint, params.run_id, params.min_nodes, params.max_nodes
    )
    return creators.c10d(c10d)


@pytest.fixture
def added(monkeypatch) -> str:
    """One row more in the table, and nothing else changed."""
    CREATED.clear()
    row = InnerBackend("c10d-renamed", False, f"{__name__}:create_renamed_c10d")
    monkeypatch.setitem(registry.INNER_BACKENDS, row.name, row)
    return row.name


def test_every_row_names_a_creator_of_this_folder():
    """A row's creator loads, and lives beside the table (a backend's room)."""
    for row in registry.INNER_BACKENDS.values():
        module, _, function = row.creator.partition(":")
        assert module.startswith("nvrx_seghealth._rendezvous."), row
        assert callable(getattr(importlib.import_module(module), function)), row
    assert registry.names()[0] == "c10d"  # the default
    assert registry.etcd_names() == ("etcd-v2", "etcd-v3")
    assert "barrier" in registry.names()


def test_a_backend_added_as_one_row_is_accepted_named_and_created(added, tmp_path):
    settings = BackendSettings.from_rdzv_config(
        {INNER_BACKEND_KEY: added, "segment_health_check_dir": str(tmp_path)}, environ={}
    )
    assert settings.inner_backend == added
    assert added in launch_parser().format_help()  # run's help names it
    assert JobSpec(tasks=1, inner_backend=added).inner_backend == added  # the demo takes it
    handler = create_segment_health_handler(
        RendezvousParameters(
            BACKEND_NAME,
            f"127.0.0.1:{free_port()}",
            "run",
            1,
            1,
            **{INNER_BACKEND_KEY: added},
        )
    )
    assert CREATED == [added]
    assert handler.inner.get_backend() == "c10d"  # torch's own backend under it
    handler.shutdown()


def test_a_name_without_a_row_is_refused_with_every_row_named(added):
    from nvrx_seghealth._errors import ConfigurationError

    with pytest.raises(ConfigurationError) as refused:
        BackendSettings.from_rdzv_config({INNER_BACKEND_KEY: "etcd-v9"}, environ={})
    assert all(name in str(refused.value) for name in registry.names())
    assert added in str(refused.value)
