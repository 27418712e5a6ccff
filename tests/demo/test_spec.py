"""A simulated job's watch interval: passed to every launcher as its rdzv-conf key, refused
where the launcher would refuse it or where no wrapper reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvrx_seghealth._demo import JobSpec
from nvrx_seghealth._demo.launcher import rendezvous_config
from nvrx_seghealth._errors import ConfigurationError
from nvrx_seghealth._settings.rdzv_conf import WATCH_INTERVAL_KEY


def test_the_watch_interval_reaches_every_launchers_rdzv_conf(tmp_path: Path) -> None:
    spec = JobSpec(watch_interval=1.5)
    assert {
        rendezvous_config(spec, tmp_path, label)[WATCH_INTERVAL_KEY] for label in spec.labels
    } == {"1.5"}


def test_without_a_watch_interval_the_key_is_not_passed(tmp_path: Path) -> None:
    assert WATCH_INTERVAL_KEY not in rendezvous_config(JobSpec(), tmp_path)


def test_plain_c10d_with_a_watch_is_refused() -> None:
    with pytest.raises(ValueError, match=WATCH_INTERVAL_KEY):
        JobSpec(backend="c10d", watch_interval=1.0)


@pytest.mark.parametrize("seconds", [-1.0, 3601.0, float("nan")])
def test_a_watch_interval_out_of_range_is_refused(seconds: float) -> None:
    with pytest.raises(ConfigurationError) as refused:
        JobSpec(watch_interval=seconds)
    assert refused.value.setting == "watch_interval"
