"""The registered backend, found the way torchrun finds it: in a fresh interpreter."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
from typing import cast

import pytest
from torch.distributed.elastic.rendezvous import RendezvousHandlerRegistry

from harness.commands import clean_environment
from harness.ports import free_port
from harness.rendezvous import coordinator_of, excluded
from harness.slurmenv import slurm_env
from harness.telemetry import exclusion_tokens
from harness.waits import AT_ONCE_BOUND, wait_until
from nvrx_seghealth import (
    BACKEND_NAME,
    SegmentHealthRendezvousHandler,
    publish_decision,
    register,
)
from nvrx_seghealth._errors import ConfigurationError
from nvrx_seghealth._launcher.agentstore import SHARED_STORE_ENV
from nvrx_seghealth._launcher.backend import create_segment_health_handler
from nvrx_seghealth._launcher.rankexchange import IDENTICAL_ENV

#: The logger of the workers' store.
STORE = "nvrx_seghealth._launcher.agentstore"

# One write(2) per line: two workers share the pipe, and print() may write in pieces.
WORKER = "import os; os.write(1, f\"worker rank {os.environ['RANK']}\\n\".encode())\n"


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 120):
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_entry_point_is_found_by_torchs_registry_in_a_fresh_interpreter(tmp_path):
    code = f"""
import json
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler
handler = get_rendezvous_handler(RendezvousParameters(
    "segment-health", "127.0.0.1:{free_port()}", "run", 1, 1, is_host="true",
    segment_health_check_dir={str(tmp_path)!r}))
print(json.dumps({{"type": type(handler).__name__, "backend": handler.get_backend(),
                  "inner": handler.inner.get_backend(),
                  "coordinator": type(handler._coordinator).__name__,
                  "markers": handler._coordinator.markers is not None}}))
"""
    done = run_python(code, slurm_env(task=3))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "type": "SegmentHealthRendezvousHandler",
        "backend": "segment-health",
        "inner": "c10d",
        "coordinator": "ProcessZero",  # the check is installed
        "markers": True,
    }
    assert "Exception while registering out of tree plugin" not in done.stderr


def test_register_into_a_launchers_own_registry_under_any_name(tmp_path):
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    registry = RendezvousHandlerRegistry()
    register(registry, name="my-health")
    register(registry, name="my-health")  # idempotent
    register()  # torch's registry already holds it from the entry point: no error
    handler = registry.create_handler(
        RendezvousParameters("my-health", f"127.0.0.1:{free_port()}", "run", 1, 1, is_host="true")
    )
    assert handler.get_backend() == "my-health"
    ours = cast(SegmentHealthRendezvousHandler, handler)  # the registry made the wrapper
    assert coordinator_of(ours) is None  # no directory: pure pass-through
    handler.shutdown()


@pytest.mark.parametrize(
    "conf,expected", [({}, True), ({"segment_health_check_handoff_timeout": "0"}, False)]
)
def test_the_handoff_is_on_by_default_and_the_key_turns_it_off(
    tmp_path, monkeypatch, conf, expected
):
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    for key, value in slurm_env(task=3, procid=1).items():
        monkeypatch.setenv(key, value)
    handler = create_segment_health_handler(
        RendezvousParameters(
            BACKEND_NAME,
            f"127.0.0.1:{free_port()}",
            "run",
            1,
            1,
            is_host="true",
            segment_health_check_dir=str(tmp_path),
            **conf,
        )
    )
    role = coordinator_of(handler)
    assert role is not None  # the task's other launcher
    assert (role.handoff is not None) is expected
    handler.shutdown()


def test_bad_configuration_fails_before_any_rendezvous():
    """No store is reached: the endpoint has no server and would time out if dialled."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    params = RendezvousParameters(
        BACKEND_NAME,
        f"127.0.0.1:{free_port()}",
        "run",
        1,
        1,
        is_host="false",
        read_timeout=f"{AT_ONCE_BOUND:g}",
        segment_health_check_dir="relative/shc",
    )
    started = time.monotonic()
    with pytest.raises(ConfigurationError) as refused:
        create_segment_health_handler(params)
    assert refused.value.setting == "rdzv-conf segment_health_check_dir"
    assert time.monotonic() - started < AT_ONCE_BOUND / 2  # no wait for the store


