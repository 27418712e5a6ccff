"""The ``nvrx-seghealth`` subcommands, one module each.

Every command module exposes ``register(subparsers)``, which adds its subparser (help
text, examples) and sets ``func``; ``func(args)`` returns the exit code. Wire them into
a parser with :func:`register_all`::

    subparsers = parser.add_subparsers(dest="command", required=True)
    register_all(subparsers)
    args = parser.parse_args(argv)
    return args.func(args)

Importing this package does not import torch: ``run`` imports it when it runs.
"""

from __future__ import annotations

from typing import Any

from . import check, doctor, mark, publish_drained, run, status, store_host

__all__ = ["register_all"]


def register_all(subparsers: Any) -> None:
    """Add ``run``, ``check``, ``mark``, ``clear``, ``status``, ``doctor``,
    ``publish-drained`` and ``store-host`` to ``subparsers`` (from
    ``ArgumentParser.add_subparsers()``)."""
    for module in (run, check, mark, status, doctor, publish_drained, store_host):
        module.register(subparsers)
