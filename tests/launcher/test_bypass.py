"""What counts as asking for the backend, or for standalone, and when the launcher says the
check is off: when torch creates the rendezvous of another backend. A known launcher's
options are read by its own parser; the scan reads any other's.

The real launchers' cases (torchrun ``--standalone``, ``PET_STANDALONE``, accelerate's
fallback, the training script's own arguments, torchrun's early exits) are in
``integration/launchers/test_standalone_bypass.py``.
"""

from __future__ import annotations

import logging
import os

import pytest
from torch.distributed.elastic.rendezvous import (
    RendezvousHandlerRegistry,
    RendezvousParameters,
)
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler
from torch.distributed.run import get_args_parser

from harness.ports import free_port
from nvrx_seghealth import register
from nvrx_seghealth._launcher import bypass
from nvrx_seghealth._launcher.bypass import asked_for, standalone_asked
from nvrx_seghealth._logfmt import parse_fields

pytestmark = pytest.mark.usefixtures("release_handlers")

BACKEND = "segment-health"
SCRIPT_SAYS_STANDALONE = ["train.py", "--standalone", "--rdzv-backend", BACKEND]


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
        (["--rdzv-backend=c10d", "train.py", "--rdzv-backend=segment-health"], {}, False),
        (["--use-env", "--rdzv-backend=segment-health", "train.py"], {}, True),  # a flag
        (["--use_env", "--rdzv_backend", BACKEND, "train.py"], {}, True),
        (["--offset", "-1", "--rdzv-backend", BACKEND, "train.py"], {}, True),  # a value
        (["--offset", "-", "--rdzv-backend", BACKEND, "train.py"], {}, True),
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
        (["--rdzv-backend=segment-health", "train.py", "--standalone"], {}, False),
        (["--use-env", "--standalone", "train.py"], {}, True),  # an unknown flag before it
        (["--ignore-missing-cfg", "--rdzv-backend=segment-health", "--standalone"], {}, True),
    ],
)
def test_standalone_is_the_flag_or_a_non_zero_pet_standalone(argv, environ, expected) -> None:
    assert standalone_asked(argv, environ) is expected


@pytest.mark.parametrize(
    "argv",
    [
        ["--rdzv-backend=segment-health", *SCRIPT_SAYS_STANDALONE],
        ["--rdzv-backend=c10d", *SCRIPT_SAYS_STANDALONE],
        ["--standalone", "--rdzv-backend", BACKEND, *SCRIPT_SAYS_STANDALONE],
        ["--nnodes", "2", "--rdzv-conf", "a=b", "--rdzv-backend", "c10d", *SCRIPT_SAYS_STANDALONE],
        ["--rdzv-backend=segment-health", "-m", "pkg.train", "--standalone"],
        ["--standalone", "--module", "pkg.train", "--rdzv-backend=segment-health"],
        ["--rdzv-backend=segment-health", "--no-python", "prog", "--standalone"],
        ["--no_python", "--rdzv_backend", BACKEND, "prog", "--standalone"],
        ["--run-path", "--rdzv-backend=segment-health", *SCRIPT_SAYS_STANDALONE],
        ["-r3", "--rdzv-backend=segment-health", *SCRIPT_SAYS_STANDALONE],
        ["-r", "3", "-t", "0", "--rdzv-backend=segment-health", *SCRIPT_SAYS_STANDALONE],
        ["--rdzv-backend=c10d", "--", *SCRIPT_SAYS_STANDALONE],
        ["--virtual-local-rank", "--standalone", "train.py"],
        SCRIPT_SAYS_STANDALONE,
    ],
)
def test_the_command_line_is_read_as_torchruns_parser_reads_it(argv, monkeypatch) -> None:
    """Only torchrun's own options count: the training script's arguments do not."""
    for name in [name for name in os.environ if name.startswith("PET_")]:
        monkeypatch.delenv(name)
    parsed, _ = get_args_parser().parse_known_args(argv)
    assert asked_for(argv, {}, BACKEND) is (parsed.rdzv_backend == BACKEND)
    assert standalone_asked(argv, {}) is parsed.standalone


