"""The etcd-v3 rendezvous of one launcher, built as torchrun builds it: :func:`v3_launcher`.

Used by the etcd-v3 tests (``integration/etcd/test_v3_*.py``) and benchmarks, against a
real etcd (:mod:`harness.services.etcd`).
"""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nvrx_seghealth._rendezvous.etcd_v3.backend import EtcdV3Backend
    from nvrx_seghealth._rendezvous.etcd_v3.store import EtcdV3Store

__all__ = ["open_v3_launcher", "raw_get", "raw_put", "raw_v3", "v3_launcher", "v3_params"]


def v3_params(endpoint: str, run_id: str, min_nodes: int = 1, max_nodes: int = 1, **conf: Any):
    """torch's ``RendezvousParameters`` of an ``etcd-v3`` launcher (``conf``: rdzv-conf)."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    return RendezvousParameters("etcd-v3", endpoint, run_id, min_nodes, max_nodes, **conf)


def v3_launcher(endpoint: str, run_id: str, **conf: Any) -> tuple[EtcdV3Backend, EtcdV3Store]:
    """The backend and store one launcher of run ``run_id`` builds (``conf``: rdzv-conf)."""
    from nvrx_seghealth._rendezvous.etcd_v3 import create_backend

    return create_backend(v3_params(endpoint, run_id, **conf))


@contextmanager
def open_v3_launcher(
    endpoint: str, run_id: str, **conf: Any
) -> Iterator[tuple[EtcdV3Backend, EtcdV3Store]]:
    """:func:`v3_launcher` for the length of a block, whose end closes its etcd client."""
    backend, store = v3_launcher(endpoint, run_id, **conf)
    try:
        yield backend, store
    finally:
        backend.close()


def raw_v3(endpoint: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` to etcd's JSON gateway at ``/v3/<path>`` with the standard library
    alone (not the product's client), and return the answer."""
    request = urllib.request.Request(
        f"http://{endpoint}/v3/{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def raw_get(endpoint: str, key: bytes) -> bytes | None:
    """The value of ``key`` as etcd holds it; ``None`` when absent."""
    kvs = raw_v3(endpoint, "kv/range", {"key": _b64(key)}).get("kvs", [])
    return base64.b64decode(kvs[0].get("value", "")) if kvs else None


def raw_put(endpoint: str, key: bytes, value: bytes) -> None:
    """Write ``value`` under ``key`` (no lease), as another program would."""
    raw_v3(endpoint, "kv/put", {"key": _b64(key), "value": _b64(value)})
