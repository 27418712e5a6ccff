"""What docs/reference/etcd-v3.md and docs/cluster.md claim of etcd-v3, held to the code:
the install line's extra, the run id an array shares, the releases CI runs, doctor's
levels."""

from __future__ import annotations

import re
from pathlib import Path

from harness.docs import commands, examples_under, section
from harness.services.etcd import ETCD_RELEASES

PAGE = "docs/reference/etcd-v3.md"
ROOT = Path(__file__).resolve().parents[3]


def test_the_install_line_names_an_extra_of_a_checkout():
    """The package is on no index: the page installs a checkout, with an extra it has."""
    (block,) = examples_under(PAGE, "The etcd-v3 backend")
    pip = commands(block.text)[0]
    assert pip[:2] == ["pip", "install"]
    target, extra = re.fullmatch(r"(\.)\[(\w+)\]", pip[2]).groups()  # type: ignore[union-attr]
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extras = pyproject.split("[project.optional-dependencies]\n", 1)[1].split("\n[", 1)[0]
    assert target == "." and extra in re.findall(r"^([\w-]+) = \[", extras, re.MULTILINE)


def test_the_run_id_is_the_one_every_array_task_shares():
    (block,) = examples_under(PAGE, "The etcd-v3 backend")
    torchrun = commands(block.text)[1]
    assert "--rdzv-id=$SLURM_ARRAY_JOB_ID" in torchrun


def test_the_releases_tested_are_those_ci_runs():
    """Each release of the harness is named as tested; no other is claimed."""
    tested = section(PAGE, "Tested on")
    ran = set(re.findall(r"\b(3\.\d+)\.\d+ \(", tested))  # "3.4.23 (Debian 12's ...)"
    assert ran == set(ETCD_RELEASES)
    opening = section(PAGE, "The etcd-v3 backend").split("##", 1)[0]
    assert set(re.findall(r"\b3\.\d+\b", opening)) <= set(ETCD_RELEASES)


def test_doctor_s_levels_are_listed_as_doctor_gives_them():
    """docs/cluster.md's list of ``doctor --etcd``'s levels; integration/etcd/
    test_v3_doctor.py runs each case against real members."""
    text = section("docs/cluster.md", "When to choose etcd over c10d")
    levels = dict(re.findall(r"^- `(FAIL|warn|hint)`: (.*(?:\n  .*)*)", text, re.MULTILINE))
    assert set(levels) == {"FAIL", "warn", "hint"}
    for level, case in [
        ("FAIL", "no named member answers"),
        ("FAIL", "another cluster"),
        ("FAIL", "NOSPACE"),
        ("warn", "a named member does not answer"),
        ("warn", "no member's client URL"),
        ("hint", "not named"),
    ]:
        assert case in " ".join(levels[level].split()), (level, case)
