"""torch's rank exchange, which a launcher leaving a formed round would stall.

After ``next_rendezvous()`` returns, torch's agent assigns worker ranks through the round's
store unless ``TORCH_ELASTIC_WORKER_IDENTICAL=1``: rank 0 waits for every member's
``role_info``. A member that leaves the round right after joining never writes it, and
every agent fails once the store read times out (60 s). The rules:

* With the check on, :func:`skip_rank_exchange` sets ``TORCH_ELASTIC_WORKER_IDENTICAL=1``
  in this process unless it is set, as ``nvrx-seghealth run`` does. torch then computes
  each worker's rank from the group rank and ``--nproc-per-node``.
* The ``segment-health`` backend does so with the check off too: agents that skip the
  exchange and agents that make it wait for each other, so one world must agree.
* That fast path needs every launcher of a job to run the same number of workers in one
  role: the shape of a job array whose spares replace its tasks.
* A value the user set is never changed. Another value than ``1`` keeps the exchange, with
  one WARNING. The launcher then never leaves a round it joined: it does not look again
  right after joining (a slow stat would hold the exchange past the store's read
  timeout), and its unit is judged again at its next rendezvous.

The story: docs/concepts.md, "Right after joining".
"""

from __future__ import annotations

import logging
import os

__all__ = ["CHECK_OFF", "IDENTICAL_ENV", "LEAVING", "skip_rank_exchange"]

log = logging.getLogger(__name__)

#: torch's switch between its rank exchange (unset, ``0``) and the identical-workers path.
IDENTICAL_ENV = "TORCH_ELASTIC_WORKER_IDENTICAL"

#: Why, with the check on.
LEAVING = "a unit excluded right after joining would stall it"
#: Why, with the check off on the ``segment-health`` backend.
CHECK_OFF = (
    "the segment-health backend skips it with the check off too, so that the launchers of "
    "one world agree whichever of them has a decision directory"
)


def skip_rank_exchange(why: str = LEAVING) -> bool:
    """Set :data:`IDENTICAL_ENV` to ``1`` unless set; whether torch's agent in this process
    skips its rank exchange, so that a launcher may leave a round it just joined. ``why``
    (:data:`LEAVING`, :data:`CHECK_OFF`) is logged with it."""
    value = os.environ.get(IDENTICAL_ENV)
    if value is None:
        os.environ[IDENTICAL_ENV] = "1"
        log.info(
            "%s=1: torch's agents skip their rank exchange (%s); every launcher must run "
            "the same workers (--nproc-per-node); export %s=0 where they do not",
            IDENTICAL_ENV,
            why,
            IDENTICAL_ENV,
        )
        return True
    if value == "1":
        return True
    log.warning(
        "%s=%s keeps torch's rank exchange: no look right after joining, so a unit marked "
        "while it waited trains until its next rendezvous (or the watch's first look); "
        "unset it, or set it to 1, where every launcher runs the same workers",
        IDENTICAL_ENV,
        value,
    )
    return False