def test_a_store_client_says_where_it_waits_for_the_store(tcp_store, caplog):
    """With is_host=false torch waits for the store silently; the wrapper says so first."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    endpoint = f"127.0.0.1:{tcp_store.port}"
    creators = "nvrx_seghealth._rendezvous.creators"
    caplog.set_level(logging.INFO, logger=creators)
    handler = create_segment_health_handler(
        RendezvousParameters(BACKEND_NAME, endpoint, "run", 1, 1, is_host="false")
    )
    said = [r.getMessage() for r in caplog.records if r.name == creators]
    assert any(endpoint in line and "store-host" in line for line in said), said
    handler.shutdown()


@pytest.mark.parametrize(
    ("given", "kept", "warned"),
    [(None, "1", False), ("1", "1", False), ("0", "0", True)],
)
def test_with_the_store_outside_the_workers_do_not_share_it_unless_the_user_said_so(
    tcp_store, caplog, monkeypatch, given, kept, warned
):
    """A restart with an outside store and torch's shared agent store fails
    (integration/launchers/test_external_store_restart.py): the backend turns sharing off
    in its launcher, also with the check off, and keeps a value the user set, warning
    when it turns sharing on."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    _given(monkeypatch, given)
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    handler = create_segment_health_handler(
        RendezvousParameters(
            BACKEND_NAME, f"127.0.0.1:{tcp_store.port}", "run", 1, 1, is_host="false"
        )
    )
    assert os.environ[SHARED_STORE_ENV] == kept
    assert handler.use_agent_store  # served each round by rank 0's launcher, or torch's
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == STORE]
    assert bool(warnings) is warned, [r.getMessage() for r in warnings]
    handler.shutdown()


def test_a_hosting_launcher_without_the_check_serves_its_workers_as_a_checked_one(
    monkeypatch, caplog
):
    """No directory on one launcher, a directory on another (a partial roll-out): both
    serve the workers' store, so the round's workers bootstrap from one port, and both
    skip torch's rank exchange (integration/test_scenario_mixed_check.py). The
    launcher without the check says so in one WARNING, with the token ``check=off``."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    monkeypatch.delenv(SHARED_STORE_ENV, raising=False)
    monkeypatch.delenv(IDENTICAL_ENV, raising=False)
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    handler = create_segment_health_handler(
        RendezvousParameters(BACKEND_NAME, f"127.0.0.1:{free_port()}", "run", 1, 1)
    )
    assert os.environ[SHARED_STORE_ENV] == "1" and handler.use_agent_store
    assert os.environ[IDENTICAL_ENV] == "1"  # as its checked peers: no one waits in the exchange
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "check=off" in warnings[0], warnings
    handler.shutdown()


@pytest.mark.parametrize(
    ("given", "kept", "warned"),
    [(None, "1", False), ("1", "1", False), ("0", "0", True)],
)
@pytest.mark.parametrize("is_host", ["true", "false"])
def test_with_the_check_on_the_workers_never_share_a_launchers_store(
    tcp_store, shc, caplog, monkeypatch, is_host, given, kept, warned
):
    """An excluded unit may hold rank 0, and a spare may join a later round: workers
    that bootstrap from the store of the launcher holding rank 0 then never form the
    new world (integration/etcd/test_scenario_etcd.py, integration/test_config_matrix.py).
    So with the check on torch's shared store is turned off wherever the
    rendezvous store lives, also when a launcher hosts it (``is_host=true``): which
    launcher holds rank 0 does not depend on which one hosts. A value the user set is
    kept; one that turns sharing on is one WARNING naming the risk."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    _given(monkeypatch, given)
    for key, value in slurm_env(task=3).items():
        monkeypatch.setenv(key, value)
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    port = tcp_store.port if is_host == "false" else free_port()
    handler = create_segment_health_handler(
        RendezvousParameters(
            BACKEND_NAME,
            f"127.0.0.1:{port}",
            "run",
            1,
            1,
            is_host=is_host,
            segment_health_check_dir=shc,
        )
    )
    assert os.environ[SHARED_STORE_ENV] == kept
    assert handler.use_agent_store  # served each round by rank 0's launcher, or torch's
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == int(warned), [r.getMessage() for r in warnings]
    if warned:
        assert f"{SHARED_STORE_ENV}=0" in warnings[0].getMessage()
        assert warnings[0].name == STORE
    handler.shutdown()


@pytest.mark.parametrize(("directory", "kept"), [(True, "1"), (False, None)])
def test_a_composed_handler_with_the_check_on_keeps_the_workers_off_the_agent_store(
    tcp_store, shc, monkeypatch, directory, kept
):
    """Composition (docs/reference/python-api.md, "Compose it in your own launcher") takes the same path as the
    registered backend: the handler itself sets the variable when it has a directory."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

    monkeypatch.delenv(SHARED_STORE_ENV, raising=False)
    params = RendezvousParameters("c10d", f"127.0.0.1:{free_port()}", "run", 1, 1)
    backend, store = create_backend(params)
    handler = SegmentHealthRendezvousHandler(
        create_handler(store, backend, params),
        store=store,
        directory=shc if directory else None,
        environ=slurm_env(task=3),
    )
    assert os.environ.get(SHARED_STORE_ENV) == kept
    assert handler.use_agent_store  # served each round by rank 0's launcher, or torch's
    handler.shutdown()


def _given(monkeypatch, value: str | None) -> None:
    """The user's ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE``: ``None`` leaves it unset."""
    if value is None:
        monkeypatch.delenv(SHARED_STORE_ENV, raising=False)
    else:
        monkeypatch.setenv(SHARED_STORE_ENV, value)


