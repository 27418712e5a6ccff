"""``python -m bench [--quick] [--rows 3,4,5]``: print the benchmark table.

Each row compares two things measured side by side in this one run; absolute times on
a shared machine are noise, the ratios are the result.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

from . import check_cost, startup, store_scale
from .common import table

ROWS = {"3": check_cost.rows, "4": store_scale.rows, "5": startup.rows}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--rows", default=",".join(ROWS), help="which rows (default: all)")
    args = parser.parse_args()
    started = time.monotonic()
    rows = [row for key in args.rows.split(",") for row in ROWS[key](args.quick)]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, {'quick' if args.quick else 'full'} run, "
          f"{time.monotonic() - started:.0f} s")
    print(table(rows))
    return 0 if all(row.met is not False for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
