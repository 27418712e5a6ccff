"""Row 18: time to the first world of N launchers, five rendezvous side by side.

Designs: torch's ``c10d``; ``seghealth-c10d`` (segment-health over c10d, an empty
decision directory, Slurm variables per launcher); ``barrier``; ``seghealth-barrier``;
``seghealth-barrier-no-handoff`` (siblings join without process 0's verdict, the spec's
fallback: what the hand-off costs); ``nvrx`` (NVRx 0.7.0's barrier handler,
:mod:`.nvrx_stubs`; never a dependency).

* N launchers are threads over P processes (:mod:`.scale_launchers`), each with its own
  TCPStore client, against one libuv TCPStore server in its own process. Each unit's
  process 0 has its own stat helper, as in a job. Opening the connections and starting
  the helpers is not timed. Launchers run off the main thread, so their waits block
  directly (``_rendezvous.waits``); a launcher's main thread adds a thread per wait. All call ``next_rendezvous()`` at one instant; the time runs
  to the last launcher's return. ``min = max = N``, ``is_host=false``.
* Store ops and payload bytes per launcher: each client is counted (a ``Store``
  subclass), until that launcher returned. Server CPU: from ``/proc`` of its process.
* Every trial has a fresh server, fresh processes and its own run id. Repetitions are
  interleaved (:func:`~harness.bench.measure.interleaved_samples`).
* A c10d-based design that forms no world within ``--give-up`` is recorded "never" and
  is not tried at larger sizes (it livelocks: every join rewrites one shared record).
* Marked: seghealth-barrier at ``--marked-size`` with ``min = N - 4``. After the first
  world, one unit's decision file is published; every launcher joins again at one
  instant. Timed: until the world without that unit formed.
* Check: barrier's store ops per launcher may not grow with N (largest / smallest size).

``python -m bench.barrier_scale [--sizes 64,256,1024,4096] [--repetitions 2]
[--give-up 120] [--marked-size 1024] [--designs ...]`` prints the table.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import queue
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bench.measure import Row, interleaved_samples, ratio_or_none, table

from . import nvrx_stubs
from .scale_launchers import ARRAY_JOB, NO_HANDOFF, UNIT, Job, Round, run_share

DESIGNS = (
    "c10d",
    "seghealth-c10d",
    "barrier",
    "seghealth-barrier",
    f"seghealth-barrier{NO_HANDOFF}",
    "nvrx",
)
C10D_BASED = ("c10d", "seghealth-c10d")
#: Seconds every process may take to import torch, connect and build its handlers.
READY_TIMEOUT = 900.0
#: Barrier's ops per launcher at the largest size / at the smallest: at most this.
FLAT_OPS = 1.10
QUICK_SIZES, FULL_SIZES = (64,), (64, 256)


def processes_for(size: int) -> int:
    """Worker processes for ``size`` launchers: 8; 16 from 1,024; 32 from 4,096 (256
    threads in one process formed no world in 120 s: each waits its turn for the GIL)."""
    return 8 if size < 1024 else 16 if size < 4096 else 32


@dataclass
class Trial:
    """One trial's outcome. ``seconds`` ``None``: no world within the give-up."""

    seconds: float | None
    ops: float
    bytes: float
    server_cpu: float
    client_cpu: float
    calls: dict[str, int] = field(default_factory=dict)
    note: str = ""


def _serve(out: Any) -> None:
    from torch.distributed import TCPStore

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, use_libuv=True)
    out.put(server.port)
    while True:
        time.sleep(3600)


