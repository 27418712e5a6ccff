"""The launcher's decision directory, as ``ft_launcher`` takes it: flag, YAML file, environment.

Precedence, highest first:

1. the command-line flag (``--ft-segment-health-check-dir DIR`` for ``nvrx-seghealth run``,
   ``--dir DIR`` for the operator commands);
2. ``fault_tolerance.segment_health_check_dir`` in the YAML file given with
   ``--ft-cfg-path``. As in NVRx, the ``fault_tolerance`` section may sit at any depth:
   the first non-empty ``fault_tolerance`` value found depth-first (through mappings and
   lists, in file order) is the section;
3. the environment variable ``NVRX_SEGMENT_HEALTH_CHECK_DIR`` (empty counts as unset).

None of them: the check is disabled. The winning value must be an absolute path. A flag
or YAML value that is empty or not a string, a YAML file that cannot be read or parsed,
a ``fault_tolerance`` section that is not a mapping, or a field in it that looks like
``segment_health_check_dir`` but is not (``segment_health_chek_dir``) is a
:class:`ConfigurationError` naming the setting and the fix; so is a file that cannot be
walked (nested too deeply). A document that refers to itself through an anchor
(``a: &x [*x]``) is walked once per node. The YAML file is always read when given, even
when the flag wins, so a broken file is never silently ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from .._errors import ConfigurationError
from .check_settings import (
    ENVIRONMENT_SOURCE,
    directory_from_environment,
    require_absolute_directory,
)
from .rdzv_conf import DIRECTORY_KEY, lookalike

__all__ = [
    "CFG_FLAG",
    "DIRECTORY_FLAG",
    "YAML_FIELD",
    "DirectorySetting",
    "directory_from_yaml",
    "resolve_directory",
]

DIRECTORY_FLAG = "--ft-segment-health-check-dir"
CFG_FLAG = "--ft-cfg-path"
YAML_SECTION = "fault_tolerance"
YAML_FIELD = f"{YAML_SECTION}.{DIRECTORY_KEY}"


@dataclass(frozen=True)
class DirectorySetting:
    """A validated decision directory and where it came from.

    Attributes:
        directory: the absolute directory.
        source: the setting that gave it, for messages (``--ft-segment-health-check-dir``,
            ``fault_tolerance.segment_health_check_dir in FILE``, ``environment variable
            NVRX_SEGMENT_HEALTH_CHECK_DIR``).
    """

    directory: str
    source: str

    @property
    def from_environment(self) -> bool:
        """True when only the environment variable configured the directory."""
        return self.source == ENVIRONMENT_SOURCE


def _find_section(data: Any, seen: set[int] | None = None) -> Any:
    """The first non-empty ``fault_tolerance`` value, depth-first (NVRx's rule).

    Each mapping and list is visited once: YAML anchors can make a document refer to
    itself (``a: &x [*x]``) or share one node many times.
    """
    seen = set() if seen is None else seen
    if id(data) in seen:
        return None
    children: Iterable[Any]
    if isinstance(data, Mapping):
        seen.add(id(data))
        if data.get(YAML_SECTION):
            return data[YAML_SECTION]
        children = data.values()
    elif isinstance(data, list):
        seen.add(id(data))
        children = data
    else:
        return None
    for child in children:
        found = _find_section(child, seen)
        if found:
            return found
    return None


def directory_from_yaml(path: str) -> str | None:
    """Return ``fault_tolerance.segment_health_check_dir`` from the YAML file at ``path``.

    ``None`` when the file has no ``fault_tolerance`` section, the section has no such
    field, or the field is ``null``. The value is returned as written (not yet checked
    for being absolute).

    Raises:
        ConfigurationError: the file cannot be read or parsed, the section is not a
            mapping, or the field is not a non-empty string.
    """
    what = f"{CFG_FLAG} {path}"
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as error:
        raise ConfigurationError(
            f"{what}: cannot read the file ({error.strerror or error}); give the path of a "
            "readable YAML file",
            setting=CFG_FLAG,
        ) from None
    except (yaml.YAMLError, UnicodeDecodeError, ValueError) as error:
        detail = " ".join(str(error).split())
        raise ConfigurationError(
            f"{what} is not valid YAML ({detail}); fix the file or drop {CFG_FLAG}",
            setting=CFG_FLAG,
        ) from None
    except RecursionError:
        raise ConfigurationError(
            f"{what} is nested too deeply to be read as YAML; fix the file or drop {CFG_FLAG}",
            setting=CFG_FLAG,
        ) from None
    try:
        section = _find_section(data)
    except RecursionError:
        raise ConfigurationError(
            f"{what} is nested too deeply to look for '{YAML_SECTION}'; fix the file or drop "
            f"{CFG_FLAG}",
            setting=CFG_FLAG,
        ) from None
    if section is None:
        return None
    if not isinstance(section, Mapping):
        raise ConfigurationError(
            f"{what}: '{YAML_SECTION}' must be a mapping of settings, got "
            f"{type(section).__name__} {section!r}",
            setting=YAML_SECTION,
        )
    for field in section:  # NVRx's other fault_tolerance settings are not ours to judge
        if lookalike(str(field), (DIRECTORY_KEY,)) is not None:
            raise ConfigurationError(
                f"{YAML_SECTION}.{field} in {path} is not a setting (did you mean "
                f"{YAML_FIELD}?); as written, the segment health check would be off",
                setting=f"{YAML_SECTION}.{field}",
            )
    value = section.get(DIRECTORY_KEY)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigurationError(
            f"{YAML_FIELD} in {path} must be an absolute directory path (a non-empty "
            f"string), got {type(value).__name__} {value!r}; write e.g. "
            f"'{DIRECTORY_KEY}: /shared/job/segment-health-check', or remove the field to "
            "disable the check",
            setting=YAML_FIELD,
        )
    return value


def _validated(value: str, source: str) -> DirectorySetting:
    return DirectorySetting(require_absolute_directory(value, what=source), source)


def resolve_directory(
    flag_value: str | None,
    cfg_path: str | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    flag: str = DIRECTORY_FLAG,
) -> DirectorySetting | None:
    """Resolve the decision directory: ``flag_value`` > YAML file > environment.

    ``flag`` names the command-line option in messages. Returns ``None`` when nothing
    configures a directory (the check is disabled).

    Raises:
        ConfigurationError: see the module documentation.
    """
    from_yaml = directory_from_yaml(cfg_path) if cfg_path is not None else None
    if flag_value is not None:
        if not flag_value:
            raise ConfigurationError(
                f"{flag} is empty; give the absolute decision directory, or omit the option",
                setting=flag,
            )
        return _validated(flag_value, flag)
    if from_yaml is not None:
        return _validated(from_yaml, f"{YAML_FIELD} in {cfg_path}")
    value = directory_from_environment(environ)
    return None if value is None else _validated(value, ENVIRONMENT_SOURCE)
