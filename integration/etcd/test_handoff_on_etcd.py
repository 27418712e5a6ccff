"""The request/verdict hand-off on torch's EtcdStore against a real etcd.

The protocol tests of ``tests/launcher/test_handoff.py`` run here once more, with ``markers``
in etcd: the hand-off uses only ``add``, which torch's EtcdStore has (it has no
``compare_set``).
"""

from __future__ import annotations

import uuid

import pytest
from test_markers_on_etcd import etcd_store

from nvrx_seghealth._launcher.markers import ReplacementGroupMarkers
from tests.launcher.test_handoff import (  # noqa: F401  (collected here with the etcd fixture)
    test_a_new_process_zero_instance_answers_correctly,
    test_a_standing_answer_covers_every_request_made_while_it_stands,
    test_a_verdict_covering_the_request_is_taken_at_once,
    test_a_verdict_older_than_the_request_is_never_taken,
    test_an_answer_read_before_a_request_does_not_cover_it,
    test_an_exclusion_stands_for_every_request_past_and_future,
    test_groups_and_lives_of_a_task_do_not_mix,
    test_no_verdict_returns_none_after_the_bound,
    test_one_answer_covers_every_earlier_request,
    test_requests_are_numbered_and_process_zero_reads_the_highest,
)

pytestmark = pytest.mark.etcd


@pytest.fixture
def markers(etcd_server):
    """The markers of a fresh run in etcd (etcd's keys outlive a test: a new run id)."""
    return ReplacementGroupMarkers(etcd_store(etcd_server), f"run-{uuid.uuid4().hex[:8]}", "50")
