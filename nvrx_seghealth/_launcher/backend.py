"""The ``segment-health`` rendezvous backend, registered with torchrun.

torch finds it through the ``torchrun.handlers`` entry-point group: it calls
:func:`entry_point` and registers the creator it returns. Launchers that keep their own
registry call :func:`register`. The creator:

* builds the inner handler named by ``inner_backend`` (the table of
  :mod:`.._rendezvous.registry`: ``c10d`` by default) from the same parameters;
* shares that backend's store for the replacement-group markers;
* wraps it in a :class:`SegmentHealthRendezvousHandler` that reports this backend's name.

With the check off, the workers' store is still served (:mod:`.agentstore`) and torch's
rank exchange still skipped (:mod:`.rankexchange`), so that the launchers of one world
bootstrap alike whichever of them has a directory; the creator says the check is off in
one WARNING. A :class:`ConfigurationError` leaves the creator as it is; if
nothing catches it, Python prints only its message (:func:`_said_in_one_line`). torch is
imported only inside functions: torch loads the entry point while it imports its own
rendezvous package.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import traceback
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING

from .._errors import ConfigurationError
from .._rendezvous import registry
from .._rendezvous.creators import store_outside
from .._settings.rdzv_conf import BackendSettings
from . import bypass, rankexchange
from .agentstore import CHECK_OFF, OUTSIDE_STORE
from .logs import ensure_visible

if TYPE_CHECKING:
    from torch.distributed import Store
    from torch.distributed.elastic.rendezvous import (
        RendezvousHandler,
        RendezvousHandlerRegistry,
        RendezvousParameters,
    )

    from .handler import SegmentHealthRendezvousHandler

__all__ = [
    "BACKEND_NAME",
    "create_segment_health_handler",
    "entry_point",
    "register",
]

BACKEND_NAME = "segment-health"
log = logging.getLogger(__name__)


def _create_inner(params: RendezvousParameters) -> tuple[RendezvousHandler, Store]:
    from torch.distributed.elastic.rendezvous import RendezvousHandler
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

    backend, store = registry.create(params)
    if isinstance(backend, RendezvousHandler):  # a rendezvous with its own handler
        return backend, store
    return create_handler(store, backend, params), store


#: The creator's latest :class:`ConfigurationError`, which the hook of
#: :func:`_said_in_one_line` prints in one line if nothing catches it.
_refused: BaseException | None = None


@contextlib.contextmanager
def _said_in_one_line() -> Iterator[None]:
    """Have Python print a :class:`ConfigurationError` raised inside, should nothing catch
    it, as its last traceback line only; any other uncaught exception goes to the
    ``sys.excepthook`` in place before."""
    global _refused
    try:
        yield
    except ConfigurationError as error:
        if _refused is None:
            previous = sys.excepthook

            def excepthook(
                kind: type[BaseException], value: BaseException, tb: TracebackType | None
            ) -> None:
                if value is _refused:
                    sys.stderr.write("".join(traceback.format_exception_only(kind, value)))
                else:
                    previous(kind, value, tb)

            sys.excepthook = excepthook
        _refused = error
        raise


def create_segment_health_handler(
    params: RendezvousParameters,
) -> SegmentHealthRendezvousHandler:
    """Build the handler for ``params`` (the rendezvous creator torch calls).

    All settings are validated, once, before the inner rendezvous is created
    (:meth:`~.._settings.rdzv_conf.BackendSettings.from_rdzv_config`); the handler takes
    the validated :class:`~.._settings.check_settings.CheckSettings` as it is.

    Raises:
        ConfigurationError: a setting is invalid (named in the message).
    """
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    from .handler import SegmentHealthRendezvousHandler

    bypass.created()
    with _said_in_one_line():
        settings = BackendSettings.from_rdzv_config(params.config)
    ensure_visible()
    inner_params = RendezvousParameters(
        backend=settings.inner_backend,
        endpoint=params.endpoint,
        run_id=params.run_id,
        min_nodes=params.min_nodes,
        max_nodes=params.max_nodes,
        local_addr=params.local_addr,
        **settings.inner_config,
    )
    with _said_in_one_line():
        inner, store = _create_inner(inner_params)
    if settings.check is None:
        rankexchange.skip_rank_exchange(rankexchange.CHECK_OFF)  # as its checked peers
        log.warning(
            "Segment health check: check=off, no decision directory on this launcher "
            "(segment_health_check_dir, NVRX_SEGMENT_HEALTH_CHECK_DIR): it joins as plain %s "
            "would; give every launcher of the job the same directory",
            settings.inner_backend,
        )
    why = OUTSIDE_STORE if store_outside(inner_params) else CHECK_OFF  # unused: the check on
    return SegmentHealthRendezvousHandler.from_settings(
        inner, settings.check, store=store, backend=params.backend, serve_workers_why=why
    )


def entry_point() -> Callable[[RendezvousParameters], SegmentHealthRendezvousHandler]:
    """The ``torchrun.handlers`` entry point: returns the rendezvous creator.

    Also watches for a launcher that asked for this backend and will not get it
    (``--standalone``; see :mod:`.bypass`).
    """
    bypass.watch(BACKEND_NAME)
    return create_segment_health_handler


def register(
    registry: RendezvousHandlerRegistry | None = None,
    name: str = BACKEND_NAME,
) -> None:
    """Register the backend as ``name`` in ``registry`` (default: torch's global one).

    Registering again under the same name is a no-op (torch compares creators), so this
    is safe in a process where the entry point already registered it.
    """
    if registry is None:
        from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

        registry = rendezvous_handler_registry
    registry.register(name, create_segment_health_handler)
