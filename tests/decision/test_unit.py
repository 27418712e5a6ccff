import pytest

from harness.slurmenv import slurm_env
from nvrx_seghealth import publish_decision
from nvrx_seghealth._decision.unit import AllocationUnit, InvalidIdentityError, SlurmId, validate_id


def unit_of(env: dict[str, str]) -> AllocationUnit:
    """The allocation unit of ``env``, which names one."""
    unit = AllocationUnit.from_env(env)
    assert unit is not None
    return unit


def test_array_task_identity_comes_from_array_variables():
    unit = unit_of(slurm_env(task=7, procid=0, array_job=123, job=130))
    assert (unit.job_id, unit.task_id, unit.is_array) == ("123", "7", True)
    assert unit.is_process_zero
    assert unit.replacement_group == "7"


def test_regular_job_uses_job_id_for_both_and_has_no_group():
    unit = unit_of(slurm_env(procid=0, job=55))
    assert (unit.job_id, unit.task_id, unit.is_array) == ("55", "55", False)
    assert unit.replacement_group is None


@pytest.mark.parametrize("procid", [None, "1", "00", " 0", "0 ", "-0", ""])
def test_only_procid_exactly_zero_is_process_zero(procid):
    env = slurm_env(task=1)
    if procid is None:
        del env["SLURM_PROCID"]
    else:
        env["SLURM_PROCID"] = procid
    assert not unit_of(env).is_process_zero


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


@pytest.mark.parametrize("value,canonical", [("007", "7"), ("0123", "123"), ("00", "0")])
def test_leading_zeros_are_refused_with_the_id_slurm_writes(value, canonical):
    """Slurm never writes ``007``: a decision for it would name a file no launcher reads."""
    with pytest.raises(InvalidIdentityError, match=f"give {canonical}$") as refused:
        validate_id("task_id", value)
    assert refused.value.canonical == canonical
    with pytest.raises(InvalidIdentityError):
        AllocationUnit.from_env(slurm_env(task=7) | {"SLURM_ARRAY_TASK_ID": value})


def test_publish_decision_refuses_leading_zeros_and_writes_nothing(tmp_path):
    with pytest.raises(InvalidIdentityError, match="task_id='007' has leading zeros"):
        publish_decision(str(tmp_path), "123", "007", "bad psu")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["0", "7", "10", "100"])
def test_zero_and_ids_without_leading_zeros_pass(value):
    assert validate_id("task_id", value) == value


@pytest.mark.parametrize(
    "value,expected", [(None, "0"), ("", "0"), ("2", "2"), ("x", None), ("-1", None)]
)
def test_the_restart_count_is_read_with_the_ids_and_a_bad_one_leaves_the_unit_usable(
    value, expected
):
    env = slurm_env(task=1)
    if value is not None:
        env["SLURM_RESTART_COUNT"] = value
    unit = unit_of(env)
    assert (unit.task_id, unit.restart_count) == ("1", expected)


def test_ids_are_validated_once_into_slurm_ids_that_pass_unchanged():
    unit = unit_of(slurm_env(task=7, array_job=123))
    assert all(isinstance(v, SlurmId) for v in (unit.job_id, unit.task_id, unit.restart_count))
    assert validate_id("task_id", unit.task_id) is unit.task_id
    given = AllocationUnit("123", "7", is_array=True, procid="0")  # an entry too
    assert isinstance(given.task_id, SlurmId) and given == unit
    with pytest.raises(InvalidIdentityError, match="restart_count"):
        AllocationUnit("123", "7", is_array=True, restart_count="1x")
