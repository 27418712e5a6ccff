"""The Python API page (docs/reference/python-api.md) lists every public signature as
:func:`inspect.signature` gives it: each function and constructor of ``nvrx_seghealth``,
its parameters in order, ``*`` before the keyword-only ones, and their defaults."""

from __future__ import annotations

import enum
import inspect

import pytest

import nvrx_seghealth
from harness.docs import section

PAGE = "docs/reference/python-api.md"

pytestmark = pytest.mark.torch  # the handler's signature names torch's types


def _callables() -> dict[str, object]:
    """The public functions and constructors: exceptions and enums take no arguments a
    reader gives."""
    found = {}
    for name in nvrx_seghealth.__all__:
        obj = getattr(nvrx_seghealth, name)
        if not callable(obj):
            continue
        if inspect.isclass(obj) and issubclass(obj, (BaseException, enum.Enum)):
            continue
        found[name] = obj
    return found


def _parameters(obj: object) -> list[str]:
    rendered, keyword_only = [], False
    for p in inspect.signature(obj).parameters.values():  # type: ignore[arg-type]
        if p.kind is p.KEYWORD_ONLY and not keyword_only:
            rendered.append("*")
            keyword_only = True
        rendered.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    return rendered


def _table() -> dict[str, list[str]]:
    text = section(PAGE, "Signatures")
    lines = text[text.index("| name | parameters |") :].split("\n\n", 1)[0].splitlines()[2:]
    rows = {}
    for line in lines:
        name, cell = [c.strip() for c in line.strip().strip("|").split(" | ")]
        rows[name.strip("`")] = [p.strip().strip("`") for p in cell.split(",")]
    return rows


def test_every_public_callable_has_its_row_and_no_other():
    assert set(_table()) == set(_callables())


@pytest.mark.parametrize("name", list(_callables()))
def test_the_parameters_are_the_signature_s(name):
    assert _table()[name] == _parameters(_callables()[name])


def test_the_composition_prose_names_every_timeout_argument():
    from nvrx_seghealth import SegmentHealthRendezvousHandler

    text = section(PAGE, "Compose it in your own launcher")
    settings = [
        p
        for p in inspect.signature(SegmentHealthRendezvousHandler).parameters
        if p.endswith(("_timeout", "_interval"))
    ]
    assert settings == ["stat_timeout", "handoff_timeout", "watch_interval"]
    assert all(f"`{p}=`" in text for p in settings)
