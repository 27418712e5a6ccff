"""One validator for every duration, whichever way the value is given."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from harness.slurmenv import slurm_env
from nvrx_seghealth import SegmentHealthCheck, SegmentHealthRendezvousHandler
from nvrx_seghealth._errors import ConfigurationError
from nvrx_seghealth._settings.durations import (
    FS_TIMEOUT,
    HANDOFF_TIMEOUT,
    MINIMUM_STAT_TIMEOUT,
    MINIMUM_WATCH_INTERVAL,
    STAT_TIMEOUT,
    WATCH_INTERVAL,
    default_handoff_timeout,
    validate_seconds,
)
from nvrx_seghealth._settings.rdzv_conf import BackendSettings

#: The handler and the check take these durations: a second torch must pass them too.
pytestmark = pytest.mark.torch

REFUSED_STAT = [
    0,
    0.005,
    "0.05",
    -1,
    600.5,
    1e10,
    float("inf"),
    float("nan"),
    True,
    None,
    "soon",
    "",
    [5],
]
REFUSED_HANDOFF = [-0.1, 3600.5, 1e10, float("inf"), float("nan"), False, None, "later"]


@pytest.mark.parametrize("value,seconds", [(10, 10.0), ("2.5", 2.5), (600, 600.0), ("0.1", 0.1)])
def test_stat_timeouts_in_range_are_seconds(value, seconds):
    assert validate_seconds(STAT_TIMEOUT, value) == seconds


@pytest.mark.parametrize("value", REFUSED_STAT)
def test_stat_timeouts_out_of_range_are_refused_the_same_way_everywhere(value, tmp_path):
    with pytest.raises(ConfigurationError) as refused:
        validate_seconds(STAT_TIMEOUT, value)
    assert refused.value.setting == "stat_timeout"
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        with pytest.raises(ConfigurationError) as refused:
            BackendSettings.from_rdzv_config({"segment_health_check_stat_timeout": str(value)}, {})
        assert refused.value.setting == "rdzv-conf segment_health_check_stat_timeout"
    with pytest.raises(ConfigurationError) as refused:
        SegmentHealthCheck(str(tmp_path), "1", "2", stat_timeout=value)
    assert refused.value.setting == "stat_timeout"


@pytest.mark.parametrize("value", [0.005, "0.05", 0.0999])
def test_a_stat_bound_below_the_smallest_that_works_says_which_that_is(value):
    """A bound the helper cannot meet on a loaded node would fail open on every round."""
    with pytest.raises(ConfigurationError) as refused:
        validate_seconds(
            STAT_TIMEOUT, value, given_as="rdzv-conf segment_health_check_stat_timeout"
        )
    assert refused.value.setting == "rdzv-conf segment_health_check_stat_timeout"
    assert f"{MINIMUM_STAT_TIMEOUT:g} s" in str(refused.value)


@pytest.mark.parametrize("value", REFUSED_HANDOFF)
def test_handoff_timeouts_out_of_range_are_refused(value):
    with pytest.raises(ConfigurationError) as refused:
        validate_seconds(HANDOFF_TIMEOUT, value)
    assert refused.value.setting == "handoff_timeout"


def test_zero_turns_the_handoff_off_and_the_default_follows_the_stat_bound():
    assert validate_seconds(HANDOFF_TIMEOUT, 0) == 0.0
    assert validate_seconds(HANDOFF_TIMEOUT, "3600") == 3600.0
    assert default_handoff_timeout(10.0) == 30.0


def test_a_watch_interval_from_the_floor_to_the_maximum_is_a_watch_and_zero_is_none():
    assert validate_seconds(WATCH_INTERVAL, 0) == 0.0
    assert validate_seconds(WATCH_INTERVAL, "0") == 0.0
    assert validate_seconds(WATCH_INTERVAL, "0.5") == MINIMUM_WATCH_INTERVAL == 0.5
    assert validate_seconds(WATCH_INTERVAL, 3600) == 3600.0
    for value in (-1, 3600.5, float("inf"), float("nan"), True, "five"):
        with pytest.raises(ConfigurationError) as refused:
            validate_seconds(WATCH_INTERVAL, value)
        assert refused.value.setting == "watch_interval"


@pytest.mark.parametrize("value", [1e-9, 0.001, "0.1", 0.4999])
def test_a_watch_interval_below_the_floor_is_refused_with_the_range(value):
    """Each look is a stat on the shared filesystem from every unit's process 0: a
    tiny interval would load its metadata server; 0, not a tiny value, turns it off."""
    given_as = "rdzv-conf segment_health_check_watch_interval"
    with pytest.raises(ConfigurationError) as refused:
        validate_seconds(WATCH_INTERVAL, value, given_as=given_as)
    assert refused.value.setting == given_as
    message = str(refused.value)
    assert given_as in message and WATCH_INTERVAL.range_text in message
    assert WATCH_INTERVAL.range_text == "0, or 0.5 <= s <= 3600"
    with pytest.raises(ConfigurationError) as refused:
        BackendSettings.from_rdzv_config(
            {"segment_health_check_dir": "/shc", "segment_health_check_watch_interval": str(value)},
            {},
        )
    assert refused.value.setting == given_as


@pytest.mark.parametrize("value", REFUSED_STAT)
def test_the_commands_fs_timeout_has_the_stat_bounds_range(value):
    """The operator commands' calls run in the same helper processes as the launcher's
    stat: the same range, refused by the same validator, named as the option."""
    assert (FS_TIMEOUT.minimum, FS_TIMEOUT.maximum) == (STAT_TIMEOUT.minimum, STAT_TIMEOUT.maximum)
    with pytest.raises(ConfigurationError) as refused:
        validate_seconds(FS_TIMEOUT, value)
    assert refused.value.setting == "--fs-timeout"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"stat_timeout": float("inf")},
        {"stat_timeout": 1e10},
        {"handoff_timeout": -1},
        {"handoff_timeout": float("nan")},
        {"watch_interval": -0.5},
        {"watch_interval": 1e9},
    ],
)
def test_the_composition_api_refuses_before_any_rendezvous(kwargs, tmp_path):
    """Refused at construction, on every launcher, not later inside process 0's check."""
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
        C10dRendezvousBackend,
    )
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

    store = dist.HashStore()
    inner = DynamicRendezvousHandler.from_backend(
        "run", store, C10dRendezvousBackend(store, "run"), 1, 1
    )
    for env in (slurm_env(task=1), slurm_env(task=1, procid=1), {}):
        with pytest.raises(ConfigurationError):
            SegmentHealthRendezvousHandler(
                inner, store=store, directory=str(tmp_path), environ=env, **kwargs
            )
