"""The launcher's decision directory from a YAML file: a misspelt field is an error."""

from __future__ import annotations

import pytest

from nvrx_seghealth.config import ConfigurationError
from nvrx_seghealth.ft_settings import directory_from_yaml


def yaml_file(tmp_path, text):
    path = tmp_path / "ft.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("field", ["segment_health_chek_dir", "segment_health_check_directory",
                                   "segment_health_dir"])
def test_a_misspelt_field_is_refused_with_the_right_name(tmp_path, field):
    path = yaml_file(tmp_path, f"fault_tolerance:\n  {field}: /shared/shc\n")
    with pytest.raises(ConfigurationError, match=f"fault_tolerance.{field} .*segment_health_check_dir"):
        directory_from_yaml(path)


def test_the_other_fault_tolerance_settings_are_left_alone(tmp_path):
    path = yaml_file(tmp_path, "fault_tolerance:\n  rank_heartbeat_timeout: 30\n"
                               "  segment_health_check_dir: /shared/shc\n  workload_check_interval: 5\n")
    assert directory_from_yaml(path) == "/shared/shc"
