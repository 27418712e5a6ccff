"""``nvrx-seghealth doctor``: pre-flight of one launcher's segment health check.

Run it where a launcher would run: inside the job step, one per node. The findings come
from :func:`~.._decision.preflight.preflight`: the directory, the Slurm identity, the
decision file, the launch shape. With ``--etcd``, the etcd-v3 cluster's come from
:mod:`.doctor_etcd`. An unusable ``--dir`` is one ``FAIL``, and the other findings follow.
The command adds the type of the directory's filesystem: a node's own (``tmpfs``, a local
disk) is not shared, so a producer on another node would never be seen. The type comes
from ``/proc/self/mountinfo``, by the device a bounded ``stat`` gives: no unbounded call.

This command only prints: one line per finding (``ok``, ``info``, ``hint``, ``warn`` or
``FAIL``), then a verdict, or one JSON object.
Exit codes: :data:`~.output.EXIT_STATUSES` (``doctor``). Standard library plus PyYAML.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from .._decision.boundedstat import stat_within
from .._decision.decision_file import DEFAULT_STAT_TIMEOUT
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
    any of them could exclude any unit. Warns when the directory is in the node's
    memory (tmpfs, ramfs), and hints on a local disk: a producer on another node
    would write elsewhere.
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


#: Where the kernel lists this process's mounts, each with its device and type.
MOUNTINFO = "/proc/self/mountinfo"
#: Filesystems in a node's memory: every node has its own.
_NODE_MEMORY = frozenset({"tmpfs", "ramfs"})
#: Filesystems on a node's own disk: another node mounts them only through an export.
_LOCAL_DISK = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "vfat", "overlay"})


def register(subparsers: Any) -> None:
    """Add the ``doctor`` subcommand."""
    add_command(subparsers, "doctor", SUMMARY, DESCRIPTION, EXAMPLES, OPTIONS, doctor_command)


def filesystem_type(device: int, mountinfo: str) -> str | None:
    """The type of the mounted filesystem whose device number is ``device`` (a
    ``st_dev``), from the text of :data:`MOUNTINFO`; ``None`` when none is listed."""
    wanted = f"{os.major(device)}:{os.minor(device)}"
    for line in mountinfo.splitlines():
        fields, separator, after = line.partition(" - ")  # optional fields come before it
        if separator and fields.split()[2:3] == [wanted] and after.split():
            return after.split()[0]
    return None


def _filesystem_finding(directory: str) -> Finding | None:
    """Whether ``directory``'s filesystem is shared between nodes, as far as its type
    tells; ``None`` when it cannot be told (the pre-flight says why)."""
    try:
        device = stat_within(directory, DEFAULT_STAT_TIMEOUT).st_dev
        with open(MOUNTINFO, encoding="utf-8", errors="replace") as file:
            kind = filesystem_type(device, file.read())
    except (OSError, ValueError):  # HelperTimeout too
        return None
    if kind in _NODE_MEMORY:
        return Finding(
            Level.WARN,
            f"decision directory {directory} is on {kind}, in this node's memory: a "
            "producer or mark on another node writes its own copy, which no launcher here "
            "reads; put the directory on storage that every node mounts",
        )
    if kind in _LOCAL_DISK:
        return Finding(
            Level.HINT,
            f"decision directory {directory} is on a local {kind} filesystem: fine when "
            "the producer and every launcher run on this node; else put it on storage "
            "that every node mounts (NFS, Lustre, GPFS...)",
        )
    if kind is None:
        return None
    return Finding(Level.OK, f"decision directory {directory} is on a {kind} filesystem")


def _findings(args: argparse.Namespace) -> list[Finding]:
    """Every finding, in order: the directory setting's, the pre-flight's, the
    filesystem's, etcd's."""
    environ = dict(os.environ)
    findings: list[Finding] = []
    directory = None
    try:
        directory = directory_of(args)
    except ConfigurationError as error:
        findings.append(Finding(Level.FAIL, str(error)))
    findings += preflight(environ, directory, standalone=standalone_asked([], environ))
    shared = None if directory is None else _filesystem_finding(directory)
    findings += [] if shared is None else [shared]
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