def _cpu(pid: int) -> float:
    """CPU seconds process ``pid`` has used (all its threads), from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _outcome(
    rounds: list[Round], start: float, expected: int, server: float, processes: int
) -> Trial:
    size = max(1, sum(r.launchers for r in rounds))
    calls: Counter[str] = Counter()
    for r in rounds:
        calls.update(r.calls)
    returned = sum(r.returned for r in rounds)
    excluded = sum(r.excluded for r in rounds)
    errors: Counter[str] = Counter()
    for r in rounds:
        errors.update(r.errors)
    done = len(rounds) == processes and returned == expected
    note = "" if done else f"{returned}/{expected} returned"
    if errors:
        note += f" errors {dict(errors)}"
    if excluded:
        note += f" excluded {excluded}"
    return Trial(
        seconds=max(r.last for r in rounds) - start if done else None,
        ops=sum(calls.values()) / size,
        bytes=sum(r.bytes for r in rounds) / size,
        server_cpu=server,
        client_cpu=sum(r.cpu for r in rounds),
        calls=dict(calls),
        note=note.strip(),
    )


def trial(
    design: str,
    size: int,
    give_up: float,
    number: int,
    *,
    marked: bool = False,
    nvrx_dir: Path = nvrx_stubs.DEFAULT_DIR,
) -> list[Trial]:
    """One trial of ``size`` launchers; two rounds when ``marked`` (see the module)."""
    # torch's socket messages look up each peer's name; where DNS does not answer, each
    # lookup stalls opening connections for the resolver's timeout (5 s): cut it to 1 s
    os.environ.setdefault("RES_OPTIONS", "timeout:1 attempts:1")
    context = multiprocessing.get_context("forkserver")
    # one import of torch in the fork server, not one per process per trial
    context.set_forkserver_preload(["bench.scale_launchers", "nvrx_seghealth._launcher.backend"])
    port_out = context.Queue()
    server = context.Process(target=_serve, args=(port_out,), daemon=True)
    server.start()
    processes = processes_for(size)
    with tempfile.TemporaryDirectory() as directory:
        job = Job(
            design=design,
            port=port_out.get(timeout=120),
            run_id=f"{design}-{size}-{number}",
            size=size,
            min_nodes=size - UNIT if marked else size,
            processes=processes,
            directory=directory,
            give_up=give_up,
            rounds=2 if marked else 1,
            nvrx_dir=str(nvrx_dir),
        )
        ready = context.Barrier(processes + 1)
        starts = [context.Value("d", 0.0) for _ in range(job.rounds)]
        out = context.Queue()
        workers = [
            context.Process(target=run_share, args=(job, share, ready, starts, out))
            for share in range(processes)
        ]
        for worker in workers:
            worker.start()
        try:
            began = time.monotonic()
            ready.wait(timeout=READY_TIMEOUT)
            print(
                f"{design} N={size}: {time.monotonic() - began:.0f} s to connect and build",
                file=sys.stderr,
                flush=True,
            )
            results = []
            for number_of_round in range(job.rounds):
                if number_of_round == 1:
                    from nvrx_seghealth import publish_decision

                    unit = size // UNIT // 2
                    publish_decision(directory, str(ARRAY_JOB), str(unit), "marked by the bench\n")
                expected = size - (UNIT if number_of_round == 1 else 0)
                before = _cpu(server.pid or 0)
                start = time.monotonic() + 0.5
                starts[number_of_round].value = start
                rounds = []
                for _ in workers:
                    wait = max(5.0, start + give_up + 30 - time.monotonic())
                    try:
                        rounds.append(out.get(timeout=wait))
                    except queue.Empty:
                        break
                used = _cpu(server.pid or 0) - before
                results.append(_outcome(rounds, start, expected, used, processes))
                if results[-1].seconds is None:
                    break
            return results
        finally:
            for process in [*workers, server]:
                if process.is_alive():
                    process.kill()
                process.join()


_numbers = itertools.count()
Samples = dict[str, list[Trial]]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _seconds(trials: list[Trial]) -> float | None:
    """The median time of the trials that formed a world; ``None`` if none did."""
    return _median([t.seconds for t in trials if t.seconds is not None])


def _each(trials: list[Trial]) -> str:
    return ", ".join("never" if t.seconds is None else f"{t.seconds:.2f}" for t in trials)


def _by_name(trials: list[Trial], size: int) -> str:
    calls: Counter[str] = Counter()
    for t in trials:
        calls.update(t.calls)
    total = size * len(trials)
    return " ".join(f"{name} {count / total:.1f}" for name, count in calls.most_common())


HEAD = (
    "| N | design | time to first world, s: median (each rep) | / barrier | / nvrx "
    "| store ops / launcher | bytes / launcher | server CPU s | launchers' CPU s "
    "| ops / launcher by name | note |\n|---|---|---|---|---|---|---|---|---|---|---|"
)


def _ratio(value: float | None, base: float | None) -> str:
    ratio = ratio_or_none(value, base)
    return "n/a" if ratio is None else f"{ratio:.2f}"


def size_lines(size: int, samples: Samples) -> list[str]:
    """The table's lines of one size."""
    barrier, nvrx = _seconds(samples.get("barrier", [])), _seconds(samples.get("nvrx", []))
    lines = []
    for design, trials in samples.items():
        seconds = _seconds(trials)
        shown = "never" if seconds is None else f"{seconds:.2f}"
        notes = "; ".join(sorted({t.note for t in trials if t.note}))
        lines.append(
            f"| {size:,} | {design} | {shown} ({_each(trials)}) | {_ratio(seconds, barrier)} "
            f"| {_ratio(seconds, nvrx)} | {_median([t.ops for t in trials]):.1f} "
            f"| {_median([t.bytes for t in trials]):,.0f} "
            f"| {_median([t.server_cpu for t in trials]):.2f} "
            f"| {_median([t.client_cpu for t in trials]):.1f} | {_by_name(trials, size)} "
            f"| {notes} |"
        )
    return lines


def sweep(
    sizes: list[int], designs: list[str], repetitions: int, give_up: float, nvrx_dir: Path
) -> dict[int, Samples]:
    """Every design at every size, interleaved; prints each size's lines as it ends."""
    print(HEAD, flush=True)
    found: dict[int, Samples] = {}
    dropped: set[str] = set()
    for size in sizes:

        def one(design: str, size: int = size) -> Trial:
            return trial(design, size, give_up, next(_numbers), nvrx_dir=nvrx_dir)[0]

        variants = {d: (lambda d=d: one(d)) for d in designs if d not in dropped}
        found[size] = interleaved_samples(variants, repetitions)
        print("\n".join(size_lines(size, found[size])), flush=True)
        for design in C10D_BASED:
            if design in found[size] and _seconds(found[size][design]) is None:
                dropped.add(design)  # it livelocked here: larger sizes only take longer
                print(f"{design}: no world at N={size:,}; not tried at larger sizes", flush=True)
    return found


