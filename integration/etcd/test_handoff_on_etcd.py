"""The request/verdict hand-off on torch's EtcdStore against a real etcd.

The protocol's tests (:class:`harness.handoff.HandoffTests`, which
``tests/launcher/test_handoff.py`` runs on torch's own stores) run here once more, with
``markers`` in etcd: the hand-off uses only ``add``, which torch's EtcdStore has (it has
no ``compare_set``).
"""

from __future__ import annotations

import uuid

import pytest

from harness.handoff import HandoffTests
from harness.services.etcd import etcd_store
from nvrx_seghealth._launcher.markers import ReplacementGroupMarkers

pytestmark = pytest.mark.etcd


@pytest.fixture
def markers(etcd_server):
    """The markers of a fresh run in etcd (etcd's keys outlive a test: a new run id)."""
    return ReplacementGroupMarkers(etcd_store(etcd_server), f"run-{uuid.uuid4().hex[:8]}", "50")


class TestHandoffOnEtcd(HandoffTests):
    """The protocol on torch's EtcdStore."""
