"""The etcd-v3 backend against a real etcd with the v2 API off: torch's backend contract
(``RendezvousBackend``: the eight cases of torch's own mixin, written anew), the stored
format, and runs kept apart."""

from __future__ import annotations

import gc
import os
import uuid
import warnings
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from torch.distributed.elastic.rendezvous import RendezvousStateError

from harness.services.etcd_v3 import open_v3_launcher, raw_get, raw_put, v3_launcher
from nvrx_seghealth._demo.rendezvous_state import read_endpoint
from nvrx_seghealth._rendezvous.etcd_v3.backend import FORMAT
from nvrx_seghealth._rendezvous.etcd_v3.errors import EtcdError, EtcdRefused
from nvrx_seghealth._rendezvous.etcd_v3.keys import RunKeys
from nvrx_seghealth._rendezvous.etcd_v3.settings import PASSWORD_ENV

pytestmark = pytest.mark.etcd


@pytest.fixture
def run() -> str:
    return f"run-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def backend(etcd_v3_server, run):
    with open_v3_launcher(etcd_v3_server.endpoint, run) as (backend, _):
        yield backend


def test_get_state_is_none_before_any_state(backend):
    assert backend.get_state() is None


def test_set_state_without_token_creates_the_state(backend):
    written = backend.set_state(b"first")
    assert written is not None
    state, token, has_set = written
    assert (state, has_set) == (b"first", True)
    assert backend.get_state() == (b"first", token)


def test_get_state_returns_the_state_and_its_token(backend):
    _, token, _ = backend.set_state(b"first")
    assert backend.get_state() == (b"first", token)


def test_set_state_with_the_current_token_writes_and_gives_a_new_token(backend):
    _, token, _ = backend.set_state(b"first")
    state, new_token, has_set = backend.set_state(b"second", token)
    assert (state, has_set) == (b"second", True)
    assert new_token != token
    assert backend.get_state() == (b"second", new_token)


def test_set_state_with_an_old_token_returns_the_current_state(backend):
    _, old, _ = backend.set_state(b"first")
    _, current, _ = backend.set_state(b"second", old)
    assert backend.set_state(b"third", old) == (b"second", current, False)
    assert backend.get_state() == (b"second", current)


def test_set_state_without_token_returns_an_existing_state(backend):
    _, token, _ = backend.set_state(b"first")
    assert backend.set_state(b"second") == (b"first", token, False)


@pytest.mark.parametrize("token", ["not-a-revision", object(), 3.5j])
def test_set_state_with_a_token_of_another_kind_returns_the_current_state(backend, token):
    _, current, _ = backend.set_state(b"first")
    assert backend.set_state(b"second", token) == (b"first", current, False)


def test_set_state_with_a_token_and_no_state_returns_none(backend):
    assert backend.set_state(b"first", 12345) is None
    assert backend.get_state() is None


def test_two_launchers_racing_from_one_token_write_once(etcd_v3_server, run):
    with (
        open_v3_launcher(etcd_v3_server.endpoint, run) as one,
        open_v3_launcher(etcd_v3_server.endpoint, run) as two,
    ):
        first: Any = one[0]
        second = two[0]
        _, token, _ = first.set_state(b"base")
        _, won, has_set = first.set_state(b"by first", token)
        assert has_set is True
        assert second.set_state(b"by second", token) == (b"by first", won, False)


def test_the_state_is_stored_compressed_behind_a_format_byte(etcd_v3_server, backend, run):
    state = b"torch's pickled state " * 1000
    backend.set_state(state)
    stored = raw_get(etcd_v3_server.endpoint, RunKeys(run).state)
    assert stored is not None
    assert stored.startswith(FORMAT)
    assert len(stored) < len(state) / 10


@pytest.mark.parametrize("stored", [b"", b"\x02whatever", FORMAT + b"not zlib"])
def test_a_value_not_in_the_format_is_a_state_error(etcd_v3_server, backend, run, stored):
    raw_put(etcd_v3_server.endpoint, RunKeys(run).state, stored)
    with pytest.raises(RendezvousStateError):
        backend.get_state()


def test_runs_whose_ids_nest_keep_apart(etcd_v3_server, run):
    with (
        open_v3_launcher(etcd_v3_server.endpoint, run) as (outer, _),
        open_v3_launcher(etcd_v3_server.endpoint, f"{run}/state") as (inner, _),
    ):
        outer.set_state(b"outer")
        assert inner.get_state() is None
        inner.set_state(b"inner")
        assert outer.get_state() == (b"outer", mock.ANY)


@pytest.mark.parametrize("closed", [0, 1], ids=["backend", "store"])
def test_closing_the_backend_or_the_store_closes_their_shared_client(etcd_v3_server, run, closed):
    launcher = v3_launcher(etcd_v3_server.endpoint, run)
    backend = launcher[0]
    backend.set_state(b"state")
    launcher[closed].close()
    with pytest.raises(EtcdError, match="the etcd client is closed"):
        backend.get_state()


def test_reading_a_runs_state_closes_its_client(etcd_v3_server, run):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        snapshot = read_endpoint("etcd-v3", etcd_v3_server.endpoint, run, timedelta(seconds=30))
        gc.collect()
    assert snapshot.round is None
    assert [str(w.message) for w in caught if w.category is ResourceWarning] == []


def test_the_etcd_password_leaves_the_environment_the_workers_inherit(etcd_v3_auth, monkeypatch):
    """torchrun hands its environment to every worker: the launcher takes the password out
    of it, and a second launcher in the same process still logs in."""
    monkeypatch.setenv(PASSWORD_ENV, etcd_v3_auth.password)
    conf = {"user": etcd_v3_auth.user}
    for _ in range(2):
        with open_v3_launcher(etcd_v3_auth.server.endpoint, "run", **conf) as (_, store):
            assert PASSWORD_ENV not in os.environ
            with pytest.raises(EtcdRefused) as refused:
                store.num_keys()  # logged in (not "auth"), outside the user's one prefix
            assert refused.value.cause == "permission"
