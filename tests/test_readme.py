"""Every example in README.md works as written: run for real where one machine can, else
parsed and validated by the code that would run it.

The examples are read from the README itself. Each fenced block is claimed by the check of
its section (:data:`CHECKED`); a block in a section without a check fails
:func:`test_every_example_is_checked`, so a new example cannot go unchecked. Substitutions
are limited to what a test must change: a free port for 29400, a temporary folder for
``/tmp/...`` paths, the running virtual environment for ``.venv``.
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

import pytest

from harness.benchcli import build_parser as bench_parser
from harness.common import free_port
from harness.readme import (
    README,
    ROOT,
    clean_environment,
    commands,
    examples_under,
    readme_examples,
    without_srun,
)
from harness.telemetry import exclusion_tokens
from nvrx_seghealth._commands import build_parser
from nvrx_seghealth._decision.artifact import ARTIFACT_PREFIX
from nvrx_seghealth._settings.launcher_options import resolve_directory
from nvrx_seghealth._settings.rdzv_conf import BackendSettings

CI_RUN = ROOT / ".ci" / "run"


#: (heading, language) of every README block, and the test that checks it.
CHECKED = {
    ("Quick start", "bash"): "test_quick_start",
    ("Quick start", "text"): "test_captured_outputs_are_what_the_code_prints",
    ("Events and metrics", "python"): "test_events_launcher_script",
    ("Events and metrics", "bash"): "test_events_launcher_script",
    ("Events and metrics", "text"): "test_captured_outputs_are_what_the_code_prints",
    ("Try it on one machine", "bash"): "test_try_it_on_one_machine",
    ("Run it on a cluster", "bash"): "test_cluster_recipe_submits_the_tested_job_script",
    ("Install", "bash"): "test_install_lines",
    ("The torchrun backend", "bash"): "test_torchrun_command_lines",
    ("When to choose etcd-v2 over c10d", "bash"): "test_torchrun_command_lines"
    " (etcd's own flags:"
    " integration/etcd/test_readme_etcd.py)",
    ("nvrx-seghealth run", "bash"): "test_launcher_command_lines",
    ("nvrx-seghealth run", "yaml"): "test_launcher_command_lines",
    ("Compose it in your own launcher", "python"): "test_composition_example",
    ("With your launcher", "bash"): "test_your_launcher_command_lines"
    " (runs: integration/launchers/)",
    ("The decision file", ""): "test_decision_file_name",
    ("Tests", "bash"): "test_test_commands_are_what_ci_runs",
    ("Under load", "bash"): "test_loaded_test_command (runs: tests/test_dev.py)",
    ("Benchmarks", "bash"): "test_benchmark_command_lines",
    ("The watch: a decision during training", "bash"): "test_torchrun_command_lines",
    ("The watch: a decision during training", "python"): "test_the_checkpoint_example",
    ("A pass now: SIGUSR1 or a Slurm trigger", "bash"): "test_producer_wakeup_lines"
    " (runs: integration/slurm/test_publish_drained_trigger.py)",
}


def test_every_example_is_checked():
    unchecked = [
        f"README.md:{e.line} ({e.heading!r}, {e.language or 'plain'})"
        for e in readme_examples()
        if (e.heading, e.language) not in CHECKED
    ]
    assert not unchecked, f"examples without a check in {__name__}: {unchecked}"
    names = {value.split(" ")[0] for value in CHECKED.values()}
    assert names <= set(globals()), names - set(globals())


#: Demo command lines that tests/commands/test_demo.py runs (there with a log folder).
DEMO_RUNS = {
    (): 'nvrx_seghealth("demo", "--keep-logs"',
    ("--compare",): 'nvrx_seghealth("demo", "--compare", "--keep-logs"',
    ("--watch", "1"): 'nvrx_seghealth("demo", "--watch", "1", "--keep-logs"',
}


def test_quick_start(tmp_path):
    lines = [argv for e in examples_under("Quick start") for argv in commands(e.text)]
    assert [argv[:2] for argv in lines] == [
        ["./dev", "demo"],
        ["./dev", "test"],
        ["./dev", "demo"],
        ["./dev", "demo"],
        ["./dev", "demo"],
    ]
    assert "./dev test-all" in CI_RUN.read_text().splitlines()  # CI runs every tier
    demo_tests = (ROOT / "tests" / "commands" / "test_demo.py").read_text()
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
    script = "\n".join(e.text for e in examples_under("Try it on one machine"))
    assert ". .venv/bin/activate" in script and "29400" in script
    activate = Path(sys.prefix) / "bin" / "activate"
    assert activate.is_file(), "run the tests from a virtual environment (./dev test)"
    decisions = tmp_path / "segment-health-check"
    script = (
        script.replace(". .venv/bin/activate", f". {shlex.quote(str(activate))}")
        .replace("29400", str(free_port()))
        .replace("/tmp/segment-health-check", str(decisions))
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
    assert tokens in output and f"`{tokens}`" in README.read_text()
    assert re.search(r"^1000\s+7\s+unhealthy", output, re.MULTILINE)  # status after mark
    assert (decisions / f"{ARTIFACT_PREFIX}.1000.7").stat().st_size == 0  # cleared


def test_cluster_recipe_submits_the_tested_job_script():
    (block,) = examples_under("Run it on a cluster")
    export, submit = commands(block.text)
    assert export[0] == "export" and submit[:2] == [
        "sbatch",
        "examples/segment-health-array.sbatch",
    ]
    script = (ROOT / submit[1]).read_text()
    variable = export[1].split("=", 1)[0]
    assert f"${{{variable}" in script  # the setting the README exports is the script's
    e2e = (ROOT / "harness" / "slurmjob.py").read_text()
    assert '"examples" / "segment-health-array.sbatch"' in e2e  # submitted on real Slurm


def test_install_lines(tmp_path):
    (block,) = examples_under("Install")
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
    assert not [n for n in names if n.startswith(("tests/", "integration/", "bench/"))]
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel_file).read(entry_points).decode()
    assert "[torchrun.handlers]" in text and "segment-health" in text
    assert "nvrx-seghealth = nvrx_seghealth._commands:main" in text


def _torchrun_config(argv: list[str]):
    """torchrun's launch configuration for ``argv``, as torchrun itself derives it."""
    from torch.distributed.run import config_from_args, get_args_parser

    return config_from_args(get_args_parser().parse_args(argv))[0]


