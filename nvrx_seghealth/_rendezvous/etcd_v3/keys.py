"""Where a run keeps its keys in etcd: :class:`RunKeys`.

Every key of one rendezvous run lies under one prefix, ``/torchelastic/v3/<run id>/``:

- ``state``: torch's rendezvous state (:mod:`.backend`);
- ``store/<key>``: the store's keys (:mod:`.store`), so ``num_keys`` is one counted range;
- ``writers/<writer>``: the tag of the latest guarded write (``add``, ``append``,
  ``delete_key``) of one launcher's thread, which settles a write whose answer was lost
  (:mod:`.store`);
- ``lease``: the id of the run's lease, which every key of the run rides (:mod:`.lease`).

The run id is percent-encoded, ``/`` included, so no run's prefix is the prefix of
another's: a run can neither read nor overwrite another run's keys by its name. With
etcd's authentication on, a role granted ``/torchelastic/v3/<run id>/`` alone confines
a job to its own keys (docs/cluster.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

__all__ = ["ROOT", "RunKeys"]

#: The prefix of every run's keys.
ROOT = b"/torchelastic/v3/"


@dataclass(frozen=True)
class RunKeys:
    """The etcd keys of one run (bytes, as the client takes them).

    Args:
        run_id: the rendezvous run id (torchrun's ``--rdzv-id``), not empty.
    """

    run_id: str

    def __post_init__(self) -> None:
        if not self.run_id:
            raise ValueError("the run id must not be empty")

    @property
    def prefix(self) -> bytes:
        """The prefix of every key of the run."""
        return ROOT + quote(self.run_id, safe="").encode() + b"/"

    @property
    def state(self) -> bytes:
        """The key of torch's rendezvous state."""
        return self.prefix + b"state"

    @property
    def lease(self) -> bytes:
        """The key holding the run lease's id."""
        return self.prefix + b"lease"

    @property
    def store_prefix(self) -> bytes:
        """The prefix of the store's keys."""
        return self.prefix + b"store/"

    def store(self, key: str) -> bytes:
        """The etcd key of the store's ``key``."""
        return self.store_prefix + key.encode()

    def writer(self, writer: str) -> bytes:
        """The key holding the tag of the latest guarded write of ``writer`` (one thread
        of one launcher)."""
        return self.prefix + b"writers/" + writer.encode()
