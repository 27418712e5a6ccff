"""The ``nvrx-seghealth`` command: a thin dispatcher to one module per subcommand.

A subcommand module provides ``register(subparsers)``, which adds its subparser and sets
``func``; ``func(args)`` returns the exit code. To add subcommands, list their
``register`` in ``_REGISTRARS``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from . import demo
from .commands import register_all

__all__ = ["build_parser", "main"]

_REGISTRARS = (demo.register, register_all)


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="nvrx-seghealth",
        description="Keep an unhealthy Slurm allocation unit out of PyTorch elastic rendezvous.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _REGISTRARS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run the chosen subcommand."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))