def torchrun(tmp_path, env, conf: str, *, nproc: int = 1):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=segment-health",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        f"--rdzv-conf={conf}",
        str(worker),
    ]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=180,
        env={**clean_environment(), **env, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"},
        check=False,
    )


def test_under_torchrun_the_install_line_and_the_exclusion_reach_stderr(tmp_path):
    shc = tmp_path / "shc"
    shc.mkdir()
    path = publish_decision(str(shc), "41", "2", "drained")
    done = torchrun(tmp_path, slurm_env(task=2, array_job=41), f"segment_health_check_dir={shc}")
    assert done.returncode not in (0, 93)
    assert f"Segment health check installed directory={shc} job_id=41 task_id=2" in done.stderr
    assert "UnhealthyNodeException" in done.stderr
    tokens = re.escape(exclusion_tokens("41", "2"))
    assert re.search(rf"{re.escape(path)}\b.*; {tokens}$", done.stderr, re.MULTILINE)
    assert "worker rank" not in done.stdout


def test_under_torchrun_a_fail_open_warning_reaches_stderr_and_training_runs(tmp_path):
    shc = tmp_path / "shc"
    shc.mkdir()
    os.mkfifo(shc / "segment_health_check.41.2")
    done = torchrun(
        tmp_path, slurm_env(task=2, array_job=41), f"segment_health_check_dir={shc}", nproc=2
    )
    assert done.returncode == 0, done.stderr
    assert "cannot judge" in done.stderr and "not a regular file: FIFO" in done.stderr
    assert sorted(done.stdout.split("\n")[:2]) == ["worker rank 0", "worker rank 1"]


def test_under_torchrun_the_environment_variable_configures_the_directory(tmp_path):
    shc = tmp_path / "shc"
    shc.mkdir()
    publish_decision(str(shc), "9", "9", "bad")
    done = torchrun(
        tmp_path, {**slurm_env(job=9), "NVRX_SEGMENT_HEALTH_CHECK_DIR": str(shc)}, "join_timeout=30"
    )
    assert done.returncode not in (0, 93)
    assert exclusion_tokens("9", "9") in done.stderr


def test_under_torchrun_a_relative_directory_is_refused_with_the_fix(tmp_path):
    done = torchrun(tmp_path, slurm_env(task=2), "segment_health_check_dir=shc")
    assert done.returncode != 0
    assert "rdzv-conf segment_health_check_dir must be an absolute path" in done.stderr
    assert "worker rank" not in done.stdout


def test_under_torchrun_a_key_of_the_check_without_any_directory_is_refused(tmp_path):
    """The usual cause: NVRX_SEGMENT_HEALTH_CHECK_DIR not exported to the launcher."""
    done = torchrun(tmp_path, slurm_env(task=2), "segment_health_check_watch_interval=5")
    assert done.returncode == 1, done.stderr
    assert "rdzv-conf segment_health_check_watch_interval=5" in done.stderr
    assert "NVRX_SEGMENT_HEALTH_CHECK_DIR" in done.stderr
    assert "worker rank" not in done.stdout


def test_under_torchrun_a_refused_setting_is_one_line_not_a_traceback(tmp_path):
    done = torchrun(tmp_path, slurm_env(task=2), "segment_health_check_stat_timeout=nan")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith("nvrx_seghealth.ConfigurationError: rdzv-conf "), done.stderr


def test_a_refusal_that_is_caught_and_any_other_error_keep_their_traceback():
    """Only the creator's own refusal, uncaught, is said in one line."""
    code = """
from torch.distributed.elastic.rendezvous import RendezvousParameters
from nvrx_seghealth._launcher.backend import create_segment_health_handler
params = RendezvousParameters(
    "segment-health", "127.0.0.1:1", "r", 1, 1, segment_health_check_stat_timeout="nan"
)
try:
    create_segment_health_handler(params)
except ValueError as error:
    print("caught", type(error).__name__)
raise RuntimeError("another error")
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_environment(),
        check=False,
    )
    assert done.stdout == "caught ConfigurationError\n", done.stderr
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr
    assert done.stderr.splitlines()[-1] == "RuntimeError: another error"


def test_etcd_v2_without_python_etcd_names_the_extra_to_install():
    """python-etcd is installed here; its absence is injected with an import blocker."""
    code = """
