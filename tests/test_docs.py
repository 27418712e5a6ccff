"""Every example of the documentation works as written, every relative link resolves, and
the site builds strictly.

The pages are README.md (the front page) and ``docs/**/*.md``. Each fenced block of a page
is claimed (:data:`CHECKED`) by the test that runs it, or parses and validates it with the
code that would run it (here, in ``tests/test_docs_runs.py``, or where a note says), or is
marked as not runnable here, with why (:data:`NOT_RUNNABLE`); a block neither claims fails
:func:`test_every_example_is_claimed`, so a new example cannot go unchecked. Every
relative link of README.md, ARCHITECTURE.md, BENCHMARKS.md, CHANGELOG.md and the pages
names a file that exists, and an anchor that its headings make, as a forge and the site
make them (:func:`test_every_relative_link_resolves`).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.benchcli import build_parser as bench_parser
from harness.common import free_port
from harness.docs import (
    PAGES,
    ROOT,
    anchors,
    commands,
    doc_examples,
    examples_under,
    relative_links,
    section,
    without_srun,
)
from nvrx_seghealth._commands import build_parser
from nvrx_seghealth._decision.artifact import ARTIFACT_PREFIX
from nvrx_seghealth._settings.launcher_options import resolve_directory
from nvrx_seghealth._settings.rdzv_conf import BackendSettings

FRONT, CLUSTER, LAUNCHERS, CONTRIBUTING, RUN = (
    "README.md",
    "docs/cluster.md",
    "docs/launchers.md",
    "docs/contributing.md",
    "docs/reference/run.md",
)
API = "docs/reference/python-api.md"
CI_RUN = ROOT / ".ci" / "run"
RUNS = "tests/test_docs_runs.py"
SITE = "test_the_site_build_is_strict (./dev docs renders it; CI runs that)"

#: (page, heading, language) of every block that a test runs or checks, and that test
#: (in this module, or in :data:`RUNS` when it says so).
CHECKED = {
    (FRONT, "Try it", "bash"): f"test_the_two_commands_and_the_demo ({RUNS})",
    (FRONT, "Launch it", "bash"): "test_cluster_recipe_submits_the_tested_job_script"
    " and test_torchrun_command_lines",
    ("docs/getting-started.md", "The demo", "bash"): f"test_the_two_commands_and_the_demo ({RUNS})",
    ("docs/getting-started.md", "The demo", "text"): "test_captured_outputs_are_what_the_code"
    f"_prints ({RUNS})",
    ("docs/getting-started.md", "Try it on one machine", "bash"): "test_try_it_on_one_machine"
    f" ({RUNS})",
    ("docs/watch.md", "The watch: a decision during training", "bash"): "test_torchrun"
    "_command_lines",
    ("docs/watch.md", "The watch: a decision during training", "python"): "test_the"
    f"_checkpoint_example ({RUNS})",
    (CLUSTER, "Step by step", "bash"): "test_cluster_recipe_submits_the_tested_job_script",
    (CLUSTER, "Install", "bash"): f"test_install_lines ({RUNS})",
    (CLUSTER, "When to choose etcd-v2 over c10d", "bash"): "test_torchrun_command_lines"
    " (etcd's own flags: integration/etcd/test_docs_etcd.py)",
    ("docs/operators.md", "A pass now: SIGUSR1 or a Slurm trigger", "bash"): "test_producer"
    "_wakeup_lines (runs: integration/slurm/test_publish_drained_trigger.py)",
    (LAUNCHERS, "accelerate", "bash"): "test_your_launcher_command_lines"
    " (runs: integration/launchers/)",
    (
        LAUNCHERS,
        "TorchX",
        "bash",
    ): "test_your_launcher_command_lines (runs: integration/launchers/)",
    (LAUNCHERS, "Lightning Fabric", "bash"): "test_your_launcher_command_lines"
    " (runs: integration/launchers/)",
    ("docs/reference/backend.md", "The torchrun backend", "bash"): "test_torchrun_command_lines",
    (RUN, "nvrx-seghealth run", "bash"): "test_launcher_command_lines",
    (RUN, "nvrx-seghealth run", "yaml"): "test_launcher_command_lines",
    (API, "Compose it in your own launcher", "python"): f"test_composition_example ({RUNS})",
    (API, "For a launcher", "{eval-rst}"): SITE,
    (API, "The check alone", "{eval-rst}"): SITE,
    (API, "For a producer", "{eval-rst}"): SITE,
    (API, "The store and the events", "{eval-rst}"): SITE,
    (API, "Every caller", "{eval-rst}"): SITE,
    ("docs/reference/decision-file.md", "The decision file", ""): "test_decision_file_name",
    ("docs/reference/events.md", "Events and metrics", "python"): "test_events_launcher"
    f"_script ({RUNS})",
    ("docs/reference/events.md", "Events and metrics", "bash"): "test_events_launcher"
    f"_script ({RUNS})",
    ("docs/reference/events.md", "Events and metrics", "text"): "test_captured_outputs_are"
    f"_what_the_code_prints ({RUNS})",
    (CONTRIBUTING, "Tests", "bash"): "test_test_commands_are_what_ci_runs",
    (CONTRIBUTING, "Under load", "bash"): "test_loaded_test_command (runs: tests/test_dev.py)",
    (CONTRIBUTING, "Benchmarks", "bash"): "test_benchmark_command_lines",
    (CONTRIBUTING, "The documentation", "bash"): "test_the_docs_command_is_what_ci_runs",
    ("docs/index.md", "nvrx-seghealth documentation", "{toctree}"): SITE,
}

#: (page, heading, language) of every block that nothing can run, and why.
NOT_RUNNABLE = {
    ("docs/concepts.md", "A round and an exclusion", "text"): "a drawing of one round, "
    "neither a command nor a captured output",
}


def test_every_example_is_claimed():
    claims = {**CHECKED, **NOT_RUNNABLE}
    unclaimed = [
        e.where
        for page in PAGES
        for e in doc_examples(page)
        if (e.page, e.heading, e.language) not in claims
    ]
    assert not unclaimed, f"examples neither claimed in {__name__} nor marked: {unclaimed}"
    stale = [
        key
        for key in claims
        if not any((e.page, e.heading, e.language) == key for e in doc_examples(key[0]))
    ]
    assert not stale, f"claims of blocks that no page has: {stale}"
    assert not set(CHECKED) & set(NOT_RUNNABLE)
    defined = {
        name
        for path in (Path(__file__), ROOT / RUNS)
        for name in re.findall(r"^def (test_\w+)\(", path.read_text(), re.MULTILINE)
    }
    named = {
        word for claim in CHECKED.values() for word in claim.split() if word.startswith("test_")
    }
    assert named <= defined, named - defined


def test_every_relative_link_resolves():
    pages = ["ARCHITECTURE.md", "BENCHMARKS.md", "CHANGELOG.md", *PAGES]
    links = [link for page in pages for link in relative_links(page)]
    assert len(links) > 50, links  # the reader found the links
    broken = [
        f"{link.page}:{link.line}: {link.target}#{link.anchor}"
        for link in links
        if not (ROOT / link.target).exists()
        or (link.anchor and link.anchor not in anchors(link.target))
    ]
    assert broken == []


def _site_build_options() -> list[str]:
    """The options of ``./dev docs``'s sphinx-build, between the program and its folders."""
    (line,) = [line for line in (ROOT / "dev").read_text().splitlines() if "sphinx-build" in line]
    argv = shlex.split(line.strip())
    assert (
        argv[0] == "exec" and argv[1].endswith("/sphinx-build") and argv[-2:] == [".", "build/docs"]
    )
    return argv[2:-2]


