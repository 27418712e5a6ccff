"""The package's exceptions keep their tokens across processes and copies."""

from __future__ import annotations

import concurrent.futures
import copy
import multiprocessing
import pickle

import pytest

from nvrx_seghealth import ConfigurationError, ExclusionReason, UnhealthyNodeException


def exclusion() -> UnhealthyNodeException:
    return UnhealthyNodeException(
        "allocation unit job_id=7 task_id=3 is excluded",
        job_id="7",
        task_id="3",
        reason=ExclusionReason.DECISION_FILE,
        after_joining=True,
        path="/shared/shc/segment_health_check.7.3",
        size=12,
        marker="m",
    )


def same_exclusion(got: UnhealthyNodeException, want: UnhealthyNodeException) -> None:
    assert type(got) is UnhealthyNodeException
    assert got.args == want.args
    assert got.fields() == want.fields()
    assert (got.path, got.size, got.marker) == (want.path, want.size, want.marker)


@pytest.mark.parametrize(
    "rebuild",
    [lambda e: pickle.loads(pickle.dumps(e)), copy.copy, copy.deepcopy],
    ids=["pickle", "copy", "deepcopy"],
)
def test_an_exclusion_is_rebuilt_with_its_tokens(rebuild):
    original = exclusion()
    same_exclusion(rebuild(original), original)


def raise_exclusion() -> None:
    raise exclusion()


def test_an_exclusion_raised_in_a_child_process_reaches_the_parent_as_itself():
    """A launcher that runs its agent in a worker process gets the exclusion, not a
    TypeError from unpickling it."""
    context = multiprocessing.get_context("fork")
    with (
        concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool,
        pytest.raises(UnhealthyNodeException) as raised,
    ):
        pool.submit(raise_exclusion).result(timeout=120)
    same_exclusion(raised.value, exclusion())


def test_a_configuration_error_keeps_its_setting_when_pickled():
    error = ConfigurationError("bad", setting="rdzv-conf segment_health_check_dir")
    again = pickle.loads(pickle.dumps(error))
    assert (again.args, again.setting) == (error.args, error.setting)
