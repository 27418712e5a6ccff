"""Say so when torch replaces the ``segment-health`` backend a launcher asked for.

torchrun's ``--standalone`` (or ``PET_STANDALONE=1``) makes torch overwrite the
rendezvous backend with ``c10d`` after it parsed the command line, and a launcher that
falls back to standalone does the same (accelerate, when its ``--main_process_port`` is
in use on a single machine). This backend's creator is then never called: a marked unit
trains, and without this module nothing would say the check did not run.

torch loads the ``torchrun.handlers`` entry point while it imports its rendezvous
package, which is before any launcher decides on standalone. So :func:`watch` runs then:
if the launcher asked for segment-health, it wraps the ``create_handler`` of torch's
rendezvous registry (the one call through which torch's launcher API builds its
rendezvous). When a handler is created there without this backend's creator being called
(:func:`created`), the check is off: one WARNING, before any worker starts, with
``check=off``, the ``cause`` (``standalone`` if it was asked for, else
``launcher-fallback``) and the ``backend`` torch created. A launcher that ends before any
rendezvous (``--help``, a usage error, a failure while it sets up) says nothing: no
worker trained.

What is asked for is read from the launcher's own options, as torchrun's parser reads
them: the options before the training script (the first positional argument, the module
of ``-m`` or the program of ``--no-python``) or ``--``; the training script's arguments do
not count. ``--rdzv-backend``/``--rdzv_backend`` and ``--standalone`` are recognised as
one token with ``=`` or two; where the command line is silent, ``PET_RDZV_BACKEND`` and
``PET_STANDALONE`` (torchrun's own defaults) are. For ``accelerate launch`` and
``nvrx-seghealth run`` the options follow the subcommand word. An option torchrun does
not know (another launcher's) is taken to have a value unless written with ``=``, so the
scan may read on into the script's arguments rather than stop early. A spelling torchrun
also accepts by abbreviation (``--rdzv-b``) is not recognised; nor is a launcher that
sets the backend in its own configuration file. docs/reference/backend.md and ``nvrx-seghealth doctor``
say how to avoid those routes.

Standard library only, but for torch's registry, which :func:`watch` imports when the
backend is asked for (torch has loaded it by then).
"""

from __future__ import annotations

import enum
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .._logfmt import format_fields
from .logs import ensure_visible

if TYPE_CHECKING:
    from torch.distributed.elastic.rendezvous import (
        RendezvousHandler,
        RendezvousHandlerRegistry,
        RendezvousParameters,
    )

__all__ = [
    "BypassCause",
    "asked_for",
    "command_line",
    "created",
    "launcher_options",
    "standalone_asked",
    "watch",
]

log = logging.getLogger(__name__)

_BACKEND_OPTIONS = ("--rdzv-backend", "--rdzv_backend")
_STANDALONE_OPTION = "--standalone"
#: torchrun's options that take no value (its parser's, checked by the tests).
_FLAGS = frozenset(
    {
        "-h",
        "--help",
        _STANDALONE_OPTION,
        "-m",
        "--module",
        "--no-python",
        "--no_python",
        "--run-path",
        "--run_path",
        "--virtual-local-rank",
        "--virtual_local_rank",
    }
)
#: Launchers whose torchrun-like options follow a subcommand word: program, subcommand.
_SUBCOMMANDS = {"accelerate": "launch", "nvrx-seghealth": "run"}


class BypassCause(str, enum.Enum):
    """Why torch never created the ``segment-health`` backend it was asked for."""

    #: ``--standalone`` or ``PET_STANDALONE`` was given with the backend.
    STANDALONE = "standalone"
    #: The launcher ran with another backend (a launcher's own standalone fallback).
    LAUNCHER_FALLBACK = "launcher-fallback"


_created = 0


def created() -> None:
    """Note that torch called the backend's creator in this process."""
    global _created
    _created += 1


