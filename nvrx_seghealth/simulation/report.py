"""A report of a simulated job that a person can read at a glance.

Standard library only.
"""

from __future__ import annotations

import re

from .outcome import JobResult, LauncherOutcome, Round

__all__ = ["describe_exit", "render_report"]

# How the segment-health wrapper reports an exclusion (nvrx_seghealth.handler).
_EXIT_REASONS = (
    (r"is excluded: decision file", "excluded by its decision file"),
    (r"is excluded \(before joining\)", "refused to join: its task was marked"),
    (r"is excluded \(after joining\)", "left after joining: its task was marked"),
    (r"RendezvousClosedError", "the rendezvous was closed"),
    (r"RendezvousTimeoutError", "the rendezvous join timed out"),
)


def describe_exit(outcome: LauncherOutcome) -> str:
    """How and why one launcher ended, in a few words."""
    if not outcome.started:
        return "never started"
    if outcome.returncode == 0:
        return "exit 0"
    if outcome.killed_by_srun:
        return f"terminated by srun (exit {outcome.returncode})"
    text = outcome.log()
    for pattern, reason in _EXIT_REASONS:
        if re.search(pattern, text):
            return f"exit {outcome.returncode}, {reason}"
    return f"exit {outcome.returncode}"


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
