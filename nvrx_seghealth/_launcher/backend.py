"""The ``segment-health`` rendezvous backend, registered with torchrun.

torch finds it through the ``torchrun.handlers`` entry-point group: it calls
:func:`entry_point` and registers the creator it returns. Launchers that keep their own
registry call :func:`register`. The creator:

* builds the inner handler named by ``inner_backend`` (:data:`INNER_BACKEND_CREATORS`:
  ``c10d`` by default, ``etcd-v2``, ``etcd-v3``) from the same parameters;
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
from .._settings.rdzv_conf import INNER_BACKEND_KEY, BackendSettings
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
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousBackend

    from .handler import SegmentHealthRendezvousHandler

__all__ = [
    "BACKEND_NAME",
    "INNER_BACKEND_CREATORS",
    "create_segment_health_handler",
    "entry_point",
    "register",
]

BACKEND_NAME = "segment-health"
log = logging.getLogger(__name__)


def _create_c10d(params: RendezvousParameters) -> tuple[RendezvousBackend, Store]:
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend

    if _store_outside(params):
        # torch waits for the store without a word until its timeout (minutes)
        log.info(
            "Connecting to the rendezvous store at %s; with is_host=false it must already "
            "be served there (e.g. by nvrx-seghealth store-host)",
            params.endpoint,
        )
    return c10d_rendezvous_backend.create_backend(params)


def _create_etcd_v2(params: RendezvousParameters) -> tuple[RendezvousBackend, Store]:
    try:
        import etcd  # noqa: F401  (python-etcd; torch silently stubs it when missing)
    except ImportError:
        raise ConfigurationError(
            "inner_backend=etcd-v2 needs the python-etcd client: pip install python-etcd "
            "(the package's etcd extra: pip install '.[etcd]' from a checkout)",
            setting=f"rdzv-conf {INNER_BACKEND_KEY}=etcd-v2",
        ) from None
    from torch.distributed.elastic.rendezvous import etcd_rendezvous_backend

    from .etcd_v2 import election_safe

    # Through an etcd leader election; the store reads one key, not torch's whole directory.
    return election_safe(*etcd_rendezvous_backend.create_backend(params))


def _create_etcd_v3(params: RendezvousParameters) -> tuple[RendezvousBackend, Store]:
    from .etcd_v3 import create_backend

    return create_backend(params)


#: The inner backends by name (``inner_backend``, :data:`~.._settings.rdzv_conf.INNER_BACKENDS`
#: in the same order), as torch's registry keeps its handlers: each creates torch's
#: rendezvous backend and the store it shares from the inner parameters.
INNER_BACKEND_CREATORS: dict[
    str, Callable[[RendezvousParameters], tuple[RendezvousBackend, Store]]
] = {
    "c10d": _create_c10d,
    "etcd-v2": _create_etcd_v2,
    "etcd-v3": _create_etcd_v3,
}


def _create_inner(params: RendezvousParameters) -> tuple[RendezvousHandler, Store]:
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

    backend, store = INNER_BACKEND_CREATORS[params.backend](params)
    return create_handler(store, backend, params), store


def _store_outside(params: RendezvousParameters) -> bool:
    """Whether the c10d store is served outside this launcher (``is_host=false``)."""
    return params.backend == "c10d" and not params.get_as_bool("is_host", True)


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
    why = OUTSIDE_STORE if _store_outside(inner_params) else CHECK_OFF  # unused: the check on
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
