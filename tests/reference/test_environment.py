"""The environment page (docs/reference/environment.md) names every variable the package
reads or sets, and no other.

The package's variables are found in its code objects, not its source text: every string
constant of a module, a class or a function (nested ones too) that reads as a variable
of Slurm, torch, torchrun or this package (:data:`_VARIABLE`). Names a module exports in
``__all__`` are names, not variables. The demo's own variables, which it sets for the
processes of its simulated job, are said once on the page by their patterns.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import types
from collections.abc import Iterable

import nvrx_seghealth
from harness.docs import section

PAGE = "docs/reference/environment.md"
_VARIABLE = re.compile(r"(NVRX_|SLURM_|TORCH_|PET_)[A-Z0-9_]+")
_CODE = re.compile(r"`([^`]+)`")
#: The demo's modules: its variables are its simulated job's.
DEMO = "nvrx_seghealth._demo"


def _in_code(code: types.CodeType) -> Iterable[str]:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _in_code(const)
        elif isinstance(const, (tuple, frozenset)):
            yield from (c for c in const if isinstance(c, str))
        elif isinstance(const, str):
            yield const


def _in_object(obj: object, module: str, seen: set[int]) -> Iterable[str]:
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, (tuple, list, set, frozenset)):
        for item in obj:
            yield from _in_object(item, module, seen)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _in_object(key, module, seen)
            yield from _in_object(value, module, seen)
    elif isinstance(obj, (staticmethod, classmethod)):
        yield from _in_object(obj.__func__, module, seen)
    elif isinstance(obj, property):
        for accessor in (obj.fget, obj.fset):
            yield from _in_object(accessor, module, seen)
    elif isinstance(obj, types.FunctionType) and obj.__module__ == module:
        yield from _in_code(obj.__code__)
    elif inspect.isclass(obj) and obj.__module__ == module:
        for value in vars(obj).values():
            yield from _in_object(value, module, seen)


def variables_in_code() -> dict[str, set[str]]:
    """Each variable the package's code holds, with the modules holding it."""
    found: dict[str, set[str]] = {}
    for info in pkgutil.walk_packages(nvrx_seghealth.__path__, "nvrx_seghealth."):
        if info.name.endswith("__main__"):  # importing it runs the command
            continue
        module = importlib.import_module(info.name)
        values = [v for k, v in vars(module).items() if k != "__all__"]  # not the names
        for text in _in_object(values, info.name, set()):
            if _VARIABLE.fullmatch(text):
                found.setdefault(text, set()).add(info.name)
    return found


def _documented(heading: str) -> set[str]:
    text = section(PAGE, heading)
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in _CODE.findall(row.split(" | ", 1)[0])}


def test_the_launcher_table_is_the_package_s_variables():
    found = variables_in_code()
    assert len(found) > 10, found  # the walk found the variables
    outside_demo = {
        name for name, modules in found.items() if any(not m.startswith(DEMO) for m in modules)
    }
    documented = _documented("What a launcher reads and sets")
    assert "PET_*" in documented  # torchrun's defaults, which carry the backend's settings
    assert outside_demo == documented - {"PET_*"}


def test_the_demo_s_variables_are_said_by_their_patterns():
    found = variables_in_code()
    demo_only = {
        name for name, modules in found.items() if all(m.startswith(DEMO) for m in modules)
    }
    assert demo_only, "the demo sets its simulated job's variables"
    assert all(name.startswith(("NVRX_SIM_", "SLURM_")) for name in demo_only), demo_only
    text = section(PAGE, "The demo")
    assert "`NVRX_SIM_*`" in text and "`SLURM_*`" in text
