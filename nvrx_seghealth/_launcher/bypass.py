"""Say so when torch replaces the ``segment-health`` backend a launcher asked for.

torchrun's ``--standalone`` (or ``PET_STANDALONE=1``) makes torch create a ``c10d``
rendezvous instead. A launcher's own standalone fallback does the same (accelerate's,
when its port is in use). This backend's creator is then never called, and a marked unit
trains. The rules:

* :func:`watch` wraps torch's registry's ``create_handler`` when torch loads the entry
  point, before any launcher decides on standalone.
* A handler created without this backend's creator (:func:`created`) makes the launcher's
  options be read once (:func:`asked`).
* If they asked for segment-health: one WARNING before any worker starts, with
  ``check=off``, the ``cause`` and the ``backend`` torch created.
* A launcher that ends before any rendezvous says nothing: no worker trained.
* The options are read by the launcher's own parser where it is known (torchrun, torch's
  deprecated ``torch.distributed.launch``, ``accelerate launch``), else by a scan of
  torchrun-like options (:func:`launcher_options`).
* Reading never stops the launcher.

Standard library only, but for torch's registry and the launchers' parsers, imported
when the launcher has loaded them already.
"""

from __future__ import annotations

import argparse
import enum
import logging
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from .._logfmt import format_fields
from .logs import ensure_visible

if TYPE_CHECKING:
    from torch.distributed.elastic.rendezvous import (
        RendezvousHandler,
        RendezvousHandlerRegistry,
        RendezvousParameters,
    )

__all__ = [
    "Asked",
    "BypassCause",
    "asked",
    "asked_for",
    "created",
    "launcher_options",
    "standalone_asked",
    "watch",
]

log = logging.getLogger(__name__)

_BACKEND_OPTIONS = ("--rdzv-backend", "--rdzv_backend")
_STANDALONE_OPTION = "--standalone"
#: What argparse reads as a negative number, a value (its ``_negative_number_matcher``).
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
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


class BypassCause(str, enum.Enum):
    """Why torch never created the ``segment-health`` backend it was asked for."""

    #: ``--standalone`` or ``PET_STANDALONE`` was given with the backend.
    STANDALONE = "standalone"
    #: The launcher ran with another backend (a launcher's own standalone fallback).
    LAUNCHER_FALLBACK = "launcher-fallback"


@dataclass(frozen=True)
class Asked:
    """What a launcher's options ask of torch's rendezvous.

    Attributes:
        backend: the rendezvous backend named (``None``: none).
        standalone: whether torchrun's ``--standalone`` (or ``PET_STANDALONE``) is given.
    """

    backend: str | None
    standalone: bool = False

    @property
    def cause(self) -> BypassCause:
        """Why another backend was created when this one was asked for."""
        return BypassCause.STANDALONE if self.standalone else BypassCause.LAUNCHER_FALLBACK


_created = 0


def created() -> None:
    """Note that torch called the backend's creator in this process."""
    global _created
    _created += 1


