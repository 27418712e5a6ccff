"""The ``nvrx-seghealth`` command: a thin dispatcher to one module per subcommand.

A subcommand module provides ``register(subparsers)``, which adds its subparser and sets
``func``; ``func(args)`` returns the exit code. Each module declares its options as rows
(:mod:`.arguments`). ``--help`` lists the subcommands in the order of ``_SUBCOMMANDS``.

* A ``func`` that finds its arguments or settings unusable raises
  :class:`~nvrx_seghealth.ConfigurationError`. :func:`main` prints it as
  ``nvrx-seghealth COMMAND: error: MESSAGE`` and returns 2, as argparse does.
* Output whose reader went away (``status | head -1``) ends the command quietly, with
  exit 141 (:data:`~.output.EXIT_BROKEN_PIPE`). What the command did before stands.
* argparse's own exits (``--help``, a malformed option) keep their status.
* ``--version`` prints the installed distribution's version and exits 0. A source tree
  that is not installed has none, and exits 1.

Importing this package does not import torch: ``run`` imports it when it runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .._errors import ConfigurationError
from .output import EXIT_BROKEN_PIPE, quiet_gone_readers, usage_error

__all__ = ["build_parser", "main"]

#: Each subcommand's module, in the order ``--help`` lists them.
_SUBCOMMANDS = {
    "demo": "demo",
    "run": "run",
    "check": "check",
    "mark": "mark",
    "clear": "mark",
    "status": "status",
    "doctor": "doctor",
    "publish-drained": "publish_drained",
    "store-host": "store_host",
}

#: The distribution whose metadata holds the version (pyproject.toml's ``[project] name``).
_DISTRIBUTION = "nvrx-seghealth"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command-line parser with every subcommand, or with ``command`` alone.

    A command line that starts with its command needs that command's module only. The
    others, and what they import, are not loaded: an operator's command starts quickly.
    ``command`` and the commands its module adds (``mark``'s ``clear``) are then the
    only choices.
    """
    parser = argparse.ArgumentParser(
        prog="nvrx-seghealth",
        description="Keep an unhealthy Slurm allocation unit out of PyTorch elastic rendezvous.",
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="print the installed version and exit"
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = dict.fromkeys(_SUBCOMMANDS.values()) if command is None else [_SUBCOMMANDS[command]]
    for name in modules:
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
    return parser


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        import importlib.metadata  # 20 ms a command does not need otherwise

        try:
            version = importlib.metadata.version(_DISTRIBUTION)
        except importlib.metadata.PackageNotFoundError:
            parser.exit(
                1,
                f"{parser.prog}: no version: this source tree is not installed; install it "
                "(pip install . in the checkout) to have one\n",
            )
        print(f"{parser.prog} {version}")  # on stdout, as argparse's own version action
        parser.exit(0)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the chosen subcommand and return
    its exit code; ``2`` when it raises :class:`~nvrx_seghealth.ConfigurationError`.

    It returns ``141`` (128 + SIGPIPE) when stdout's or stderr's reader went away, the
    status a shell reports for ``grep`` killed by SIGPIPE in the same place. 141 is
    neither the command's verdict nor a usage error: the output was cut, and under
    ``set -o pipefail`` the pipeline says so. A ``BrokenPipeError`` from anything else
    (a socket of ``run``) is not hidden.
    """
    try:
        return _dispatch(argv)
    except BrokenPipeError:
        if not quiet_gone_readers():
            raise
        return EXIT_BROKEN_PIPE


def _dispatch(argv: Sequence[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[0] if argv and argv[0] in _SUBCOMMANDS else None
    args = build_parser(command).parse_args(argv)
    try:
        code = int(args.func(args))
    except ConfigurationError as error:
        code = usage_error(args.command, str(error))
    sys.stdout.flush()  # a reader that went away shows here, not at the interpreter's exit
    return code