def test_torchrun_command_lines():
    lines = [
        without_srun(argv)
        for heading in (
            "The torchrun backend",
            "When to choose etcd-v2 over c10d",
            "The watch: a decision during training",
        )
        for e in examples_under(heading)
        for argv in commands(e.text)
        if "torchrun" in argv
    ]
    assert len(lines) == 3
    watched = [
        BackendSettings.from_rdzv_config(_torchrun_config(a[1:]).rdzv_configs, {}) for a in lines
    ]
    assert [w.check is not None and w.check.watch_enabled for w in watched] == [False, False, True]
    for argv in lines:
        assert argv[0] == "torchrun"
        config = _torchrun_config(argv[1:])
        assert config.rdzv_backend == "segment-health"
        settings = BackendSettings.from_rdzv_config(config.rdzv_configs, environ={})
        assert settings.check is not None
        assert settings.check.directory == "/shared/job/segment-health-check"
        if settings.inner_backend == "c10d":  # the store outside every unit
            assert config.rdzv_configs.get("is_host") == "false"


def test_launcher_command_lines(tmp_path, monkeypatch):
    from nvrx_seghealth._commands.run import launch_parser, select_segment_health

    (yaml,) = examples_under("nvrx-seghealth run", "yaml")
    (tmp_path / "ft.yaml").write_text(yaml.text)
    monkeypatch.chdir(tmp_path)  # where the example's ft.yaml is
    monkeypatch.delenv("NVRX_SEGMENT_HEALTH_CHECK_DIR", raising=False)
    lines = [
        without_srun(argv)
        for e in examples_under("nvrx-seghealth run")
        for argv in commands(e.text)
    ]
    assert len(lines) == 2
    for argv in lines:
        assert argv[:2] == ["nvrx-seghealth", "run"]
        args = launch_parser().parse_args(argv[2:])
        setting = resolve_directory(args.ft_segment_health_check_dir, args.ft_cfg_path)
        assert setting is not None and setting.directory == "/shared/job/segment-health-check"
        select_segment_health(args, setting)
        assert args.rdzv_backend == "segment-health"
        from torch.distributed.run import config_from_args

        config = config_from_args(args)[0]
        settings = BackendSettings.from_rdzv_config(config.rdzv_configs, environ={})
        assert settings.check is not None and settings.check.directory == setting.directory
        assert settings.inner_backend == "c10d"


