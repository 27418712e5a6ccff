"""Row 16: etcd history written by torch's keep-alive rewrites of the rendezvous state.

torch's handler rewrites the whole pickled ``_RendezvousState`` on every keep-alive
(``keep_alive_interval``, 5 s by default), and etcd keeps every revision until a
compaction. From real states of 100, 1,000 and 5,000 nodes (each a participant with its
heartbeat), computed: the bytes each launcher adds to the history per minute, compressed
as the etcd-v3 backend stores the state and uncompressed as a backend storing torch's
bytes would, and the minutes until a job of that size fills ``--quota-backend-bytes``
(2 GiB by default) without compaction. Measured on one etcd 3.4: the growth of its db
(``/v3/maintenance/status`` ``dbSize``) over a fixed number of rewrites of a 1,000-node
state, through the real backend and as raw puts of torch's bytes.
"""

from __future__ import annotations

import datetime
import pickle
import random
import uuid
import zlib

from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc, _RendezvousState

from harness.bench.measure import Row
from harness.services.etcd import EtcdServer, running_etcd
from harness.services.etcd_v3 import raw_put, v3_launcher
from nvrx_seghealth._rendezvous.etcd_v3.backend import FORMAT

#: torch's default ``keep_alive_interval``: each launcher rewrites the state this often.
KEEP_ALIVE_SECONDS = 5.0
#: etcd's default ``--quota-backend-bytes``.
QUOTA = 2 * 1024**3
#: Launchers of the computed rows, and those the NOSPACE minutes are given for.
SIZES = (100, 1000, 5000)
#: The state rewritten on the real etcd, and how many times, quick and full.
MEASURED_NODES = 1000
REWRITES = {True: 100, False: 300}


def state_of(nodes: int) -> bytes:
    """torch's pickled state of a complete round of ``nodes`` participants, each with its
    own heartbeat within the last keep-alive interval (as the handler pickles it)."""
    state = _RendezvousState()
    now = datetime.datetime.now(datetime.timezone.utc)
    spread = random.Random(nodes)
    for rank in range(nodes):
        node = _NodeDesc(f"node{rank:05d}.cluster.example.com", 100_000 + rank, 0)
        state.participants[node] = rank
        state.last_heartbeats[node] = now - datetime.timedelta(
            microseconds=spread.randrange(int(KEEP_ALIVE_SECONDS * 1e6))
        )
    state.complete = True
    return pickle.dumps(state)


def stored(state: bytes) -> bytes:
    """The value the etcd-v3 backend writes for ``state`` (its format byte, then zlib)."""
    return FORMAT + zlib.compress(state)


def _per_minute(value_bytes: int) -> float:
    """History bytes one launcher writes per minute with a value of ``value_bytes``."""
    return value_bytes * 60 / KEEP_ALIVE_SECONDS


def _minutes_to_quota(value_bytes: int, launchers: int) -> float:
    return QUOTA / (_per_minute(value_bytes) * launchers)


def _db_size(server: EtcdServer) -> int:
    return int(server.gateway("/v3/maintenance/status", {})["dbSize"])


def _growth(value_bytes: int, rewrites: int, write: str) -> tuple[int, int]:
    """The db size before and after ``rewrites`` writes of a 1,000-node state on a new etcd:
    ``write`` ``backend`` through the etcd-v3 backend, ``raw`` as puts of torch's bytes."""
    state = state_of(MEASURED_NODES)
    with running_etcd("v3-history", release="3.4", v2=False) as server:
        run_id = f"bench-{uuid.uuid4().hex[:8]}"
        backend, _ = v3_launcher(server.endpoint, run_id)
        before = _db_size(server)
        token = None
        for _ in range(rewrites):
            if write == "backend":
                answer = backend.set_state(state, token)
                assert answer is not None and answer[2], "a rewrite lost its compare"
                token = answer[1]
            else:
                raw_put(server.endpoint, f"/bench/{run_id}/state".encode(), state)
        return before, _db_size(server)


def rows(quick: bool) -> list[Row]:
    result = []
    sizes = {n: (len(state_of(n)), len(stored(state_of(n)))) for n in SIZES}
    for nodes, (raw, packed) in sizes.items():
        result.append(
            Row(
                f"history per launcher per minute, {nodes:,} launchers, kB: compressed "
                "(etcd-v3) / uncompressed",
                _per_minute(packed) / _per_minute(raw),
                "-",
                None,
                f"state {raw / 1024:.1f} KiB pickled, {packed / 1024:.1f} KiB stored; "
                f"per launcher {_per_minute(packed) / 1e3:,.0f} kB/min against "
                f"{_per_minute(raw) / 1e3:,.0f}; whole job {_per_minute(packed) * nodes / 1e6:,.1f}"
                f" MB/min against {_per_minute(raw) * nodes / 1e6:,.1f}; 2 GiB quota full, no "
                f"compaction, in {_minutes_to_quota(packed, nodes):,.2f} min against "
                f"{_minutes_to_quota(raw, nodes):,.2f}",
            )
        )
    rewrites = REWRITES[quick]
    growth = {}
    for write in ("backend", "raw"):
        before, after = _growth(sizes[MEASURED_NODES][0], rewrites, write)
        growth[write] = (before, after)
    per_write = {w: (after - before) / rewrites for w, (before, after) in growth.items()}
    result.append(
        Row(
            f"etcd db growth per rewrite of a {MEASURED_NODES:,}-node state, kB: etcd-v3 / raw",
            per_write["backend"] / per_write["raw"] if per_write["raw"] else None,
            "-",
            None,
            "; ".join(
                f"{'etcd-v3 backend' if w == 'backend' else 'raw puts of torch bytes'}: dbSize "
                f"{growth[w][0] / 1e6:.2f} -> {growth[w][1] / 1e6:.2f} MB over {rewrites} "
                f"rewrites, {per_write[w] / 1e3:.1f} kB each (value "
                f"{(sizes[MEASURED_NODES][1] if w == 'backend' else sizes[MEASURED_NODES][0]) / 1e3:.1f} kB)"
                for w in growth
            )
            + " (one new etcd 3.4.23 each)",
        )
    )
    return result
