"""``python -m bench [--quick] [--rows 1,2,3,4,5,6,7,8,9,10,11]``: print the benchmark table.

Each row compares two things measured side by side in this one run; absolute times on
a shared machine are noise, the ratios are the result. The header names the machine,
the run and its load (the 1-minute load average before and after): on a busy machine
the whole-job rows (1, 2, 6, 7, 10, 11) are the first to suffer.

Exit status: 0 when no row missed its target, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable

from . import (
    bad_task,
    check_cost,
    healthy_rendezvous,
    parse_cost,
    producer_wakeup,
    recovery,
    sibling_first,
    startup,
    store_scale,
    watch,
)
from .common import Row, table

ROWS: dict[str, Callable[[bool], list[Row]]] = {
    "1": healthy_rendezvous.rows,
    "2": bad_task.rows,
    "3": check_cost.rows,
    "4": store_scale.rows,
    "5": startup.rows,
    "6": sibling_first.rows,
    "7": recovery.rows,
    "8": parse_cost.rows,
    "9": producer_wakeup.rows,
    "10": watch.exclusion_rows,
    "11": watch.hung_rows,
}


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def _row_keys(value: str) -> list[str]:
    """argparse type of ``--rows``: comma-separated keys of :data:`ROWS`."""
    keys = [key.strip() for key in value.split(",") if key.strip()]
    unknown = [key for key in keys if key not in ROWS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown rows {unknown}; choose from {','.join(ROWS)}")
    return keys


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m bench`` (``bench/run``, ``./dev bench``)."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and sizes")
    parser.add_argument(
        "--rows",
        type=_row_keys,
        default=list(ROWS),
        help="which rows, comma-separated (default: all)",
    )
    return parser


def main() -> int:
    """Run the selected rows and print the header and the table."""
    args = build_parser().parse_args()
    keys = args.rows
    load_before = _load()
    started = time.monotonic()
    rows = []
    for key in keys:
        row_started = time.monotonic()
        rows.extend(ROWS[key](args.quick))
        print(f"row {key}: {time.monotonic() - row_started:.0f} s", file=sys.stderr, flush=True)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {'quick' if args.quick else 'full'} run of rows "
        f"{','.join(keys)}, {time.monotonic() - started:.0f} s, load average "
        f"{load_before} before, {_load()} after"
    )
    print(table(rows))
    return 0 if all(row.met is not False for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