def test_the_site_build_is_strict(tmp_path):
    """``./dev docs``'s build of a copy of the pages, with one broken link and one page
    outside every table of contents planted, fails and names both, and nothing else: the
    rest (the tables of contents, the public API's directives) renders clean."""
    if os.environ.get("CI") != "true":  # ./dev, and so CI, installs the docs extra
        pytest.importorskip("sphinx", reason="pip install -e '.[docs]'")
    options = _site_build_options()
    assert {"-W", "--keep-going", "-n"} <= set(options)
    source = tmp_path / "source"
    source.mkdir()
    for name in ("README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "CHANGELOG.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("docs", "examples"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("_build"))
    with open(source / "docs" / "operators.md", "a") as page:
        page.write("\nSee [a page that does not exist](nowhere.md).\n")
    (source / "docs" / "orphan.md").write_text("# A page in no table of contents\n")
    built = subprocess.run(
        [sys.executable, "-m", "sphinx", *options, ".", str(tmp_path / "site")],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode != 0
    warnings = [line for line in built.stderr.splitlines() if "WARNING:" in line]
    assert len(warnings) == 2, built.stderr[-4000:]
    planted = {
        ("docs/operators.md", "[myst.xref_missing]"),
        ("docs/orphan.md", "[toc.not_included]"),
    }
    assert {
        (w.split(":", 1)[0].removeprefix(f"{source}/"), w.split()[-1]) for w in warnings
    } == planted


def test_the_docs_command_is_what_ci_runs():
    (example,) = examples_under(CONTRIBUTING, "The documentation")
    assert [shlex.join(argv) for argv in commands(example.text)] == ["./dev docs"]
    assert "./dev docs" in CI_RUN.read_text().splitlines()


@pytest.mark.parametrize(
    "block",
    [examples_under(CLUSTER, "Step by step")[0], examples_under(FRONT, "Launch it")[0]],
    ids=["cluster", "front-page"],
)
def test_cluster_recipe_submits_the_tested_job_script(block):
    export, submit = commands(block.text)
    assert export[0] == "export" and submit[:2] == [
        "sbatch",
        "examples/segment-health-array.sbatch",
    ]
    script = (ROOT / submit[1]).read_text()
    variable = export[1].split("=", 1)[0]
    assert f"${{{variable}" in script  # the setting the page exports is the script's
    e2e = (ROOT / "harness" / "slurmjob.py").read_text()
    assert '"examples" / "segment-health-array.sbatch"' in e2e  # submitted on real Slurm


def _torchrun_config(argv: list[str]):
    """torchrun's launch configuration for ``argv``, as torchrun itself derives it."""
    from torch.distributed.run import config_from_args, get_args_parser

    return config_from_args(get_args_parser().parse_args(argv))[0]


def test_torchrun_command_lines():
    lines = [
        without_srun(argv)
        for page, heading in (
            (FRONT, "Launch it"),
            ("docs/reference/backend.md", "The torchrun backend"),
            (CLUSTER, "When to choose etcd-v2 over c10d"),
            ("docs/watch.md", "The watch: a decision during training"),
        )
        for e in examples_under(page, heading)
        for argv in commands(e.text)
        if "torchrun" in argv
    ]
    assert len(lines) == 4
    watched = [
        BackendSettings.from_rdzv_config(_torchrun_config(a[1:]).rdzv_configs, {}) for a in lines
    ]
    assert [w.check is not None and w.check.watch_enabled for w in watched] == [
        False,
        False,
        False,
        True,
    ]
    assert lines[0] == lines[1]  # the front page's launch is the backend page's
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

    (yaml,) = examples_under(RUN, "nvrx-seghealth run", "yaml")
    (tmp_path / "ft.yaml").write_text(yaml.text)
    monkeypatch.chdir(tmp_path)  # where the example's ft.yaml is
    monkeypatch.delenv("NVRX_SEGMENT_HEALTH_CHECK_DIR", raising=False)
    lines = [
        without_srun(argv)
        for e in examples_under(RUN, "nvrx-seghealth run")
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


def test_your_launcher_command_lines(monkeypatch, tmp_path):
    """accelerate's, TorchX's and Fabric's own parsers take the section's commands, and the
    torchrun each would start has the page's rendezvous: the segment-health backend, the store's
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

    (accelerate_block,) = examples_under(LAUNCHERS, "accelerate")
    (torchx_block,) = examples_under(LAUNCHERS, "TorchX")
    (fabric_block,) = examples_under(LAUNCHERS, "Lightning Fabric")
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


def test_decision_file_name():
    (example,) = examples_under("docs/reference/decision-file.md", "The decision file", "")
    assert example.text.strip() == f"<directory>/{ARTIFACT_PREFIX}.<job_id>.<task_id>"


def test_test_commands_are_what_ci_runs():
    (example,) = examples_under(CONTRIBUTING, "Tests")
    lines = [shlex.join(argv) for argv in commands(example.text)]
    assert lines == ["./dev test", "./dev test-all", "./dev lint"]
    # CI runs the lint gate and every tier; the fast tier is a subset of the second.
    assert {"./dev test-all", "./dev lint"} <= set(CI_RUN.read_text().splitlines())


def test_loaded_test_command():
    (example,) = examples_under(CONTRIBUTING, "Under load")
    assert [shlex.join(argv) for argv in commands(example.text)] == ["./dev loaded-test"]
    assert (
        "test_loaded_test_runs_pytest_beside_two_hogs" in (ROOT / "tests/test_dev.py").read_text()
    )


def test_benchmark_command_lines():
    (example,) = examples_under(CONTRIBUTING, "Benchmarks")
    for argv in commands(example.text):
        assert argv[:2] == ["./dev", "bench"]
        bench_parser().parse_args(argv[2:])  # exits 2 on an unknown option or row


#: Inline commands of the prose and tables: ``nvrx-seghealth SUBCOMMAND --option ...``.
_INLINE = re.compile(r"`((?:srun [^`]*?)?nvrx-seghealth (?!run)[a-z-]+ --[^`]*)`")


def test_inline_operator_commands_parse():
    spans = [
        " ".join(span.replace("[", "").replace("]", "").split())  # [--optional]
        for page in PAGES
        for span in _INLINE.findall((ROOT / page).read_text())
    ]
    assert len(spans) >= 8, spans
    for span in spans:
        argv = without_srun(shlex.split(span))
        assert argv[0] == "nvrx-seghealth", span
        try:
            build_parser().parse_args(argv[1:])
        except SystemExit as error:  # argparse refused it
            pytest.fail(f"the documented `{span}` does not parse: exit {error.code}")


def test_exit_code_table_is_the_code_s():
    """The documented exit codes are :data:`EXIT_STATUSES`, the source of every ``--help``."""
    from nvrx_seghealth._commands.output import EXIT_STATUSES

    text = section("docs/reference/exit-codes.md", "The commands")
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
    }  # run exits as torchrun does; the demo: its own section


def test_the_ft_launcher_table_names_tests_that_exist():
    table = section(RUN, "Where ft_launcher differs")
    paths = re.findall(r"`((?:tests|integration)/[^`]*)`", table)
    assert len(paths) >= 6, paths
    assert [p for p in paths if not (ROOT / p).exists()] == []


def test_producer_wakeup_lines():
    """The producer's command parses, the signalling script it names is the example's, and
    the trigger runs that script with the same pid file."""
    signal_block, trigger_block = examples_under(
        "docs/operators.md", "A pass now: SIGUSR1 or a Slurm trigger"
    )
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
