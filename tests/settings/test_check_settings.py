"""The check's settings: validated once into a frozen CheckSettings, or off."""

from __future__ import annotations

import dataclasses

import pytest

from nvrx_seghealth import ConfigurationError
from nvrx_seghealth._settings.check_settings import (
    DIRECTORY_ENV,
    CheckSettings,
    check_settings,
    directory_from_environment,
)


def test_the_defaults_and_the_handoff_bound_that_follows_the_stat_bound():
    assert CheckSettings.validate("/shc") == CheckSettings("/shc", 10.0, 30.0)
    assert CheckSettings.validate("/shc", stat_timeout="2.5") == CheckSettings("/shc", 2.5, 22.5)
    settings = CheckSettings.validate("/shc", handoff_timeout=0)
    assert settings.handoff_timeout == 0.0 and not settings.handoff_enabled


def test_settings_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        CheckSettings.validate("/shc").directory = "/elsewhere"  # type: ignore[misc]  # on purpose


@pytest.mark.parametrize("directory", [None, ""])
def test_no_directory_turns_the_check_off_but_the_timeouts_are_still_validated(directory):
    assert check_settings(directory) is None
    with pytest.raises(ConfigurationError) as refused:
        check_settings(directory, handoff_timeout=-1, handoff_timeout_as="--my-handoff")
    assert refused.value.setting == "--my-handoff"


@pytest.mark.parametrize(
    "kwargs,setting",
    [
        ({"directory_as": "--my-dir"}, "--my-dir"),
        ({}, "directory"),
    ],
)
def test_a_relative_directory_names_the_setting_it_came_from(kwargs, setting):
    with pytest.raises(ConfigurationError) as refused:
        CheckSettings.validate("relative", **kwargs)
    assert refused.value.setting == setting


def test_the_environment_gives_the_directory_and_empty_counts_as_unset():
    assert directory_from_environment({DIRECTORY_ENV: "/from/env"}) == "/from/env"
    assert directory_from_environment({DIRECTORY_ENV: ""}) is None
    assert directory_from_environment({}) is None