ACCELERATE = "/venv/bin/accelerate"
#: ``python -m`` puts the module's path first in ``sys.argv``.
ACCELERATE_CLI = "/venv/lib/python3.11/site-packages/accelerate/commands/accelerate_cli.py"
TORCH_LAUNCH = "/venv/lib/python3.11/site-packages/torch/distributed/launch.py"
#: The finding's command line: ``--multi_gpu`` is a flag, ``1`` the value of --num_machines.
FALLBACK_ACCELERATE = [
    ACCELERATE,
    "launch",
    "--multi_gpu",
    "--num_machines",
    "1",
    "--num_processes",
    "2",
    "--main_process_port",
    "29500",
    "--rdzv_backend",
    BACKEND,
    "--rdzv_conf",
    "segment_health_check_dir=/shc",
    "train.py",
]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (FALLBACK_ACCELERATE, bypass.Asked(BACKEND)),
        (
            [
                ACCELERATE,
                "launch",
                "--multi-gpu",
                "--mixed-precision",
                "no",
                "--rdzv-backend",
                BACKEND,
                "train.py",
            ],
            bypass.Asked(BACKEND),
        ),
        (
            ["/venv/bin/accelerate-launch", "--cpu", "--rdzv_backend", BACKEND, "t.py"],
            bypass.Asked(BACKEND),
        ),
        ([ACCELERATE, "launch", "train.py", "--rdzv_backend", BACKEND], bypass.Asked("static")),
        (
            ["/venv/bin/torchrun", "--stand", "--rdzv-b", BACKEND, "t.py"],
            bypass.Asked(BACKEND, True),
        ),
        (
            [
                "/venv/lib/python3.11/site-packages/torch/distributed/run.py",
                "--rdzv_backend",
                BACKEND,
                "--standalone",
                "t.py",
            ],
            bypass.Asked(BACKEND, True),
        ),
        (
            ["/venv/bin/torchrun", "-m", "pkg.train", "--rdzv-backend", BACKEND],
            bypass.Asked("static"),
        ),
        (
            ["/venv/bin/nvrx-seghealth", "run", "--standalone", "--rdzv-backend", BACKEND, "t.py"],
            bypass.Asked(None),
        ),  # run refuses it itself
        (
            ["/venv/bin/mine", "--multi_gpu", "--rdzv_backend", BACKEND, "t.py"],
            bypass.Asked(BACKEND),
        ),
        (["/venv/bin/mine", "--multi_gpu", "--rdzv_backend", BACKEND], bypass.Asked(BACKEND)),
        (
            ["/venv/bin/mine", "--multi_gpu", "t.py", "--rdzv_backend", BACKEND],
            bypass.Asked(BACKEND),
        ),  # a scan cannot know that --multi_gpu takes no value: t.py is read as its value
        (
            [TORCH_LAUNCH, "--use-env", "--rdzv-backend=segment-health", "--standalone", "t.py"],
            bypass.Asked(BACKEND, True),
        ),
        (
            [TORCH_LAUNCH, "--use_env", "--stand", "--rdzv-back", BACKEND, "t.py"],
            bypass.Asked(BACKEND, True),
        ),
        ([TORCH_LAUNCH, "--use-env", "t.py", "--rdzv-backend", BACKEND], bypass.Asked("static")),
        (
            [ACCELERATE_CLI, "launch", "--multi_gpu", "--num_machines", "1", "--rdzv_backend"]
            + [BACKEND, "train.py"],
            bypass.Asked(BACKEND),
        ),
        (
            [ACCELERATE_CLI, "launch", "--debug", "--rdzv-backend", BACKEND, "train.py"],
            bypass.Asked(BACKEND),
        ),
        ([ACCELERATE_CLI, "launch", "train.py", "--rdzv_backend", BACKEND], bypass.Asked("static")),
    ],
)
def test_a_known_launchers_options_are_read_by_its_own_parser(argv, expected, monkeypatch) -> None:
    """torchrun's parser takes abbreviations and flags as torchrun does; accelerate's knows its
    flags (``--multi_gpu``); any other program is scanned, where an unknown option takes the
    next token as its value unless that token is an option (``--multi_gpu t.py``: a value)."""
    for name in [name for name in os.environ if name.startswith("PET_")]:
        monkeypatch.delenv(name)
    assert bypass.asked(argv) == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["/venv/bin/torchrun", "--help", "--rdzv-backend", BACKEND],
        ["/venv/bin/torchrun", "--max-restarts=x", "--rdzv-backend", BACKEND, "t.py"],
        [ACCELERATE, "launch", "--num_processes=x", "--rdzv_backend", BACKEND, "t.py"],
        [ACCELERATE, "launch", "--help", "--rdzv_backend", BACKEND],
    ],
)
def test_a_parser_that_refuses_the_line_prints_nothing_exits_not_and_the_scan_reads_it(
    argv, capsys, monkeypatch
) -> None:
    for name in [name for name in os.environ if name.startswith("PET_")]:
        monkeypatch.delenv(name)
    assert bypass.asked(argv) == bypass.Asked(BACKEND)
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(
    "options",
    [
        ["--use-env", "--rdzv-backend=segment-health", "--standalone", "t.py"],
        ["--use_env", "--rdzv_backend", BACKEND, "t.py", "--standalone"],
        ["--standalone", "--use-env", "t.py", "--rdzv-backend", BACKEND],
        ["--rdzv-back", BACKEND, "--use_env", "--stand", "-m", "pkg.train"],
    ],
)
def test_torch_launch_is_read_as_its_own_parse_args_reads_it(options, monkeypatch) -> None:
    """``python -m torch.distributed.launch`` adds ``--use-env`` to torchrun's options: its
    ``parse_args`` (which exits on a line it refuses) is the reference."""
    from torch.distributed import launch

    for name in [name for name in os.environ if name.startswith("PET_")]:
        monkeypatch.delenv(name)
    parsed = launch.parse_args(options)
    expected = bypass.Asked(parsed.rdzv_backend, parsed.standalone)
    assert bypass.asked([TORCH_LAUNCH, *options]) == expected


