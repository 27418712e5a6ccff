"""The launcher's settings, as ``ft_launcher`` takes them: flag, YAML file, environment.

The decision directory's precedence, highest first:

1. the command-line flag: ``--ft-segment-health-check-dir`` for ``nvrx-seghealth run``,
   ``--dir`` for the operator commands;
2. ``fault_tolerance.segment_health_check_dir`` in the ``--ft-cfg-path`` YAML file, whose
   section may sit at any depth, as in NVRx (:func:`_find_section`);
3. ``NVRX_SEGMENT_HEALTH_CHECK_DIR``, where empty counts as unset.

None of them: the check is off. The rules:

- The winning value must be an absolute path.
- The YAML file is always read when given, so a broken file is never silently ignored.
- A bad value, file or section, and a field that looks like ours but is not, raise
  :class:`ConfigurationError` naming the setting and the fix.
- The watch interval has a flag and a YAML field, no environment variable; the flag wins.
- Each interval is validated where it enters (:func:`~.durations.validate_seconds`).
- A positive watch interval without any directory is refused: it would do nothing.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

import yaml

from .._errors import ConfigurationError
from .check_settings import (
    DIRECTORY_ENV,
    ENVIRONMENT_SOURCE,
    directory_from_environment,
    require_absolute_directory,
)
from .durations import WATCH_INTERVAL, validate_seconds
from .rdzv_conf import DIRECTORY_KEY, WATCH_INTERVAL_KEY, lookalike

__all__ = [
    "CFG_FLAG",
    "DIRECTORY_FLAG",
    "WATCH_INTERVAL_FIELD",
    "WATCH_INTERVAL_FLAG",
    "YAML_FIELD",
    "DirectorySetting",
    "LauncherSettings",
    "WatchIntervalSetting",
    "YamlSettings",
    "resolve_directory",
    "resolve_launcher_settings",
    "yaml_settings",
]

DIRECTORY_FLAG = "--ft-segment-health-check-dir"
WATCH_INTERVAL_FLAG = "--ft-segment-health-check-watch-interval"
CFG_FLAG = "--ft-cfg-path"
YAML_SECTION = "fault_tolerance"
YAML_FIELD = f"{YAML_SECTION}.{DIRECTORY_KEY}"
WATCH_INTERVAL_FIELD = f"{YAML_SECTION}.{WATCH_INTERVAL_KEY}"

#: The section's fields this package reads, and what a misspelling of each would turn off.
_FIELDS = {DIRECTORY_KEY: "the segment health check", WATCH_INTERVAL_KEY: "the watch"}


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


@dataclass(frozen=True)
class WatchIntervalSetting:
    """A validated watch interval and where it came from.

    Attributes:
        seconds: in the range of :data:`~.durations.WATCH_INTERVAL`; ``0``: no watch.
        source: the setting that gave it, for messages
            (``--ft-segment-health-check-watch-interval``,
            ``fault_tolerance.segment_health_check_watch_interval in FILE``).
    """

    seconds: float
    source: str

    @property
    def enabled(self) -> bool:
        """Whether the interval turns the watch on."""
        return self.seconds > 0


@dataclass(frozen=True)
class YamlSettings:
    """The fields of one ``--ft-cfg-path`` file's ``fault_tolerance`` section.

    Attributes:
        directory: ``segment_health_check_dir`` as written (a non-empty string, not yet
            checked for being absolute); ``None``: absent or ``null``.
        watch_interval: ``segment_health_check_watch_interval``, validated; ``None``:
            absent or ``null``.
    """

    directory: str | None = None
    watch_interval: WatchIntervalSetting | None = None


@dataclass(frozen=True)
class LauncherSettings:
    """What the launcher's flags, YAML file and environment configure.

    Attributes:
        directory: the decision directory; ``None``: the check is off.
        watch_interval: the watch interval; ``None``: neither the flag nor the YAML file
            gives one (no watch). Never enabled without a directory.
    """

    directory: DirectorySetting | None
    watch_interval: WatchIntervalSetting | None = None


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


def _open_regular(path: str, what: str) -> TextIO:
    """The file at ``path`` open for reading as text, refused unless it is a regular file.

    It is opened without blocking: an open of a FIFO for reading waits for a writer.
    """
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigurationError(
                f"{what} is not a regular file ({_KINDS.get(stat.S_IFMT(mode), 'special file')}); "
                "give the path of a YAML file",
                setting=CFG_FLAG,
            )
        os.set_blocking(descriptor, True)
        return open(descriptor, encoding="utf-8")
    except BaseException:
        os.close(descriptor)
        raise


#: What a file that is not a regular file is, for messages.
_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def _section(path: str) -> Mapping[Any, Any] | None:
    """The ``fault_tolerance`` section of the YAML file at ``path`` (``None``: none),
    its lookalike fields refused."""
    what = f"{CFG_FLAG} {path}"
    try:
        with _open_regular(path, what) as handle:
            data = yaml.safe_load(handle)
    except ConfigurationError:  # a ValueError: not one of the parser's below
        raise
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
    if data is not None and not isinstance(data, Mapping):
        raise ConfigurationError(
            f"{what}: the file holds a {type(data).__name__}, not a mapping of settings; give "
            f"the path of a YAML configuration file (e.g. one with a '{YAML_SECTION}' section)",
            setting=CFG_FLAG,
        )
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
        meant = lookalike(str(field), _FIELDS)
        if meant is not None:
            raise ConfigurationError(
                f"{YAML_SECTION}.{field} in {path} is not a setting (did you mean "
                f"{YAML_SECTION}.{meant}?); as written, {_FIELDS[meant]} would be off",
                setting=f"{YAML_SECTION}.{field}",
            )
    return section


def yaml_settings(path: str) -> YamlSettings:
    """Read and validate the segment health fields of the YAML file at ``path``.

    Raises:
        ConfigurationError: the file cannot be read or parsed, the section is not a
            mapping, a field looks like one of ours but is not, the directory is not a
            non-empty string, or the watch interval is not a number of seconds in range.
    """
    section = _section(path)
    if section is None:
        return YamlSettings()
    directory = section.get(DIRECTORY_KEY)
    if directory is not None and (not isinstance(directory, str) or not directory):
        raise ConfigurationError(
            f"{YAML_FIELD} in {path} must be an absolute directory path (a non-empty "
            f"string), got {type(directory).__name__} {directory!r}; write e.g. "
            f"'{DIRECTORY_KEY}: /shared/job/segment-health-check/<array job id>' (the "
            "array job's own folder, which its launchers read), or remove the field to "
            "disable the check",
            setting=YAML_FIELD,
        )
    interval = section.get(WATCH_INTERVAL_KEY)
    watch = None if interval is None else _watch(interval, f"{WATCH_INTERVAL_FIELD} in {path}")
    return YamlSettings(directory, watch)


def _watch(value: object, source: str) -> WatchIntervalSetting:
    return WatchIntervalSetting(validate_seconds(WATCH_INTERVAL, value, given_as=source), source)


def _validated(value: str, source: str) -> DirectorySetting:
    return DirectorySetting(require_absolute_directory(value, what=source), source)


def _directory(
    flag_value: str | None,
    from_yaml: YamlSettings,
    cfg_path: str | None,
    environ: Mapping[str, str] | None,
    flag: str,
) -> DirectorySetting | None:
    if flag_value is not None:
        if not flag_value:
            raise ConfigurationError(
                f"{flag} is empty; give the absolute decision directory, or omit the option",
                setting=flag,
            )
        return _validated(flag_value, flag)
    if from_yaml.directory is not None:
        return _validated(from_yaml.directory, f"{YAML_FIELD} in {cfg_path}")
    value = directory_from_environment(environ)
    return None if value is None else _validated(value, ENVIRONMENT_SOURCE)


def resolve_launcher_settings(
    directory_flag: str | None,
    watch_interval_flag: str | None = None,
    cfg_path: str | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    flag: str = DIRECTORY_FLAG,
) -> LauncherSettings:
    """Resolve the directory (flag > YAML file > environment) and the watch interval
    (flag > YAML file), reading the YAML file at ``cfg_path`` once.

    ``flag`` names the directory's command-line option in messages.

    Raises:
        ConfigurationError: see the module documentation.
    """
    from_yaml = yaml_settings(cfg_path) if cfg_path is not None else YamlSettings()
    watch = (
        from_yaml.watch_interval
        if watch_interval_flag is None
        else _watch(watch_interval_flag, WATCH_INTERVAL_FLAG)
    )
    directory = _directory(directory_flag, from_yaml, cfg_path, environ, flag)
    if directory is None and watch is not None and watch.enabled:
        raise ConfigurationError(
            f"{watch.source}={watch.seconds:g} would do nothing: the segment health check is "
            f"off (no decision directory); give {flag}, {YAML_FIELD} or "
            f"{DIRECTORY_ENV}, or drop the watch interval",
            setting=watch.source,
        )
    return LauncherSettings(directory, watch)


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
    return resolve_launcher_settings(flag_value, None, cfg_path, environ, flag=flag).directory
