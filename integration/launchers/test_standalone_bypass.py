"""When torch replaces the ``segment-health`` backend, the launcher says the check is off.

torchrun's ``--standalone`` (or ``PET_STANDALONE=1``) and accelerate's fallback to
standalone when its port is in use make torch rendezvous with ``c10d``: the backend's
creator is never called and the marked task trains. Each case runs the marked task
alone, with a real launcher, and expects the training to happen (torch's behaviour, which
the package cannot change) and one WARNING with ``check=off`` and the cause's token,
whichever way the launcher's options are written (flags before values, accelerate's
hyphens, torchrun's abbreviations, ``python -m torch.distributed.run``), and through torch's
deprecated ``python -m torch.distributed.launch`` and ``python -m
accelerate.commands.accelerate_cli launch``. The
control cases say nothing of the kind: the same task without standalone (excluded), the
options in the training script's own arguments, and torchrun ending before any rendezvous
(``--help``, a usage error, a failure while it sets up).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness.jobs.launcherjob import (
    JOB_TIMEOUT,
    MARKED,
    TRAIN,
    launcher_env,
    require_launcher,
    slurm_task,
)
from nvrx_seghealth._logfmt import parse_fields

SINGLE_NODE = ["--nnodes=1", "--nproc-per-node=1"]


def launch(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run one launcher of the marked task to its end."""
    return subprocess.run(
        argv,
        check=False,
        cwd=cwd,
        env=launcher_env(**slurm_task(MARKED), **env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
    )


def check_off_causes(output: str) -> list[str]:
    """The ``cause`` of every line that says the check is off."""
    return [
        fields["cause"]
        for fields in map(parse_fields, output.splitlines())
        if fields.get("check") == "off"
    ]


def trained(output: str, world: int = 1) -> bool:
    """Whether worker 0 of a world of ``world`` finished its step."""
    return f"worker 0 of {world}: sum of ranks {sum(range(world))}" in output


@pytest.mark.parametrize("route", ["command-line", "environment"])
def test_torchrun_standalone_says_the_check_is_off(tmp_path, decisions, route) -> None:
    conf = f"segment_health_check_dir={decisions}"
    if route == "command-line":
        argv = ["--standalone", "--rdzv-backend=segment-health", f"--rdzv-conf={conf}"]
        env = {}
    else:  # torchrun's defaults for the options it is not given
        argv = []
        env = {"PET_STANDALONE": "1", "PET_RDZV_BACKEND": "segment-health", "PET_RDZV_CONF": conf}
    done = launch(["torchrun", *SINGLE_NODE, *argv, str(TRAIN)], tmp_path, **env)
    output = done.stdout + done.stderr
    assert (done.returncode, trained(output)) == (0, True), output[-3000:]
    assert check_off_causes(output) == ["standalone"], output[-3000:]


@pytest.mark.parametrize("use_env", ["--use-env", "--use_env"])
def test_torchs_deprecated_launch_with_standalone_says_the_check_is_off(
    tmp_path, decisions, use_env
) -> None:
    """``--use-env``, a flag of torch.distributed.launch alone, comes before the backend: a
    scan took it to have a value and never saw ``--rdzv-backend``."""
    argv = [
        *(sys.executable, "-m", "torch.distributed.launch", use_env),
        *("--rdzv-backend=segment-health", "--standalone", *SINGLE_NODE),
        *(f"--rdzv-conf=segment_health_check_dir={decisions}", str(TRAIN)),
    ]
    done = launch(argv, tmp_path)
    output = done.stdout + done.stderr
    assert (done.returncode, trained(output)) == (0, True), output[-3000:]
    assert check_off_causes(output) == ["standalone"], output[-3000:]


def test_without_standalone_the_check_runs_and_nothing_says_it_is_off(tmp_path, decisions) -> None:
    done = launch(
        [
            "torchrun",
            *SINGLE_NODE,
            "--rdzv-backend=segment-health",
            "--rdzv-endpoint=127.0.0.1:0",
            f"--rdzv-conf=segment_health_check_dir={decisions}",
            str(TRAIN),
        ],
        tmp_path,
    )
    output = done.stdout + done.stderr
    assert (done.returncode, trained(output)) == (1, False), output[-3000:]
    assert "reason=decision-file" in output, output[-3000:]
    assert check_off_causes(output) == [], output[-3000:]


def torchrun(*argv: str) -> list[str]:
    """A torchrun command line for the marked task alone, then ``argv``."""
    return ["torchrun", *SINGLE_NODE, "--rdzv-endpoint=127.0.0.1:0", *argv]


def test_the_training_scripts_own_standalone_leaves_the_check_on(tmp_path, decisions) -> None:
    conf = f"--rdzv-conf=segment_health_check_dir={decisions}"
    argv = torchrun("--rdzv-backend=segment-health", conf, str(TRAIN), "--standalone")
    done = launch(argv, tmp_path)
    output = done.stdout + done.stderr
    assert (done.returncode, trained(output)) == (1, False), output[-3000:]
    assert "reason=decision-file" in output, output[-3000:]
    assert check_off_causes(output) == [], output[-3000:]


def test_the_training_scripts_own_backend_is_not_asked_of_torchrun(tmp_path) -> None:
    argv = torchrun("--rdzv-backend=c10d", str(TRAIN), "--rdzv-backend=segment-health")
    done = launch(argv, tmp_path)
    output = done.stdout + done.stderr
    assert (done.returncode, trained(output)) == (0, True), output[-3000:]
    assert check_off_causes(output) == [], output[-3000:]


@pytest.mark.parametrize(
    ("options", "returncode"),
    [
        (["--help"], 0),
        (["--standalone", "--help"], 0),
        (["--bogus-option"], 2),
        (["--nproc-per-node=gpu"], 1),  # no CUDA here: torchrun fails before its rendezvous
    ],
)
def test_torchrun_ending_before_any_rendezvous_says_nothing_of_the_check(
    tmp_path, decisions, options, returncode
) -> None:
    conf = f"--rdzv-conf=segment_health_check_dir={decisions}"
    argv = ["torchrun", "--nnodes=1", "--rdzv-backend=segment-health", conf, *options]
    done = launch([*argv, str(TRAIN)], tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == returncode, output[-3000:]
    assert check_off_causes(output) == [], output[-3000:]


ACCELERATE_CLI = [sys.executable, "-m", "accelerate.commands.accelerate_cli"]


@pytest.mark.parametrize(
    ("program", "shape"),
    [
        (["accelerate"], "equals"),  # every option one token
        (["accelerate"], "as-in-the-review"),  # each value its own token, after --multi_gpu
        (["accelerate"], "hyphens"),  # accelerate's other spelling, more flags and values
        (ACCELERATE_CLI, "as-in-the-review"),  # its path is argv[0], then launch
    ],
    ids=["equals", "as-in-the-review", "hyphens", "python-m-accelerate-cli"],
)
def test_accelerates_standalone_fallback_says_the_check_was_off(
    tmp_path, decisions, program, shape
) -> None:
    """accelerate's own parser reads its options: a scan took the flag ``--multi_gpu`` to
    have a value, read the next value as the training script, and said nothing; with
    ``python -m``, the word ``launch`` was taken for the script."""
    require_launcher("accelerate")
    conf = f"segment_health_check_dir={decisions}"
    with socket.socket() as taken:  # accelerate's port check finds it in use
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        options = {
            "equals": [
                "--multi_gpu",
                "--num_machines=1",
                "--num_processes=2",  # --multi_gpu wants two
                f"--main_process_port={port}",
                "--mixed_precision=no",
                "--dynamo_backend=no",
                "--rdzv_backend=segment-health",
                f"--rdzv_conf={conf}",
            ],
            "as-in-the-review": [
                *("--multi_gpu", "--num_machines", "1", "--num_processes", "2"),
                *("--main_process_port", port, "--mixed_precision", "no"),
                *("--dynamo_backend", "no", "--rdzv_backend", "segment-health"),
                *("--rdzv_conf", conf),
            ],
            "hyphens": [
                *("--multi-gpu", "--num-cpu-threads-per-process", "1", "--mixed-precision"),
                *("no", "--dynamo-backend", "no", "--num-machines", "1", "--num-processes"),
                *("2", "--main-process-port", port, "--rdzv-backend", "segment-health"),
                *("--rdzv-conf", conf),
            ],
        }[shape]
        done = launch(
            [*program, "launch", *options, str(TRAIN)],
            tmp_path,
            HF_HOME=str(tmp_path / "hf"),
        )
    output = done.stdout + done.stderr
    assert (done.returncode, trained(output, world=2)) == (0, True), output[-3000:]
    assert check_off_causes(output) == ["launcher-fallback"], output[-3000:]


@pytest.mark.parametrize(
    "program",
    [["torchrun"], [sys.executable, "-m", "torch.distributed.run"]],
    ids=["torchrun", "python-m"],
)
def test_torchruns_abbreviations_are_read_as_torchrun_reads_them(
    tmp_path, decisions, program
) -> None:
    """torchrun takes ``--stand`` for ``--standalone`` and ``--rdzv-back`` for
    ``--rdzv-backend``: its own parser reads them, where a scan did not."""
    argv = [
        *program,
        *("--nnodes", "1", "--nproc-per-node", "1", "--max-restarts", "0", "--stand"),
        *("--rdzv-back", "segment-health", "--rdzv-conf", f"segment_health_check_dir={decisions}"),
    ]
    done = launch([*argv, str(TRAIN)], tmp_path)
    output = done.stdout + done.stderr
    assert (done.returncode, trained(output)) == (0, True), output[-3000:]
    assert check_off_causes(output) == ["standalone"], output[-3000:]
