"""The documentation's examples that run for real: the demo's command lines, the
getting-started session, the install lines (a wheel built from a copy of the checkout),
the composition example, the events launcher script and the training loop that keeps its
progress. Each is read from its page; ``tests/test_docs.py`` claims every block of every
page and names these tests for theirs.

Substitutions are limited to what a test must change: a free port for 29400, a temporary
folder for ``/tmp/...`` paths, the running virtual environment for ``.venv``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from harness.commands import clean_environment
from harness.docs import (
    ROOT,
    ci_commands,
    commands,
    examples_under,
    without_srun,
)
from harness.ports import free_port
from harness.rendezvous import coordinator_of
from harness.telemetry import exclusion_tokens
from nvrx_seghealth._commands import build_parser
from nvrx_seghealth._decision.decision_file import DECISION_FILE_PREFIX

FRONT, START, CLUSTER, WATCH = (
    "README.md",
    "docs/getting-started.md",
    "docs/cluster.md",
    "docs/watch.md",
)
API, EVENTS = "docs/reference/python-api.md", "docs/reference/events.md"

#: Demo command lines that integration/commands/test_demo.py runs (there with a log folder).
DEMO_RUNS = {
    (): 'nvrx_seghealth("demo", "--keep-logs"',
    ("--compare",): 'nvrx_seghealth("demo", "--compare", "--keep-logs"',
    ("--watch", "1"): 'nvrx_seghealth("demo", "--watch", "1", "--keep-logs"',
}


def test_the_two_commands_and_the_demo(tmp_path):
    """The front page's two commands and the getting-started page's: each demo shape parses,
    the ones integration/commands/test_demo.py runs are named there, and any other runs here."""
    front = [argv for e in examples_under(FRONT, "Try it") for argv in commands(e.text)]
    assert [argv[:2] for argv in front] == [["./dev", "demo"], ["./dev", "test"]]
    lines = [argv for e in examples_under(START, "The demo") for argv in commands(e.text)]
    assert [argv[:2] for argv in lines] == [
        ["./dev", "demo"],
        ["./dev", "test"],
        ["./dev", "demo"],
        ["./dev", "demo"],
        ["./dev", "demo"],
    ]
    assert "TEST_COVERAGE=0 ./dev test-all -m integration" in ci_commands()  # after ./dev test
    demo_tests = (ROOT / "integration" / "commands" / "test_demo.py").read_text()
    ran = 0
    for argv in lines:
        if argv[1] != "demo":
            continue
        options = argv[2:]
        build_parser().parse_args(["demo", *options])
        if tuple(options) in DEMO_RUNS:
            assert DEMO_RUNS[tuple(options)] in demo_tests
            continue
        # Any other shape runs here as written, its log folder made temporary.
        logs = options.index("--keep-logs") + 1
        folder = tmp_path / Path(options[logs]).name
        options[logs] = str(folder)
        demo = subprocess.run(
            [sys.executable, "-m", "nvrx_seghealth", "demo", *options],
            env=clean_environment(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
        assert any(folder.iterdir())
        ran += 1
    assert ran == 1


def test_try_it_on_one_machine(tmp_path):
    """The section's blocks, in order, as one shell session."""
    script = "\n".join(e.text for e in examples_under(START, "Try it on one machine"))
    assert ". .venv/bin/activate" in script and "29400" in script
    activate = Path(sys.prefix) / "bin" / "activate"
    assert activate.is_file(), "run the tests from a virtual environment (./dev test)"
    decisions = tmp_path / "segment-health-check"
    script = (
        script.replace(". .venv/bin/activate", f". {shlex.quote(str(activate))}")
        .replace("29400", str(free_port()))
        .replace("/tmp/segment-health-check/1000", str(decisions))
    )
    log = tmp_path / "session.log"
    with log.open("w") as sink:  # a file: a background job may hold it after bash exits
        session = subprocess.Popen(
            ["bash", "-e", "-c", script],
            cwd=ROOT,
            env=clean_environment(),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            session.wait(timeout=240)
        finally:
            with contextlib.suppress(ProcessLookupError):  # whatever the script left
                os.killpg(session.pid, signal.SIGKILL)
    output = log.read_text()
    assert session.returncode == 0, output[-4000:]
    installed = f"Segment health check installed directory={decisions} job_id=1000 task_id=7"
    assert output.count(installed) == 3, output[-4000:]  # try-1, try-2, run
    assert output.count("worker 0 of 2: sum of ranks 1") == 2  # try-1 and run trained
    assert "UnhealthyNodeException" in output and "launcher exit code: 1" in output
    tokens = exclusion_tokens("1000", "7")  # as the composition section shows them
    assert tokens in output and f"`{tokens}`" in (ROOT / API).read_text()
    assert re.search(r"^1000\s+7\s+unhealthy", output, re.MULTILINE)  # status after mark
    assert (decisions / f"{DECISION_FILE_PREFIX}.1000.7").stat().st_size == 0  # cleared


def test_install_lines(tmp_path):
    (block,) = examples_under(CLUSTER, "Install")
    torch_line, checkout, wheel, install = commands(block.text)
    dev = (ROOT / "dev").read_text()
    assert f"TORCH_SPEC:-{torch_line[2]}" in dev  # the torch that ./dev and CI install
    assert checkout[:2] == ["pip", "install"] and checkout[2].startswith(".[")
    extras = checkout[2][2:-1].split(",")
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert all(re.search(rf"^{extra} = \[", pyproject, re.MULTILINE) for extra in extras)
    # Build the wheel as written (into a temporary folder), then check what it installs.
    assert wheel[:5] == ["pip", "wheel", "--no-deps", "-w", "dist"] and wheel[5] == "."
    # setuptools builds inside the source tree (build/, *.egg-info): build from a copy.
    source = tmp_path / "checkout"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache"
        ),
    )
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    assert install[:2] == ["pip", "install"]
    wheel_file = tmp_path / install[2]
    assert wheel_file.is_file(), sorted(p.name for p in (tmp_path / "dist").iterdir())
    names = zipfile.ZipFile(wheel_file).namelist()
    assert "nvrx_seghealth/py.typed" in names
    assert not [n for n in names if n.startswith(("tests/", "integration/", "bench/", "harness/"))]
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel_file).read(entry_points).decode()
    assert "[torchrun.handlers]" in text and "segment-health" in text
    assert "nvrx-seghealth = nvrx_seghealth._commands:main" in text


