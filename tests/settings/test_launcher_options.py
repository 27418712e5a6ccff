"""The launcher's decision directory from a YAML file: a misspelt field is an error."""

from __future__ import annotations

import pytest

from nvrx_seghealth._errors import ConfigurationError
from nvrx_seghealth._settings.launcher_options import directory_from_yaml
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
        directory_from_yaml(path)
    assert refused.value.setting == f"fault_tolerance.{field}"
    assert lookalike(field, ("segment_health_check_dir",)) == "segment_health_check_dir"


def test_the_other_fault_tolerance_settings_are_left_alone(tmp_path):
    path = yaml_file(
        tmp_path,
        "fault_tolerance:\n  rank_heartbeat_timeout: 30\n"
        "  segment_health_check_dir: /shared/shc\n  workload_check_interval: 5\n",
    )
    assert directory_from_yaml(path) == "/shared/shc"


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
    assert directory_from_yaml(str(cfg)) == expected


def test_yaml_of_any_kind_of_error_is_a_configuration_error_naming_the_file(tmp_path):
    for name, text in [
        ("deep.yaml", "[" * 100_000 + "]" * 100_000),
        ("bad.yaml", "a: [1,\n"),
        ("binary.yaml", b"\xff\xfe\x00a"),
    ]:
        cfg = tmp_path / name
        cfg.write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(ConfigurationError) as refused:
            directory_from_yaml(str(cfg))
        assert refused.value.setting == "--ft-cfg-path" and str(cfg) in str(refused.value)


def test_the_launcher_command_exits_2_on_a_self_referencing_or_deep_file(tmp_path):
    from tests.commands.runner import nvrx_seghealth

    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    done = nvrx_seghealth("run", "--ft-cfg-path", str(deep), "--nnodes=1", "x.py")
    assert done.returncode == 2
    assert f"--ft-cfg-path {deep} is nested too deeply" in done.stderr
    assert "Traceback" not in done.stderr