def flat_ops(found: dict[int, Samples]) -> Row:
    """barrier's store ops per launcher at the largest size over the smallest."""
    ops = {  # sizes where it formed a world: a round that never did counts until give-up
        size: _median([t.ops for t in samples["barrier"] if t.seconds is not None])
        for size, samples in found.items()
        if _seconds(samples.get("barrier", [])) is not None
    }
    if not ops:
        return Row("barrier: store ops per launcher (no world formed)", None, "-", None, "")
    small, large = min(ops), max(ops)
    ratio = ratio_or_none(ops[large], ops[small])
    each = ", ".join(f"N={size:,}: {value:.2f}" for size, value in sorted(ops.items()) if value)
    return Row(
        f"barrier: store ops per launcher, N={large:,} / N={small:,} (no growth with N)",
        ratio,
        f"<= {FLAT_OPS:g}",
        None if ratio is None else ratio <= FLAT_OPS,
        each,
    )


def marked_rows(size: int, repetitions: int, give_up: float) -> list[Row]:
    """seghealth-barrier: the world re-formed without one marked unit, ``size`` launchers."""
    runs = [
        trial("seghealth-barrier", size, give_up, next(_numbers), marked=True)
        for _ in range(repetitions)
    ]
    again = [run[1] for run in runs if len(run) == 2]
    seconds = _seconds(again)
    each = ", ".join(
        f"first {run[0].seconds if run[0].seconds is None else round(run[0].seconds, 2)} s, "
        f"again {'never' if len(run) < 2 or run[1].seconds is None else round(run[1].seconds, 2)}"
        f" s ({run[-1].note})"
        for run in runs
    )
    ops = _median([t.ops for t in again])
    return [
        Row(
            f"seghealth-barrier, N={size:,}, one unit marked between rounds: seconds to the "
            "world without it",
            seconds,
            "-",
            None,
            f"{each}; store ops / launcher in that round "
            f"{'n/a' if ops is None else f'{ops:.1f}'} ({_by_name(again, size)})",
        )
    ]


def _ratio_row(found: Samples, size: int, top: str, bottom: str) -> Row | None:
    if top not in found or bottom not in found:
        return None
    a, b = _seconds(found[top]), _seconds(found[bottom])
    return Row(
        f"time to first world, N={size:,}: {top} / {bottom}",
        ratio_or_none(a, b),
        "-",
        None,
        f"{top} {_each(found[top])} s; {bottom} {_each(found[bottom])} s",
    )


def measure(
    sizes: list[int],
    designs: list[str],
    repetitions: int,
    give_up: float,
    marked_size: int,
    nvrx_dir: Path = nvrx_stubs.DEFAULT_DIR,
) -> list[Row]:
    """The sweep, the marked unit and the check, as the table's rows."""
    designs = list(designs)
    if "nvrx" in designs:
        why = nvrx_stubs.obtain(nvrx_dir)
        if why is not None:
            print(f"nvrx: not measured: NVRx could not be obtained ({why})", flush=True)
            designs.remove("nvrx")
    found = sweep(sizes, designs, repetitions, give_up, nvrx_dir)
    made: list[Row] = []
    pairs = (
        ("barrier", "c10d"),
        ("barrier", "nvrx"),
        ("seghealth-barrier", "barrier"),
        (f"seghealth-barrier{NO_HANDOFF}", "barrier"),
    )
    for size, samples in found.items():
        for top, bottom in (*pairs, ("seghealth-c10d", "c10d")):
            row = _ratio_row(samples, size, top, bottom)
            if row is not None:
                made.append(row)
    if "barrier" in designs:
        made.append(flat_ops(found))
    if marked_size:
        made.extend(marked_rows(marked_size, repetitions, give_up))
    return made


def rows(quick: bool) -> list[Row]:
    """Row 18 of ``python -m bench``: small sizes (the full sweep: ``--sizes`` here)."""
    sizes = list(QUICK_SIZES if quick else FULL_SIZES)
    return measure(sizes, list(DESIGNS), 1 if quick else 2, 120.0, max(sizes))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, FULL_SIZES)))
    parser.add_argument("--designs", default=",".join(DESIGNS))
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--give-up", type=float, default=120.0)
    parser.add_argument(
        "--marked-size", type=int, default=-1, help="0: none; default: the largest size"
    )
    parser.add_argument("--nvrx-dir", type=Path, default=nvrx_stubs.DEFAULT_DIR)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    designs = [d for d in args.designs.split(",") if d]
    unknown = set(designs) - set(DESIGNS)
    if unknown:
        parser.error(f"unknown designs {sorted(unknown)}; choose from {','.join(DESIGNS)}")
    marked = max(sizes) if args.marked_size < 0 else args.marked_size
    started = time.monotonic()
    made = measure(sizes, designs, args.repetitions, args.give_up, marked, args.nvrx_dir)
    print(
        f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} after "
        f"{time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    print(table(made))


if __name__ == "__main__":
    main()
