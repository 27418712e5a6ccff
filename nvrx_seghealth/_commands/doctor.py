"""``nvrx-seghealth doctor``: pre-flight of one launcher's segment health check.

Run it where a launcher would run: inside the job step, one per node. The findings come
from :func:`~.._decision.preflight.preflight`: the directory, the Slurm identity, the
decision file, the launch shape. With ``--etcd``, the etcd-v3 cluster's come from
:mod:`.doctor_etcd`. An unusable ``--dir`` is one ``FAIL``, and the other findings follow.

This command only prints: one line per finding (``ok``, ``info``, ``hint``, ``warn`` or
``FAIL``), then a verdict, or one JSON object.
Exit codes: :data:`~.output.EXIT_STATUSES` (``doctor``). Standard library plus PyYAML.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from .._decision.preflight import Finding, Level, preflight
from .._errors import ConfigurationError
from .._launcher.bypass import standalone_asked
from .arguments import DIRECTORY, JSON, add_command, directory_of, option
from .doctor_etcd import etcd_findings
from .output import EXIT_FAILURE, EXIT_OK, paint, print_json

__all__ = ["doctor_command", "register"]

_LEVEL_COLOURS = {
    Level.OK: "green",
    Level.INFO: None,
    Level.HINT: "dim",
    Level.WARN: "yellow",
    Level.FAIL: "red",
}

SUMMARY = "pre-flight check of a launcher's segment health setup"
DESCRIPTION = """
    Check what one launcher needs: an absolute decision directory that exists and
    answers a stat quickly, a valid Slurm identity, whether this launcher is its
    unit's process 0, the decision file it will consult, and the launch shape
    (one launcher per node; --kill-on-bad-exit=1; --no-requeue for arrays).
    Run it the way the launchers run, inside the job step. Warns when users other
    than the directory's owner can write in it (or above it) without the sticky bit:
    any of them could exclude any unit.
    """
EXAMPLES = """
    srun --ntasks-per-node=1 nvrx-seghealth doctor --dir /shared/job/segment-health-check/123
    nvrx-seghealth doctor --json        # directory from $NVRX_SEGMENT_HEALTH_CHECK_DIR
    nvrx-seghealth doctor --dir /shared/job/segment-health-check/123 \\
        --etcd etcd1:2379,etcd2:2379,etcd3:2379
    """
OPTIONS = (
    DIRECTORY,
    option(
        "--etcd",
        metavar="ENDPOINTS",
        help="also check the etcd-v3 cluster of the launchers' --rdzv-endpoint "
        "(host:port, comma-separated: every member)",
    ),
    option(
        "--etcd-conf",
        metavar="KEY=VALUE,...",
        default="",
        help="the launchers' --rdzv-conf keys for etcd (protocol, ca_cert, ssl_cert, "
        "ssl_cert_key, user, password_file, read_timeout)",
    ),
    JSON,
)


def register(subparsers: Any) -> None:
    """Add the ``doctor`` subcommand."""
    add_command(subparsers, "doctor", SUMMARY, DESCRIPTION, EXAMPLES, OPTIONS, doctor_command)


def _findings(args: argparse.Namespace) -> list[Finding]:
    """Every finding, in order: the directory setting's, the pre-flight's, etcd's."""
    environ = dict(os.environ)
    findings: list[Finding] = []
    directory = None
    try:
        directory = directory_of(args)
    except ConfigurationError as error:
        findings.append(Finding(Level.FAIL, str(error)))
    findings += preflight(environ, directory, standalone=standalone_asked([], environ))
    if args.etcd is not None:
        findings += etcd_findings(args.etcd, args.etcd_conf)
    return findings


def doctor_command(args: argparse.Namespace) -> int:
    """Print the pre-flight findings; exit 1 when any is a ``FAIL``, else 0."""
    findings = _findings(args)
    failed = any(finding.level is Level.FAIL for finding in findings)
    if args.json:
        findings_json = [{"level": f.level.value, "message": f.message} for f in findings]
        print_json({"ok": not failed, "findings": findings_json})
        return EXIT_FAILURE if failed else EXIT_OK
    for finding in findings:
        level = finding.level
        print(f"{paint(level.value.ljust(4), _LEVEL_COLOURS[level])}  {finding.message}")
    if failed:
        print(paint("problems found: see the FAIL lines", "red"))
    else:
        print(paint("no problems found", "green"))
    return EXIT_FAILURE if failed else EXIT_OK
