"""The consumer: who installs the check, what it logs, what calling it returns."""

from __future__ import annotations

import copy
import logging
import os
import pickle

import pytest

from harness.slurmenv import slurm_env
from nvrx_seghealth import SegmentHealthCheck, get_segment_health_check, publish_decision
from nvrx_seghealth._decision.unit import InvalidIdentityError
from nvrx_seghealth._errors import ConfigurationError

INSTALL = "Segment health check installed directory={} job_id={} task_id={}"


def installs(caplog):
    return [r.getMessage() for r in caplog.records if "installed" in r.getMessage()]


def warnings_(caplog):
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name.startswith("nvrx_seghealth")
    ]


def test_process_zero_of_an_array_task_installs_and_logs_the_exact_line(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    check = get_segment_health_check(str(tmp_path), slurm_env(task=7, array_job=123))
    assert check is not None  # process 0, with a directory
    assert check.path == os.path.join(tmp_path, "segment_health_check.123.7")
    assert installs(caplog) == [INSTALL.format(tmp_path, 123, 7)]
    assert [r.levelno for r in caplog.records] == [logging.INFO]


def test_regular_job_installs_with_job_id_twice(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    check = get_segment_health_check(str(tmp_path), slurm_env(job=55))
    assert check is not None  # process 0, with a directory
    assert check.path.endswith("segment_health_check.55.55")
    assert installs(caplog) == [INSTALL.format(tmp_path, 55, 55)]


def test_install_line_once_however_often_the_check_runs(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    check = get_segment_health_check(str(tmp_path), slurm_env(task=1))
    assert check is not None  # process 0, with a directory
    for _ in range(5):
        assert check() is True
    assert len(installs(caplog)) == 1


@pytest.mark.parametrize(
    "env",
    [
        slurm_env(task=1, procid=1),
        {k: v for k, v in slurm_env(task=1).items() if k != "SLURM_PROCID"},
    ],
    ids=["procid-1", "no-procid"],
)
def test_other_launchers_install_nothing_and_log_nothing(tmp_path, caplog, env):
    caplog.set_level(logging.DEBUG, logger="nvrx_seghealth")
    assert get_segment_health_check(str(tmp_path), env) is None
    assert caplog.records == []


@pytest.mark.parametrize("directory", [None, ""])
def test_no_directory_disables(directory):
    assert get_segment_health_check(directory, slurm_env(task=1)) is None


def test_relative_directory_is_a_configuration_error_on_every_launcher():
    for env in (slurm_env(task=1), slurm_env(task=1, procid=3), {}):
        with pytest.raises(ConfigurationError) as refused:
            get_segment_health_check("shared/shc", env)
        assert refused.value.setting == "directory"


def test_hostile_identity_is_refused_with_one_warning(tmp_path, caplog):
    env = slurm_env(task=1)
    env["SLURM_ARRAY_TASK_ID"] = "../../x"
    assert get_segment_health_check(str(tmp_path), env) is None
    assert len(warnings_(caplog)) == 1
    assert "SLURM_ARRAY_TASK_ID='../../x'" in warnings_(caplog)[0]


def test_environment_defaults_to_os_environ(tmp_path, monkeypatch):
    for key, value in slurm_env(task=4, array_job=77).items():
        monkeypatch.setenv(key, value)
    check = get_segment_health_check(str(tmp_path))
    assert check is not None  # process 0, with a directory
    assert check.path.endswith("segment_health_check.77.4")


def test_call_returns_false_only_for_a_non_empty_file(tmp_path, caplog):
    check = SegmentHealthCheck(str(tmp_path), "9", "3")
    assert check() is True  # missing
    open(check.path, "wb").close()
    assert check() is True  # empty
    publish_decision(str(tmp_path), "9", "3", "bad")
    assert check() is False
    assert warnings_(caplog) == []  # missing, empty and unhealthy never warn here


def test_fail_open_warns_once_per_evaluation_naming_path_and_type(tmp_path, caplog):
    check = SegmentHealthCheck(str(tmp_path), "9", "3")
    os.mkdir(check.path)
    assert check() is True
    assert check() is True
    assert len(warnings_(caplog)) == 2
    assert check.path in warnings_(caplog)[0] and "directory" in warnings_(caplog)[0]


def test_constructor_validates_everything(tmp_path):
    with pytest.raises(ConfigurationError) as refused:
        SegmentHealthCheck("rel", "1", "2")
    assert refused.value.setting == "directory"
    with pytest.raises(InvalidIdentityError):
        SegmentHealthCheck(str(tmp_path), "1", "../2")
    with pytest.raises(ConfigurationError) as refused:
        SegmentHealthCheck(str(tmp_path), "1", "2", stat_timeout=0)
    assert refused.value.setting == "stat_timeout"


def test_the_constructor_builds_through_from_settings_the_one_path(tmp_path):
    """The constructor validates raw values and hands them to ``from_settings``, which
    builds every check: a subclass that extends it extends both doors."""

    built: list[tuple[str, str, str]] = []

    class Counted(SegmentHealthCheck):
        @classmethod
        def from_settings(cls, settings, job_id, task_id):
            built.append((settings.directory, job_id, task_id))
            return super().from_settings(settings, job_id, task_id)

    check = Counted(tmp_path, 7, "8")
    assert built == [(str(tmp_path), "7", "8")]
    assert type(check) is Counted
    assert check.path == os.path.join(tmp_path, "segment_health_check.7.8")


def test_a_check_survives_pickle_and_copy(tmp_path):
    """A check goes to another process as any plain object does (multiprocessing's spawn
    pickles it)."""
    check = SegmentHealthCheck(tmp_path, 5, 6, stat_timeout=3)
    publish_decision(tmp_path, 5, 6, "drained")
    for twin in (pickle.loads(pickle.dumps(check)), copy.copy(check)):
        assert repr(twin) == repr(check)
        assert (twin.path, twin.stat_timeout) == (check.path, 3)
        assert twin() is False


@pytest.mark.parametrize("env", [{"SLURM_PROCID": "0"}, {}], ids=["no-job-id", "no-slurm"])
def test_a_directory_without_a_slurm_job_says_the_check_is_off(tmp_path, caplog, env):
    """No silent off-switch: configured, but not launched under Slurm."""
    caplog.set_level(logging.DEBUG, logger="nvrx_seghealth")
    assert get_segment_health_check(str(tmp_path), env) is None
    (warning,) = warnings_(caplog)
    assert "SLURM_JOB_ID" in warning
    assert get_segment_health_check(None, env) is None  # nothing configured: quiet
    assert len(caplog.records) == 1


def test_integer_ids_are_accepted_where_string_ids_are(tmp_path):
    publish_decision(str(tmp_path), 5000, 3, "drained")
    check = SegmentHealthCheck(str(tmp_path), 5000, 3)
    assert (check.job_id, check.task_id) == ("5000", "3")
    assert check.path == os.path.join(tmp_path, "segment_health_check.5000.3")
    assert check() is False


@pytest.mark.parametrize("bad", [True, 5.0, b"5", None])
def test_other_id_types_are_a_type_error_that_says_so(tmp_path, bad):
    with pytest.raises(TypeError, match=r"job_id must be a str of decimal digits or an int"):
        SegmentHealthCheck(str(tmp_path), bad, 3)
    with pytest.raises(TypeError, match=r"task_id must be a str of decimal digits or an int"):
        publish_decision(str(tmp_path), 1, bad, "x")


def test_a_negative_integer_id_is_refused_as_not_decimal(tmp_path):
    with pytest.raises(ValueError, match="not a decimal Slurm id"):
        SegmentHealthCheck(str(tmp_path), -1, 3)


def test_a_path_object_is_taken_wherever_a_directory_is(tmp_path):
    """``pathlib.Path`` is how Python code holds a directory; the API takes it as a str."""
    from nvrx_seghealth import Outcome, SegmentHealthRendezvousHandler, clear_decision

    path = publish_decision(tmp_path, 123, 7, "drained")
    assert path == os.path.join(str(tmp_path), "segment_health_check.123.7")
    check = SegmentHealthCheck(tmp_path, 123, 7)
    assert check.path == path
    assert check.evaluate().outcome is Outcome.UNHEALTHY
    installed = get_segment_health_check(tmp_path, slurm_env(task=7, array_job=123))
    assert installed is not None and installed.path == path
    assert clear_decision(tmp_path, 123, 7) == path
    handler = SegmentHealthRendezvousHandler(
        _inner_handler(), store=None, directory=tmp_path, environ={}
    )
    assert handler.get_backend() == "c10d"  # composed: it reports the inner backend


def _inner_handler():
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
        C10dRendezvousBackend,
    )
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

    store = dist.HashStore()
    return DynamicRendezvousHandler.from_backend(
        "run", store, C10dRendezvousBackend(store, "run"), 1, 1
    )
