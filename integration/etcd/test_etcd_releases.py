"""The etcd the etcd-v3 tests stand on (``harness/services/etcd.py``): each release the tests run
starts and says which it is, its v2 API is off when asked, a cluster of three elects one
leader, a TLS member speaks https to a client with a certificate only, and with
authentication on a wrong password and a key outside the user's prefix are refused. A
member whose port another process took starts again on a new one.

Every test runs once per release (``etcd3.4``, ``etcd3.5``); they ask etcd's HTTP API
directly (the v3 JSON gateway, ``/version``, ``/v2/keys``), not the package's client.
"""

from __future__ import annotations

import base64
import json
import socket
import urllib.error
import urllib.request

import pytest

import harness.services.etcd
from harness.ports import free_port
from harness.services.etcd import ETCD_RELEASES, Release, authenticate, running_etcd
from harness.session.fixtures import RELEASE_IDS, started_etcd

pytestmark = pytest.mark.etcd

#: gRPC status codes in etcd's error bodies: a wrong password, a key outside the role's.
INVALID_ARGUMENT, PERMISSION_DENIED = 3, 7


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _release(request: pytest.FixtureRequest, fixture: str) -> str:
    """The release this test's parametrized ``fixture`` started."""
    return str(request.node.callspec.params[fixture])


def test_each_release_starts_and_reports_its_version(etcd_v3_server, request) -> None:
    release = _release(request, "etcd_v3_server")
    assert etcd_v3_server.version().startswith(f"{release}.")
    assert etcd_v3_server.scheme == "http"


#: Requests of the v2 API: (method, path, form body).
V2_REQUESTS = (
    ("GET", "/v2/keys", None),
    ("PUT", "/v2/keys/nvrx-releases/v2", b"value=1"),
    ("GET", "/v2/keys/nvrx-releases/v2", None),
)


def test_the_v2_api_is_off_and_the_v3_gateway_answers(etcd_v3_server) -> None:
    for method, path, body in V2_REQUESTS:
        with pytest.raises(urllib.error.HTTPError) as refused:
            _v2(etcd_v3_server, method, path, body)
        refused.value.close()
        assert refused.value.code == 404, (method, path)
    assert not etcd_v3_server.serves_v2()

    key = _b64("/nvrx-releases/v2-off")
    etcd_v3_server.gateway("/v3/kv/put", {"key": key, "value": _b64("on v3")})
    answer = etcd_v3_server.gateway("/v3/kv/range", {"key": key})
    assert [kv["value"] for kv in answer["kvs"]] == [_b64("on v3")]


@pytest.mark.parametrize("release", ETCD_RELEASES, ids=RELEASE_IDS)
def test_the_v2_api_is_on_when_asked(release: Release) -> None:
    """The requests the test above sees refused are served when the same release has v2."""
    with started_etcd("nvrx-v2-on", release, v2=True) as server:
        assert server.serves_v2()
        answers = [_v2(server, method, path, body) for method, path, body in V2_REQUESTS]
    assert answers[-1]["node"]["value"] == "1"


def _v2(server, method: str, path: str, body: bytes | None) -> dict:
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    with server.open(path, body, method=method, headers=headers) as answer:
        return json.loads(answer.read())


def test_a_cluster_of_three_elects_one_leader(etcd_v3_cluster, request) -> None:
    release = _release(request, "etcd_v3_cluster")
    assert len(etcd_v3_cluster.members) == 3
    for member in etcd_v3_cluster.members:
        assert member.server.version().startswith(f"{release}.")
        assert not member.server.serves_v2()
    leader = etcd_v3_cluster.leader()
    assert [m for m in etcd_v3_cluster.members if m.is_leader()] == [leader]


def test_a_tls_member_answers_over_https_with_the_client_certificate(etcd_v3_tls_server) -> None:
    assert etcd_v3_tls_server.scheme == "https"
    assert etcd_v3_tls_server.url.startswith("https://127.0.0.1:")
    key = _b64("/nvrx-releases/tls")
    etcd_v3_tls_server.gateway("/v3/kv/put", {"key": key, "value": _b64("over tls")})
    answer = etcd_v3_tls_server.gateway("/v3/kv/range", {"key": key})
    assert [kv["value"] for kv in answer["kvs"]] == [_b64("over tls")]


def test_a_tls_member_refuses_plain_http(etcd_v3_tls_server) -> None:
    plain = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with pytest.raises(OSError):  # etcd closes the connection (RemoteDisconnected)
        plain.open(f"http://{etcd_v3_tls_server.endpoint}/version", timeout=10).close()


def test_a_tls_member_refuses_a_client_without_a_certificate(etcd_v3_tls_server) -> None:
    tls = etcd_v3_tls_server.tls
    anonymous = urllib.request.build_opener(
        urllib.request.ProxyHandler({}),
        urllib.request.HTTPSHandler(context=tls.client_context(with_cert=False)),
    )
    with pytest.raises(OSError) as refused:
        anonymous.open(f"{etcd_v3_tls_server.url}/version", timeout=10).close()
    assert not isinstance(refused.value, urllib.error.HTTPError)  # no HTTP: the handshake failed


def test_auth_refuses_a_wrong_password(etcd_v3_auth) -> None:
    assert etcd_v3_auth.token()  # the right one is taken
    with pytest.raises(urllib.error.HTTPError) as refused:
        authenticate(etcd_v3_auth.server, etcd_v3_auth.user, etcd_v3_auth.password + "x")
    assert _grpc_code(refused.value) == INVALID_ARGUMENT


def test_auth_confines_the_user_to_its_prefix(etcd_v3_auth) -> None:
    server, token = etcd_v3_auth.server, etcd_v3_auth.token()
    inside = _b64(etcd_v3_auth.prefix.decode() + "state")
    outside = _b64("/another-run/state")
    server.gateway("/v3/kv/put", {"key": inside, "value": _b64("1")}, token=token)
    assert server.gateway("/v3/kv/range", {"key": inside}, token=token)["kvs"]
    for path in ("/v3/kv/put", "/v3/kv/range"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            server.gateway(path, {"key": outside, "value": _b64("1")}, token=token)
        assert _grpc_code(refused.value) == PERMISSION_DENIED, path
    with pytest.raises(urllib.error.HTTPError) as refused:  # no token at all
        server.gateway("/v3/kv/put", {"key": inside, "value": _b64("2")})
    refused.value.close()
    root = etcd_v3_auth.token(root=True)  # root may: the refusal above is the role's
    server.gateway("/v3/kv/put", {"key": outside, "value": _b64("1")}, token=root)


def _grpc_code(error: urllib.error.HTTPError) -> int:
    """The gRPC status code of etcd's JSON error body."""
    with error:
        return int(json.loads(error.read())["code"])


def test_a_member_whose_port_was_taken_starts_again_on_new_ports(monkeypatch) -> None:
    """Another test's process may bind the port chosen for a member before etcd does: the
    first choice here is a port this test listens on."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        port = taken.getsockname()[1]
        choices = iter([port])
        monkeypatch.setattr(
            harness.services.etcd, "free_port", lambda: next(choices, None) or free_port()
        )
        with running_etcd("nvrx-port-taken", v2=False) as server:
            assert server.port != port
            assert server.version().startswith("3.")