def test_composition_example(tcp_store):
    (example,) = examples_under("Compose it in your own launcher", "python")
    namespace: dict = {}
    exec(  # noqa: S102  (the README example, as a user runs it)
        example.text.replace("store-host:29400", f"127.0.0.1:{tcp_store.port}"), namespace
    )
    handler = namespace["handler"]
    assert type(handler).__name__ == "SegmentHealthRendezvousHandler"
    assert handler.get_backend() == "c10d" and handler.get_run_id() == "run-42"
    assert handler.check is None  # not under Slurm here: nothing installed


def test_your_launcher_command_lines(monkeypatch, tmp_path):
    """accelerate's, TorchX's and Fabric's own parsers take the section's commands, and the
    torchrun each would start has the README's rendezvous: the segment-health backend, the store's
    endpoint, is_host=false, the directory and the run id (runs for real:
    integration/launchers/)."""
    import argparse

    for module in ("accelerate", "torchx", "lightning_fabric"):
        if os.environ.get("CI") != "true":  # ./dev, and so CI, installs the launchers extra
            pytest.importorskip(module, reason="pip install -e '.[launchers]'")
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import _filter_args, prepare_multi_gpu_env
    from torch.distributed import run as torchrun
    from torchx.cli.cmd_run import CmdRun
    from torchx.specs import macros
    from torchx.specs.builders import materialize_appdef
    from torchx.specs.finder import get_component

    accelerate_block, torchx_block, fabric_block = examples_under("With your launcher")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no accelerate config of this account
    for name in [k for k in os.environ if k.startswith(("PET_", "NVRX_"))]:
        monkeypatch.delenv(name)

    # accelerate: its parser and its own steps to torchrun's arguments.
    export, srun = commands(accelerate_block.text)
    assert export[0] == "export"
    variable, run_id = export[1].split("=", 1)
    assert variable == "PET_RDZV_ID"
    argv = without_srun(srun)
    assert argv[:2] == ["accelerate", "launch"]

    def accelerate_config():
        args, _, _ = _validate_launch_command(launch_command_parser().parse_args(argv[2:]))
        assert args.multi_gpu and args.main_process_port == 29400
        args.main_process_port = free_port()  # its port check connects to localhost:PORT
        prepare_multi_gpu_env(args)
        script = ["--training_script", args.training_script, "--training_script_args"]
        launch = _filter_args(args, torchrun.get_args_parser(), [*script, []])
        return torchrun.config_from_args(launch)[0]

    assert accelerate_config().run_id == "none"  # without PET_RDZV_ID
    monkeypatch.setenv(variable, run_id)
    config = accelerate_config()
    assert config.run_id == "$SLURM_ARRAY_JOB_ID" == run_id
    assert config.rdzv_backend == "segment-health"
    assert config.rdzv_endpoint.startswith("store-host:")
    assert (config.min_nodes, config.max_nodes) == (2, 2)
    assert config.rdzv_configs["is_host"] == "false"
    assert config.rdzv_configs["segment_health_check_dir"] == "/shared/job/segment-health-check"
    monkeypatch.delenv(variable)

    # TorchX: the store, the environment, then `torchx run`'s parser and the component's.
    store, *exports, run = commands(torchx_block.text)
    assert store[:2] == ["nvrx-seghealth", "store-host"] and store[-1] == "&"
    served = build_parser().parse_args(store[1:-1])
    environment = dict(
        pair.split("=", 1) for line in exports if line[0] == "export" for pair in line[1:]
    )
    assert environment["NVRX_SEGMENT_HEALTH_CHECK_DIR"] == "/tmp/segment-health-check"
    assert run[:2] == ["torchx", "run"]
    parser = argparse.ArgumentParser()
    CmdRun().add_arguments(parser)
    options = parser.parse_args(run[2:])
    assert options.scheduler == "local_cwd"
    component, *component_args = options.component_name_and_args
    assert component == "dist.ddp"
    (role,) = materialize_appdef(get_component(component).fn, component_args).roles
    assert (role.min_replicas, role.num_replicas) == (2, 3)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)  # exported for `torchx run`, passed on by local_cwd
    for replica in range(role.num_replicas):
        values = macros.Values(
            img_root="", app_id="app-1", replica_id=str(replica), rank0_env="TORCHX_RANK0_HOST"
        )
        replica_role = values.apply(role)
        assert replica_role.env["SLURM_ARRAY_TASK_ID"] == str(replica)
        shell, command = replica_role.args
        launch = shlex.split(command.replace("${TORCHX_RANK0_HOST:=localhost}", "localhost"))
        assert shell == "-c" and launch[0] == "torchrun"
        config = _torchrun_config(launch[1:])
        assert config.rdzv_backend == "segment-health" and config.run_id == "app-1"
        assert config.rdzv_endpoint == f"localhost:{served.port}"
        assert config.rdzv_configs["is_host"] == "false"
        assert "segment_health_check_dir" not in config.rdzv_configs  # from the environment

    # Fabric: the exports, then the torchrun arguments `fabric run` hands to torchrun's main().
    for name in environment:
        monkeypatch.delenv(name)
    *exports, srun = commands(fabric_block.text)
    for line in exports:
        assert line[0] == "export"
        for pair in line[1:]:
            monkeypatch.setenv(*pair.split("=", 1))
    argv = without_srun(srun)
    assert argv[:2] == ["fabric", "run"]
    # No GPU here: the accelerator decides only what each worker runs on, not the rendezvous.
    argv = ["--accelerator=cpu" if arg == "--accelerator=cuda" else arg for arg in argv]
    from lightning_fabric.cli import _main as fabric

    handed: list[list[str]] = []
    monkeypatch.setattr(torchrun, "main", handed.append)
    monkeypatch.chdir(tmp_path)
    (tmp_path / argv[-1]).write_text("")  # `fabric run` wants the script to exist
    fabric.main(argv[1:], standalone_mode=False)
    config = _torchrun_config(handed[0])
    assert config.rdzv_backend == "segment-health" and config.run_id == "$SLURM_ARRAY_JOB_ID"
    assert config.rdzv_endpoint == "store-host:29400"
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node) == (2, 2, 8)
    assert config.rdzv_configs["is_host"] == "false"
    assert config.rdzv_configs["segment_health_check_dir"] == "/shared/job/segment-health-check"


