"""Say so when torch replaced the ``segment-health`` backend a launcher asked for.

torchrun's ``--standalone`` (or ``PET_STANDALONE=1``) makes torch overwrite the
rendezvous backend with ``c10d`` after it parsed the command line, and a launcher that
falls back to standalone does the same (accelerate, when its ``--main_process_port`` is
in use on a single machine). This backend's creator is then never called: a marked unit
trains, and without this module nothing would say the check did not run.

torch loads the ``torchrun.handlers`` entry point while it imports its rendezvous
package, which is before any launcher decides on standalone. So :func:`watch` runs then,
and looks at the command line and the ``PET_*`` environment torchrun reads:

- segment-health asked for together with standalone: one WARNING at once, before any
  worker starts (``check=off cause=standalone``);
- segment-health asked for: at the process's exit, if the launcher ran (torch's launcher
  API is imported, and the launcher did not refuse its command line first: see
  :func:`refused`) and the creator was never called, one WARNING
  (``check=off cause=launcher-fallback``): the run trained without the check.

What is asked for is read from the command line (``--rdzv-backend``/``--rdzv_backend``,
``--standalone``, as one token with ``=`` or two) and, where the command line is silent,
from ``PET_RDZV_BACKEND`` and ``PET_STANDALONE`` (torchrun's own defaults). A spelling
torchrun also accepts by abbreviation (``--rdzv-b``) is not recognised; nor is a
launcher that sets the backend in its own configuration file. The README and
``nvrx-seghealth doctor`` say how to avoid those routes.

Standard library only: imported while torch imports its own rendezvous package.
"""

from __future__ import annotations

import atexit
import enum
import logging
import os
import sys
from collections.abc import Mapping, Sequence

from .._logfmt import format_fields
from .logs import ensure_visible

__all__ = ["BypassCause", "asked_for", "created", "refused", "standalone_asked", "watch"]

log = logging.getLogger(__name__)

_BACKEND_OPTIONS = ("--rdzv-backend", "--rdzv_backend")
_STANDALONE_OPTION = "--standalone"
#: Imported by every launcher built on torch's launcher API (torchrun, accelerate, ...).
_LAUNCHER_MODULE = "torch.distributed.launcher.api"


class BypassCause(str, enum.Enum):
    """Why torch never created the ``segment-health`` backend it was asked for."""

    #: ``--standalone`` or ``PET_STANDALONE`` was given with the backend.
    STANDALONE = "standalone"
    #: The launcher ran with another backend (a launcher's own standalone fallback).
    LAUNCHER_FALLBACK = "launcher-fallback"


_created = False
_refused = False


def created() -> None:
    """Note that torch called the backend's creator in this process."""
    global _created
    _created = True


def refused() -> None:
    """The launcher refused its command line before launching anything: no run can have
    trained without the check, and the exit says nothing about it."""
    global _refused
    _refused = True


def _option_value(argv: Sequence[str], names: Sequence[str]) -> str | None:
    """The value of the last of ``names`` in ``argv`` (``--name V`` or ``--name=V``)."""
    value = None
    for index, token in enumerate(argv):
        name, equals, given = token.partition("=")
        if name not in names:
            continue
        if equals:
            value = given
        elif index + 1 < len(argv):
            value = argv[index + 1]
    return value


def asked_for(argv: Sequence[str], environ: Mapping[str, str], backend: str) -> bool:
    """Whether ``argv`` (without the program), or else ``PET_RDZV_BACKEND``, names ``backend``."""
    given = _option_value(argv, _BACKEND_OPTIONS)
    return (given if given is not None else environ.get("PET_RDZV_BACKEND")) == backend


def standalone_asked(argv: Sequence[str], environ: Mapping[str, str]) -> bool:
    """Whether ``argv`` has ``--standalone``, or ``PET_STANDALONE`` is a non-zero integer
    (torchrun's rule for its flags' environment defaults)."""
    if _STANDALONE_OPTION in argv:
        return True
    try:
        return int(environ.get("PET_STANDALONE", "0")) != 0
    except ValueError:
        return False


def _warn(cause: BypassCause) -> None:
    ensure_visible()
    fields = format_fields({"check": "off", "cause": cause.value})
    if cause is BypassCause.STANDALONE:
        log.warning(
            "Segment health check is OFF: --standalone makes torch replace the "
            "segment-health rendezvous backend with c10d, so no decision file is looked at; "
            "drop --standalone and give --rdzv-endpoint (and --rdzv-id); %s",
            fields,
        )
    else:
        log.warning(
            "Segment health check was OFF for this launcher: segment-health was asked for, "
            "but the launcher rendezvoused with another backend (a standalone fallback, such "
            "as accelerate's when its --main_process_port is in use), so no decision file was "
            "looked at; give the launcher a free port or its standalone-free options; %s",
            fields,
        )


def _at_exit() -> None:
    if not _created and not _refused and _LAUNCHER_MODULE in sys.modules:
        _warn(BypassCause.LAUNCHER_FALLBACK)


def watch(
    backend: str, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> None:
    """Warn when ``backend`` is asked for and torch will not, or did not, create it.

    ``argv`` defaults to ``sys.argv[1:]`` and ``environ`` to ``os.environ``. Call it once,
    when torch loads the entry point (see the module doc).
    """
    argv = sys.argv[1:] if argv is None else argv
    environ = os.environ if environ is None else environ
    if not asked_for(argv, environ, backend):
        return
    if standalone_asked(argv, environ):
        _warn(BypassCause.STANDALONE)
    else:
        atexit.register(_at_exit)
