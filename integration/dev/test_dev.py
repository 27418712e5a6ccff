"""``./dev``: the set-up-and-run command of a checkout (the front page's "Try it").

A fresh clone's first ``./dev test`` is what CI runs (``.ci/run``), so a whole set-up from
nothing is proven there. These tests cover the rest: usage errors, a set-up's steps said as
they begin and the one that fails named (pip without an index, in a new environment), and
that a set-up ``.venv`` is reused (no reinstall) and dispatches to the demo.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEV = ROOT / "dev"


def dev(
    *args: str, timeout: float = 120, drop: str = "COVERAGE_", **settings: str
) -> subprocess.CompletedProcess[str]:
    """``./dev ARGS`` in the checkout, as a user runs it: without this environment's
    variables whose names start with ``drop`` (this run's coverage by default: its helpers
    would write their data files into the checkout), plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COVERAGE_", drop))}
    env.update(settings)
    return subprocess.run(
        [str(DEV), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        check=False,
    )


@pytest.mark.parametrize("args", [(), ("deploy",)])
def test_no_or_an_unknown_command_prints_the_usage_and_exits_2(args):
    done = dev(*args)
    assert done.returncode == 2 and done.stdout == ""
    assert "./dev demo" in done.stderr and "./dev test" in done.stderr


def test_a_set_up_venv_is_reused_and_runs_the_demo_command():
    venv = ROOT / ".venv"
    if Path(sys.prefix) != venv or not (venv / ".nvrx-seghealth-installed").is_file():
        message = "needs the tests to run in the .venv that ./dev set up (./dev test)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    done = dev("demo", "--help")
    assert done.returncode == 0, done.stderr
    assert "--keep-logs" in done.stdout
    assert "setting up" not in done.stderr  # nothing installed again


def setup_steps(stderr: str) -> list[tuple[str, str]]:
    """Each line of the set-up's steps: the step (``2/3``) and what it says first (``at``
    its start, ``failed``, or ``:`` an environment that exists)."""
    return re.findall(r"^dev: setup step (\d/3)(:| at| failed)", stderr, re.MULTILINE)


def test_a_new_environment_says_each_step_and_names_the_one_that_failed(tmp_path):
    """pip without an index or a configuration: the environment is created, the torch
    requirement (``pip``, in every new environment) is met at once, and the package's step
    fails. Nothing is marked installed; the next run says the environment exists."""
    venv = tmp_path / "venv"
    settings = {
        "VENV": str(venv),
        "PYTHON": sys.executable,
        "TORCH_SPEC": "pip",
        "PIP_CONFIG_FILE": os.devnull,  # no configured find-links or index
        "PIP_NO_INDEX": "1",
    }
    for step_1 in (" at", ":"):  # created, then found
        done = dev("demo", "--help", timeout=300, drop="PIP_", **settings)
        steps = [("1/3", step_1), ("2/3", " at"), ("3/3", " at"), ("3/3", " failed")]
        assert (done.returncode, setup_steps(done.stderr)) == (1, steps), done.stderr
        assert not (venv / ".nvrx-seghealth-installed").exists()


def cpu_hogs() -> list[str]:
    """PIDs of the CPU hogs ``./dev loaded-test`` starts (tagged in their command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"nvrx-seghealth-cpu-hog" in argv:
            found.append(entry.name)
    return found


@pytest.mark.parametrize("selection,status", [("tests/test_logfmt.py", 0), ("tests/absent.py", 4)])
def test_loaded_test_runs_pytest_beside_two_hogs_and_stops_them(selection, status):
    """pytest's exit status is the command's; no hog outlives it, nothing is left in the
    checkout."""
    assert cpu_hogs() == []
    before = set(ROOT.iterdir())
    done = dev("loaded-test", "-q", "-p", "no:cacheprovider", selection, timeout=600)
    assert done.returncode == status, done.stdout + done.stderr
    assert cpu_hogs() == []
    assert set(ROOT.iterdir()) - before == set()