def test_events_launcher_script(tmp_path, tcp_store):
    """The script as written, with its folder made temporary, launching an excluded unit."""
    (script,) = examples_under("Events and metrics", "python")
    name = script.text.split(":", 1)[0].removeprefix("# ")
    (line,) = [
        without_srun(argv)
        for e in examples_under("Events and metrics")
        for argv in commands(e.text)
    ]
    assert line[:2] == ["python", name]
    folder = tmp_path / "events"
    folder.mkdir()
    (tmp_path / name).write_text(script.text.replace("/shared/job/events", str(folder)))
    decisions = tmp_path / "decisions"
    decisions.mkdir()
    (decisions / f"{ARTIFACT_PREFIX}.123.7").write_text("node17: ECC errors\n")
    options = [
        arg.replace("store-host:29400", f"127.0.0.1:{tcp_store.port}")
        .replace('"$SLURM_ARRAY_JOB_ID"', "events-1")
        .replace("/shared/job/segment-health-check", str(decisions))
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
    (demo,) = examples_under("Quick start", "text")
    for heading in (
        "Timeline, ",
        "(seconds from launch)",
        "What the gate saves",
        "rounds to the final world",
        "time to a healthy world",
    ):
        assert heading in demo.text and heading in source, heading
    (captured,) = examples_under("Events and metrics", "text")
    event, *metrics = [json.loads(line) for line in captured.text.splitlines()]
    documented = re.findall(r"^\| `(nvrx_seghealth\.[a-z_]+)` \|", README.read_text(), re.MULTILINE)
    assert event["event"]["name"] in documented and event["event"]["name"] in source
    fields = {"name", "run_id", "hostname", "pid", "local_id", "rank", "node_state", "message"}
    assert fields <= set(event["event"])
    for metric in metrics:
        assert metric["name"].removeprefix("nvrx_seghealth.").split(".")[0] in source


def test_decision_file_name():
    (example,) = examples_under("The decision file", "")
    assert example.text.strip() == f"<directory>/{ARTIFACT_PREFIX}.<job_id>.<task_id>"


def test_test_commands_are_what_ci_runs():
    (example,) = examples_under("Tests")
    lines = [shlex.join(argv) for argv in commands(example.text)]
    assert lines == ["./dev test", "./dev test-all", "./dev lint"]
    # CI runs the lint gate and every tier; the fast tier is a subset of the second.
    assert {"./dev test-all", "./dev lint"} <= set(CI_RUN.read_text().splitlines())


def test_loaded_test_command():
    (example,) = examples_under("Under load")
    assert [shlex.join(argv) for argv in commands(example.text)] == ["./dev loaded-test"]
    assert (
        "test_loaded_test_runs_pytest_beside_two_hogs" in (ROOT / "tests/test_dev.py").read_text()
    )


def test_benchmark_command_lines():
    (example,) = examples_under("Benchmarks")
    for argv in commands(example.text):
        assert argv[:2] == ["./dev", "bench"]
        bench_parser().parse_args(argv[2:])  # exits 2 on an unknown option or row


#: Inline commands of the prose and tables: ``nvrx-seghealth SUBCOMMAND --option ...``.
_INLINE = re.compile(r"`((?:srun [^`]*?)?nvrx-seghealth (?!run)[a-z-]+ --[^`]*)`")


def test_inline_operator_commands_parse():
    spans = [
        " ".join(span.replace("[", "").replace("]", "").split())  # [--optional]
        for span in _INLINE.findall(README.read_text())
    ]
    assert len(spans) >= 8, spans
    for span in spans:
        argv = without_srun(shlex.split(span))
        assert argv[0] == "nvrx-seghealth", span
        try:
            build_parser().parse_args(argv[1:])
        except SystemExit as error:  # argparse refused it
            pytest.fail(f"README's `{span}` does not parse: exit {error.code}")


def test_exit_code_table_is_the_code_s():
    """README's exit codes are :data:`EXIT_STATUSES`, the source of every ``--help``."""
    from nvrx_seghealth._commands.output import EXIT_STATUSES

    text = README.read_text()
    table = text[text.index("| command | 0 | 1 | 2 |") :].split("\n\n", 1)[0].splitlines()[2:]
    rows = {}
    for row in table:
        command, *cells = [cell.strip().replace("`", "") for cell in row.strip("|").split("|")]
        rows[command] = cells
    expected = {
        command: [dict(statuses).get(code, "—") for code in (0, 1, 2)]
        for command, statuses in EXIT_STATUSES.items()
    }
    assert rows == expected
    # argparse's own record of the subcommands: private, and typed as optional.
    actions = build_parser()._subparsers._group_actions  # type: ignore[union-attr]
    subcommands = set(actions[0].choices)  # type: ignore[arg-type]
    assert set(rows) == subcommands - {
        "run",
        "demo",
    }  # run exits as torchrun does; the demo: Quick start


def test_the_ft_launcher_table_names_tests_that_exist():
    text = README.read_text()
    table = text[text.index("### Where `ft_launcher` differs") :].split("\n### ", 1)[0]
    paths = re.findall(r"`((?:tests|integration)/[^`]*)`", table)
    assert len(paths) >= 6, paths
    assert [p for p in paths if not (ROOT / p).exists()] == []


def test_producer_wakeup_lines():
    """The producer's command parses, the signalling script it names is the example's, and
    the trigger runs that script with the same pid file."""
    signal_block, trigger_block = examples_under("A pass now: SIGUSR1 or a Slurm trigger")
    producer, drain, poke = commands(signal_block.text)
    assert producer[-1] == "&" and producer[:2] == ["nvrx-seghealth", "publish-drained"]
    options = build_parser().parse_args(producer[1:-1])
    assert options.pid_file == poke[1] and options.interval == 300
    assert drain[:3] == ["scontrol", "update", "nodename=gpu017"]
    script = ROOT / poke[0]
    assert script.name == "publish-drained-now.sh" and os.access(script, os.X_OK)
    (trigger,) = commands(trigger_block.text)
    assert trigger[:5] == ["strigger", "--set", "--node", "--drained", "--flags=PERM"]
    program = shlex.split(trigger[5].removeprefix("--program="))
    assert Path(program[0]).name == script.name and program[1:] == [options.pid_file]


def test_the_checkpoint_example(tmp_path):
    """The README's training loop is examples/train_checkpointed.py, and it keeps its
    progress: stopped by its agent (SIGTERM to a real torchrun) after its first periodic
    save, it resumes at the step it saved on the way out."""
    example = ROOT / "examples" / "train_checkpointed.py"
    (block,) = examples_under("The watch: a decision during training", "python")
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
