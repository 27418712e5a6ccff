"""A report of a simulated job that a person can read at a glance."""

from __future__ import annotations

import dataclasses
import json
import signal
from collections.abc import Sequence

from .._errors import ExclusionReason
from . import logtokens
from .logtokens import Exclusion
from .outcome import JobResult, LauncherOutcome, Round

__all__ = [
    "describe_exit",
    "render_decisions",
    "render_report",
    "render_table",
    "render_timeline",
]

#: torch's own errors a launcher may end with, by exception class name (a stable token).
_TORCH_ERRORS = (
    ("RendezvousClosedError", "the rendezvous was closed"),
    ("RendezvousTimeoutError", "the rendezvous join timed out"),
)


def _excluded(exclusion: Exclusion) -> str:
    if exclusion.reason is ExclusionReason.DECISION_FILE:
        return "excluded by its decision file"
    if exclusion.after_joining:
        return "left after joining: its task was marked"
    return "refused to join: its task was marked"


def _why(log: str) -> str | None:
    """Why a launcher ended, from the tokens of its log (:mod:`.logtokens`)."""
    exclusion = logtokens.exclusion(log)
    if exclusion is not None:
        return _excluded(exclusion)
    for name, reason in _TORCH_ERRORS:
        if name in log:
            return reason
    return "its node failed" if logtokens.broke_its_node(log) else None


def describe_exit(outcome: LauncherOutcome) -> str:
    """How and why one launcher ended, in a few words."""
    if not outcome.started:
        return "never started"
    code = outcome.returncode
    if code == 0:
        return "exit 0"
    if code is None:
        return "still running"
    if outcome.killed_by_srun:
        return f"terminated by srun (exit {code})"
    how = f"exit {code}" if code > 0 else f"killed by {signal.Signals(-code).name}"
    why = _why(outcome.log())
    return how if why is None else f"{how}, {why}"


def _unit_line(result: JobResult, unit: int) -> str:
    final = result.final_round
    joined = [r.number for r in result.rounds if unit in r.units]
    if final is not None and unit in final.units:
        status = f"in the final world (round {final.number})"
    elif unit in result.decisions:
        status = f"EXCLUDED after round {joined[-1]}" if joined else "EXCLUDED, never joined"
    elif joined:
        status = f"left after round {joined[-1]}"
    else:
        status = "not in any world"
    exits = "; ".join(f"proc {o.procid}: {describe_exit(o)}" for o in result.unit_launchers(unit))
    line = f"  {result.spec.unit_name(unit):<7} {status}\n            {exits}"
    decision = result.decisions.get(unit)
    if decision is not None and decision.exists():
        text = decision.read_text(errors="replace").strip().splitlines()
        line += (
            f"\n            decision {decision} ({decision.stat().st_size} bytes): "
            f"{text[0][:80] if text else ''}"
        )
    return line


def _round_state(round_: Round) -> str:
    if round_.completed:
        return "completed"
    if round_.formed:
        return "formed, did not finish"
    return f"did not form ({len(round_.workers)} of {round_.world_size} workers started)"


def render_report(result: JobResult) -> str:
    """The whole report: units, rounds and timing (where the files are: ``result.paths``)."""
    spec = result.spec
    low, high = spec.nnodes
    shape = (
        f"job array {spec.array_job_id}: {spec.tasks} tasks x {spec.nodes_per_task} nodes"
        if spec.array
        else f"regular job {spec.array_job_id}: {spec.nodes_per_task} nodes"
    )
    lines = [
        f"Simulated {shape}, --nnodes={low}:{high}, rendezvous backend {spec.backend}",
        "",
        "Allocation units",
        *(_unit_line(result, unit) for unit in spec.units),
        "",
        "Rendezvous rounds that started workers",
    ]
    for round_ in result.rounds:
        units = ", ".join(spec.unit_name(u) for u in round_.units)
        lines.append(
            f"  round {round_.number}: world size {round_.world_size} from {units}; "
            f"{_round_state(round_)}"
        )
    if not result.rounds:
        lines.append("  none")
    unknown = result.workers_of_unknown_round
    if unknown:
        lines.append(
            f"  round unknown: {len(unknown)} worker(s) could not read torch's rendezvous state"
        )
    if result.faults:
        lines += ["", "Faults injected"]
    for fault in result.faults:
        recovery = result.recovery(fault)
        hit = "before any world" if fault.round is None else f"in round {fault.round}"
        lines.append(
            f"  {fault.at - result.started_at:.1f} s: {fault.what} ({hit}); next world "
            + ("never formed" if recovery is None else f"formed {recovery:.1f} s later")
        )
    healthy = result.time_to_healthy_world
    lines += [
        "",
        "Time to a healthy world: "
        + ("never" if healthy is None else f"{healthy:.1f} s")
        + f" (job ended after {result.duration:.1f} s"
        + (", stopped by the harness at its time limit)" if result.timed_out else ")"),
    ]
    return "\n".join(lines)