def launcher_options(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """The launcher's options in its command line ``argv``, as ``(name, value)`` pairs
    (``None``: no value): the scan for a launcher whose parser is not known.

    The options end at the training script (the first positional argument, the module of
    ``-m`` or the program of ``--no-python``) or at ``--``. An option is one token with
    ``=`` or two. An option torchrun does not know takes the next token as its value,
    unless it is written with ``=`` or the next token is an option (argparse's rule: a
    value never starts with ``-``, but for a negative number). So ``--use-env
    --standalone`` is two flags. Abbreviations are not recognised.
    """
    options: list[tuple[str, str | None]] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if token == "--" or not _is_option(token):
            break  # the training script, the module or the program: the rest is its own
        name, equals, value = token.partition("=")
        following = argv[index] if index < len(argv) else None
        if equals:
            options.append((name, value))
        elif token in _FLAGS:
            options.append((token, None))
        elif not token.startswith("--") and len(token) > 2:  # -r3: the value attached
            options.append((token[:2], token[2:]))
        elif following is not None and _is_option(following):  # an unknown flag
            options.append((token, None))
        else:
            options.append((token, following))
            index += 1
    return options


def _is_option(token: str) -> bool:
    """Whether argparse reads ``token`` as an option, not a value (``-``, ``-1``, ``-.5``)."""
    return token.startswith("-") and token != "-" and not _NEGATIVE_NUMBER.match(token)


def asked_for(argv: Sequence[str], environ: Mapping[str, str], backend: str) -> bool:
    """Whether the scanned options in ``argv`` (without the program), or else
    ``PET_RDZV_BACKEND``, name ``backend``; the last such option counts, as in argparse."""
    return _scanned(argv, environ).backend == backend


def standalone_asked(argv: Sequence[str], environ: Mapping[str, str]) -> bool:
    """Whether the scanned options in ``argv`` have ``--standalone``, or
    ``PET_STANDALONE`` is a non-zero integer (torchrun's rule for its flags' environment
    defaults)."""
    if any(name == _STANDALONE_OPTION for name, _ in launcher_options(argv)):
        return True
    try:
        return int(environ.get("PET_STANDALONE", "0")) != 0
    except ValueError:
        return False


def _scanned(argv: Sequence[str], environ: Mapping[str, str]) -> Asked:
    """What the scan of ``argv`` (without the program) and ``environ`` finds."""
    given = None
    for name, value in launcher_options(argv):
        if name in _BACKEND_OPTIONS and value is not None:
            given = value
    backend = given if given is not None else environ.get("PET_RDZV_BACKEND")
    return Asked(backend, standalone_asked(argv, environ))


def _refuse(*args: object, **kwargs: object) -> NoReturn:
    """Where a parser would exit (its help, a usage error): raise instead."""
    raise argparse.ArgumentError(None, "the launcher's parser refused the command line")


def _say_nothing(*args: object, **kwargs: object) -> None:
    return None


def _quietly(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser``, made to raise ``argparse.ArgumentError`` where it would exit, and to
    print nothing (its help and version actions print, then exit)."""
    parser.exit = parser.error = _refuse  # type: ignore[method-assign]
    parser.print_help = parser.print_usage = _say_nothing  # type: ignore[method-assign]
    parser._print_message = _say_nothing  # type: ignore[method-assign]  # the version action's
    return parser


def _torchrun(options: list[str]) -> Asked:
    from torch.distributed.run import get_args_parser

    return _torchrun_reads(get_args_parser(), options)


def _torch_launch(options: list[str]) -> Asked:
    """torch's deprecated ``python -m torch.distributed.launch``: torchrun's parser and the
    one flag its ``parse_args`` adds, ``--use-env`` (that function exits where it cannot
    parse, so the parser is built here the same way)."""
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.add_argument("--use-env", "--use_env", action="store_true")
    return _torchrun_reads(parser, options)


def _torchrun_reads(parser: argparse.ArgumentParser, options: list[str]) -> Asked:
    parsed, _ = _quietly(parser).parse_known_args(options)
    return Asked(parsed.rdzv_backend, bool(parsed.standalone))


def _accelerate(options: list[str]) -> Asked:
    from accelerate.commands.launch import launch_command_parser

    parsed, _ = _quietly(launch_command_parser()).parse_known_args(options)
    return Asked(parsed.rdzv_backend)


def _nothing(options: list[str]) -> Asked:
    """``nvrx-seghealth run``: it refuses ``--standalone`` with a hand-made segment-health
    backend before it launches, so nothing is read."""
    return Asked(None)


#: A launcher's parser by the end of its ``argv[0]`` (program, or ``python -m``'s path),
#: with the subcommand word its options follow (``""``: none).
_PARSERS: tuple[tuple[str, str, Callable[[list[str]], Asked]], ...] = (
    ("torchrun", "", _torchrun),
    (os.path.join("torch", "distributed", "run.py"), "", _torchrun),
    (os.path.join("torch", "distributed", "launch.py"), "", _torch_launch),
    ("accelerate", "launch", _accelerate),
    ("accelerate-launch", "", _accelerate),
    (os.path.join("accelerate", "commands", "launch.py"), "", _accelerate),
    (os.path.join("accelerate", "commands", "accelerate_cli.py"), "launch", _accelerate),
    ("nvrx-seghealth", "run", _nothing),
    (os.path.join("nvrx_seghealth", "__main__.py"), "run", _nothing),
)


def _launcher(
    argv: Sequence[str],
) -> tuple[Callable[[list[str]], Asked] | None, list[str]]:
    """The parser of the launcher that ``argv`` runs (``None``: not known), and the
    options it reads: ``argv`` without the program and its subcommand word."""
    for end, subcommand, parse in _PARSERS:
        if argv[0] == end or argv[0].endswith(os.sep + end):
            if not subcommand:
                return parse, list(argv[1:])
            if list(argv[1:2]) == [subcommand]:
                return parse, list(argv[2:])
    return None, list(argv[1:])


def asked(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Asked:
    """What the launcher's options in ``argv`` (``sys.argv``, the program first) ask for.

    Read by the launcher's own parser where it is known (:data:`_PARSERS`), with
    ``parse_known_args``, made to raise where it would print or exit (:func:`_quietly`).
    torchrun's parser takes abbreviations and the ``PET_*`` environment as defaults, as
    torchrun does. A launcher not known, a parser that cannot be imported and a line it
    refuses fall back to the scan (:func:`launcher_options`) with ``environ`` (default
    ``os.environ``): ``--rdzv-backend``, ``--standalone``, then ``PET_RDZV_BACKEND`` and
    ``PET_STANDALONE``.

    No reading sees a backend set in a launcher's configuration file (accelerate's
    ``rdzv_backend``), nor one a launcher builds in its own code: docs/reference/backend.md
    and ``nvrx-seghealth doctor`` name them. Reading never stops the launcher.
    """
    parse, options = _launcher(argv) if argv else (None, [])
    if parse is not None:
        try:
            return parse(options)
        except Exception as error:  # ArgumentError, ImportError, a parser's own failure
            from .._rendezvous.signals import stops_the_launcher

            if stops_the_launcher(error):
                raise
            log.debug("the launcher's parser cannot read %s (%r); scanning it", argv, error)
    return _scanned(options, os.environ if environ is None else environ)


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
    """Warn once when ``registry`` creates a handler without ``backend``'s creator while
    the launcher's options asked for ``backend`` (see the module doc).

    ``argv`` defaults to ``sys.argv`` (the program first), ``environ`` (for the scan) to
    ``os.environ`` and ``registry`` to torch's global one. Call it once, when torch loads
    the entry point. The options are read only when another backend's handler is created.
    """
    argv = list(sys.argv if argv is None else argv)
    if registry is None:
        from torch.distributed.elastic.rendezvous.api import rendezvous_handler_registry

        registry = rendezvous_handler_registry
    create = registry.create_handler
    read = False

    def create_handler(params: RendezvousParameters) -> RendezvousHandler:
        nonlocal read
        before = _created
        handler = create(params)
        if _created == before and not read:
            read = True
            options = asked(argv, environ)
            if options.backend == backend:
                _warn(options.cause, params.backend)
        return handler

    registry.create_handler = create_handler  # type: ignore[method-assign]
