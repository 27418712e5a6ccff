"""Which etcd-v2 errors the retry policy runs a call again for
(:func:`nvrx_seghealth._rendezvous.etcd_v2.is_transient`), on python-etcd's own exceptions
as its client raises them. The backend and store against a real three-member etcd:
``integration/etcd/test_leader_loss.py``."""

from __future__ import annotations

import etcd
import pytest
from torch.distributed.elastic.rendezvous import RendezvousConnectionError, RendezvousStateError

from nvrx_seghealth._rendezvous.etcd_v2 import is_transient


def answer(status: int, code: int | None, message: str) -> Exception:
    """The exception python-etcd raises for etcd's error answer (``EtcdError.handle``)."""
    payload = {"status": status, "message": message, "cause": "c", "index": 7}
    if code is not None:
        payload["errorCode"] = code
    try:
        etcd.EtcdError.handle(payload)
    except Exception as error:  # noqa: BLE001  (what it raised is the subject)
        return error
    raise AssertionError("EtcdError.handle raised nothing")


def wrapped(cause: Exception) -> RendezvousConnectionError:
    """torch's backend's error, with python-etcd's as its cause."""
    try:
        raise RendezvousConnectionError("The connection to etcd has failed.") from cause
    except RendezvousConnectionError as error:
        return error


TRANSIENT = {
    "raft internal error": answer(500, 300, "Raft Internal Error"),
    "leader election": answer(500, 301, "During Leader Election"),
    "5xx without a code": answer(503, None, "unavailable"),
    "no member answered": etcd.EtcdConnectionFailed("Connection to etcd failed", cause=None),
    "torch's, of a raft error": wrapped(answer(500, 300, "Raft Internal Error")),
    "a socket error": ConnectionResetError("reset"),
}
FINAL = {
    "key not found": answer(404, 100, "Key not found"),
    "compare failed": answer(412, 101, "Compare failed"),
    "already exists": answer(412, 105, "Key already exists"),
    "a wait that ran out": etcd.EtcdWatchTimedOut("Watch timed out", cause=None),
    "the cluster changed": etcd.EtcdClusterIdChanged("The UUID of the cluster changed"),
    "a bad request": answer(400, 209, "Invalid field"),
    "torch's, of a key not found": wrapped(answer(404, 100, "Key not found")),
    "torch's, without a cause": RendezvousConnectionError("no cause"),
    "a corrupt state": RendezvousStateError("corrupt"),
    "a bug": TypeError("bug"),
}


@pytest.mark.parametrize("error", TRANSIENT.values(), ids=TRANSIENT.keys())
def test_transient(error) -> None:
    assert is_transient(error)


@pytest.mark.parametrize("error", FINAL.values(), ids=FINAL.keys())
def test_not_transient(error) -> None:
    assert not is_transient(error)
