"""``harness.session.coverage_startup``: in the processes a test starts, coverage pauses
while torch imports and measures the rest as before.

A probe package named ``torch`` records whether a tracer ran while it imported; coverage
measures it and the module that imports it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import coverage
import pytest

from harness.session.coverage_startup import FOLDER

#: The importing module: lines before and after ``import torch``.
APP = """\
import json, sys, threading
event = threading.Event()
if "--thread" in sys.argv:
    threading.Thread(target=event.wait).start()
import torch
event.set()
print(json.dumps({"traced": torch.TRACED}))
"""
#: The probe: whether a tracer ran while it imported.
PROBE = """\
import sys
TRACED = sys.gettrace() is not None
"""


def run(folder: Path, *args: str, startup: bool = True, measured: bool = True) -> dict:
    """Run the app in a process of its own in ``folder``, measured by coverage
    (``measured``), with the start-up folder first on its path (``startup``). Its
    report, with the lines measured in each file (``lines``)."""
    folder.mkdir()
    (folder / "torch").mkdir()
    (folder / "torch" / "__init__.py").write_text(PROBE)
    (folder / "app.py").write_text(APP)
    config = folder / "coveragerc"
    config.write_text(
        f"[run]\nbranch = true\nparallel = true\nsource = {folder}\n"
        f"data_file = {folder / 'data' / '.coverage'}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(FOLDER)] * startup + [str(folder)])
    if measured:
        env["COVERAGE_PROCESS_START"] = str(config)
    done = subprocess.run(
        [sys.executable, "-c", "import app", *args],
        cwd=folder, env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    report = json.loads(done.stdout)
    if measured:
        lines: dict[str, set[int]] = {}
        for path in (folder / "data").iterdir():  # one file per process measured
            measured_data = coverage.CoverageData(str(path))
            measured_data.read()
            for name in measured_data.measured_files():
                key = Path(name).relative_to(folder).as_posix()
                lines.setdefault(key, set()).update(measured_data.lines(name) or ())
        report["lines"] = {name: sorted(found) for name, found in lines.items()}
    return report


def test_torch_imports_unmeasured_and_the_rest_as_before(tmp_path):
    paused = run(tmp_path / "paused")
    plain = run(tmp_path / "plain", startup=False)
    assert (paused["traced"], plain["traced"]) == (False, True)
    assert plain["lines"]["torch/__init__.py"] == [1, 2]
    assert paused["lines"].get("torch/__init__.py", []) == []
    assert paused["lines"]["app.py"] == plain["lines"]["app.py"] == [1, 2, 3, 5, 6, 7]


def test_a_second_thread_keeps_the_tracer_on(tmp_path):
    threaded = run(tmp_path / "threaded", "--thread")
    assert threaded["traced"] is True
    assert threaded["lines"]["torch/__init__.py"] == [1, 2]
    assert threaded["lines"]["app.py"] == [1, 2, 3, 4, 5, 6, 7]


@pytest.mark.parametrize("startup", [True, False])
def test_without_coverage_the_process_starts_as_it_would(tmp_path, startup):
    assert run(tmp_path / "bare", startup=startup, measured=False) == {"traced": False}
