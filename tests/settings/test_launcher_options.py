"""The launcher's settings from its flags and YAML file: the directory, the watch interval."""

from __future__ import annotations

import os
import re
import threading

import pytest
import yaml

from harness.waits import AT_ONCE_BOUND
from nvrx_seghealth._errors import ConfigurationError
from nvrx_seghealth._settings.durations import WATCH_INTERVAL, validate_seconds
from nvrx_seghealth._settings.launcher_options import (
    CFG_FLAG,
    WATCH_INTERVAL_FLAG,
    WatchIntervalSetting,
    YamlSettings,
    resolve_launcher_settings,
    yaml_settings,
)
from nvrx_seghealth._settings.rdzv_conf import lookalike


def yaml_file(tmp_path, text):
    path = tmp_path / "ft.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "field", ["segment_health_chek_dir", "segment_health_check_directory", "segment_health_dir"]
)
def test_a_misspelt_field_is_refused_with_the_right_name(tmp_path, field):
    path = yaml_file(tmp_path, f"fault_tolerance:\n  {field}: /shared/shc\n")
    with pytest.raises(ConfigurationError) as refused:
        yaml_settings(path)
    assert refused.value.setting == f"fault_tolerance.{field}"
    assert lookalike(field, ("segment_health_check_dir",)) == "segment_health_check_dir"


def test_the_other_fault_tolerance_settings_are_left_alone(tmp_path):
    path = yaml_file(
        tmp_path,
        "fault_tolerance:\n  rank_heartbeat_timeout: 30\n"
        "  segment_health_check_dir: /shared/shc\n  workload_check_interval: 5\n",
    )
    assert yaml_settings(path).directory == "/shared/shc"


@pytest.mark.parametrize(
    "text,expected",
    [
        ("a: &x [*x]\n", None),
        ("a: &x [*x]\nfault_tolerance:\n  segment_health_check_dir: /shc\n", "/shc"),
        ("a: &x {b: *x, c: [*x, *x]}\nd: [*x]\n", None),
    ],
)
def test_a_document_that_refers_to_itself_is_walked_once_per_node(tmp_path, text, expected):
    cfg = tmp_path / "ft.yaml"
    cfg.write_text(text)
    assert yaml_settings(str(cfg)).directory == expected


def test_yaml_of_any_kind_of_error_is_a_configuration_error_naming_the_file(tmp_path):
    files: list[tuple[str, str | bytes]] = [
        ("deep.yaml", "[" * 100_000 + "]" * 100_000),
        ("bad.yaml", "a: [1,\n"),
        ("binary.yaml", b"\xff\xfe\x00a"),
    ]
    for name, text in files:
        cfg = tmp_path / name
        cfg.write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(ConfigurationError) as refused:
            yaml_settings(str(cfg))
        assert refused.value.setting == "--ft-cfg-path" and str(cfg) in str(refused.value)


def test_the_launcher_command_exits_2_on_a_self_referencing_or_deep_file(tmp_path):
    from harness.commands import nvrx_seghealth

    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    done = nvrx_seghealth("run", "--ft-cfg-path", str(deep), "--nnodes=1", "x.py")
    assert done.returncode == 2
    assert f"--ft-cfg-path {deep} is nested too deeply" in done.stderr
    assert "Traceback" not in done.stderr


# --- the watch interval: flag > YAML > 0 -------------------------------------------------

WATCH_FIELD = "fault_tolerance.segment_health_check_watch_interval"


def watch_yaml(tmp_path, value, directory="/shared/shc"):
    return yaml_file(
        tmp_path,
        f"trainer:\n  fault_tolerance:\n    segment_health_check_dir: {directory}\n"
        f"    segment_health_check_watch_interval: {value}\n",
    )


@pytest.mark.parametrize("value,seconds", [("5", 5.0), ("0.5", 0.5), ("'2'", 2.0), ("0", 0.0)])
def test_the_yaml_field_sits_in_the_directorys_section(tmp_path, value, seconds):
    path = watch_yaml(tmp_path, value)
    read = yaml_settings(path)
    assert read.directory == "/shared/shc"
    assert read.watch_interval == WatchIntervalSetting(seconds, f"{WATCH_FIELD} in {path}")
    assert read.watch_interval.enabled is (seconds > 0)


def test_a_null_or_absent_field_is_no_watch(tmp_path):
    assert yaml_settings(watch_yaml(tmp_path, "null")).watch_interval is None
    path = yaml_file(tmp_path, "fault_tolerance:\n  segment_health_check_dir: /shc\n")
    assert yaml_settings(path).watch_interval is None
    assert resolve_launcher_settings(None, None, path, environ={}).watch_interval is None


@pytest.mark.parametrize("value", ["-1", "3601", "true", "five", ".inf", ".nan", "[5]", "{a: 1}"])
def test_a_bad_yaml_interval_is_refused_as_every_duration_is(tmp_path, value):
    path = watch_yaml(tmp_path, value)
    with pytest.raises(ConfigurationError) as refused:
        yaml_settings(path)
    given_as = f"{WATCH_FIELD} in {path}"
    assert refused.value.setting == given_as
    written = yaml.safe_load(f"v: {value}")["v"]
    with pytest.raises(ConfigurationError) as same:
        validate_seconds(WATCH_INTERVAL, written, given_as=given_as)
    assert str(refused.value) == str(same.value)


