"""A producer's health, told by its state alone: ok, failing, or stopped.

``status`` shows it; the rule lives with the state (:meth:`ProducerState.health`). Every
time here is a number given to the rule, so no clock is read.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.services.fakeslurm import dump, planted
from nvrx_seghealth._producer.state import ProducerHealth, parse_state, state_file_name

PATH = f"/shc/{state_file_name('t1', '500')}"
LAST_PASS = 1.7e9
FAILING: dict[str, Any] = {
    "failing_since": LAST_PASS - 600,
    "failed_passes": 4,
    "last_error": "squeue: timed out",
}


def state(interval=None, *, failing=False):
    """A producer's state: its last pass at :data:`LAST_PASS`, one every ``interval``
    seconds (``None``: single passes), its passes failing or not."""
    body = planted(last_pass=LAST_PASS, interval=interval, **(FAILING if failing else {}))
    return parse_state(PATH, dump(body))


@pytest.mark.parametrize(
    ("interval", "quiet", "failing", "health"),
    [
        pytest.param(30.0, 5, False, ProducerHealth.OK, id="on-time"),
        pytest.param(None, 86400, False, ProducerHealth.OK, id="single-passes-never-stop"),
        pytest.param(30.0, 5, True, ProducerHealth.FAILING, id="failing"),
        pytest.param(30.0, 91, False, ProducerHealth.STOPPED, id="quiet-past-interval-plus-60"),
        pytest.param(30.0, 89, False, ProducerHealth.OK, id="quiet-within-interval-plus-60"),
        pytest.param(100.0, 301, False, ProducerHealth.STOPPED, id="quiet-past-3-intervals"),
        pytest.param(100.0, 299, False, ProducerHealth.OK, id="quiet-within-3-intervals"),
        pytest.param(30.0, 91, True, ProducerHealth.STOPPED, id="stopped-wins-over-failing"),
    ],
)
def test_health_by_the_last_pass(interval, quiet, failing, health):
    """Stopped: quiet longer than max(3 x interval, interval + 60) seconds."""
    assert state(interval, failing=failing).health(LAST_PASS + quiet) is health


def test_a_file_written_recently_keeps_a_producer_with_a_slow_clock_alive():
    """Its stamp says 95 s ago (its clock is behind); the file server stamped the file
    1 s ago: it ran its last pass just now."""
    behind = state(1.0)
    now = LAST_PASS + 95
    assert behind.health(now) is ProducerHealth.STOPPED
    assert behind.health(now, written=now - 1) is ProducerHealth.OK
    assert behind.quiet_for(now, written=now - 1) == 1


def test_quiet_for_is_never_negative():
    """A stamp ahead of the reader's clock is quiet for 0 s, not for a negative time."""
    ahead = state(30.0)
    assert ahead.quiet_for(LAST_PASS - 50) == 0.0
    assert ahead.health(LAST_PASS - 50) is ProducerHealth.OK
