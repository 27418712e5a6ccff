"""The documented launch lines: each ``torchrun``, ``nvrx-seghealth run``, accelerate,
TorchX and Fabric command of the pages is parsed by that launcher's own parser, and the
torchrun it would start has the documented rendezvous (the segment-health backend, the
directory, the store outside every unit). ``tests/test_docs.py`` claims the blocks for
these tests; the launchers run for real in ``integration/launchers/``.
"""

from __future__ import annotations

import argparse
import os
import shlex

import pytest

from harness.docs import ROOT, commands, examples_under, without_srun
from harness.ports import free_port
from nvrx_seghealth._commands import build_parser
from nvrx_seghealth._settings.launcher_options import resolve_directory
from nvrx_seghealth._settings.rdzv_conf import BackendSettings

pytestmark = pytest.mark.torch  # the launch lines parse with the launchers' own parsers

FRONT, CLUSTER, LAUNCHERS, RUN = (
    "README.md",
    "docs/cluster.md",
    "docs/launchers.md",
    "docs/reference/run.md",
)
#: The decision directory of the launch lines: the root plus the array job id, as the
#: example job script reads it (the shell expands the variable).
DIRECTORY = "/shared/job/segment-health-check/$SLURM_ARRAY_JOB_ID"
#: The directory of run.md's YAML example, a file written for array job 123.
YAML_DIRECTORY = "/shared/job/segment-health-check/123"


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
            (CLUSTER, "When to choose etcd over c10d"),
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
        assert settings.check.directory == DIRECTORY
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
        expected = DIRECTORY if args.ft_segment_health_check_dir else YAML_DIRECTORY
        assert setting is not None and setting.directory == expected
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
    assert config.rdzv_configs["segment_health_check_dir"] == DIRECTORY
    monkeypatch.delenv(variable)

    # TorchX: the store, the environment, then `torchx run`'s parser and the component's.
    store, *exports, run = commands(torchx_block.text)
    assert store[:2] == ["nvrx-seghealth", "store-host"] and store[-1] == "&"
    served = build_parser().parse_args(store[1:-1])
    environment = dict(
        pair.split("=", 1) for line in exports if line[0] == "export" for pair in line[1:]
    )
    assert environment["NVRX_SEGMENT_HEALTH_CHECK_DIR"] == "/tmp/segment-health-check/1000"
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
    assert config.rdzv_configs["segment_health_check_dir"] == DIRECTORY


def test_the_etcd_v3_page_installs_the_extra_and_launches_on_every_member():
    """The etcd-v3 page's install line names an extra of the package, and its torchrun
    line selects etcd-v3 with an endpoint list of three members (the jobs of
    ``integration/etcd/test_v3_jobs.py`` run such lines for real)."""
    from nvrx_seghealth._rendezvous.etcd_v3.settings import EtcdV3Settings

    (block,) = examples_under("docs/reference/etcd-v3.md", "The etcd-v3 backend")
    (pip, torchrun) = commands(block.text)
    assert pip == ["pip", "install", ".[etcd3]"]
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert "\netcd3 = [" in pyproject.split("[project.optional-dependencies]")[1]
    config = _torchrun_config(torchrun[1:])
    assert config.rdzv_backend == "etcd-v3"
    settings = EtcdV3Settings.from_conf(config.rdzv_endpoint, config.rdzv_configs, {})
    assert [str(endpoint) for endpoint in settings.endpoints] == [
        "etcd1:2379",
        "etcd2:2379",
        "etcd3:2379",
    ]


def test_the_barrier_page_launches_on_the_etcd_v3_store_of_every_member():
    """The barrier page's torchrun line selects barrier on the etcd-v3 store, every member
    an endpoint; torch's parsed configuration builds that handler, asking etcd nothing
    (``integration/etcd/test_barrier_on_etcd_v3.py`` runs such a line for real)."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    from nvrx_seghealth._rendezvous.barrier.creator import create_handler
    from nvrx_seghealth._rendezvous.etcd_v3.store import EtcdV3Store

    (block,) = examples_under("docs/reference/barrier.md", "Settings")
    (torchrun,) = commands(block.text)
    config = _torchrun_config(torchrun[1:])
    assert config.rdzv_backend == "barrier"
    assert config.rdzv_endpoint == "etcd1:2379,etcd2:2379,etcd3:2379"
    params = RendezvousParameters(
        config.rdzv_backend,
        config.rdzv_endpoint,
        config.run_id,
        config.min_nodes,
        config.max_nodes,
        **config.rdzv_configs,
    )
    assert isinstance(create_handler(params).store, EtcdV3Store)
