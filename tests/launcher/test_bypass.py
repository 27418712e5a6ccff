"""What counts as asking for the backend, or for standalone, and the exit-time warning.

The real launchers' cases (torchrun ``--standalone``, ``PET_STANDALONE``, accelerate's
fallback) are in ``integration/launchers/test_standalone_bypass.py``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from nvrx_seghealth._launcher.bypass import asked_for, standalone_asked
from nvrx_seghealth._logfmt import parse_fields

BACKEND = "segment-health"


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["--rdzv-backend", BACKEND, "train.py"], {}, True),
        (["--rdzv_backend=segment-health", "train.py"], {}, True),
        (["--rdzv-backend=c10d", "train.py"], {"PET_RDZV_BACKEND": BACKEND}, False),
        (["train.py"], {"PET_RDZV_BACKEND": BACKEND}, True),
        (["--rdzv-backend=c10d", "--rdzv-backend=segment-health"], {}, True),  # the last wins
        (["--rdzv-backend"], {}, False),
        (["train.py"], {}, False),
    ],
)
def test_the_backend_is_asked_for_on_the_command_line_or_else_in_the_environment(
    argv, environ, expected
) -> None:
    assert asked_for(argv, environ, BACKEND) is expected


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["--standalone"], {}, True),
        ([], {"PET_STANDALONE": "1"}, True),
        ([], {"PET_STANDALONE": "0"}, False),
        ([], {"PET_STANDALONE": "yes"}, False),  # torchrun itself refuses it
        ([], {}, False),
    ],
)
def test_standalone_is_the_flag_or_a_non_zero_pet_standalone(argv, environ, expected) -> None:
    assert standalone_asked(argv, environ) is expected


_LAUNCHER = textwrap.dedent(
    """
    import sys
    import torch.distributed.launcher.api  # a launcher ran
    from nvrx_seghealth._launcher import bypass
    bypass.watch("segment-health", ["--rdzv-backend=segment-health", "train.py"], {})
    if sys.argv[1] == "created":
        bypass.created()
    """
)


@pytest.mark.parametrize(("how", "causes"), [("created", []), ("bypassed", ["launcher-fallback"])])
def test_a_launcher_that_never_created_the_backend_says_so_at_exit(how, causes) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, how],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found = [
        fields["cause"]
        for fields in map(parse_fields, done.stderr.splitlines())
        if fields.get("check") == "off"
    ]
    assert found == causes, done.stderr