def test_torchruns_parser_takes_its_environment_defaults(monkeypatch) -> None:
    monkeypatch.setenv("PET_RDZV_BACKEND", BACKEND)
    monkeypatch.setenv("PET_STANDALONE", "1")
    assert bypass.asked(["/venv/bin/torchrun", "t.py"]) == bypass.Asked(BACKEND, True)
    monkeypatch.setenv("PET_STANDALONE", "yes")  # torchrun's parser cannot be built: scanned
    assert bypass.asked(["/venv/bin/torchrun", "t.py"]) == bypass.Asked(BACKEND, False)


def test_the_options_taking_no_value_are_torchruns() -> None:
    """The scan knows which options take no value; torchrun's parser is the reference."""
    flags = {
        option
        for action in get_args_parser()._actions  # no public listing of the actions
        if action.nargs == 0
        for option in action.option_strings
    }
    assert flags == bypass._FLAGS


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/venv/bin/torchrun", "--nnodes=2", "t.py"], ["--nnodes=2", "t.py"]),
        (["/venv/lib/torch/distributed/run.py", "--nnodes=2"], ["--nnodes=2"]),
        (["/venv/bin/nvrx-seghealth", "run", "--nnodes=2"], ["--nnodes=2"]),
        (["/src/nvrx_seghealth/__main__.py", "run", "--nnodes=2"], ["--nnodes=2"]),
        (["/venv/bin/accelerate", "launch", "--num_processes=2"], ["--num_processes=2"]),
        ([ACCELERATE_CLI, "launch", "--num_processes=2"], ["--num_processes=2"]),
        ([ACCELERATE_CLI, "env", "--rdzv_backend=x"], ["env", "--rdzv_backend=x"]),
        ([TORCH_LAUNCH, "--use-env", "t.py"], ["--use-env", "t.py"]),
        (["/venv/bin/torchrun", "run", "--nnodes=2"], ["run", "--nnodes=2"]),  # a script
        (["/venv/bin/accelerate", "env", "--rdzv_backend=x"], ["env", "--rdzv_backend=x"]),
    ],
)
def test_a_wrappers_subcommand_comes_before_its_launcher_options(argv, expected) -> None:
    """``accelerate launch`` and ``nvrx-seghealth run`` take torchrun-like options after
    their subcommand word."""
    assert bypass._launcher(argv)[1] == expected


