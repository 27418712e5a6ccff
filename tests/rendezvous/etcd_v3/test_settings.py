"""The etcd-v3 settings: torch's etcd keys, the password never on the command line."""

from __future__ import annotations

import pytest

from nvrx_seghealth._errors import ConfigurationError
from nvrx_seghealth._rendezvous.etcd_v3.endpoints import Endpoint
from nvrx_seghealth._rendezvous.etcd_v3.settings import (
    DEFAULT_LEASE_TTL,
    DEFAULT_READ_TIMEOUT,
    PASSWORD_ENV,
    EtcdV3Settings,
)


def settings(conf=None, environ=None, endpoint="e1:2379,e2"):
    return EtcdV3Settings.from_conf(endpoint, conf or {}, environ or {})


def test_the_defaults_and_every_member_of_the_endpoint_list():
    found = settings()
    assert found.endpoints == (Endpoint("e1", 2379), Endpoint("e2", 2379))
    assert (found.read_timeout, found.lease_ttl) == (DEFAULT_READ_TIMEOUT, DEFAULT_LEASE_TTL)
    assert (found.protocol, found.tls, found.credentials) == ("http", None, None)


@pytest.mark.parametrize("key", ["read_timeout", "lease_ttl"])
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_a_duration_that_is_not_a_positive_number_is_refused(key, value):
    with pytest.raises(ConfigurationError) as refused:
        settings({key: value})
    assert refused.value.setting == f"rdzv-conf {key}"


def test_a_password_on_the_command_line_is_refused():
    with pytest.raises(ConfigurationError) as refused:
        settings({"user": "u", "password": "secret"})
    assert refused.value.setting == "rdzv-conf password"
    assert "secret" not in str(refused.value)


def test_the_password_comes_from_its_file_or_the_environment(tmp_path):
    path = tmp_path / "password"
    path.write_text("from the file\n")
    assert settings({"user": "u", "password_file": str(path)}).credentials.password == (
        "from the file"
    )
    environ = {PASSWORD_ENV: "from the environment"}
    assert settings({"user": "u"}, environ).credentials.password == "from the environment"


@pytest.mark.parametrize(
    "conf, setting",
    [
        ({"user": "u"}, "rdzv-conf user"),
        ({"password_file": "/p"}, "rdzv-conf password_file"),
        ({"user": "u", "password_file": "/no/such/file"}, "rdzv-conf password_file"),
        ({"protocol": "ftp"}, "rdzv-conf protocol"),
        ({"ca_cert": "/etc/ca.pem"}, "rdzv-conf ca_cert"),  # certificates need https
    ],
)
def test_an_unusable_setting_is_refused_naming_it(conf, setting):
    with pytest.raises(ConfigurationError) as refused:
        settings(conf)
    assert refused.value.setting == setting
