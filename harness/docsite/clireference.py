"""The command line's reference tables, rendered from the commands' own parsers.

docs/reference/cli.md holds one generated block per command, between two HTML comments
(:data:`BEGIN`, :data:`END`). :func:`blocks` renders each from the parser that
``nvrx-seghealth`` builds (:func:`nvrx_seghealth._commands.build_parser`): the command's
one-line summary and a row per option, with its argument, default and help.

- ``run`` takes torchrun's options: its block lists the three it adds to torchrun's parser.
- A block is rendered from the parsers' objects, never from the source's text.

``python -m harness.docsite.clireference`` rewrites the blocks of the page; the page's test
(tests/reference/test_cli.py) fails while a block differs from its rendering.
"""

from __future__ import annotations

import argparse
import re
import sys

from nvrx_seghealth._commands import build_parser

from ..docs import ROOT

__all__ = ["BEGIN", "END", "PAGE", "blocks", "page_blocks", "rewrite", "subcommands"]

#: The page, relative to the repository.
PAGE = "docs/reference/cli.md"
#: The comment before a generated block, with the command's name.
BEGIN = "<!-- generated from the parser by harness/docsite/clireference.py: {name} -->"
#: The comment after a generated block.
END = "<!-- end of the generated block -->"
#: The block of the top-level parser: the command list and ``--version``.
TOP = "nvrx-seghealth"
#: The argument group ``run`` adds to torchrun's parser.
RUN_GROUP = "segment health check"

_BLOCK = re.compile(
    re.escape(BEGIN).replace(r"\{name\}", r"(?P<name>[a-z-]+)")
    + r"\n(?P<body>.*?)"
    + re.escape(END),
    re.DOTALL,
)


def subcommands() -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """Each subcommand, in ``--help``'s order: its summary and its parser (``run``'s:
    torchrun's parser with the options it adds)."""
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    summaries = {choice.dest: choice.help or "" for choice in action._choices_actions}
    found = {}
    for name, subparser in action.choices.items():
        if name == "run":
            from nvrx_seghealth._commands.run import launch_parser  # imports torch

            subparser = launch_parser()
        found[name] = (summaries[name], subparser)
    return found


def _options(parser: argparse.ArgumentParser, name: str) -> list[argparse.Action]:
    """The options a reader sets: every optional argument but ``--help`` (for ``run``,
    those of the group it adds to torchrun's)."""
    actions = parser._actions
    if name == "run":
        (group,) = [g for g in parser._action_groups if g.title == RUN_GROUP]
        actions = group._group_actions
    return [a for a in actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


#: What the help says literally: an option (``--fs-timeout``), a variable
#: (``$NVRX_...``), a placeholder (``<account>-<states>``). Set as code: the site would
#: turn ``--`` into a dash, and Markdown reads ``<...>`` as HTML.
_LITERAL = re.compile(r"(?<![\w`])(--?[A-Za-z][\w-]*|\$[A-Z_]+|(?:[\w-]*<\w+>)+[\w-]*)")


def _cell(text: str) -> str:
    """``text`` as a Markdown table cell: one line, its literals as code, ``|`` escaped."""
    return _LITERAL.sub(r"`\1`", " ".join(text.split())).replace("|", r"\|")


def _argument(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    metavar = action.metavar or action.dest.upper()
    if action.nargs == "*":
        return f"[{metavar} ...]"
    return str(metavar)


def _default(action: argparse.Action) -> str:
    value = action.default
    if action.required:
        return "required"
    if action.nargs == 0:
        return "off"
    if value is None or value == argparse.SUPPRESS or value in ({}, ""):
        return "—"
    if isinstance(value, (list, tuple)):
        return (" " if action.nargs == "*" else ",").join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help as ``--help`` prints it (``%(default)s`` and the like expanded)."""
    return parser._get_formatter()._expand_help(action) if action.help else ""


def _table(parser: argparse.ArgumentParser, actions: list[argparse.Action]) -> list[str]:
    rows = ["| option | argument | default | meaning |", "|---|---|---|---|"]
    for action in actions:
        names = ", ".join(f"`{option}`" for option in action.option_strings)
        cells = (names, _argument(action), _default(action), _help(parser, action))
        rows.append("| " + " | ".join((names, *(_cell(c) for c in cells[1:]))) + " |")
    return rows


def blocks() -> dict[str, str]:
    """Each generated block's text by name: :data:`TOP`'s, then every subcommand's."""
    commands = subcommands()
    top = build_parser()
    lines = ["| command | what it does |", "|---|---|"]
    lines += [
        f"| [`{name}`](#nvrx-seghealth-{name}) | {_cell(s)} |" for name, (s, _) in commands.items()
    ]
    lines += ["", *_table(top, _options(top, TOP))]
    rendered = {TOP: "\n".join(lines)}
    for name, (summary, parser) in commands.items():
        options = _options(parser, name)
        text = [_cell(summary[:1].upper() + summary[1:]) + "."]
        if options:
            text += ["", *_table(parser, options)]
        rendered[name] = "\n".join(text)
    return rendered


def page_blocks(text: str) -> dict[str, str]:
    """The generated blocks of the page's ``text`` by name, as written."""
    return {m["name"]: m["body"].strip("\n") for m in _BLOCK.finditer(text)}


def rewrite(text: str) -> str:
    """``text`` with every generated block rendered afresh."""
    rendered = blocks()
    return _BLOCK.sub(
        lambda m: f"{BEGIN.format(name=m['name'])}\n\n{rendered[m['name']]}\n\n{END}", text
    )


if __name__ == "__main__":
    path = ROOT / PAGE
    before = path.read_text()
    after = rewrite(before)
    path.write_text(after)
    print(f"{PAGE}: {'rewritten' if after != before else 'unchanged'}", file=sys.stderr)
