import pytest

from nvrx_seghealth._decision.unit import AllocationUnit, InvalidIdentityError, validate_id

from ..support import slurm_env


def test_array_task_identity_comes_from_array_variables():
    unit = AllocationUnit.from_env(slurm_env(task=7, procid=0, array_job=123, job=130))
    assert (unit.job_id, unit.task_id, unit.is_array) == ("123", "7", True)
    assert unit.is_process_zero
    assert unit.replacement_group == "7"


def test_regular_job_uses_job_id_for_both_and_has_no_group():
    unit = AllocationUnit.from_env(slurm_env(procid=0, job=55))
    assert (unit.job_id, unit.task_id, unit.is_array) == ("55", "55", False)
    assert unit.replacement_group is None


@pytest.mark.parametrize("procid", [None, "1", "00", " 0", "0 ", "-0", ""])
def test_only_procid_exactly_zero_is_process_zero(procid):
    env = slurm_env(task=1)
    if procid is None:
        del env["SLURM_PROCID"]
    else:
        env["SLURM_PROCID"] = procid
    assert not AllocationUnit.from_env(env).is_process_zero


def test_no_job_id_means_no_unit():
    assert AllocationUnit.from_env({"SLURM_PROCID": "0"}) is None


@pytest.mark.parametrize("variable", ["SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_ID"])
@pytest.mark.parametrize("value", ["../x", "7/..", "", "1e3", "٣", "12 ", "/etc", "-1"])
def test_hostile_ids_are_refused(variable, value):
    env = slurm_env(task=1) if variable != "SLURM_JOB_ID" else slurm_env()
    env[variable] = value
    with pytest.raises(InvalidIdentityError, match=variable):
        AllocationUnit.from_env(env)


@pytest.mark.parametrize("missing", ["SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"])
def test_half_an_array_identity_is_refused(missing):
    env = slurm_env(task=1)
    del env[missing]
    with pytest.raises(InvalidIdentityError, match="must be set together"):
        AllocationUnit.from_env(env)


def test_validate_id_names_the_value():
    with pytest.raises(InvalidIdentityError, match=r"task_id='\.\./x'"):
        validate_id("task_id", "../x")
    assert validate_id("task_id", "0042") == "0042"