@pytest.mark.parametrize("value", ["-1", "3601", "nan", "inf", "", "5s"])
def test_a_bad_flag_is_refused_as_every_duration_is(value):
    with pytest.raises(ConfigurationError) as refused:
        resolve_launcher_settings("/shc", value, environ={})
    assert refused.value.setting == WATCH_INTERVAL_FLAG
    with pytest.raises(ConfigurationError) as same:
        validate_seconds(WATCH_INTERVAL, value, given_as=WATCH_INTERVAL_FLAG)
    assert str(refused.value) == str(same.value)


@pytest.mark.parametrize(
    "field",
    [
        "watch_interval",
        "segment_health_check_watch_intervall",
        "Segment-Health-Check-Watch-Interval",
        "segment_health_check_interval",
    ],
)
def test_a_misspelt_watch_field_is_refused_with_the_right_name(tmp_path, field):
    path = yaml_file(
        tmp_path, f"fault_tolerance:\n  segment_health_check_dir: /shc\n  {field}: 5\n"
    )
    with pytest.raises(ConfigurationError) as refused:
        yaml_settings(path)
    assert refused.value.setting == f"fault_tolerance.{field}"
    assert WATCH_FIELD in str(refused.value)


def test_the_flag_beats_the_yaml_field_which_is_still_validated(tmp_path):
    path = watch_yaml(tmp_path, "5")
    flagged = resolve_launcher_settings(None, "2", path, environ={})
    assert flagged.watch_interval == WatchIntervalSetting(2.0, WATCH_INTERVAL_FLAG)
    assert flagged.directory is not None and flagged.directory.directory == "/shared/shc"
    from_yaml = resolve_launcher_settings("/flag", None, path, environ={})
    assert from_yaml.watch_interval == WatchIntervalSetting(5.0, f"{WATCH_FIELD} in {path}")
    assert from_yaml.directory is not None and from_yaml.directory.directory == "/flag"
    with pytest.raises(ConfigurationError) as refused:
        resolve_launcher_settings(None, "2", watch_yaml(tmp_path, "-5"), environ={})
    assert refused.value.setting == f"{WATCH_FIELD} in {tmp_path / 'ft.yaml'}"


def test_neither_flag_nor_field_is_no_watch():
    settings = resolve_launcher_settings("/shc", None, None, environ={})
    assert settings.watch_interval is None
    env = {"NVRX_SEGMENT_HEALTH_CHECK_DIR": "/env"}
    assert resolve_launcher_settings(None, "3", None, environ=env).watch_interval == (
        WatchIntervalSetting(3.0, WATCH_INTERVAL_FLAG)
    )


def test_a_watch_without_any_directory_is_refused_but_zero_is_not(tmp_path):
    with pytest.raises(ConfigurationError) as refused:
        resolve_launcher_settings(None, "5", None, environ={})
    assert refused.value.setting == WATCH_INTERVAL_FLAG
    path = yaml_file(tmp_path, "fault_tolerance:\n  segment_health_check_watch_interval: 5\n")
    with pytest.raises(ConfigurationError) as refused:
        resolve_launcher_settings(None, None, path, environ={})
    assert refused.value.setting == f"{WATCH_FIELD} in {path}"
    off = resolve_launcher_settings(None, "0", None, environ={})
    assert off.directory is None and off.watch_interval == WatchIntervalSetting(
        0.0, WATCH_INTERVAL_FLAG
    )


# --- files that are not a YAML configuration ---------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "- a\n",
        "a" * 3_000_000 + "\n",
        "42\n",
        "- fault_tolerance:\n    segment_health_check_dir: /shc\n",  # a list of files?
    ],
)
def test_a_file_whose_top_level_is_no_mapping_is_refused(tmp_path, text):
    """The wrong file: read as one without a section, the check would be off without a word."""
    with pytest.raises(ConfigurationError) as refused:
        yaml_settings(yaml_file(tmp_path, text))
    assert refused.value.setting == CFG_FLAG


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "model:\n  layers: 2\n"])
def test_a_file_without_the_section_is_no_setting(tmp_path, text):
    assert yaml_settings(yaml_file(tmp_path, text)) == YamlSettings()


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_path_that_is_no_regular_file_is_refused_without_waiting(tmp_path, kind):
    """An open of a FIFO for reading waits for a writer: it is refused before that."""
    path = {"fifo": tmp_path / "ft.yaml", "directory": tmp_path, "device": "/dev/null"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    outcome: list[BaseException | YamlSettings] = []

    def read() -> None:
        try:
            outcome.append(yaml_settings(str(path)))
        except ConfigurationError as error:
            outcome.append(error)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(AT_ONCE_BOUND)
    if reader.is_alive():  # release the open with a writer, then fail
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        reader.join()
        pytest.fail(f"reading {path} waited for a writer")
    [refused] = outcome
    assert isinstance(refused, ConfigurationError) and refused.setting == CFG_FLAG


@pytest.mark.parametrize("value", ["42", "''", "[/shared/shc/123]"])
def test_a_bad_directory_field_suggests_the_folder_a_launcher_reads(tmp_path, value):
    path = yaml_file(tmp_path, f"fault_tolerance:\n  segment_health_check_dir: {value}\n")
    with pytest.raises(ConfigurationError) as refused:
        yaml_settings(path)
    [suggested] = re.findall(r"'segment_health_check_dir: ([^']*)'", str(refused.value))
    assert suggested.endswith("/<array job id>")  # the launchers read the job's own folder
