"""``nvrx-seghealth run`` before any agent starts: what it refuses (exit 2, one line), its
help, and how it rewrites torchrun's command line and hands the watch interval on.

The command runs as a user runs it, in a new process, and stops before a rendezvous; its
configuration errors and the rewriting run in process, on torchrun's real parser. Real launches:
``integration/commands/test_run.py``.
"""

from __future__ import annotations

import os
import re

import pytest

from harness.commands import (
    ft_cfg,
    nvrx_seghealth,
    one_node_command,
    one_node_environment,
    one_node_job,
    run_one_node,
)
from harness.docs import ROOT
from nvrx_seghealth import publish_decision
from nvrx_seghealth._commands import main
from nvrx_seghealth._commands.run import (
    agent_environment,
    launch_parser,
    select_segment_health,
    use_local_rendezvous,
)
from nvrx_seghealth._errors import ConfigurationError
from nvrx_seghealth._rendezvous import registry
from nvrx_seghealth._rendezvous.registry import InnerBackend
from nvrx_seghealth._settings.launcher_options import (
    WATCH_INTERVAL_FLAG,
    DirectorySetting,
    WatchIntervalSetting,
    resolve_launcher_settings,
)
from nvrx_seghealth._settings.rdzv_conf import BackendSettings

pytestmark = pytest.mark.torch  # the rewriting reads torchrun's parser and config


@pytest.fixture
def job(tmp_path):
    """A worker script, and three decision directories (flag, yaml, env)."""
    return one_node_job(tmp_path)


# --- configuration errors: exit 2, nothing starts ----------------------------------------


@pytest.mark.parametrize(
    "case,message",
    [
        (
            "relative flag",
            (
                "--ft-segment-health-check-dir must be an absolute path that every "
                "launcher can reach, got 'shc'; pass e.g."
            ),
        ),
        ("empty flag", "--ft-segment-health-check-dir is empty"),
        (
            "relative yaml",
            "fault_tolerance.segment_health_check_dir in {cfg} must be an absolute path",
        ),
        (
            "number in yaml",
            (
                "fault_tolerance.segment_health_check_dir in {cfg} must be an absolute "
                "directory path (a non-empty string), got int 42"
            ),
        ),
        ("list in yaml", "got list ['/a']"),
        ("section not a mapping", "'fault_tolerance' must be a mapping of settings, got str"),
        ("broken yaml", "--ft-cfg-path {cfg} is not valid YAML"),
        ("missing yaml", "--ft-cfg-path {cfg}: cannot read the file (No such file or directory)"),
        ("fifo", "--ft-cfg-path {cfg} is not a regular file (a FIFO)"),  # not opened: it waits
        ("list file", "--ft-cfg-path {cfg}: the file holds a list, not a mapping of settings"),
        ("string file", "--ft-cfg-path {cfg}: the file holds a str, not a mapping of settings"),
        ("relative env", "environment variable NVRX_SEGMENT_HEALTH_CHECK_DIR must be an absolute"),
        ("comma", "cannot be passed to the rendezvous: --rdzv-conf values cannot contain commas"),
        (
            "static backend",
            (
                "--rdzv-backend=static cannot carry the segment health check (set by "
                "--ft-segment-health-check-dir); use --rdzv-backend=c10d, etcd-v2, etcd-v3 "
                "or barrier"
            ),
        ),
        ("configured twice", "already configure it: give --rdzv-backend the inner rendezvous"),
    ],
)
def test_configuration_errors_exit_2_before_anything_starts(job, case, message, monkeypatch, capfd):
    cfg = job / "ft.yaml"
    flag = f"--ft-segment-health-check-dir={job / 'flag'}"
    options, env = [], {}
    if case == "relative flag":
        options = ["--ft-segment-health-check-dir=shc"]
    elif case == "empty flag":
        options = ["--ft-segment-health-check-dir="]
    elif case == "relative yaml":
        options = [ft_cfg(job, "fault_tolerance:\n  segment_health_check_dir: shc\n")]
    elif case == "number in yaml":
        options = [ft_cfg(job, "fault_tolerance:\n  segment_health_check_dir: 42\n")]
    elif case == "list in yaml":
        options = [ft_cfg(job, "fault_tolerance:\n  segment_health_check_dir: [/a]\n")]
    elif case == "section not a mapping":
        options = [ft_cfg(job, "fault_tolerance: /shared/shc\n")]
    elif case == "broken yaml":  # also refused when the flag would win
        options = [ft_cfg(job, "fault_tolerance: [\n"), flag]
    elif case == "missing yaml":
        options = [f"--ft-cfg-path={cfg}"]
    elif case == "fifo":
        os.mkfifo(cfg)
        options = [f"--ft-cfg-path={cfg}"]
    elif case == "list file":
        options = [ft_cfg(job, "- a\n")]
    elif case == "string file":
        options = [ft_cfg(job, "a" * 3_000_000 + "\n")]
    elif case == "relative env":
        env = {"NVRX_SEGMENT_HEALTH_CHECK_DIR": "shc"}
    elif case == "comma":
        options = [f"--ft-segment-health-check-dir={job / 'a,b'}"]
    elif case == "static backend":
        options = ["--rdzv-backend=static", "--nnodes=2", flag]
    elif case == "configured twice":
        options = [f"--rdzv-conf=segment_health_check_dir={job / 'env'}", flag]
    assert message.format(cfg=cfg) in _refused_in_process(job, options, env, monkeypatch, capfd)


