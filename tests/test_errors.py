"""The package's exceptions: one tree under a public base, and their tokens kept across
processes and copies."""

from __future__ import annotations

import concurrent.futures
import copy
import importlib
import multiprocessing
import pickle
import pkgutil

import pytest

import nvrx_seghealth
from nvrx_seghealth import ConfigurationError, ExclusionReason, UnhealthyNodeException
from nvrx_seghealth._errors import Exclusion, SegmentHealthError, When

pytestmark = pytest.mark.torch  # it imports every module, torch's included


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


def test_when_has_one_token_and_one_phrase_each():
    """The tokens are the ``when`` of events and of the round's signal; another release's
    token reads as unknown."""
    assert [when.token for when in When] == ["before-joining", "after-joining", "during-training"]
    assert len({when.phrase for when in When}) == len(When)
    assert all(When.parse(when.token) is when for when in When)
    assert When.parse("at-dawn") is None and When.parse(None) is None
    assert [when.joined for when in When] == [False, True, True]


def test_an_exclusion_value_builds_its_exception():
    value = Exclusion(
        ExclusionReason.MARKER, When.AFTER_JOINING, "its process 0 marked it: m", marker="m"
    )
    error = value.error("7", "3")
    assert str(error) == (
        "allocation unit job_id=7 task_id=3 is excluded right after joining: "
        "its process 0 marked it: m"
    )
    assert error.fields() == {
        "reason": "marker",
        "after_joining": True,
        "when": "after-joining",
        "job_id": "7",
        "task_id": "3",
    }
    assert (error.path, error.size, error.marker) == (None, None, "m")


def test_a_watch_exclusion_says_during_training_not_only_after_joining():
    """``after_joining`` is true while the unit trains too (the launcher is a member of the
    round it leaves); the ``when`` token tells the two apart on the ERROR line."""
    error = Exclusion(ExclusionReason.DECISION_FILE, When.DURING_TRAINING, "non-empty").error(
        "7", "3"
    )
    assert (error.fields()["after_joining"], error.fields()["when"]) == (True, "during-training")
    assert pickle.loads(pickle.dumps(error)).when is When.DURING_TRAINING


def _exception_classes() -> set[type[BaseException]]:
    """Every exception class a module of the package defines (``__main__`` aside: it runs)."""
    found: set[type[BaseException]] = set()
    for info in pkgutil.walk_packages(nvrx_seghealth.__path__, "nvrx_seghealth."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__.split(".")[0] == "nvrx_seghealth"
            ):
                found.add(value)
    return found


#: Raised on purpose, yet outside the tree (the tree in ``_errors.py`` says why).
OUTSIDE_THE_TREE = {
    "StepError",  # _decision/files.py imports nothing from the package
    "NotRegularError",
    "LockBusyError",
    "CallsClosed",  # a BaseException, as SystemExit: the interpreter exits
    "Stopped",  # a BaseException: the producer was told to stop
    "_Hung",  # the producer's pass stops touching a hung directory; never leaves it
}


def test_every_exception_the_package_defines_derives_from_the_public_base():
    classes = _exception_classes()
    assert len(classes) > 10  # the walk found them
    outside = {cls.__name__ for cls in classes if not issubclass(cls, SegmentHealthError)}
    assert outside == OUTSIDE_THE_TREE


def test_every_exported_exception_derives_from_the_exported_base_and_keeps_its_builtin_one():
    exported = [getattr(nvrx_seghealth, name) for name in nvrx_seghealth.__all__]
    exceptions = {cls for cls in exported if isinstance(cls, type) and issubclass(cls, Exception)}
    assert {cls.__name__ for cls in exceptions} == {
        "SegmentHealthError",
        "ConfigurationError",
        "UnhealthyNodeException",
        "InvalidIdentityError",
        "DecisionConflict",
    }
    assert all(issubclass(cls, nvrx_seghealth.SegmentHealthError) for cls in exceptions)
    assert issubclass(nvrx_seghealth.ConfigurationError, ValueError)
    assert issubclass(nvrx_seghealth.InvalidIdentityError, ValueError)
    assert issubclass(nvrx_seghealth.DecisionConflict, RuntimeError)


def test_one_except_catches_what_a_call_of_the_package_raised_on_purpose(tmp_path):
    with pytest.raises(SegmentHealthError):
        nvrx_seghealth.publish_decision(str(tmp_path), "1x", "1", "reason")  # a bad id
    with pytest.raises(SegmentHealthError):
        nvrx_seghealth.decision_file_path("relative", "1", "1")  # a bad directory