def render_table(
    rows: Sequence[Sequence[str]], left: Sequence[int] = (0,), indent: str = "  "
) -> str:
    """``rows`` (the first is the header) in aligned columns: the columns numbered in
    ``left`` (negative: from the end) left-aligned, the others right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lefts = {i % len(widths) for i in left}

    def cell(i: int, text: str) -> str:
        return text.ljust(widths[i]) if i in lefts else text.rjust(widths[i])

    return "\n".join(
        (indent + "  ".join(cell(i, text) for i, text in enumerate(row))).rstrip() for row in rows
    )


def render_timeline(result: JobResult) -> str:
    """One line per launcher, in seconds from the job's launch.

    Columns: when it started; for each round, when its worker started in it (its
    node trained in that round, from the worker records; ``-``: not in it; a last
    ``round unknown`` column for workers that could not read their round); when it
    was excluded and by what (from its recorded ``nvrx_seghealth.excluded`` event, a
    column shown when a segment-health job recorded telemetry); when and how it ended.
    """
    numbers: list[int | None] = [r.number for r in result.rounds]
    if result.workers_of_unknown_round:
        numbers.append(None)
    spec = result.spec
    telemetry = spec.record_telemetry and spec.backend == "segment-health"
    header = ["launcher", "started", *(f"round {'unknown' if n is None else n}" for n in numbers)]
    header += ["excluded"] * telemetry + ["ended", "how"]
    rows = [header]

    def at(when: float | None) -> str:
        return "-" if when is None else f"{when - result.started_at:.1f}"

    for label, outcome in result.launchers.items():
        joined: dict[int | None, float] = {}
        for worker in result.workers:
            if worker.launcher == label:
                joined[worker.round] = min(
                    joined.get(worker.round, worker.started_at), worker.started_at
                )
        row = [label, at(outcome.started_at) if outcome.started else "never"]
        row += [at(joined.get(n)) for n in numbers]
        if telemetry:
            exclusion = next((e for e in outcome.events() if e.decision == "excluded"), None)
            row.append(
                "-" if exclusion is None else f"{at(exclusion.time)} ({exclusion.fields['by']})"
            )
        row += [at(outcome.ended_at), describe_exit(outcome)]
        rows.append(row)
    return render_table(rows, left=(0, -1))


def render_decisions(result: JobResult) -> str:
    """The segment-health decisions the launchers recorded as TorchElastic events:
    how many of each, and the first exclusion as it was recorded."""
    events = [e for o in result.launchers.values() for e in o.events() if e.ours]
    if not events:
        return "No segment-health event was recorded."
    counts: dict[str, int] = {}
    for event in events:
        counts[event.decision] = counts.get(event.decision, 0) + 1
    lines = [
        f"Segment-health decisions recorded as TorchElastic events ({len(events)}): "
        + ", ".join(f"{name} {count}" for name, count in counts.items())
    ]
    exclusion = next((e for e in events if e.decision == "excluded"), None)
    if exclusion is not None:
        recorded = json.dumps(dataclasses.asdict(exclusion))
        lines.append(f"The first exclusion, as recorded: {recorded}")
    return "\n".join(lines)