def _refused_in_process(job, options, env, monkeypatch, capfd) -> str:
    """``nvrx-seghealth run`` of :func:`~harness.commands.run_one_node`, in this process,
    for a command line it refuses before torchrun: asserts exit 2 and one line on stderr,
    no traceback, no launcher log (no agent started, no rendezvous joined); returns it."""
    for name in list(os.environ):
        if name.startswith(("SLURM_", "NVRX_")):
            monkeypatch.delenv(name)
    for name, value in one_node_environment(env).items():
        monkeypatch.setenv(name, value)
    capfd.readouterr()
    code: int | str | None
    try:
        code = main(one_node_command(job, *options))
    except SystemExit as exit_:  # argparse's own usage errors
        code = exit_.code
    out, err = capfd.readouterr()
    assert code == 2, err
    assert err.startswith("nvrx-seghealth run: error: ")
    assert len(err.splitlines()) == 1
    assert out == "" and not (job / "worker-ran").exists()
    return err


def test_a_configuration_error_as_a_user_meets_it_is_one_line_and_exit_2(job):
    """The refusal from a new process, as a user runs the command."""
    # torch's own import warnings (e.g. "Failed to initialize NumPy" without numpy) are
    # not the command's output.
    env = {"PYTHONWARNINGS": "ignore::UserWarning"}
    done = run_one_node(job, "--ft-segment-health-check-dir=shc", env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("nvrx-seghealth run: error: --ft-segment-health-check-dir")
    assert len(done.stderr.splitlines()) == 1
    assert done.stdout == "" and not (job / "worker-ran").exists()


@pytest.mark.parametrize("given", ["flag", "environment"])
def test_standalone_with_a_hand_made_backend_is_refused_before_anything_starts(job, given):
    """torch would replace the backend with c10d: the check would be off, and the marked
    unit would train."""
    publish_decision(str(job / "flag"), "41", "2", "drained")
    done = run_one_node(
        job,
        *(["--standalone"] if given == "flag" else []),
        "--rdzv-backend=segment-health",
        f"--rdzv-conf=segment_health_check_dir={job / 'flag'}",
        env={"PET_STANDALONE": "1"} if given == "environment" else None,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("nvrx-seghealth run: error: --standalone"), done.stderr
    assert not (job / "worker-ran").exists()


def test_help_lists_torchrun_options_and_the_segment_health_options():
    done = nvrx_seghealth("run", "--help")
    assert done.returncode == 0
    for text in (
        "usage: nvrx-seghealth run",
        "--rdzv-backend",
        "--nproc-per-node",
        "--ft-segment-health-check-dir DIR",
        "--ft-segment-health-check-watch-interval SECONDS",
        "--ft-cfg-path FILE.yaml",
        "examples:",
    ):
        assert text in done.stdout


def _listed(text: str) -> list[str]:
    """The names of a list as a sentence gives it: ``a, b or c``."""
    return re.split(r", | or ", text)


@pytest.mark.parametrize("added", [(), ("etcd-v9",)], ids=["today", "one-more"])
def test_the_help_and_the_refusals_name_every_inner_backend(added, monkeypatch):
    """They read the table the backend checks ``inner_backend`` against: a backend added
    there is named in them at once (a written-out list once left etcd-v3 out)."""
    for name in added:
        monkeypatch.setitem(registry.INNER_BACKENDS, name, InnerBackend(name, True, "m:f"))
    backends = registry.names()
    described = re.search(r"--rdzv-backend \(([^)]*)\)", launch_parser().format_help())
    assert described is not None
    assert _listed(described.group(1)) == list(backends)
    hand_made = [
        "--rdzv-backend=segment-health",
        "--rdzv-endpoint=h:1",
        "--rdzv-conf=segment_health_check_dir=/other",
    ]
    refused = [
        ("use --rdzv-backend=(.*), or drop", ["--rdzv-backend=static", "--nnodes=2"], FLAG),
        (r"the inner rendezvous \(([^)]*)\)", hand_made, FLAG),
        (r"the inner rendezvous \(([^)]*)\)", hand_made, ENV),  # the watch cannot reach it
    ]
    for pattern, argv, setting in refused:
        with pytest.raises(ConfigurationError) as refusal:
            rewritten_with_watch(*argv, setting=setting)
        named = re.search(pattern, str(refusal.value))
        assert named is not None, refusal.value
        assert _listed(named.group(1)) == list(backends), refusal.value


def test_the_run_page_lists_every_inner_backend():
    """docs/reference/run.md names the backends that ``--rdzv-backend`` may name, in order."""
    page = " ".join((ROOT / "docs" / "reference" / "run.md").read_text().split())
    listed = re.search(r"\[inner backends\]\(backend\.md\) \(([^)]*)\)", page)
    assert listed is not None
    assert re.findall(r"`([^`]+)`", listed.group(1)) == list(registry.names())


# --- how the command line is rewritten (torchrun's real parser, no launch) ---------------

FLAG = DirectorySetting("/shc", "--ft-segment-health-check-dir")
ENV = DirectorySetting("/shc", "environment variable NVRX_SEGMENT_HEALTH_CHECK_DIR")


def rewritten(*argv, setting=FLAG):
    args = launch_parser().parse_args([*argv, "train.py"])
    use_local_rendezvous(args)
    select_segment_health(args, setting)
    return args


@pytest.mark.parametrize(
    "argv,inner,conf",
    [
        (["--rdzv-backend=c10d", "--rdzv-endpoint=h:1"], "c10d", ""),
        (
            ["--rdzv-backend=c10d", "--rdzv-endpoint=h:1", "--rdzv-conf=is_host=false"],
            "c10d",
            "is_host=false,",
        ),
        (["--rdzv-backend=etcd-v2", "--rdzv-endpoint=h:2379", "--nnodes=2:4"], "etcd-v2", ""),
    ],
)
def test_the_users_backend_becomes_the_inner_backend(argv, inner, conf):
    args = rewritten(*argv)
    assert args.rdzv_backend == "segment-health"
    assert args.rdzv_conf == f"{conf}segment_health_check_dir=/shc,inner_backend={inner}"


@pytest.mark.parametrize(
    "argv", [["--standalone"], ["--nproc-per-node=2"], ["--rdzv-backend=static"]]
)
def test_torchruns_local_rendezvous_is_wrapped_as_c10d(argv):
    args = rewritten(*argv)
    assert (args.rdzv_backend, args.rdzv_endpoint, args.standalone) == (
        "segment-health",
        "localhost:0",
        False,
    )
    assert args.rdzv_conf == "segment_health_check_dir=/shc,inner_backend=c10d"
    assert args.rdzv_id != "none"


def test_a_hand_made_backend_is_left_alone_when_only_the_environment_is_set():
    argv = [
        "--rdzv-backend=segment-health",
        "--rdzv-endpoint=h:1",
        "--rdzv-conf=segment_health_check_dir=/other,inner_backend=c10d",
    ]
    args = rewritten(*argv, setting=ENV)
    assert (args.rdzv_backend, args.rdzv_conf) == (
        "segment-health",
        "segment_health_check_dir=/other,inner_backend=c10d",
    )
    with pytest.raises(ConfigurationError, match="already configure it"):
        rewritten(*argv)
    with pytest.raises(ConfigurationError, match="--rdzv-backend=etcd cannot carry"):
        rewritten("--rdzv-backend=etcd", "--rdzv-endpoint=h:1")


def test_the_backend_defaults_to_c10d_as_in_ft_launcher():
    args = rewritten("--nnodes=2", "--rdzv-endpoint=h:1")
    assert args.rdzv_conf == "segment_health_check_dir=/shc,inner_backend=c10d"


def test_workers_are_identical_unless_the_environment_says_otherwise():
    environ: dict[str, str] = {}
    agent_environment(environ)
    assert environ == {"TORCH_ELASTIC_WORKER_IDENTICAL": "1"}
    environ = {"TORCH_ELASTIC_WORKER_IDENTICAL": "0"}
    agent_environment(environ)
    assert environ == {"TORCH_ELASTIC_WORKER_IDENTICAL": "0"}


# --- the watch interval ------------------------------------------------------------------

WATCH_KEY = "segment_health_check_watch_interval"
WATCH = WatchIntervalSetting(5.0, WATCH_INTERVAL_FLAG)


def rewritten_with_watch(*argv, setting=FLAG, watch=WATCH):
    args = launch_parser().parse_args([*argv, "train.py"])
    use_local_rendezvous(args)
    select_segment_health(args, setting, watch)
    return args


def launched_as(*argv, environ=None):
    """What ``launch`` hands to torchrun for ``argv``: the settings resolved as it does."""
    args = launch_parser().parse_args([*argv, "train.py"])
    use_local_rendezvous(args)
    settings = resolve_launcher_settings(
        args.ft_segment_health_check_dir,
        args.ft_segment_health_check_watch_interval,
        args.ft_cfg_path,
        environ={} if environ is None else environ,
    )
    assert settings.directory is not None
    select_segment_health(args, settings.directory, settings.watch_interval)
    return args


def backend_settings(args):
    """The settings the registered backend reads from torchrun's rendezvous config."""
    from torch.distributed.run import config_from_args

    return BackendSettings.from_rdzv_config(config_from_args(args)[0].rdzv_configs, environ={})


def test_a_watch_interval_travels_to_the_backend_as_its_rdzv_conf_key():
    args = rewritten_with_watch("--rdzv-endpoint=h:1", "--rdzv-conf=is_host=false")
    assert args.rdzv_conf == (
        f"is_host=false,segment_health_check_dir=/shc,inner_backend=c10d,{WATCH_KEY}=5.0"
    )
    check = backend_settings(args).check
    assert check is not None and (check.directory, check.watch_interval) == ("/shc", 5.0)


@pytest.mark.parametrize("winner", ["flag", "yaml", "env"])
def test_the_flag_beats_the_file_beats_the_environment(tmp_path, winner):
    """Each setting gives the backend its directory on its own; the higher one wins."""
    argv = []
    if winner in ("flag", "yaml"):
        cfg = tmp_path / "ft.yaml"
        cfg.write_text("trainer:\n  fault_tolerance:\n    segment_health_check_dir: /yaml\n")
        argv.append(f"--ft-cfg-path={cfg}")
    if winner == "flag":
        argv.append("--ft-segment-health-check-dir=/flag")
    args = launched_as(
        "--rdzv-endpoint=h:1", *argv, environ={"NVRX_SEGMENT_HEALTH_CHECK_DIR": "/env"}
    )
    check = backend_settings(args).check
    assert check is not None and check.directory == f"/{winner}"


@pytest.mark.parametrize(
    "option",
    [
        "--ft-segment-health-check-watch-interval=0.5",
        "--ft_segment_health_check_watch_interval=0.5",
        "yaml",
    ],
)
def test_the_flag_its_alias_and_the_yaml_field_reach_the_backend(tmp_path, option):
    if option == "yaml":
        cfg = tmp_path / "ft.yaml"
        cfg.write_text(
            "trainer:\n  fault_tolerance:\n    segment_health_check_dir: /shc\n"
            f"    {WATCH_KEY}: 0.5\n"
        )
        argv = [f"--ft-cfg-path={cfg}"]
    else:
        argv = ["--ft-segment-health-check-dir=/shc", option]
    args = launched_as("--rdzv-endpoint=h:1", *argv)
    assert args.rdzv_conf.split(",")[-1] == f"{WATCH_KEY}=0.5"
    check = backend_settings(args).check
    assert check is not None and check.watch_interval == 0.5 and check.watch_enabled


def test_the_flag_beats_the_yaml_field_on_the_command_line(tmp_path):
    cfg = tmp_path / "ft.yaml"
    cfg.write_text(f"fault_tolerance:\n  segment_health_check_dir: /shc\n  {WATCH_KEY}: 9\n")
    args = launched_as("--rdzv-endpoint=h:1", f"--ft-cfg-path={cfg}", f"{WATCH_INTERVAL_FLAG}=2")
    check = backend_settings(args).check
    assert check is not None and check.watch_interval == 2.0


@pytest.mark.parametrize("watch", [None, WatchIntervalSetting(0.0, WATCH_INTERVAL_FLAG)])
def test_no_watch_or_a_zero_interval_adds_no_key(watch):
    args = rewritten_with_watch("--rdzv-endpoint=h:1", watch=watch)
    assert args.rdzv_conf == "segment_health_check_dir=/shc,inner_backend=c10d"
    check = backend_settings(args).check
    assert check is not None and not check.watch_enabled


def test_the_rdzv_conf_key_alone_is_passed_on_as_before():
    args = rewritten_with_watch("--rdzv-endpoint=h:1", f"--rdzv-conf={WATCH_KEY}=3", watch=None)
    assert args.rdzv_conf == f"{WATCH_KEY}=3,segment_health_check_dir=/shc,inner_backend=c10d"
    check = backend_settings(args).check
    assert check is not None and check.watch_interval == 3.0


@pytest.mark.parametrize("seconds", [5.0, 0.0])
def test_a_watch_interval_also_in_rdzv_conf_is_refused(seconds):
    watch = WatchIntervalSetting(seconds, WATCH_INTERVAL_FLAG)
    with pytest.raises(ConfigurationError) as refused:
        rewritten_with_watch("--rdzv-endpoint=h:1", f"--rdzv-conf={WATCH_KEY}=3", watch=watch)
    assert refused.value.setting == WATCH_INTERVAL_FLAG


def test_a_watch_cannot_reach_a_hand_made_backend():
    argv = [
        "--rdzv-backend=segment-health",
        "--rdzv-endpoint=h:1",
        "--rdzv-conf=segment_health_check_dir=/other,inner_backend=c10d",
    ]
    with pytest.raises(ConfigurationError) as refused:
        rewritten_with_watch(*argv, setting=ENV)
    assert refused.value.setting == WATCH_INTERVAL_FLAG
    zero = WatchIntervalSetting(0.0, WATCH_INTERVAL_FLAG)
    args = rewritten_with_watch(*argv, setting=ENV, watch=zero)  # off: nothing to carry
    assert args.rdzv_conf == "segment_health_check_dir=/other,inner_backend=c10d"
    with pytest.raises(ConfigurationError, match="already configure it") as refused:
        rewritten_with_watch(*argv)  # the flag's directory is the conflict to fix first
    assert refused.value.setting is None


def test_a_watch_with_a_backend_that_cannot_carry_the_check_is_refused():
    with pytest.raises(ConfigurationError, match="--rdzv-backend=static cannot carry"):
        rewritten_with_watch("--rdzv-backend=static", "--nnodes=2", "--rdzv-endpoint=h:1")


@pytest.mark.parametrize(
    "case,setting",
    [
        ("negative flag", WATCH_INTERVAL_FLAG),
        ("flag above the maximum", WATCH_INTERVAL_FLAG),
        ("bad yaml field", f"fault_tolerance.{WATCH_KEY} in {{cfg}}"),
        ("misspelt yaml field", "fault_tolerance.watch_interval"),
        ("no directory", WATCH_INTERVAL_FLAG),
        ("also in rdzv-conf", WATCH_INTERVAL_FLAG),
        ("hand-made backend", WATCH_INTERVAL_FLAG),
    ],
)
def test_watch_interval_errors_exit_2_before_anything_starts(
    job, case, setting, monkeypatch, capfd
):
    cfg = job / "ft.yaml"
    flag = f"--ft-segment-health-check-dir={job / 'flag'}"
    env: dict[str, str] = {}
    options = {
        "negative flag": [flag, f"{WATCH_INTERVAL_FLAG}=-1"],
        "flag above the maximum": [flag, f"{WATCH_INTERVAL_FLAG}=3601"],
        "bad yaml field": [f"--ft-cfg-path={cfg}", flag],
        "misspelt yaml field": [f"--ft-cfg-path={cfg}", flag],
        "no directory": [f"{WATCH_INTERVAL_FLAG}=5"],
        "also in rdzv-conf": [flag, f"{WATCH_INTERVAL_FLAG}=5", f"--rdzv-conf={WATCH_KEY}=5"],
        "hand-made backend": [
            f"--rdzv-conf=segment_health_check_dir={job / 'env'}",
            f"{WATCH_INTERVAL_FLAG}=5",
        ],
    }[case]
    if case == "bad yaml field":
        cfg.write_text(f"fault_tolerance:\n  {WATCH_KEY}: true\n")
    elif case == "misspelt yaml field":
        cfg.write_text("fault_tolerance:\n  watch_interval: 5\n")
    elif case == "hand-made backend":
        env["NVRX_SEGMENT_HEALTH_CHECK_DIR"] = str(job / "env")
    assert setting.format(cfg=cfg) in _refused_in_process(job, options, env, monkeypatch, capfd)


@pytest.mark.parametrize(
    "options",
    [
        ["--rdzv-backend=segment-health", "--ft-segment-health-check-dir=shc"],
        ["--rdzv-backend=segment-health", "--max-restarts=x"],  # argparse's own exit 2
    ],
)
def test_a_refused_command_line_with_the_backend_asked_for_says_nothing_of_a_fallback(job, options):
    """Nothing was launched: the exit has no ``check=off`` line (no run trained)."""
    done = run_one_node(job, *options, env={"PYTHONWARNINGS": "ignore::UserWarning"})
    assert done.returncode == 2, done.stderr
    assert "cause=launcher-fallback" not in done.stderr
    assert not (job / "worker-ran").exists()
