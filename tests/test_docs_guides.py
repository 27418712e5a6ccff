"""The examples of the sizing and service pages, and BENCHMARKS.md's current table.

``tests/test_docs.py`` claims every block of ``docs/sizing.md`` and ``docs/services.md``
and names these tests for them:

- the sizing table's arithmetic, and its submission run through the example job script
  (``bash``, with a ``srun`` that records its command line);
- the checkpoint fragment is the tested ``examples/train_checkpointed.py``;
- the store host's unit file: its ``ExecStart`` parses and runs, ``systemd-analyze
  verify`` accepts it where systemd is installed; what a running job does when the store
  host dies is ``integration/test_store_host_lost.py``;
- the per-job producer's script runs as written, beside a fake ``sbatch`` and ``squeue``.

Substitutions are limited to what a test must change: temporary folders for the decision
root and ``/run/...``, the running environment for ``/opt/nvrx-seghealth``, a short sleep.
"""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.bench.benchcli import ROW_KEYS
from harness.bench.benchcli import build_parser as bench_parser
from harness.commands import clean_environment
from harness.docs import ROOT, commands, examples_under, section
from harness.waits import wait_until
from nvrx_seghealth._commands import build_parser

SIZING, SERVICES = "docs/sizing.md", "docs/services.md"
SCRIPT = ROOT / "examples" / "segment-health-array.sbatch"
COUNT = "Count launchers, not tasks"
STORE = "The store host as a systemd service"
PRODUCER = "One publish-drained per array job"


def _table(text: str, header: str) -> list[list[str]]:
    """The rows of the Markdown table whose header line starts with ``header``."""
    lines = text[text.index(header) :].split("\n\n", 1)[0].splitlines()[2:]
    return [[c.strip().strip("`") for c in line.strip().strip("|").split("|")] for line in lines]


def _tasks(array: str) -> int:
    """The tasks of ``--array=0-K``."""
    first, last = re.fullmatch(r"--array=(\d+)-(\d+)", array).groups()  # type: ignore[union-attr]
    return int(last) - int(first) + 1


def _script_default(name: str) -> str:
    (default,) = re.findall(rf"\${{{name}:-([^}}]*)}}", SCRIPT.read_text())
    return default


def test_sizing_table_counts_launchers() -> None:
    """Each row: launchers = tasks x 2, spares = launchers - MAX, and the tasks that train
    after one exclusion; the defaults row is the script's."""
    script = SCRIPT.read_text()
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --array=0-2\n" in script
    rows = _table(section(SIZING, COUNT), "| you want |")
    assert len(rows) == 3, rows
    for wanted, array, nnodes, launchers, spares, after in rows:
        low, high = (int(n) for n in nnodes.split(":"))
        total = _tasks(array) * 2
        assert int(launchers) == total, wanted
        assert int(spares) == max(0, total - high), wanted
        left = min(high, total - 2)  # one task excluded: its 2 launchers leave
        assert left >= low and after == f"{left // 2} tasks train", wanted
    defaults = rows[-1]
    assert defaults[1:3] == ["--array=0-2", _script_default("SEGHEALTH_NNODES")]


def _fake_srun(folder: Path) -> Path:
    """A ``srun`` that writes its command line, one argument per line, to ``srun.argv``."""
    folder.mkdir()
    srun = folder / "srun"
    srun.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {folder / "srun.argv"}\n')
    srun.chmod(0o755)
    return folder / "srun.argv"


