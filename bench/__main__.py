"""``python -m bench [--quick] [--rows 1,...,18] [--port-race-rounds N]``: print the benchmark table.

Each row compares two things measured side by side in this one run; absolute times on
a shared machine are noise, the ratios are the result. The header names the machine,
the run and its load (the 1-minute load average before and after): on a busy machine
the whole-job rows (1, 2, 6, 7, 10, 11, 14) are the first to suffer.

Exit status: 0 when no row missed its target, 1 otherwise.
"""

from __future__ import annotations

import functools
import os
import platform
import sys
import time
from collections.abc import Callable

from harness.bench.benchcli import ROW_KEYS, build_parser
from harness.bench.measure import Row, table

from . import (
    bad_task,
    barrier_scale,
    check_cost,
    healthy_rendezvous,
    parse_cost,
    port_race,
    producer_wakeup,
    recovery,
    sibling_first,
    sigterm_exit,
    startup,
    store_scale,
    v3_history,
    v3_jobs,
    v3_rounds,
    watch,
)

#: Each row of :data:`~harness.bench.benchcli.ROW_KEYS`, in order, and what measures it.
ROWS: dict[str, Callable[[bool], list[Row]]] = dict(
    zip(
        ROW_KEYS,
        (
            healthy_rendezvous.rows,
            bad_task.rows,
            check_cost.rows,
            store_scale.rows,
            startup.rows,
            sibling_first.rows,
            recovery.rows,
            parse_cost.rows,
            producer_wakeup.rows,
            watch.exclusion_rows,
            watch.hung_rows,
            sigterm_exit.rows,
            port_race.rows,
            v3_jobs.rows,
            v3_rounds.request_rows,
            v3_history.rows,
            v3_rounds.scale_rows,
            barrier_scale.rows,
        ),
        strict=True,
    )
)


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def main() -> int:
    """Run the selected rows and print the header and the table."""
    args = build_parser().parse_args()
    keys = args.rows
    load_before = _load()
    started = time.monotonic()
    rows = []
    for key in keys:
        row_started = time.monotonic()
        measure = ROWS[key]
        if measure is port_race.rows:  # its long run: --port-race-rounds
            measure = functools.partial(port_race.rows, rounds=args.port_race_rounds)
        rows.extend(measure(args.quick))
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
