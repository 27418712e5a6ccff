"""The command line's reference page (docs/reference/cli.md) is the commands' own.

- Every option table is the rendering of the parsers (:mod:`harness.docsite.clireference`), both
  ways: an option missing from the page, and a row naming no option, each fail by name.
- The ``--json`` tables name the keys that ``check``, ``status`` and ``doctor`` print,
  run in a real directory with a real decision and a real producer's state file.
- The audit log's table is :class:`~nvrx_seghealth._producer.audit.EventKind`'s fields,
  and a real pass's lines carry them.
"""

from __future__ import annotations

import json
import re

import pytest

from harness.commands import nvrx_seghealth
from harness.docs import ROOT, examples_under, section
from harness.docsite.clireference import PAGE, TOP, blocks, page_blocks
from harness.services.fakeslurm import FakeSlurm
from nvrx_seghealth import Outcome
from nvrx_seghealth._commands.status import NOT_LOOKED_AT, UNREAD, ProducerHealth
from nvrx_seghealth._producer.audit import AuditEvent, EventKind

pytestmark = pytest.mark.torch  # run's block renders torchrun's parser

_OPTION = re.compile(r"`(-[^`]+)`")


def _rows(table_text: str) -> dict[str, list[str]]:
    """A Markdown table's rows by their first cell (backticks removed), after the header."""
    rows = {}
    for line in table_text.strip().splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        rows[cells[0].replace("`", "")] = cells[1:]
    return rows


def _table_after(text: str, header: str) -> str:
    start = text.index(header)
    return text[start:].split("\n\n", 1)[0]


def _options_of(block: str) -> set[str]:
    return {
        option
        for line in block.splitlines()
        if line.startswith("| `-")
        for option in _OPTION.findall(line.split(" | ", 1)[0])
    }


def test_every_command_has_its_generated_block():
    written = page_blocks((ROOT / PAGE).read_text())
    assert list(written) == list(blocks()), "a command without its section, or one too many"


@pytest.mark.parametrize("name", list(blocks()))
def test_the_option_table_is_the_parser_s(name):
    rendered = blocks()[name]
    written = page_blocks((ROOT / PAGE).read_text())[name]
    fix = "run .venv/bin/python -m harness.docsite.clireference to render the page again"
    missing = _options_of(rendered) - _options_of(written)
    assert not missing, f"{name}: options of the parser missing from {PAGE}: {missing}; {fix}"
    unknown = _options_of(written) - _options_of(rendered)
    assert not unknown, f"{name}: rows of {PAGE} that name no option: {unknown}; {fix}"
    assert written == rendered, f"{name}: a default, argument or help differs; {fix}"


def _json_table(heading: str, nth: int = 0) -> dict[str, list[str]]:
    header = "| field | value |"
    tables = section(PAGE, heading).split(header)[1:]
    return _rows(header + tables[nth].split("\n\n", 1)[0])


def _json_fields(heading: str, nth: int = 0) -> set[str]:
    return {name.strip() for cell in _json_table(heading, nth) for name in cell.split(",")}


def _values(heading: str, field: str, nth: int = 0) -> set[str]:
    """The values a field's row names, as code."""
    return set(re.findall(r"`([^`]+)`", _json_table(heading, nth)[field][0]))


def test_check_json_fields(tmp_path):
    done = nvrx_seghealth(
        "check", "--dir", str(tmp_path / "gone"), "--job-id", "5", "--task-id", "1", "--json"
    )
    printed = json.loads(done.stdout)
    assert printed["hint"]  # the missing directory's hint is one of the fields
    assert set(printed) == _json_fields("nvrx-seghealth check")
    assert _values("nvrx-seghealth check", "outcome") == {o.value for o in Outcome}


def test_status_json_fields(tmp_path):
    slurm = FakeSlurm(tmp_path)
    assert slurm.run().returncode == 0  # a real pass: decisions and a state file
    done = nvrx_seghealth("status", "--dir", str(slurm.shc), "--json")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert set(printed) == {"directory", "decisions", "producers", "warnings"}
    status = section(PAGE, "nvrx-seghealth status")
    assert all(f"`{key}`" in status.split("A decision:")[0] for key in printed)
    decisions = {key for row in printed["decisions"] for key in row}
    assert decisions == _json_fields("nvrx-seghealth status")
    states = {o.value for o in Outcome} | {UNREAD, NOT_LOOKED_AT}
    assert _values("nvrx-seghealth status", "state") == states
    health = _values("nvrx-seghealth status", "state", nth=1)
    assert health == {h.value for h in ProducerHealth}
    (producer,) = printed["producers"]
    documented = _json_fields("nvrx-seghealth status", nth=1)
    assert set(producer) == documented - {"unreadable"}
    (slurm.shc / next(p.name for p in slurm.shc.iterdir() if p.name.endswith(".json"))).write_text(
        "{"
    )
    broken = json.loads(nvrx_seghealth("status", "--dir", str(slurm.shc), "--json").stdout)
    (producer,) = broken["producers"]
    assert set(producer) == {"producer_id", "job_id", "state", "unreadable"}


def test_doctor_json_fields(tmp_path):
    done = nvrx_seghealth("doctor", "--dir", str(tmp_path), "--json")
    printed = json.loads(done.stdout)
    assert set(printed) == _json_fields("nvrx-seghealth doctor")
    assert {key for finding in printed["findings"] for key in finding} == {"level", "message"}


def _audit_table() -> dict[str, set[str]]:
    text = section(PAGE, "The audit log")
    rows = _rows(_table_after(text, "| `event` | other fields |"))
    return {event: {f.strip("` ") for f in cells[0].split(",")} for event, cells in rows.items()}


def test_the_audit_table_is_the_producer_s():
    assert _audit_table() == {kind.value: set(kind.fields) for kind in EventKind}
    line = json.loads(
        AuditEvent(EventKind.PASS_FAILED, "5", "ops", error="x", failing_since=0.0).to_json("t")
    )
    common = set(line) - set(EventKind.PASS_FAILED.fields)
    text = section(PAGE, "The audit log")
    assert all(f"`{field}`" in text.split("| `event` |")[0] for field in common), common


def test_a_real_pass_writes_the_documented_lines(tmp_path):
    slurm = FakeSlurm(tmp_path)
    slurm.decision(0).write_text("nvrx-seghealth publish-drained[t1]: old\n")  # cleared
    assert slurm.run().returncode == 0
    table = _audit_table()
    lines = [json.loads(line) for line in slurm.audit.read_text().splitlines()]
    assert {line["event"] for line in lines} == {"published", "cleared"}
    for line in lines:
        common = {"time", "event", "job_id", "producer_id"}
        assert set(line) == common | table[line["event"]]
        assert list(line) == sorted(line)
    (example,) = examples_under(PAGE, "The audit log", "text")
    shown = json.loads(example.text)
    assert set(shown) == {"time", "event", "job_id", "producer_id"} | table[shown["event"]]


def test_the_top_block_lists_every_command():
    text = page_blocks((ROOT / PAGE).read_text())[TOP]
    listed = set(_rows(_table_after(text, "| command |")))
    assert {re.sub(r"\[(.*)\]\(.*\)", r"\1", c) for c in listed} == set(blocks()) - {TOP}
