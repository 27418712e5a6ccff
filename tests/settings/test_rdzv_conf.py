import pytest

from nvrx_seghealth._errors import ConfigurationError
from nvrx_seghealth._settings.check_settings import DIRECTORY_ENV, CheckSettings
from nvrx_seghealth._settings.rdzv_conf import (
    HANDOFF_TIMEOUT_KEY as HANDOFF,
)
from nvrx_seghealth._settings.rdzv_conf import (
    OUR_KEYS,
    BackendSettings,
    lookalike,
)
from nvrx_seghealth._settings.rdzv_conf import (
    STAT_TIMEOUT_KEY as STAT,
)
from nvrx_seghealth._settings.rdzv_conf import (
    WATCH_INTERVAL_KEY as WATCH,
)


def settings(config, env=None):
    return BackendSettings.from_rdzv_config(config, env or {})


def test_defaults_disable_the_check_and_wrap_c10d():
    s = settings({"timeout": 900, "is_host": "false"})
    assert (s.check, s.inner_backend) == (None, "c10d")
    assert s.inner_config == {"timeout": 900, "is_host": "false"}


def test_our_keys_do_not_reach_the_inner_backend():
    s = settings(
        {
            "segment_health_check_dir": "/shc",
            "segment_health_check_stat_timeout": "2.5",
            "segment_health_check_handoff_timeout": "0",
            "inner_backend": "etcd-v2",
            "join_timeout": "60",
        }
    )
    assert s.check == CheckSettings("/shc", stat_timeout=2.5, handoff_timeout=0.0)
    assert not s.check.handoff_enabled and s.inner_backend == "etcd-v2"
    assert s.inner_config == {"join_timeout": "60"}


def test_rdzv_conf_beats_environment_and_environment_is_the_fallback():
    env = {DIRECTORY_ENV: "/from/env"}
    assert settings({"segment_health_check_dir": "/from/conf"}, env).check.directory == "/from/conf"
    assert settings({}, env).check.directory == "/from/env"
    assert settings({}, {DIRECTORY_ENV: ""}).check is None


def test_the_handoff_timeout_defaults_to_the_stat_bound_plus_the_margin():
    s = settings({"segment_health_check_dir": "/shc", "segment_health_check_stat_timeout": "4"})
    assert s.check == CheckSettings("/shc", stat_timeout=4.0, handoff_timeout=24.0)


def test_the_watch_is_off_unless_the_key_sets_a_positive_interval():
    assert settings({"segment_health_check_dir": "/shc"}).check.watch_interval == 0.0
    assert not settings({"segment_health_check_dir": "/shc"}).check.watch_enabled
    watched = settings(
        {"segment_health_check_dir": "/shc", "segment_health_check_watch_interval": "5"}
    )
    assert watched.check.watch_interval == 5.0 and watched.check.watch_enabled
    assert "segment_health_check_watch_interval" not in watched.inner_config


@pytest.mark.parametrize("value", ["-1", "x", "inf", "3601", ""])
def test_a_bad_watch_interval_is_refused_with_its_key_even_while_the_check_is_off(value):
    for config in ({}, {"segment_health_check_dir": "/shc"}):
        with pytest.raises(ConfigurationError) as refused:
            settings(config | {"segment_health_check_watch_interval": value})
        assert refused.value.setting == "rdzv-conf segment_health_check_watch_interval"


def test_timeouts_are_validated_while_the_check_is_off():
    with pytest.raises(ConfigurationError):
        settings({"segment_health_check_stat_timeout": "0"})