import importlib.abc, sys
class NoEtcd(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "etcd":
            raise ModuleNotFoundError("No module named 'etcd'", name="etcd")
sys.modules.pop("etcd", None)
sys.meta_path.insert(0, NoEtcd())
from torch.distributed.elastic.rendezvous import RendezvousParameters
from nvrx_seghealth._launcher.backend import create_segment_health_handler
try:
    create_segment_health_handler(RendezvousParameters(
        "segment-health", "127.0.0.1:2379", "run", 1, 1, inner_backend="etcd-v2"))
except ValueError as error:
    print(error)
"""
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert "inner_backend=etcd-v2" in done.stdout and "pip install python-etcd" in done.stdout


def test_the_watch_interval_key_turns_the_watch_on(tmp_path, monkeypatch):
    """Through the registered backend: a decision written after joining is acted on
    while the workers run (a world of one restarts at once), not at the next join."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    for key, value in slurm_env(task=3).items():
        monkeypatch.setenv(key, value)
    handler = create_segment_health_handler(
        RendezvousParameters(
            BACKEND_NAME,
            f"127.0.0.1:{free_port()}",
            "run",
            1,
            1,
            is_host="true",
            segment_health_check_dir=str(tmp_path),
            segment_health_check_watch_interval="0.5",
        )
    )
    handler.next_rendezvous()
    assert handler.num_nodes_waiting() == 0
    publish_decision(str(tmp_path), "1000", "3", "drained")
    wait_until(lambda: excluded(handler))
    wait_until(lambda: handler.num_nodes_waiting() == 1)
    handler.shutdown()


def validated_calls(monkeypatch) -> list[str]:
    """The names of the validators called from now on: the directory's (in the settings
    and in the decision file's path) and the duration validator behind every ``CheckSettings``."""
    from nvrx_seghealth._decision import decision_file
    from nvrx_seghealth._settings import check_settings

    calls: list[str] = []

    def counted(module, name: str) -> None:
        real = getattr(module, name)

        def counting(*args, **kwargs):
            calls.append(name)
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counting)

    counted(check_settings, "require_absolute_directory")
    counted(decision_file, "require_absolute_directory")
    counted(check_settings, "validate_seconds")
    monkeypatch.setenv(SHARED_STORE_ENV, "1")  # the handler sets it; restored after
    return calls


def test_from_the_creator_to_the_stat_the_settings_are_validated_once(shc, monkeypatch):
    """One door: the rdzv-conf keys are validated into a ``CheckSettings`` where they enter,
    and the handler, the coordinator and the check take it as it is (torch's
    ``from_backend`` and ``__init__``). Counted through a real backend, up to process 0's
    stat (its decision excludes the unit)."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    from nvrx_seghealth import UnhealthyNodeException

    publish_decision(shc, "1000", "3", "drained")
    for key, value in slurm_env(task=3).items():
        monkeypatch.setenv(key, value)
    calls = validated_calls(monkeypatch)
    handler = create_segment_health_handler(
        RendezvousParameters(
            BACKEND_NAME,
            f"127.0.0.1:{free_port()}",
            "run",
            1,
            1,
            is_host="true",
            segment_health_check_dir=shc,
            segment_health_check_stat_timeout="5",
            segment_health_check_watch_interval="1",
        )
    )
    with pytest.raises(UnhealthyNodeException):  # process 0's stat found the decision
        handler.next_rendezvous()
    handler.shutdown()
    # the directory once; the stat bound and the watch interval once each (the
    # hand-off's default is computed from the validated stat bound)
    assert sorted(calls) == ["require_absolute_directory", "validate_seconds", "validate_seconds"]


def test_a_composed_handler_validates_its_arguments_once_up_to_the_stat(shc, monkeypatch):
    """The composition API's door is the handler's constructor; below it, as for the
    registered backend, nothing validates the settings again."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

    from nvrx_seghealth import UnhealthyNodeException

    publish_decision(shc, "1000", "3", "drained")
    params = RendezvousParameters("c10d", f"127.0.0.1:{free_port()}", "run", 1, 1)
    backend, store = create_backend(params)
    calls = validated_calls(monkeypatch)
    handler = SegmentHealthRendezvousHandler(
        create_handler(store, backend, params),
        store=store,
        directory=shc,
        environ=slurm_env(task=3),
        stat_timeout=5,
    )
    with pytest.raises(UnhealthyNodeException):
        handler.next_rendezvous()
    handler.shutdown()
    assert sorted(calls) == ["require_absolute_directory", "validate_seconds", "validate_seconds"]