def command_line(argv: Sequence[str]) -> list[str]:
    """The launcher's command line in ``argv`` (``sys.argv``): without the program, and
    without the subcommand word of ``accelerate launch`` or ``nvrx-seghealth run``
    (also as ``python -m nvrx_seghealth run``)."""
    if not argv:
        return []
    head, program = os.path.split(argv[0])
    if program == "__main__.py":  # python -m PACKAGE
        program = os.path.basename(head).replace("_", "-")
    skip = 2 if list(argv[1:2]) == [_SUBCOMMANDS.get(program)] else 1
    return list(argv[skip:])


def launcher_options(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """The launcher's options in its command line ``argv``, as ``(name, value)`` pairs
    (``None``: no value), up to the training script or ``--`` (see the module doc)."""
    options: list[tuple[str, str | None]] = []
    tokens = iter(argv)
    for token in tokens:
        if token == "--" or not token.startswith("-") or token == "-":
            break  # the training script, the module or the program: the rest is its own
        name, equals, value = token.partition("=")
        if equals:
            options.append((name, value))
        elif token in _FLAGS:
            options.append((token, None))
        elif not token.startswith("--") and len(token) > 2:  # -r3: the value attached
            options.append((token[:2], token[2:]))
        else:
            options.append((token, next(tokens, None)))
    return options


def asked_for(argv: Sequence[str], environ: Mapping[str, str], backend: str) -> bool:
    """Whether the launcher's options in ``argv`` (its :func:`command_line`), or else
    ``PET_RDZV_BACKEND``, name ``backend``; the last such option counts, as in argparse."""
    given = None
    for name, value in launcher_options(argv):
        if name in _BACKEND_OPTIONS and value is not None:
            given = value
    return (given if given is not None else environ.get("PET_RDZV_BACKEND")) == backend


def standalone_asked(argv: Sequence[str], environ: Mapping[str, str]) -> bool:
    """Whether the launcher's options in ``argv`` have ``--standalone``, or
    ``PET_STANDALONE`` is a non-zero integer (torchrun's rule for its flags' environment
    defaults)."""
    if any(name == _STANDALONE_OPTION for name, _ in launcher_options(argv)):
        return True
    try:
        return int(environ.get("PET_STANDALONE", "0")) != 0
    except ValueError:
        return False


def _warn(cause: BypassCause, backend: str) -> None:
    ensure_visible()
    fields = format_fields({"check": "off", "cause": cause.value, "backend": backend})
    if cause is BypassCause.STANDALONE:
        log.warning(
            "Segment health check is OFF: --standalone made torch replace the segment-health "
            "rendezvous backend with %s, so no decision file is looked at; drop --standalone "
            "and give --rdzv-endpoint (and --rdzv-id); %s",
            backend,
            fields,
        )
    else:
        log.warning(
            "Segment health check is OFF for this launcher: segment-health was asked for, but "
            "the launcher created a %s rendezvous instead (a standalone fallback, such as "
            "accelerate's when its --main_process_port is in use), so no decision file is "
            "looked at; give the launcher a free port or its standalone-free options; %s",
            backend,
            fields,
        )


def watch(
    backend: str,
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    registry: RendezvousHandlerRegistry | None = None,
) -> None:
    """If ``backend`` is asked for, warn once when ``registry`` creates a handler without
    its creator (see the module doc).

    ``argv`` defaults to ``sys.argv`` (the program first), ``environ`` to ``os.environ``
    and ``registry`` to torch's global one. Call it once, when torch loads the entry
    point.
    """
    options = command_line(sys.argv if argv is None else argv)
    environ = os.environ if environ is None else environ
    if not asked_for(options, environ, backend):
        return
    cause = (
        BypassCause.STANDALONE
        if standalone_asked(options, environ)
        else BypassCause.LAUNCHER_FALLBACK
    )
    if registry is None:
        from torch.distributed.elastic.rendezvous.api import rendezvous_handler_registry

        registry = rendezvous_handler_registry
    create = registry.create_handler
    warned = False

    def create_handler(params: RendezvousParameters) -> RendezvousHandler:
        nonlocal warned
        before = _created
        handler = create(params)
        if _created == before and not warned:
            warned = True
            _warn(cause, params.backend)
        return handler

    registry.create_handler = create_handler  # type: ignore[method-assign]
