"""The documentation's examples and links as the tests read them: each fenced block of
README.md and of the pages in ``docs/``, with the page and the heading it sits under
(:func:`doc_examples`), the shell commands of a block (:func:`commands`), and each
relative link of a page with the anchors a forge and the site give its target's headings
(:func:`relative_links`, :func:`anchors`).

Used by ``tests/test_docs.py``, which claims every block for a check and resolves every
link, and by the tests that run a documented command elsewhere
(``integration/etcd/test_docs_etcd.py``).
"""

from __future__ import annotations

import os
import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "PAGES",
    "ROOT",
    "Example",
    "Link",
    "anchors",
    "ci_commands",
    "commands",
    "doc_examples",
    "examples_under",
    "relative_links",
    "section",
    "without_srun",
]

#: The repository.
ROOT = Path(__file__).resolve().parents[1]


def _pages() -> tuple[str, ...]:
    """The documentation's pages, relative to the repository: the front page, then docs/."""
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
    return ("README.md", *pages)


#: Every page whose examples are claimed: README.md and ``docs/**/*.md``.
PAGES = _pages()

_FENCE = re.compile(r"( *)```(\S*)")


@dataclass(frozen=True)
class Example:
    """One fenced block: its page, the heading it sits under, its language, its text."""

    page: str
    heading: str
    language: str
    text: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line} ({self.heading!r}, {self.language or 'plain'})"


def _heading(line: str) -> str:
    return line.lstrip("#").strip().replace("`", "")


def doc_examples(page: str) -> list[Example]:
    """The fenced blocks of ``page`` in order (indented fences of list items included)."""
    examples: list[Example] = []
    heading, language, start = "", "", 0
    block: list[str] | None = None
    for number, line in enumerate((ROOT / page).read_text().splitlines(), 1):
        fence = _FENCE.fullmatch(line)
        if block is None and line.startswith("#"):
            heading = _heading(line)
        elif fence and block is None:
            block, language, start = [], fence.group(2), number
        elif fence is not None and block is not None:
            text = textwrap.dedent("\n".join(block))
            examples.append(Example(page, heading, language, text, start))
            block = None
        elif block is not None:
            block.append(line)
    return examples


def examples_under(page: str, heading: str, language: str = "bash") -> list[Example]:
    """The blocks in ``language`` under ``heading`` of ``page``; fails the test when there
    is none."""
    found = [e for e in doc_examples(page) if e.heading == heading and e.language == language]
    assert found, f"{page} has no {language} example under {heading!r}"
    return found


def section(page: str, heading: str) -> str:
    """The text of ``page`` from the heading ``heading`` to the next heading of its level
    or above."""
    lines = (ROOT / page).read_text().splitlines()
    for start, line in enumerate(lines):
        if line.startswith("#") and _heading(line) == heading:
            level = len(line) - len(line.lstrip("#"))
            break
    else:
        raise AssertionError(f"{page} has no heading {heading!r}")
    end = next(
        (i for i in range(start + 1, len(lines)) if re.match(rf"#{{1,{level}}} ", lines[i])),
        len(lines),
    )
    return "\n".join(lines[start:end])


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


def ci_commands() -> set[str]:
    """The commands ``.ci/run`` runs, one per line as written, without what a line adds to
    keep a command's status for later (``./dev test-all || status=$?`` is ``./dev test-all``)."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return {line.split(" || ")[0] for line in lines}


@dataclass(frozen=True)
class Link:
    """A relative link of a page: the file it names (relative to the repository, ``""``
    for the page itself) and its anchor (``""`` for none)."""

    page: str
    line: int
    target: str
    anchor: str


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> list[tuple[int, str]]:
    """The lines of ``text`` outside fenced blocks, without their inline code."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.fullmatch(line):
            fenced = not fenced
        elif not fenced:
            lines.append((number, re.sub(r"`[^`]*`", "", line)))
    return lines


def relative_links(page: str) -> list[Link]:
    """Every Markdown link of ``page`` that is not a URL, resolved against the page."""
    links = []
    for number, line in _prose((ROOT / page).read_text()):
        for target in _LINK.findall(line):
            if re.match(r"[a-z][a-z+.-]*:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            if path:
                resolved = os.path.normpath((Path(page).parent / path).as_posix())
            else:
                resolved = page
            links.append(Link(page, number, resolved, anchor))
    return links


def _slug(heading: str) -> str:
    """A heading's anchor as a forge makes it, and MyST with ``myst_heading_anchors``
    (``github_slugify``): lower case, spaces made ``-``, every other character that is not
    a word character or ``-`` dropped (so ``Never `--standalone``` is ``never---standalone``)."""
    return re.sub(r"[^\w\- ]", "", heading.lower().replace(" ", "-"))


def anchors(page: str) -> set[str]:
    """The anchors of ``page``'s headings (a repeated one gets ``-1``, ``-2``, ...)."""
    found: set[str] = set()
    fenced = False
    for line in (ROOT / page).read_text().splitlines():
        if _FENCE.fullmatch(line):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            slug = _slug(line.lstrip("#").strip().replace("`", ""))
            unique, count = slug, 0
            while unique in found:
                count += 1
                unique = f"{slug}-{count}"
            found.add(unique)
    return found
