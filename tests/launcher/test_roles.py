"""Which coordinator a launcher gets (:func:`~nvrx_seghealth._launcher.roles.coordinator_for`):
process 0 of a unit judges, an array task's other launchers stand on its verdict or its
marker, and what a launcher lacks (a store, a usable restart count, a directory that
exists) turns off only what needs it, with one WARNING.

The coordinators are built as a handler builds them, on a real TCPStore
(``make_coordinator``); what each role then does is shown with launchers joining for
real, as in ``test_process_zero.py`` and ``test_sibling.py``.
"""

from __future__ import annotations

import logging
import threading

import pytest

from harness.rendezvous import (
    ARRAY,
    dynamic_handler,
    join_all,
    launcher,
    our_records,
    tcp_client,
    waiting_for_a_verdict,
)
from harness.slurmenv import slurm_env
from nvrx_seghealth import (
    SegmentHealthRendezvousHandler,
    UnhealthyNodeException,
    publish_decision,
)
from nvrx_seghealth._decision import decision_file
from nvrx_seghealth._launcher.process_zero import ProcessZero
from nvrx_seghealth._launcher.sibling import Sibling

pytestmark = pytest.mark.usefixtures("release_handlers")


def test_handoff_timeout_zero_turns_the_handoff_off(tcp_store, shc, make_coordinator):
    envs = [slurm_env(task=1, procid=p) for p in (1, 0)]
    roles = [make_coordinator(env, handoff_timeout=0) for env in envs]
    assert [type(role) for role in roles] == [Sibling, ProcessZero]
    assert [role.handoff for role in roles] == [None, None]
    handlers = [launcher(tcp_store, shc, env, 2, 2, handoff_timeout=0) for env in envs]
    assert [j.result.world_size for j in join_all(handlers)] == [2, 2]
    assert not waiting_for_a_verdict(tcp_store, 1)


def test_a_restart_count_that_is_no_id_turns_only_the_handoff_off(
    tcp_store, shc, caplog, make_coordinator
):
    envs = [slurm_env(task=1, procid=p) for p in (1, 0)]
    for env in envs:
        env["SLURM_RESTART_COUNT"] = "x"
    roles = [make_coordinator(env) for env in envs]
    assert [role.handoff for role in roles] == [None, None]
    assert all(role.markers is not None for role in roles) and isinstance(roles[1], ProcessZero)
    assert len(our_records(caplog, logging.WARNING)) == 2  # one per launcher
    handlers = [launcher(tcp_store, shc, env, 2, 2) for env in envs]
    assert [j.result.world_size for j in join_all(handlers)] == [2, 2]


def test_regular_job_raises_and_publishes_nothing(tcp_store, shc, make_coordinator):
    publish_decision(shc, "77", "77", "bad")
    role = make_coordinator(slurm_env(job=77))
    assert isinstance(role, ProcessZero) and role.markers is None
    handler = launcher(tcp_store, shc, slurm_env(job=77), 1, 1)
    keys = tcp_store.num_keys()
    with pytest.raises(UnhealthyNodeException) as excluded:
        handler.next_rendezvous()
    assert (excluded.value.job_id, excluded.value.task_id) == ("77", "77")
    assert tcp_store.num_keys() == keys


def test_other_launchers_never_stat_the_decision_file(
    tcp_store, shc, monkeypatch, make_coordinator
):
    path = publish_decision(shc, str(ARRAY), "1", "bad")
    real_stat_within = decision_file.stat_within
    stats = []

    def counting_stat(target, timeout):
        if target == path:
            stats.append(threading.current_thread().name)
        return real_stat_within(target, timeout)

    monkeypatch.setattr(decision_file, "stat_within", counting_stat)
    envs = (slurm_env(task=1, procid=1), slurm_env(task=1, procid=2))
    assert all(isinstance(make_coordinator(env, handoff_timeout=0), Sibling) for env in envs)
    others = [launcher(tcp_store, shc, env, 2, 2, handoff_timeout=0) for env in envs]
    assert [j.result.world_size for j in join_all(others)] == [2, 2]
    assert stats == []
    process0 = launcher(tcp_store, shc, slurm_env(task=1), 1, 1)
    with pytest.raises(UnhealthyNodeException):
        process0.next_rendezvous()
    assert len(stats) == 1  # one metadata call per rendezvous


def test_without_a_store_process_zero_still_excludes_and_says_so_once(tcp_store, shc, caplog):
    publish_decision(shc, str(ARRAY), "1", "bad")
    store = tcp_client(tcp_store)
    handler = SegmentHealthRendezvousHandler(
        dynamic_handler(store, 1, 1), store=None, directory=shc, environ=slurm_env(task=1)
    )
    with pytest.raises(UnhealthyNodeException):
        handler.next_rendezvous()
    warnings = our_records(caplog, logging.WARNING)
    assert len(warnings) == 1 and "no rendezvous store" in warnings[0]


def test_a_directory_that_does_not_exist_gets_one_warning(tcp_store, tmp_path, caplog):
    missing = str(tmp_path / "typo")
    handler = launcher(tcp_store, missing, slurm_env(task=1), 1, 1, handoff_timeout=0)
    for _ in range(2):
        assert handler.next_rendezvous().world_size == 1
    warnings = our_records(caplog, logging.WARNING)
    assert len(warnings) == 1 and missing in warnings[0] and "does not exist" in warnings[0]
    sibling = launcher(
        tcp_store, missing, slurm_env(task=1, procid=1), 1, 1, run_id="run-2", handoff_timeout=0
    )
    sibling.next_rendezvous()
    assert len(our_records(caplog, logging.WARNING)) == 1  # other launchers never look
