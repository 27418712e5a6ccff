"""Whether the workers bootstrap from a store that one launcher serves: not in a checked job.

By default (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE`` unset or ``0``) torch's dynamic
rendezvous, on every inner backend, has the launcher of rank 0 serve a TCPStore from
which the workers of every launcher bootstrap, and a launcher that is not rank 0 keeps
the address of its *first* round for good (pytorch#135712). So once the unit that held
rank 0 is excluded, a survivor that stays non-zero points its workers at a master that
left with it; and a spare that joins a later round as rank 1 waits for an address that
the launcher still holding rank 0 published only in the round where it became rank 0.
Either way the new world never forms. With ``1``, each round's rank-0 worker serves its
own bootstrap store and every round is built afresh.

:func:`keep_workers_off_the_agent_store` sets ``1`` in the launcher's own environment,
unless the user set the variable. torch reads it at each round and each time it starts
workers, so setting it before the first ``next_rendezvous()`` is in time. Callers:
:class:`~.handler.SegmentHealthRendezvousHandler` whenever the check is configured (the
registered backend and composition alike), and the backend for a store outside the
launchers (``is_host=false``) with the check off, where a restart alone meets the same bug.
"""

from __future__ import annotations

import logging
import os

__all__ = ["EXCLUSIONS", "OUTSIDE_STORE", "SHARED_STORE_ENV", "keep_workers_off_the_agent_store"]

log = logging.getLogger(__name__)

#: torch's switch between sharing the agent's store with the workers (unset, ``0``) or not.
SHARED_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"

#: Why, with the check on: what an exclusion does to workers that share the store.
EXCLUSIONS = (
    "units can be excluded: once the unit holding rank 0 leaves, or a spare joins a new "
    "world, workers that bootstrap from a launcher's store wait for an address that "
    "never comes and the job fails"
)
#: Why, with a store outside the launchers (``is_host=false``).
OUTSIDE_STORE = (
    "the store is outside the launchers (is_host=false): restarted workers would read "
    "the previous attempt's addresses and fail to connect"
)


def keep_workers_off_the_agent_store(why: str) -> None:
    """Set ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` in this process unless it is set.

    ``why`` (:data:`EXCLUSIONS`, :data:`OUTSIDE_STORE`) is logged: at INFO when the
    variable is set here, at WARNING when the user's value turns sharing on (anything but
    ``1``, which torch reads as on). A value the user set is never changed.
    """
    value = os.environ.get(SHARED_STORE_ENV)
    if value is None:
        os.environ[SHARED_STORE_ENV] = "1"
        log.info(
            "The workers host their own bootstrap store: %s=1 (%s; pytorch#135712)",
            SHARED_STORE_ENV,
            why,
        )
    elif value != "1":
        log.warning(
            "%s=%s makes the workers bootstrap from the store of the launcher holding rank 0, "
            "and %s (pytorch#135712); unset it, or set it to 1",
            SHARED_STORE_ENV,
            value,
            why,
        )