def test_sizing_submission_runs_the_job_script(tmp_path: Path) -> None:
    """The page's exports and sbatch line, run as Slurm would run one of its tasks: the
    launcher gets the page's ``--nnodes`` and endpoint, and the training command."""
    (example,) = examples_under(SIZING, COUNT)
    *exports, submit = commands(example.text)
    assert [argv[0] for argv in exports] == ["export", "export"]
    settings = dict(argv[1].split("=", 1) for argv in exports)
    assert all(f"${{{name}" in SCRIPT.read_text() for name in settings)
    assert submit[0] == "sbatch" and ROOT / submit[2] == SCRIPT
    first_row = _table(section(SIZING, COUNT), "| you want |")[0]
    assert [submit[1], settings["SEGHEALTH_NNODES"]] == first_row[1:3]
    recorded = _fake_srun(tmp_path / "bin")
    env = clean_environment() | settings
    env |= {
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}",
        "SEGHEALTH_DECISION_ROOT": str(tmp_path / "decisions"),
        "SLURM_ARRAY_JOB_ID": "4242",
        "SLURM_ARRAY_TASK_ID": "4",
        "SLURM_JOB_ID": "4246",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "n[9-10]",
    }
    ran = subprocess.run(
        ["bash", str(SCRIPT), *submit[3:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    argv = recorded.read_text().splitlines()
    assert f"--nnodes={settings['SEGHEALTH_NNODES']}" in argv
    assert f"--rdzv-endpoint={settings['SEGHEALTH_RDZV_ENDPOINT']}" in argv
    assert "--rdzv-backend=segment-health" in argv
    assert argv[-3:] == ["train.py", "--lr", "0.1"]
    assert (tmp_path / "decisions" / "4242").is_dir()


def test_sizing_checkpoint_is_the_tested_example() -> None:
    """The fragment is a run of ``examples/train_checkpointed.py``'s lines, the loop that
    ``test_the_checkpoint_example`` (integration/docs/test_docs_runs.py) stops by SIGTERM and resumes."""
    (example,) = examples_under(SIZING, "Your training script", "python")
    fragment = [line.strip() for line in example.text.splitlines() if line.strip()]
    source = (ROOT / "examples" / "train_checkpointed.py").read_text().splitlines()
    lines = [line.strip() for line in source if line.strip()]
    start = lines.index(fragment[0])
    assert lines[start : start + len(fragment)] == fragment
    assert (
        "test_the_checkpoint_example"
        in (ROOT / "integration" / "docs" / "test_docs_runs.py").read_text()
    )


def _unit_file() -> configparser.ConfigParser:
    (example,) = examples_under(SERVICES, STORE, "ini")
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    unit.read_string(example.text)
    return unit


def test_store_host_unit_file(tmp_path: Path) -> None:
    """The unit's ``ExecStart`` is ``store-host`` with the documented defaults, its program
    runs, and ``systemd-analyze verify`` accepts the file (with this environment's
    program in ``/opt/nvrx-seghealth``'s place) where systemd is installed."""
    unit = _unit_file()
    assert unit.sections() == ["Unit", "Service", "Install"]
    service = unit["Service"]
    argv = shlex.split(service["ExecStart"])
    assert argv[0] == "/opt/nvrx-seghealth/bin/nvrx-seghealth"
    options = build_parser().parse_args(argv[1:])
    assert (argv[1], options.host, options.port) == ("store-host", "0.0.0.0", 29400)
    assert service["Restart"] == "on-failure" and service["DynamicUser"] == "yes"
    program = Path(sys.prefix) / "bin" / "nvrx-seghealth"
    helped = subprocess.run(
        [str(program), *argv[1:2], "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert helped.returncode == 0 and "--port" in helped.stdout, helped.stderr
    if shutil.which("systemd-analyze") is None:
        return
    (example,) = examples_under(SERVICES, STORE, "ini")
    path = tmp_path / "nvrx-seghealth-store.service"
    path.write_text(example.text.replace(argv[0], str(program)))
    verified = subprocess.run(
        ["systemd-analyze", "verify", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert verified.returncode == 0 and verified.stderr == "", verified.stderr


def _fakes(folder: Path, job: str, running: Path) -> Path:
    """``sbatch --parsable`` that prints ``JOB;cluster`` and records its arguments;
    ``squeue`` that lists the job while ``running`` exists, and nothing to the producer;
    ``sinfo`` that lists nothing."""
    folder.mkdir()
    scripts = {
        "sbatch": f'printf "%s\\n" "$@" > {folder / "sbatch.argv"}; echo "{job};cluster1"',
        "squeue": f'case "$*" in *"--jobs {job}"*) [ -e {running} ] && echo "{job}_[0-4]";; esac; '
        "exit 0",
        "sinfo": "exit 0",
    }
    for name, body in scripts.items():
        path = folder / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return folder / "sbatch.argv"


def test_publish_drained_per_array_job(tmp_path: Path) -> None:
    """The page's script runs as written: the producer starts on the array's decision
    directory with its pid file, runs while ``squeue`` lists the array, and stops with
    exit 0 once the array has ended (its pid file removed)."""
    (example,) = examples_under(SERVICES, PRODUCER)
    root, run = tmp_path / "decisions", tmp_path / "run"
    text = (
        example.text.replace("root=/shared/job/segment-health-check", f"root={root}")
        .replace("/run/nvrx-seghealth", str(run))
        .replace("sleep 60", "sleep 0.2")
    )
    assert text.count(str(root)) == 1 and text.count(str(run)) == 1 and "sleep 0.2" in text
    running = tmp_path / "running"
    running.touch()
    sbatch_argv = _fakes(tmp_path / "bin", "4242", running)
    env = clean_environment()
    env["PATH"] = os.pathsep.join(
        [str(tmp_path / "bin"), str(Path(sys.prefix) / "bin"), env["PATH"]]
    )
    script = subprocess.Popen(
        ["bash", "-c", text],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pid_file = run / "4242.pid"
        wait_until(lambda: pid_file.exists() or script.poll() is not None, timeout=60)
        time.sleep(1)  # the producer's first pass
        assert script.poll() is None, script.communicate()
        running.unlink()  # the array has ended
        out, err = script.communicate(timeout=60)
    finally:
        if script.poll() is None:
            script.kill()
            script.communicate()
    assert script.returncode == 0, err
    assert "pass done" in out, (out, err)  # it ran, then stopped between passes
    assert not pid_file.exists()
    assert list((root / "4242").glob(".publish-drained.*.4242.json")), "no state of job 4242"
    assert sbatch_argv.read_text().split() == [
        "--parsable",
        "examples/segment-health-array.sbatch",
        "train.py",
        "--lr",
        "0.1",
    ]
    assert stat.S_IMODE(run.stat().st_mode) == 0o755


def test_benchmarks_current_table_has_every_row() -> None:
    """BENCHMARKS.md stays short, its table lists every row of ``python -m bench`` in
    order, and each of its commands is one that ``./dev bench`` takes."""
    page = (ROOT / "BENCHMARKS.md").read_text()
    assert len(page.splitlines()) < 200
    rows = _table(section("BENCHMARKS.md", "The current table"), "| # |")
    numbers = [row[0] for row in rows]
    assert list(dict.fromkeys(numbers)) == list(ROW_KEYS)
    assert numbers == sorted(numbers, key=int)
    named = [re.findall(r"([\w-]+\.md)", row[-1]) for row in rows]
    assert all(len(n) == 1 and (ROOT / "bench" / "results" / n[0]).exists() for n in named), rows
    (example,) = [e for e in _blocks("BENCHMARKS.md") if e.startswith("./dev bench")]
    for argv in commands(example):
        assert argv[:2] == ["./dev", "bench"]
        bench_parser().parse_args(argv[2:])  # exits 2 on an unknown option or row


def _blocks(page: str) -> list[str]:
    """The fenced blocks of a page outside docs/ (BENCHMARKS.md)."""
    return re.findall(r"```\w*\n(.*?)```", (ROOT / page).read_text(), re.DOTALL)


@pytest.mark.parametrize("page", sorted(p.name for p in (ROOT / "bench" / "results").glob("*.md")))
def test_every_result_file_is_linked(page: str) -> None:
    assert f"`{page}` |" in (ROOT / "BENCHMARKS.md").read_text()
