"""README.md's examples as the tests read them: each fenced block with the heading it sits
under (:func:`readme_examples`), and the shell commands of a block (:func:`commands`).

Used by ``tests/test_readme.py``, which claims every block for a check, and by the tests
that run a README command elsewhere (``integration/etcd/test_readme_etcd.py``).
"""

from __future__ import annotations

import os
import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "README",
    "ROOT",
    "Example",
    "clean_environment",
    "commands",
    "examples_under",
    "readme_examples",
    "without_srun",
]

#: The repository, and its README.
ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


@dataclass(frozen=True)
class Example:
    """One fenced block of the README: the heading it sits under, its language, its text."""

    heading: str
    language: str
    text: str
    line: int


def readme_examples() -> list[Example]:
    """The fenced blocks of README.md in order (indented fences of list items included)."""
    examples: list[Example] = []
    heading, language, start = "", "", 0
    block: list[str] | None = None
    for number, line in enumerate(README.read_text().splitlines(), 1):
        fence = re.fullmatch(r"( *)```(\w*)", line)
        if block is None and line.startswith("#"):
            heading = line.lstrip("#").strip().strip("`")
        elif fence and block is None:
            block, language, start = [], fence.group(2), number
        elif fence is not None and block is not None:
            examples.append(Example(heading, language, textwrap.dedent("\n".join(block)), start))
            block = None
        elif block is not None:
            block.append(line)
    return examples


def examples_under(heading: str, language: str = "bash") -> list[Example]:
    """The blocks in ``language`` under ``heading``; fails the test when there is none."""
    found = [e for e in readme_examples() if e.heading == heading and e.language == language]
    assert found, f"README has no {language} example under {heading!r}"
    return found


def commands(text: str) -> list[list[str]]:
    """The shell commands of a block: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [
        shlex.split(line, comments=True)
        for line in joined.splitlines()
        if shlex.split(line, comments=True)
    ]


def without_srun(argv: list[str]) -> list[str]:
    """``argv`` after ``srun`` and its options (an ``srun ... PROGRAM ARGS`` line)."""
    if argv[0] != "srun":
        return argv
    rest = argv[1:]
    while rest[0].startswith("-"):
        rest = rest[1:]
    return rest


def clean_environment() -> dict[str, str]:
    """This process's environment without ``SLURM_*`` and ``NVRX_*`` variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NVRX_"))}