@pytest.mark.parametrize(
    "config,env,setting",
    [
        ({"segment_health_check_dir": "rel/shc"}, {}, "rdzv-conf segment_health_check_dir"),
        ({"segment_health_check_dir": ""}, {}, "rdzv-conf segment_health_check_dir"),
        ({}, {DIRECTORY_ENV: "rel"}, f"environment variable {DIRECTORY_ENV}"),
        ({"segment_health_check_stat_timeout": "0"}, {}, "rdzv-conf " + STAT),
        ({"segment_health_check_stat_timeout": "soon"}, {}, "rdzv-conf " + STAT),
        ({"segment_health_check_stat_timeout": "inf"}, {}, "rdzv-conf " + STAT),
        ({"segment_health_check_stat_timeout": "1e10"}, {}, "rdzv-conf " + STAT),
        ({"segment_health_check_handoff_timeout": "-1"}, {}, "rdzv-conf " + HANDOFF),
        ({"segment_health_check_handoff_timeout": "nan"}, {}, "rdzv-conf " + HANDOFF),
        ({"segment_health_check_handoff_timeout": "later"}, {}, "rdzv-conf " + HANDOFF),
        ({"inner_backend": "static"}, {}, "rdzv-conf inner_backend"),
        ({"segment_health_chek_dir": "/shc"}, {}, "rdzv-conf segment_health_chek_dir"),
        (
            {"segment_health_check_stat_timout": "5"},
            {},
            "rdzv-conf segment_health_check_stat_timout",
        ),
        ({"segment_health_directory": "/shc"}, {}, "rdzv-conf segment_health_directory"),
        ({"inner_backed": "c10d"}, {}, "rdzv-conf inner_backed"),
        ({"inner_backend": "segment-health"}, {}, "rdzv-conf inner_backend"),
    ],
)
def test_bad_values_name_the_setting(config, env, setting):
    with pytest.raises(ConfigurationError) as refused:
        settings(config, env)
    assert refused.value.setting == setting


@pytest.mark.parametrize(
    "key,meant",
    [
        ("segment_health_chek_dir", "segment_health_check_dir"),
        ("segment_health_check_stat_timout", "segment_health_check_stat_timeout"),
        ("segment_health_directory", "segment_health_check_dir"),
        ("inner_backed", "inner_backend"),
        ("SEGMENT_HEALTH_CHECK_DIR", "segment_health_check_dir"),
        ("Segment-Health-Check-Dir", "segment_health_check_dir"),
        ("SEGMENT_HEALTH_CHECK_STAT_TIMEOUT", "segment_health_check_stat_timeout"),
        ("INNER_BACKEND", "inner_backend"),
        ("segment_health_check_watch_intervall", "segment_health_check_watch_interval"),
        ("watch_interval", "segment_health_check_watch_interval"),
        ("ft_segment_health_check_dir", "segment_health_check_dir"),
        ("stat_timeout", "segment_health_check_stat_timeout"),
        ("handoff_timeout", "segment_health_check_handoff_timeout"),
        ("HANDOFF_TIMEOUT", "segment_health_check_handoff_timeout"),
    ],
)
def test_a_lookalike_key_is_matched_to_the_key_it_was_meant_to_be(key, meant):
    assert lookalike(key, OUR_KEYS) == meant


@pytest.mark.parametrize(
    "key", ["SEGMENT_HEALTH_CHECK_DIR", "stat_timeout", "handoff_timeout", "INNER_BACKEND"]
)
def test_a_key_the_inner_backend_would_ignore_is_refused_before_any_rendezvous(key):
    """Passed on, c10d ignores it: the check would be off, or bound otherwise, silently."""
    with pytest.raises(ConfigurationError) as refused:
        settings({key: "/shared/x"}, {})
    assert refused.value.setting == f"rdzv-conf {key}"


def test_the_inner_backends_own_keys_are_not_taken_for_typos():
    torch_keys = [
        "join_timeout",
        "last_call_timeout",
        "close_timeout",
        "heartbeat",
        "keep_alive_interval",
        "keep_alive_max_attempt",
        "is_host",
        "timeout",
        "read_timeout",
        "store_type",
        "use_libuv",
        "protocol",
        "ca_cert",
        "ssl_cert",
        "ssl_cert_key",
        "local_addr",
        "cas_backoff_max_seconds",  # torch 2.15
    ]
    s = settings(dict.fromkeys(torch_keys, "1"))
    assert sorted(s.inner_config) == sorted(torch_keys)


@pytest.mark.parametrize(
    ("key", "value"), [(STAT, "5"), (HANDOFF, "0"), (WATCH, "5"), (WATCH, "0")]
)
def test_a_key_of_the_check_without_any_directory_is_refused_naming_the_usual_cause(key, value):
    """As ``nvrx-seghealth run`` refuses a watch interval without a directory: the keys say
    the check was wanted, and an environment variable srun did not export turns it off."""
    for env in ({}, {DIRECTORY_ENV: ""}):
        with pytest.raises(ConfigurationError) as refused:
            settings({key: value, "is_host": "false"}, env)
        assert refused.value.setting == f"rdzv-conf {key}"
        assert DIRECTORY_ENV in str(refused.value)
    assert settings({key: value}, {DIRECTORY_ENV: "/shc"}).check is not None