def _c10d(params: RendezvousParameters):
    backend, store = create_backend(params)
    return create_handler(store, backend, params)


@pytest.fixture
def registry() -> RendezvousHandlerRegistry:
    """A registry like torch's: c10d and this backend."""
    registry = RendezvousHandlerRegistry()
    registry.register("c10d", _c10d)
    register(registry)
    return registry


def params(backend: str, **conf: str) -> RendezvousParameters:
    return RendezvousParameters(backend, f"127.0.0.1:{free_port()}", "run", 1, 1, **conf)


def check_off(caplog) -> list[dict[str, str]]:
    """The fields of every record that says the check is off."""
    return [
        fields
        for fields in (parse_fields(record.getMessage()) for record in caplog.records)
        if fields.get("check") == "off"
    ]


@pytest.mark.parametrize(
    ("argv", "cause"),
    [
        (["torchrun", "--rdzv-backend=segment-health", "train.py"], "launcher-fallback"),
        (["torchrun", "--standalone", "--rdzv-backend=segment-health", "train.py"], "standalone"),
        (
            [TORCH_LAUNCH, "--use-env", "--rdzv-backend=segment-health", "--standalone", "t.py"],
            "standalone",
        ),
        (
            [ACCELERATE_CLI, "launch", "--multi_gpu", "--rdzv_backend", BACKEND, "train.py"],
            "launcher-fallback",
        ),
    ],
)
def test_a_rendezvous_of_another_backend_says_once_that_the_check_is_off(
    registry, caplog, argv, cause
) -> None:
    caplog.set_level(logging.WARNING, logger="nvrx_seghealth")
    bypass.watch(BACKEND, argv, {}, registry)
    assert check_off(caplog) == []  # asking says nothing yet: torch may never create one
    registry.create_handler(params("c10d", is_host="true"))
    registry.create_handler(params("c10d", is_host="true"))
    assert check_off(caplog) == [{"check": "off", "cause": cause, "backend": "c10d"}]


def test_the_backend_created_or_nothing_created_says_nothing(registry, caplog, shc) -> None:
    caplog.set_level(logging.WARNING, logger="nvrx_seghealth")
    bypass.watch(BACKEND, ["torchrun", "--rdzv-backend=segment-health", "train.py"], {}, registry)
    registry.create_handler(params(BACKEND, is_host="true", segment_health_check_dir=shc))
    with pytest.raises(ValueError, match="not registered"):
        registry.create_handler(params("etcd-v2"))
    with pytest.raises(ValueError):  # c10d refuses the setting: nothing created
        registry.create_handler(params("c10d", is_host="maybe"))
    assert check_off(caplog) == []


def test_a_launcher_that_did_not_ask_for_the_backend_is_left_alone(registry, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="nvrx_seghealth")
    bypass.watch(
        BACKEND, ["torchrun", "--rdzv-backend=c10d", *SCRIPT_SAYS_STANDALONE], {}, registry
    )
    registry.create_handler(params("c10d", is_host="true"))
    assert check_off(caplog) == []


def test_accelerates_flags_before_its_port_say_that_the_check_is_off(registry, caplog) -> None:
    """The finding's command line: the scan took ``--multi_gpu`` to have a value."""
    caplog.set_level(logging.WARNING, logger="nvrx_seghealth")
    bypass.watch(BACKEND, FALLBACK_ACCELERATE, {}, registry)
    registry.create_handler(params("c10d", is_host="true"))
    assert check_off(caplog) == [{"check": "off", "cause": "launcher-fallback", "backend": "c10d"}]
