"""One place turns a command's ``ConfigurationError`` into exit 2: ``main()``.

Every operator command raises its usage errors; the dispatcher prints each as one line,
``nvrx-seghealth COMMAND: error: MESSAGE``, and exits 2 with nothing done.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.commands import nvrx_seghealth
from nvrx_seghealth._commands import _SUBCOMMANDS, build_parser, main
from nvrx_seghealth._commands.output import EXIT_BROKEN_PIPE
from nvrx_seghealth._settings.durations import DEFAULT_STAT_TIMEOUT, FS_TIMEOUT

UNIT = ["--job-id", "1", "--task-id", "2"]


@pytest.mark.parametrize(
    "argv,named",
    [
        (["check", "--dir", "rel", *UNIT], "--dir"),
        (["check", "--dir", "/shc", "--job-id", "1"], "--task-id"),
        (["mark", "--dir", "rel", *UNIT, "--reason", "x"], "--dir"),
        (["mark", "--dir", "/shc", *UNIT, "--reason", " "], "--reason"),
        (["clear", *UNIT], "NVRX_SEGMENT_HEALTH_CHECK_DIR"),
        (["status", "--dir", "rel"], "--dir"),
        (["store-host", "--port", "70000"], "--port"),
    ],
)
def test_a_configuration_error_is_one_usage_line_and_exit_2(argv, named):
    done = nvrx_seghealth(*argv)
    assert (done.returncode, done.stdout) == (2, "")
    [line] = done.stderr.splitlines()
    assert line.startswith(f"nvrx-seghealth {argv[0]}: error: ") and named in line


def test_main_returns_2_for_a_raised_configuration_error(tmp_path, capsys):
    assert main(["status", "--dir", "rel"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("nvrx-seghealth status: error: --dir")


@pytest.mark.parametrize("value", ["0", "0.05", "-1", "600.5", "inf", "nan", "soon"])
def test_fs_timeout_is_checked_by_the_duration_validator(tmp_path, value):
    """--fs-timeout takes the range of the package's one duration validator; a value
    out of it is argparse's usage error (exit 2) stating that range."""
    done = nvrx_seghealth("status", "--dir", str(tmp_path), "--fs-timeout", value)
    assert (done.returncode, done.stdout) == (2, "")
    assert "argument --fs-timeout: " in done.stderr and FS_TIMEOUT.range_text in done.stderr


def test_fs_timeout_keeps_its_default_and_takes_its_range_ends():
    parser = build_parser()
    assert parser.parse_args(["status"]).fs_timeout == DEFAULT_STAT_TIMEOUT
    for value in (FS_TIMEOUT.minimum, FS_TIMEOUT.maximum):
        assert parser.parse_args(["status", "--fs-timeout", f"{value:g}"]).fs_timeout == value


@pytest.mark.parametrize(
    "argv",
    [
        ["check", *UNIT],
        ["check", *UNIT, "--json"],
        ["status"],
        ["check", "--job-id", "1"],  # a usage error: its line goes to a closed stderr too
    ],
)
def test_output_to_a_reader_that_went_away_ends_quietly_with_141(tmp_path, argv):
    """``nvrx-seghealth check ... | head -1``: the pipe's reader is gone (here before the
    command writes at all); the command ends with 141, as one killed by SIGPIPE, and no
    traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = nvrx_seghealth(
            *argv, "--dir", str(tmp_path), stdout=write_end, stderr=write_end, env={}
        )
    finally:
        os.close(write_end)
    assert done.returncode == EXIT_BROKEN_PIPE == 141


@pytest.mark.parametrize(
    ("argv", "returncode"), [(["status"], EXIT_BROKEN_PIPE), (["status", "--help"], 0)]
)
def test_a_closed_stdout_leaves_stderr_alone(tmp_path, argv, returncode):
    """Only stdout is gone: stderr has no traceback; argparse's ``--help`` keeps its 0."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = nvrx_seghealth(*argv, "--dir", str(tmp_path), stdout=write_end)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (returncode, "")


def _module(command: str) -> str:
    return f"nvrx_seghealth._commands.{_SUBCOMMANDS[command]}"


@pytest.mark.parametrize("command", ["status", "clear", "store-host"])
def test_a_command_line_imports_its_own_command_alone(command):
    """An operator's command loads its module, not the others (nor torch)."""
    code = (
        "import sys\n"
        "from nvrx_seghealth._commands import main\n"
        f"try:\n    main([{command!r}, '--help'])\nexcept SystemExit:\n    pass\n"
        "print(' '.join(m for m in sys.modules if m.startswith('nvrx_seghealth._commands.')))\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules, torch = done.stdout.splitlines()[-2:]
    commands = {_module(name) for name in _SUBCOMMANDS}
    assert commands & set(modules.split()) == {_module(command)}
    assert torch == "False"


def test_the_full_parser_lists_every_command_and_a_command_line_builds_its_own():
    def listed(parser):
        return list(parser._subparsers._group_actions[0].choices)

    assert listed(build_parser()) == list(_SUBCOMMANDS)
    assert listed(build_parser("clear")) == ["mark", "clear"]
