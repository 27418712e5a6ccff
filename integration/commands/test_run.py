"""``nvrx-seghealth run`` launching real torchrun agents: the directory's three settings,
a healthy unit, plain torchrun without a setting, a backend's own refusal inside the agent,
and the watch acting on a decision written during training.

Launches rendezvous on 127.0.0.1 (``harness.commands.run_one_node``). What the command
decides before any agent starts is proven in ``tests/commands/test_run.py``.
"""

from __future__ import annotations

import pytest

from harness.commands import ft_cfg, one_node_job, run_one_node
from harness.telemetry import exclusion_tokens
from nvrx_seghealth import publish_decision
from nvrx_seghealth._settings.launcher_options import WATCH_INTERVAL_FLAG

INSTALLED = "Segment health check installed directory={} job_id=41 task_id=2"
#: The stable tokens that end the ERROR line of unit 41.2, excluded by its decision file.
EXCLUDED = exclusion_tokens("41", "2")
WATCH_KEY = "segment_health_check_watch_interval"


@pytest.fixture
def job(tmp_path):
    """A worker script, and three decision directories (flag, yaml, env)."""
    return one_node_job(tmp_path)


def nested_yaml(job):
    """An NVRx-style file: the fault_tolerance section nested below other settings."""
    return ft_cfg(
        job,
        f"model:\n  layers: 2\ntrainer:\n  fault_tolerance:\n"
        f"    rank_heartbeat_timeout: 60\n"
        f"    segment_health_check_dir: {job / 'yaml'}\n",
    )


def test_a_directory_from_an_nvrx_style_file_excludes_the_unit(job):
    """The setting reaches a real launcher, which excludes the marked unit. Which of the
    flag, the file and the environment wins is proven in process
    (``tests/commands/test_run.py``)."""
    path = publish_decision(str(job / "yaml"), "41", "2", "n7 drained\n")

    done = run_one_node(
        job, nested_yaml(job), env={"NVRX_SEGMENT_HEALTH_CHECK_DIR": str(job / "env")}
    )
    assert done.returncode not in (0, 93), done.stderr
    assert INSTALLED.format(job / "yaml") in done.stderr
    assert EXCLUDED in done.stderr and path in done.stderr
    assert not (job / "worker-ran").exists()


def test_a_healthy_unit_trains(job):
    done = run_one_node(job, f"--ft-segment-health-check-dir={job / 'flag'}")
    assert done.returncode == 0, done.stderr
    assert INSTALLED.format(job / "flag") in done.stderr
    assert "worker rank 0" in done.stdout


def test_without_any_setting_it_is_plain_torchrun(job):
    publish_decision(str(job / "flag"), "41", "2", "would exclude if it were configured\n")
    done = run_one_node(job)
    assert done.returncode == 0, done.stderr
    assert "Segment health check" not in done.stderr
    assert "worker rank 0" in done.stdout


def test_a_configuration_error_inside_torchrun_is_torchruns_failure_not_a_usage_error(job):
    """A hand-made backend configuration is the backend's to refuse, inside torchrun's
    agent: the command exits as torchrun does (1, the error's last line only), not with
    exit 2."""
    done = run_one_node(
        job,
        "--rdzv-backend=segment-health",
        "--rdzv-conf=segment_health_check_dir=shc",
        env={"PYTHONWARNINGS": "ignore::UserWarning"},
    )
    assert done.returncode == 1, done.stderr
    assert not done.stderr.startswith("nvrx-seghealth run: error: ")
    assert "Traceback (most recent call last)" not in done.stderr
    assert "ConfigurationError: rdzv-conf segment_health_check_dir" in done.stderr
    assert not (job / "worker-ran").exists()


#: A worker that publishes its own unit's decision once it trains, then trains on.
MARKS_ITSELF = (
    "import pathlib, sys, time\nfrom nvrx_seghealth import publish_decision\n"
    "publish_decision(sys.argv[1], '41', '2', 'drained during training\\n')\n"
    "time.sleep(600)\npathlib.Path(sys.argv[2]).touch()\n"
)


@pytest.mark.parametrize("given", ["flag", "yaml"])
def test_a_decision_written_while_the_workers_run_excludes_the_unit(job, given):
    """The setting reaches a real launcher: its watch acts on a decision during training."""
    (job / "marks_itself.py").write_text(MARKS_ITSELF)
    if given == "flag":
        options = [f"--ft-segment-health-check-dir={job / 'flag'}", f"{WATCH_INTERVAL_FLAG}=0.5"]
    else:
        options = [
            ft_cfg(
                job,
                f"fault_tolerance:\n  segment_health_check_dir: {job / 'flag'}\n"
                f"  {WATCH_KEY}: 0.5\n",
            )
        ]
    script = (str(job / "marks_itself.py"), str(job / "flag"), str(job / "worker-finished"))
    done = run_one_node(job, *options, program=script, timeout=180)
    assert done.returncode == 1, done.stderr
    tokens = "reason=decision-file after_joining=true when=during-training job_id=41 task_id=2"
    assert tokens in done.stderr  # the watch excluded it while it trained
    assert "UnhealthyNodeException" in done.stderr  # torch's traceback names the type
    assert not (job / "worker-finished").exists()
