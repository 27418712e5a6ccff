"""``SegmentHealthRendezvousHandler``: keeps an excluded allocation unit out of the rendezvous.

The wrapper sits around any torch ``RendezvousHandler``, and every method delegates to
it. ``next_rendezvous()`` asks the launcher's coordinator (:mod:`.coordinator`) before
and after it joins. A launcher with no part in a check only delegates. The rules:

* Only an exclusion, :class:`~.._errors.UnhealthyNodeException`, leaves the wrapper as
  its own exception; its own failures fail open, and the inner handler's pass unchanged.
* Once excluded, it stays excluded: later ``next_rendezvous()`` calls raise again.
* On the way out it stops the coordinator and the inner keep-alive, leaves torch's
  round, and tells that round's members, which restart without it (:mod:`.watch`).
  It leaves a round it just joined only where torch's agent skips its rank exchange
  (:mod:`.rankexchange`); elsewhere it stays there until its next rendezvous.
* ``shutdown()`` and ``set_closed()`` of an excluded launcher do not close the shared
  rendezvous: torch's dynamic handler would close it for every node.
* At exit, it keeps the inner keep-alive out of store calls (:mod:`.exiting`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from torch.distributed import Store
from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError,
    RendezvousHandler,
    RendezvousInfo,
)

from .._decision.decision_file import DirectoryPath
from .._errors import UnhealthyNodeException, When
from .._settings.check_settings import CheckSettings, check_settings
from .._settings.durations import DEFAULT_STAT_TIMEOUT
from .agentstore import EXCLUSIONS, WorkersStore, serve_workers
from .coordinator import Coordinator
from .events import DecisionRecorder
from .exiting import quiet_at_exit, shut_at_exit
from .failopen import FailOpen
from .process_zero import ProcessZero
from .rankexchange import skip_rank_exchange
from .roles import coordinator_for
from .watch import Member, WorldSignal

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["SegmentHealthRendezvousHandler"]

log = logging.getLogger(__name__)


class SegmentHealthRendezvousHandler(RendezvousHandler):
    """A ``RendezvousHandler`` that refuses to join for an excluded allocation unit.

    Args:
        inner: the handler that runs the actual rendezvous.
        store: the store the inner rendezvous shares between all launchers (for c10d,
            the TCPStore; for etcd-v2, the ``EtcdStore``), used for replacement-group
            markers. ``None``: markers can be neither published nor read (one WARNING);
            process 0 still excludes itself.
        directory: absolute path (``str`` or ``pathlib.Path``) of the decision directory; ``None`` or empty disables
            the segment health check, and the wrapper only delegates. With a directory,
            the launcher holding rank 0 serves its round's workers a new bootstrap store
            each round (:mod:`.agentstore`): an excluded unit may hold rank 0.
        environ: where to read Slurm's variables (default ``os.environ``).
        stat_timeout: seconds one ``stat`` of the decision file may take (see
            :mod:`.._settings.durations` for the range).
        backend: the name ``get_backend()`` reports (default: the inner handler's).
            A registered backend must report the name it was registered under.
        handoff_timeout: seconds a sibling waits for process 0's verdict before it
            joins without one; ``None``: ``stat_timeout`` plus
            :data:`~.._settings.durations.HANDOFF_MARGIN` (30 s with the defaults); ``0``: no
            hand-off.
        watch_interval: seconds between two looks of process 0 at its decision file
            while its workers run (:mod:`.watch`); ``0``: no watch, and a decision is
            read only before joining and right after.

    Raises:
        ValueError: ``directory`` is not absolute, or a timeout is out of range
            (:class:`~.._errors.ConfigurationError`).
    """

    # Set by :meth:`from_settings`, the one builder of every handler.
    _inner: RendezvousHandler
    _backend: str
    _coordinator: Coordinator | None
    _member: Member | None  # the check on: a member of each round (.watch)
    _leaves_joined_rounds: bool  # torch's agent skips its rank exchange
    _workers: WorkersStore | None
    _world: WorldSignal | None  # the joined round, the check on
    _joined: bool  # a round of the inner rendezvous was joined
    _left: bool
    _heartbeats_held: bool  # at exit (:meth:`_quiet_at_exit`)

    def __new__(
        cls,
        inner: RendezvousHandler,
        *,
        store: Store | None,
        directory: DirectoryPath | None,
        environ: Mapping[str, str] | None = None,
        stat_timeout: float = DEFAULT_STAT_TIMEOUT,
        backend: str | None = None,
        handoff_timeout: float | None = None,
        watch_interval: float = 0.0,
    ) -> Self:
        """The door for raw values: validate them, then build as :meth:`from_settings`."""
        settings = check_settings(
            directory,
            stat_timeout=stat_timeout,
            handoff_timeout=handoff_timeout,
            watch_interval=watch_interval,
        )
        backend = backend or inner.get_backend()
        return cls.from_settings(inner, settings, store=store, backend=backend, environ=environ)

    @classmethod
    def from_settings(
        cls,
        inner: RendezvousHandler,
        settings: CheckSettings | None,
        *,
        store: Store | None,
        backend: str,
        serve_workers_why: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Self:
        """The handler for ``settings`` validated where they entered, taken as they are.

        The registered backend's door (:mod:`.._settings.rdzv_conf`); the constructor
        validates raw values and comes here too. ``settings`` ``None``: the check is off.
        ``serve_workers_why``: why the workers' store is served with the check off.
        """
        handler = super().__new__(cls)
        handler._inner = inner
        handler._backend = backend
        handler._coordinator = None
        handler._member = None
        handler._leaves_joined_rounds = False
        why = EXCLUSIONS if settings is not None else serve_workers_why
        handler._workers = None if why is None else serve_workers(inner, why)
        if settings is not None:
            events = DecisionRecorder(inner)
            coordinator = coordinator_for(
                settings, store=store, run_id=inner.get_run_id(), events=events, environ=environ
            )
            handler._coordinator = coordinator
            handler._member = _member(settings, coordinator, events)
            handler._leaves_joined_rounds = skip_rank_exchange()
            if isinstance(coordinator, ProcessZero):
                coordinator.warn_if_the_world_cannot_shrink(inner)
        handler._world = None
        handler._joined = False
        handler._left = False
        handler._heartbeats_held = False
        quiet_at_exit(handler._quiet_at_exit)
        shut_at_exit(store)
        return handler

    @property
    def inner(self) -> RendezvousHandler:
        """The wrapped handler."""
        return self._inner

    @property
    def _exclusion(self) -> UnhealthyNodeException | None:
        return None if self._coordinator is None else self._coordinator.exclusion

    def get_backend(self) -> str:
        """See base class."""
        return self._backend

    @property
    def use_agent_store(self) -> bool:
        """See base class; with the served store (:mod:`.agentstore`), ``False`` only in
        a round where this launcher holds rank 0 and could not serve it."""
        workers = self._workers
        return self._inner.use_agent_store if workers is None else workers.use_agent_store

    def next_rendezvous(self) -> RendezvousInfo:
        """Ask the coordinator, join through the inner handler, ask it again.

        Raises:
            UnhealthyNodeException: the unit is excluded.
            Exception: whatever the inner handler raised.
        """
        previous, self._world = self._world, None
        coordinator = self._coordinator
        if coordinator is None:
            info = self._join()
            self._world = self._world_of(info)
            return info
        try:
            # without the watch, the world it trained in is not told: a write while it trains
            told = previous if self._member is not None and self._member.watches else None
            _leaving_on_exclusion(told, When.BEFORE_JOINING, coordinator.joining)
            try:
                info = self._join()
            finally:
                coordinator.out_of_rendezvous()
            world = self._world_of(info)
            if self._leaves_joined_rounds:
                _leaving_on_exclusion(
                    world, When.AFTER_JOINING, coordinator.joined, info.rank, world
                )
            else:  # no look: it could only stay, and a slow stat would hold the exchange
                _staying_on_exclusion(coordinator.joined, info.rank, world, look=False)
        except UnhealthyNodeException:
            self._leave(coordinator)
            raise
        self._world = world
        return info

    def _world_of(self, info: RendezvousInfo) -> WorldSignal | None:
        """Tell the round this launcher's watch interval; the round's signal (``None``:
        the check off)."""
        if self._member is None:
            return None
        shut_at_exit(info.store)  # the signal's looks call it
        return self._member.joined(info)

    def _join(self) -> RendezvousInfo:
        try:
            info = self._inner.next_rendezvous()
        except RendezvousClosedError:
            if not self._joined:  # torch says only "closed"; say why that happens
                log.error(
                    "Rendezvous run_id=%s is already closed before this launcher joined "
                    "it: the job it belongs to has ended, or an earlier run with the same "
                    "--rdzv-id has in the same store; give every run a new --rdzv-id",
                    self._inner.get_run_id(),
                )
            raise
        self._joined = True
        return info if self._workers is None else self._workers.serve(info)

    def is_closed(self) -> bool:
        """See base class."""
        return self._inner.is_closed()

    def set_closed(self) -> None:
        """See base class; does nothing once this unit was excluded."""
        if self._exclusion is not None:
            log.info("Segment health check: excluded unit does not close the shared rendezvous")
            return
        self._inner.set_closed()

    def num_nodes_waiting(self) -> int:
        """See base class. With the check on, also ``1`` once a unit of the current
        world left it (excluded on joining, or by the watch while it trains),
        after the aligned wait of :mod:`.watch`."""
        waiting = self._inner.num_nodes_waiting()
        world = self._world
        if waiting > 0 or world is None:
            return waiting
        return 1 if world.restart_due() else 0

    def get_run_id(self) -> str:
        """See base class."""
        return self._inner.get_run_id()

    def shutdown(self) -> bool:
        """See base class. After an exclusion, returns ``False`` without closing.

        The excluded launcher is about to exit; the rendezvous stays open for the
        healthy units, which re-form without it.
        """
        coordinator = self._coordinator
        if coordinator is not None and coordinator.exclusion is not None:
            self._leave(coordinator)
            log.info(
                "Segment health check: excluded unit leaves the shared rendezvous open "
                "for the other units"
            )
            return False
        if coordinator is not None:
            coordinator.stop()
        return self._inner.shutdown()

    def _quiet_at_exit(self, timeout: float) -> bool:
        """At the interpreter's exit: keep the inner keep-alive out of store calls from
        now on, waiting at most ``timeout`` s for its call in progress (:mod:`.exiting`)."""
        if not self._heartbeats_held:
            self._heartbeats_held = _hold_heartbeats(self._inner, timeout)
        return self._heartbeats_held

    def _leave(self, coordinator: Coordinator) -> None:
        """Once excluded: stop the coordinator, stop the inner keep-alive, leave the round."""
        if self._left:
            return
        self._left = True
        coordinator.stop()
        coordinator.fail_open(
            "leave-rendezvous", "leave the inner rendezvous", _leave_dynamic_rendezvous, self._inner
        )


def _leaving_on_exclusion(
    world: WorldSignal | None, when: When, call: Callable[..., None], *args: object
) -> None:
    """Run ``call(*args)``; when it excludes this launcher, leave ``world``, the round it
    is a member of, ``when``, before the exclusion is raised on: the world's other
    members restart their workers without it."""
    try:
        call(*args)
    except UnhealthyNodeException as exclusion:
        if world is not None:
            world.leave(exclusion, when)
        raise


def _staying_on_exclusion(call: Callable[..., None], *args: object, **kwargs: object) -> None:
    """Run ``call(*args, **kwargs)``; when it excludes this launcher, stay in the round
    just joined: torch's rank exchange waits for every member (:mod:`.rankexchange`).
    The exclusion stands, and the unit's next ``next_rendezvous()`` raises it."""
    try:
        call(*args, **kwargs)
    except UnhealthyNodeException as exclusion:
        log.warning(
            "Segment health check: the unit is excluded, and stays in the round it just "
            "joined until its next rendezvous: torch's rank exchange waits for every "
            "member; %s",
            exclusion,
        )


def _member(
    settings: CheckSettings, coordinator: Coordinator | None, events: DecisionRecorder
) -> Member:
    """What every launcher with the check on needs to be a member of a round, whatever
    its role: it tells each round its watch interval, and takes part in the world's
    restart when a member leaves it."""
    fail_open = FailOpen(events) if coordinator is None else coordinator.fail_open
    return Member(settings.watch_interval, fail_open, events)


def _leave_dynamic_rendezvous(inner: RendezvousHandler) -> None:
    """Stop a dynamic handler's keep-alive and leave its round, without closing it.

    torch's ``DynamicRendezvousHandler`` has no public way to do this; the calls are
    the ones its own ``next_rendezvous()`` starts with. Other handlers are left alone.
    """
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        DynamicRendezvousHandler,
        _RendezvousExitOp,
    )

    if not isinstance(inner, DynamicRendezvousHandler):
        return
    inner._stop_heartbeats()
    deadline = inner._get_deadline(inner._settings.timeout.close)
    inner._op_executor.run(_RendezvousExitOp(), deadline)


def _hold_heartbeats(inner: RendezvousHandler, timeout: float) -> bool:
    """Take a dynamic handler's heartbeat lock for good, waiting at most ``timeout``
    seconds for a heartbeat in progress; whether it is held (``True`` too for a handler
    that has none). Held, no keep-alive makes a store call any more (it waits for the
    lock, a wait the interpreter's finalization ends safely).

    torch's ``DynamicRendezvousHandler`` takes that lock around each keep-alive; it has
    no public way to stop one in progress.
    """
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

    lock = getattr(inner, "_heartbeat_lock", None)
    if not isinstance(inner, DynamicRendezvousHandler) or lock is None:
        return True
    return bool(lock.acquire(timeout=timeout))
