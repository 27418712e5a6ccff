"""Every example names the decision directory a launcher reads: the root plus the job id.

The example job script's launchers read ``$SEGHEALTH_DECISION_ROOT/<array job id>``, so an
operator's command writes there: ``--dir /shared/job/segment-health-check/123 --job-id 123``.
A ``--dir`` that stops at the root names a directory no launcher reads: the unit trains anyway.

The test reads every ``nvrx-seghealth SUBCOMMAND`` example of the documentation's pages
(README.md and ``docs/**``), of ``examples/`` and of every command's ``--help``.

- With ``--job-id J``, its ``--dir`` must end in ``/J``.
- Without it, its ``--dir`` must end in a job id: digits, ``<array job id>``,
  ``$SLURM_ARRAY_JOB_ID`` or the script's ``$job_id``.
- A metavar (``--dir DIR`` in a usage line) names no directory and is skipped.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from harness.docs import PAGES, ROOT
from nvrx_seghealth._commands import build_parser

#: The last part of a directory that names a job: an id, a placeholder, a variable.
JOB_ID = re.compile(r"[0-9]+|<array_job_id>|<job_id>|\$\{?SLURM_ARRAY_JOB_ID\}?|\$\{?job_id\}?")

_COMMAND = re.compile(r"nvrx-seghealth [a-z-]+\b[^`|\n]*")
_OPTION = {name: re.compile(rf"{name}(?:=|\s+)(\S+)") for name in ("--dir", "--job-id")}


@dataclass(frozen=True)
class Command:
    """One ``nvrx-seghealth`` command line of an example, and where it was found."""

    where: str
    text: str


def _placeholders(text: str) -> str:
    """``<array job id>`` as one token, ``<array_job_id>``."""
    return re.sub(r"<([^<>]*)>", lambda m: "<" + m.group(1).strip().replace(" ", "_") + ">", text)


def _joined(text: str) -> str:
    """``text`` with shell continuations joined, a comment's ``#`` lead dropped first."""
    lines = [re.sub(r"^\s*#\s?", "", line) for line in text.splitlines()]
    return re.sub(r"\\\n\s*", " ", "\n".join(lines))


def _spans_on_one_line(text: str) -> str:
    """``text`` with each inline code span of its prose on one line (a span may wrap)."""
    parts = re.split(r"(^\s*```.*$)", text, flags=re.MULTILINE)  # fences at odd indices
    fenced = False
    for i, part in enumerate(parts):
        if i % 2:
            fenced = not fenced
        elif not fenced:
            parts[i] = re.sub(r"`[^`]+`", lambda m: " ".join(m.group(0).split()), part)
    return "".join(parts)


def _commands(where: str, text: str) -> list[Command]:
    text = _spans_on_one_line(text)
    text = _placeholders(_joined(text)).replace("[", " ").replace("]", " ")
    return [Command(where, match.group(0)) for match in _COMMAND.finditer(text)]


def _help_texts() -> dict[str, str]:
    """The ``--help`` text of the console script and of each subcommand."""
    parser = build_parser()
    texts = {"nvrx-seghealth --help": parser.format_help()}
    for action in parser._actions:  # argparse keeps its subcommands here, privately
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                texts[f"nvrx-seghealth {name} --help"] = sub.format_help()
    return texts


def _examples() -> list[Command]:
    found = [command for page in PAGES for command in _commands(page, (ROOT / page).read_text())]
    found += [
        command
        for path in sorted((ROOT / "examples").iterdir())
        if path.is_file()
        for command in _commands(f"examples/{path.name}", path.read_text())
    ]
    found += [
        command for where, text in _help_texts().items() for command in _commands(where, text)
    ]
    return found


def misplaced(command: Command) -> str | None:
    """Why ``command``'s ``--dir`` is not a directory a launcher reads; ``None`` when it is
    (or when it names none)."""
    if re.search(r"--dir\s*$", command.text):
        return "--dir without a directory (a span cut short?)"
    directory = _OPTION["--dir"].search(command.text)
    if directory is None or re.fullmatch(r"[A-Z_]+", directory.group(1)):
        return None  # no --dir, or a metavar
    path = directory.group(1).rstrip("/`,;:)").strip("\"'")  # shell quotes too
    job = _OPTION["--job-id"].search(command.text)
    last = path.rsplit("/", 1)[-1]
    if job is not None:
        job_id = job.group(1).strip("\"'")
        if last != job_id:
            return f"--dir {path} does not end in its --job-id {job_id}"
        return None
    if not JOB_ID.fullmatch(last):
        return f"--dir {path} does not end in a job id (the root plus the array job id)"
    return None


def test_the_examples_are_found():
    """The reader sees the commands of each kind of source (a test that finds none could
    not fail)."""
    found = _examples()
    with_dir = [c for c in found if "--dir" in c.text]
    sources = {c.where.split("/")[0] if "/" in c.where else c.where for c in with_dir}
    assert len(with_dir) >= 20, with_dir
    assert {"docs", "examples", "nvrx-seghealth mark --help"} <= sources, sources


def test_the_rule_tells_a_root_from_a_job_s_directory():
    root = "/shared/job/segment-health-check"
    assert misplaced(Command("here", f"nvrx-seghealth mark --dir {root} --job-id 123"))
    assert misplaced(Command("here", f"nvrx-seghealth status --dir {root}"))
    assert misplaced(Command("here", f"nvrx-seghealth check --dir {root}/124 --job-id 123"))
    for good in (
        f"nvrx-seghealth mark --dir {root}/123 --job-id 123 --task-id 7",
        f"nvrx-seghealth status --dir {root}/123",
        f"nvrx-seghealth publish-drained --dir {root}/<array_job_id> --job-id <array_job_id>",
        "nvrx-seghealth doctor --dir /shared/job/segment-health-check/$SLURM_ARRAY_JOB_ID",
        "nvrx-seghealth check --dir DIR",
        'nvrx-seghealth publish-drained --dir "$root/$job" --job-id "$job"',
    ):
        assert misplaced(Command("here", good)) is None, good


def test_every_example_dir_is_a_directory_a_launcher_reads():
    wrong = [
        f"{command.where}: {why}: {command.text.strip()}"
        for command in _examples()
        if (why := misplaced(command)) is not None
    ]
    assert not wrong, "\n".join(wrong)