def test_composition_example(tcp_store):
    (example,) = examples_under(API, "Compose it in your own launcher", "python")
    namespace: dict = {}
    exec(  # noqa: S102  (the example, as a user runs it)
        example.text.replace("store-host:29400", f"127.0.0.1:{tcp_store.port}"), namespace
    )
    handler = namespace["handler"]
    assert type(handler).__name__ == "SegmentHealthRendezvousHandler"
    assert handler.get_backend() == "c10d" and handler.get_run_id() == "run-42"
    assert coordinator_of(handler) is None  # not under Slurm here: nothing installed


def test_events_launcher_script(tmp_path, tcp_store):
    """The script as written, with its folder made temporary, launching an excluded unit."""
    (script,) = examples_under(EVENTS, "Events and metrics", "python")
    name = script.text.split(":", 1)[0].removeprefix("# ")
    (line,) = [
        without_srun(argv)
        for e in examples_under(EVENTS, "Events and metrics")
        for argv in commands(e.text)
    ]
    assert line[:2] == ["python", name]
    folder = tmp_path / "events"
    folder.mkdir()
    (tmp_path / name).write_text(script.text.replace("/shared/job/events", str(folder)))
    decisions = tmp_path / "decisions"
    decisions.mkdir()
    (decisions / f"{DECISION_FILE_PREFIX}.123.7").write_text("node17: ECC errors\n")
    options = [
        arg.replace("store-host:29400", f"127.0.0.1:{tcp_store.port}")
        .replace("/shared/job/segment-health-check/$SLURM_ARRAY_JOB_ID", str(decisions))
        .replace('"$SLURM_ARRAY_JOB_ID"', "events-1")
        .replace("--nnodes=2:8", "--nnodes=1")
        .replace("--nproc-per-node=8", "--nproc-per-node=1")
        for arg in line[2:]
    ]
    options[-1] = str(ROOT / "examples" / "train.py")
    env = {
        **clean_environment(),
        "SLURM_ARRAY_JOB_ID": "123",
        "SLURM_ARRAY_TASK_ID": "7",
        "SLURM_JOB_ID": "130",
        "SLURM_PROCID": "0",
    }
    done = subprocess.run(
        [sys.executable, str(tmp_path / name), *options],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 1, done.stderr[-3000:]  # excluded
    (events,) = folder.glob("rdzv.*.jsonl")
    recorded = [json.loads(line)["event"] for line in events.read_text().splitlines()]
    excluded = [e for e in recorded if e["name"] == "nvrx_seghealth.excluded"]
    assert len(excluded) == 1 and excluded[0]["node_state"] == "FAILED"
    assert "by=decision-file" in excluded[0]["message"]
    (metrics,) = folder.glob("metrics.*.jsonl")
    values = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert {"name": "nvrx_seghealth.excluded", "value": 1}.items() <= next(
        v for v in values if v["name"] == "nvrx_seghealth.excluded"
    ).items()


def test_captured_outputs_are_what_the_code_prints():
    """A captured output's headings and names are still the code's (not a run: see the
    tests of the demo and of the events for that)."""
    source = "\n".join(p.read_text() for p in (ROOT / "nvrx_seghealth").rglob("*.py"))
    report, demo = examples_under(START, "The demo", "text")
    for line in (
        "Allocation units",
        "Rendezvous rounds that started workers",
        "Time to a healthy world: ",
        "EXCLUDED, never joined",
        "Outcome: as the contract requires.",
    ):
        assert line in report.text and line in source, line
    for heading in (
        "Timeline, ",
        "(seconds from launch)",
        "What the gate saves",
        "rounds to the final world",
        "time to a healthy world",
    ):
        assert heading in demo.text and heading in source, heading
    (captured,) = examples_under(EVENTS, "Events and metrics", "text")
    event, *metrics = [json.loads(line) for line in captured.text.splitlines()]
    events = (ROOT / EVENTS).read_text()
    documented = re.findall(r"^\| `(nvrx_seghealth\.[a-z_]+)` \|", events, re.MULTILINE)
    assert event["event"]["name"] in documented and event["event"]["name"] in source
    fields = {"name", "run_id", "hostname", "pid", "local_id", "rank", "node_state", "message"}
    assert fields <= set(event["event"])
    for metric in metrics:
        assert metric["name"].removeprefix("nvrx_seghealth.").split(".")[0] in source


def test_the_checkpoint_example(tmp_path):
    """The watch page's training loop is examples/train_checkpointed.py, and it keeps its
    progress: stopped by its agent (SIGTERM to a real torchrun) after its first periodic
    save, it resumes at the step it saved on the way out."""
    example = ROOT / "examples" / "train_checkpointed.py"
    (block,) = examples_under(WATCH, "The watch: a decision during training", "python")
    assert block.text.strip() == example.read_text().strip()
    checkpoint = tmp_path / "checkpoint.pt"
    env = clean_environment() | {"CHECKPOINT": str(checkpoint), "STEPS": "100000000"}

    def torchrun(**extra):
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=1",
                "--nproc-per-node=2",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{free_port()}",
                str(example),
            ],
            env=env | extra,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    first = torchrun()
    try:
        deadline = time.monotonic() + 120
        while not checkpoint.exists():
            assert first.poll() is None and time.monotonic() < deadline, first.stdout.read()
            time.sleep(0.1)
    finally:
        first.send_signal(signal.SIGTERM)
        output, _ = first.communicate(timeout=120)
    import torch

    saved = torch.load(checkpoint)["step"]
    assert saved >= 100, output
    second = torchrun(STEPS=str(saved + 5))
    output, _ = second.communicate(timeout=120)
    assert second.returncode == 0, output
    assert f"rank 0 starts at step {saved}" in output
