"""The command line of ``python -m bench`` (``bench/run``, ``./dev bench``): its options and
the keys of its rows, which ``tests/test_docs.py`` holds the documented commands to."""

from __future__ import annotations

import argparse

__all__ = ["ROW_KEYS", "build_parser"]

#: The rows of the benchmark table, in order (``bench/__main__.py`` measures each one).
ROW_KEYS = (
    "1",
    "2",
    "3",
    "4",
    "5",
    "6",
    "7",
    "8",
    "9",
    "10",
    "11",
    "12",
    "13",
    "14",
    "15",
    "16",
    "17",
    "18",
)


def _row_keys(value: str) -> list[str]:
    """argparse type of ``--rows``: comma-separated keys of :data:`ROW_KEYS`."""
    keys = [key.strip() for key in value.split(",") if key.strip()]
    unknown = [key for key in keys if key not in ROW_KEYS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown rows {unknown}; choose from {','.join(ROW_KEYS)}"
        )
    return keys


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m bench``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=f"``python -m bench [--quick] [--rows {','.join(ROW_KEYS)}]``: "
        "print the benchmark table.",
    )
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and sizes")
    parser.add_argument(
        "--rows",
        type=_row_keys,
        default=list(ROW_KEYS),
        help="which rows, comma-separated (default: all)",
    )
    parser.add_argument(
        "--port-race-rounds",
        type=int,
        default=None,
        metavar="N",
        help="row 13: rounds per job (its long run; default 10, 4 with --quick)",
    )
    return parser
