"""Where the launcher's log lines go: to the application's logging when it configured any,
else to stderr through the package's own handler.

Each case is a fresh interpreter in which torch's registry builds the real backend; the
record looked at is the install line of :mod:`nvrx_seghealth._launcher.check` (INFO).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from harness.ports import free_port
from harness.slurmenv import slurm_env
from nvrx_seghealth._logfmt import parse_fields

INSTALLER = "nvrx_seghealth._launcher.check"

_LAUNCHER = textwrap.dedent(
    """
    import json, logging, sys
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append([record.name, record.levelname, record.getMessage()])

    if sys.argv[1] != "unconfigured":  # the application's logging, set up before torch
        configured = logging.getLogger(None if sys.argv[1] == "root" else sys.argv[1])
        configured.addHandler(Keep())
        configured.setLevel(logging.INFO)
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

    handler = get_rendezvous_handler(RendezvousParameters(
        "segment-health", sys.argv[2], "run", 1, 1, is_host="true",
        segment_health_check_dir=sys.argv[3]))
    handler.shutdown()
    print(json.dumps(seen))
    """
)


def launch(configured: str, directory: str) -> tuple[list[list[str]], str]:
    """Build the backend in a fresh interpreter; the records the application's handler
    kept, and stderr."""
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, configured, f"127.0.0.1:{free_port()}", directory],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **slurm_env(task=4)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def installs(records: list[list[str]]) -> list[dict[str, str]]:
    """The fields of each install line among ``records`` (name, level, message)."""
    return [
        parse_fields(message)
        for name, level, message in records
        if name == INSTALLER and level == "INFO" and "job_id" in parse_fields(message)
    ]


@pytest.mark.parametrize("configured", ["nvrx_seghealth", "root"])
def test_an_application_that_configured_logging_gets_the_launchers_records(shc, configured):
    records, stderr = launch(configured, shc)
    assert installs(records) == [{"directory": shc, "job_id": "1000", "task_id": "4"}], records
    assert INSTALLER not in stderr  # the package added no handler of its own


def test_without_logging_configured_the_install_line_reaches_stderr(shc):
    records, stderr = launch("unconfigured", shc)
    assert records == []
    lines = [line.split(": ", 1) for line in stderr.splitlines() if f"] {INSTALLER}: " in line]
    assert [parse_fields(message) for _, message in lines] == [
        {"directory": shc, "job_id": "1000", "task_id": "4"}
    ], stderr
