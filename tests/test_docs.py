"""Every example of the documentation works as written, every relative link resolves, and
the site builds strictly.

The pages are README.md (the front page) and ``docs/**/*.md``. Each fenced block of a page
is claimed (:data:`CHECKED`) by the test that runs it, or parses and validates it with the
code that would run it (here, in ``integration/docs/test_docs_runs.py`` and
``tests/test_docs_launchers.py``, or where a note says), or is
marked as not runnable here, with why (:data:`NOT_RUNNABLE`); a block neither claims fails
:func:`test_every_example_is_claimed`, so a new example cannot go unchecked. Every
relative link of README.md, ARCHITECTURE.md, BENCHMARKS.md, CHANGELOG.md and the pages
names a file that exists, and an anchor that its headings make, as a forge and the site
make them (:func:`test_every_relative_link_resolves`).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bench.benchcli import build_parser as bench_parser
from harness.docs import (
    PAGES,
    ROOT,
    anchors,
    ci_commands,
    commands,
    doc_examples,
    examples_under,
    relative_links,
    section,
    without_srun,
)
from nvrx_seghealth._commands import build_parser
from nvrx_seghealth._decision.decision_file import DECISION_FILE_PREFIX

pytestmark = pytest.mark.torch  # the examples parse with torchrun and build the handler

FRONT, CLUSTER, LAUNCHERS, CONTRIBUTING, RUN = (
    "README.md",
    "docs/cluster.md",
    "docs/launchers.md",
    "docs/contributing.md",
    "docs/reference/run.md",
)
API = "docs/reference/python-api.md"
RUNS, LAUNCH = "integration/docs/test_docs_runs.py", "tests/test_docs_launchers.py"
GUIDES = "tests/test_docs_guides.py"
SIZING, SERVICES, STORE_UNIT = (
    "docs/sizing.md",
    "docs/services.md",
    "The store host as a systemd service",
)
SITE = "test_the_site_build_is_strict (./dev docs renders it; CI runs that)"
START, WATCH, EVENTS = "docs/getting-started.md", "docs/watch.md", "docs/reference/events.md"
LAUNCH_LINES = (
    f"test_cluster_recipe_submits_the_tested_job_script and test_torchrun_command_lines ({LAUNCH})"
)
TORCHRUN = f"test_torchrun_command_lines ({LAUNCH})"
YOUR_LAUNCHER = f"test_your_launcher_command_lines ({LAUNCH}; runs: integration/launchers/)"

#: (page, heading, language) of every block that a test runs or checks, and that test
#: (in this module, or in the module it names).
CHECKED = {
    (FRONT, "Try it", "bash"): f"test_the_two_commands_and_the_demo ({RUNS})",
    (FRONT, "Launch it", "bash"): LAUNCH_LINES,
    (START, "The demo", "bash"): f"test_the_two_commands_and_the_demo ({RUNS})",
    (START, "The demo", "text"): f"test_captured_outputs_are_what_the_code_prints ({RUNS})",
    (START, "Try it on one machine", "bash"): f"test_try_it_on_one_machine ({RUNS})",
    (WATCH, "The watch: a decision during training", "bash"): TORCHRUN,
    (
        WATCH,
        "The watch: a decision during training",
        "python",
    ): f"test_the_checkpoint_example ({RUNS})",
    (CLUSTER, "Step by step", "bash"): "test_cluster_recipe_submits_the_tested_job_script",
    (CLUSTER, "Install", "bash"): f"test_install_lines ({RUNS})",
    (
        CLUSTER,
        "When to choose etcd over c10d",
        "bash",
    ): f"{TORCHRUN}; etcd's own flags: integration/etcd/test_docs_etcd.py",
    (
        "docs/operators.md",
        "A pass now: SIGUSR1 or a Slurm trigger",
        "bash",
    ): "test_producer_wakeup_lines (runs: integration/slurm/test_publish_drained_trigger.py)",
    (LAUNCHERS, "accelerate", "bash"): YOUR_LAUNCHER,
    (LAUNCHERS, "TorchX", "bash"): YOUR_LAUNCHER,
    (LAUNCHERS, "Lightning Fabric", "bash"): YOUR_LAUNCHER,
    ("docs/reference/backend.md", "The torchrun backend", "bash"): TORCHRUN,
    (
        "docs/reference/etcd-v3.md",
        "The etcd-v3 backend",
        "bash",
    ): f"test_the_etcd_v3_page_installs_the_extra_and_launches_on_every_member ({LAUNCH})",
    (
        "docs/reference/barrier.md",
        "Settings",
        "bash",
    ): f"test_the_barrier_page_launches_on_the_etcd_v3_store_of_every_member ({LAUNCH})",
    (RUN, "nvrx-seghealth run", "bash"): f"test_launcher_command_lines ({LAUNCH})",
    (RUN, "nvrx-seghealth run", "yaml"): f"test_launcher_command_lines ({LAUNCH})",
    (API, "Compose it in your own launcher", "python"): f"test_composition_example ({RUNS})",
    (API, "For a launcher", "{eval-rst}"): SITE,
    (API, "The check alone", "{eval-rst}"): SITE,
    (API, "For a producer", "{eval-rst}"): SITE,
    (API, "The store and the events", "{eval-rst}"): SITE,
    (API, "Every caller", "{eval-rst}"): SITE,
    ("docs/reference/cli.md", "The audit log", "text"): "a real pass's lines have its fields "
    "(tests/reference/test_cli.py)",
    ("docs/reference/decision-file.md", "The decision file", ""): "test_decision_file_name",
    (EVENTS, "Events and metrics", "python"): f"test_events_launcher_script ({RUNS})",
    (EVENTS, "Events and metrics", "bash"): f"test_events_launcher_script ({RUNS})",
    (
        EVENTS,
        "Events and metrics",
        "text",
    ): f"test_captured_outputs_are_what_the_code_prints ({RUNS})",
    (CONTRIBUTING, "Tests", "bash"): "test_test_commands_are_what_ci_runs",
    (
        CONTRIBUTING,
        "Under load",
        "bash",
    ): "test_loaded_test_command (runs: integration/dev/test_dev.py)",
    (CONTRIBUTING, "Benchmarks", "bash"): "test_benchmark_command_lines",
    (CONTRIBUTING, "The documentation", "bash"): "test_the_docs_commands_check_what_ci_checks",
    ("docs/index.md", "nvrx-seghealth documentation", "{toctree}"): SITE,
    (
        SIZING,
        "Count launchers, not tasks",
        "bash",
    ): f"test_sizing_submission_runs_the_job_script ({GUIDES})",
    (
        SIZING,
        "Your training script",
        "python",
    ): f"test_sizing_checkpoint_is_the_tested_example ({GUIDES})",
    (
        SERVICES,
        STORE_UNIT,
        "ini",
    ): f"test_store_host_unit_file ({GUIDES}; its loss: integration/test_store_host_lost.py)",
    (
        SERVICES,
        "One publish-drained per array job",
        "bash",
    ): f"test_publish_drained_per_array_job ({GUIDES})",
}

#: (page, heading, language) of every block that nothing can run, and why.
NOT_RUNNABLE = {
    ("docs/concepts.md", "A round and an exclusion", "text"): "a drawing of one round, "
    "neither a command nor a captured output",
}


def test_every_example_is_claimed():
    claims = {**CHECKED, **NOT_RUNNABLE}
    unclaimed = [
        e.where
        for page in PAGES
        for e in doc_examples(page)
        if (e.page, e.heading, e.language) not in claims
    ]
    assert not unclaimed, f"examples neither claimed in {__name__} nor marked: {unclaimed}"
    stale = [
        key
        for key in claims
        if not any((e.page, e.heading, e.language) == key for e in doc_examples(key[0]))
    ]
    assert not stale, f"claims of blocks that no page has: {stale}"
    assert not set(CHECKED) & set(NOT_RUNNABLE)
    defined = {
        name
        for path in (Path(__file__), ROOT / RUNS, ROOT / LAUNCH, ROOT / GUIDES)
        for name in re.findall(r"^def (test_\w+)\(", path.read_text(), re.MULTILINE)
    }
    named = {
        word for claim in CHECKED.values() for word in claim.split() if word.startswith("test_")
    }
    assert named <= defined, named - defined


def test_every_relative_link_resolves():
    pages = ["ARCHITECTURE.md", "BENCHMARKS.md", "CHANGELOG.md", *PAGES]
    pages += sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "bench/results").glob("*.md"))
    links = [link for page in pages for link in relative_links(page)]
    assert len(links) > 50, links  # the reader found the links
    broken = [
        f"{link.page}:{link.line}: {link.target}#{link.anchor}"
        for link in links
        if not (ROOT / link.target).exists()
        or (link.anchor and link.anchor not in anchors(link.target))
    ]
    assert broken == []


def _site_build_options() -> list[str]:
    """The options of ``./dev docs``'s sphinx-build, between the program and its folders."""
    (line,) = [line for line in (ROOT / "dev").read_text().splitlines() if "sphinx-build" in line]
    argv = shlex.split(line.strip())
    assert argv[0].endswith("/sphinx-build") and argv[-2:] == [".", "build/docs"]
    return argv[1:-2]


def test_the_site_build_is_strict(tmp_path):
    """``./dev docs``'s build of a copy of the pages, with one broken link and one page
    outside every table of contents planted, fails and names both, and nothing else: the
    rest (the tables of contents, the public API's directives) renders clean."""
    if os.environ.get("CI") != "true":  # ./dev, and so CI, installs the docs extra
        pytest.importorskip("sphinx", reason="pip install -e '.[docs]'")
    options = _site_build_options()
    assert {"-W", "--keep-going", "-n"} <= set(options)
    source = tmp_path / "source"
    source.mkdir()
    for name in ("README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "CHANGELOG.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("docs", "examples"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("_build"))
    with open(source / "docs" / "operators.md", "a") as page:
        page.write("\nSee [a page that does not exist](nowhere.md).\n")
    (source / "docs" / "orphan.md").write_text("# A page in no table of contents\n")
    built = subprocess.run(
        # Plain text: Sphinx colours its warnings where it guesses a terminal (CI=true).
        [sys.executable, "-m", "sphinx", *options, "--no-color", ".", str(tmp_path / "site")],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode != 0
    warnings = [line for line in built.stderr.splitlines() if "WARNING:" in line]
    assert len(warnings) == 2, built.stderr[-4000:]
    planted = {
        ("docs/operators.md", "[myst.xref_missing]"),
        ("docs/orphan.md", "[toc.not_included]"),
    }
    assert {
        (w.split(":", 1)[0].removeprefix(f"{source}/"), w.split()[-1]) for w in warnings
    } == planted


def test_the_docs_commands_check_what_ci_checks():
    (example,) = examples_under(CONTRIBUTING, "The documentation")
    lines = [shlex.join(argv) for argv in commands(example.text)]
    assert lines == ["./dev docs", "./dev docs --check-width"]
    # CI runs both tiers (test_test_commands_are_what_ci_runs); this module builds the site
    # strictly, and the whole-job tier checks its width with the same code as the command.
    assert "def test_the_site_build_is_strict" in Path(__file__).read_text()
    site_test = (ROOT / "integration/docs/test_site.py").read_text()
    assert "def test_every_page_fits_1280_px" in site_test
    assert "from harness.docsite import width as sitewidth" in site_test


@pytest.mark.parametrize(
    "block",
    [examples_under(CLUSTER, "Step by step")[0], examples_under(FRONT, "Launch it")[0]],
    ids=["cluster", "front-page"],
)
def test_cluster_recipe_submits_the_tested_job_script(block):
    export, submit = commands(block.text)
    assert export[0] == "export" and submit[:2] == [
        "sbatch",
        "examples/segment-health-array.sbatch",
    ]
    script = (ROOT / submit[1]).read_text()
    variable = export[1].split("=", 1)[0]
    assert f"${{{variable}" in script  # the setting the page exports is the script's
    e2e = (ROOT / "harness" / "jobs" / "slurmjob.py").read_text()
    assert '"examples" / "segment-health-array.sbatch"' in e2e  # submitted on real Slurm


def test_decision_file_name():
    (example,) = examples_under("docs/reference/decision-file.md", "The decision file", "")
    assert example.text.strip() == f"<directory>/{DECISION_FILE_PREFIX}.<job_id>.<task_id>"


def test_test_commands_are_what_ci_runs():
    (example,) = examples_under(CONTRIBUTING, "Tests")
    lines = [shlex.join(argv) for argv in commands(example.text)]
    assert lines == ["./dev test", "./dev test-all", "./dev lint"]
    # CI runs the lint gate and every tier: the fast tier measured, then the whole jobs.
    top = [line for line in ci_commands() if "./dev " in line and line[0] not in " #"]
    ran = {line.split("./dev ", 1)[1] for line in top}
    assert {"lint", "test", "test-all -m integration"} <= ran


def test_loaded_test_command():
    (example,) = examples_under(CONTRIBUTING, "Under load")
    assert [shlex.join(argv) for argv in commands(example.text)] == ["./dev loaded-test"]
    assert (
        "test_loaded_test_runs_pytest_beside_two_hogs"
        in (ROOT / "integration/dev/test_dev.py").read_text()
    )


def test_benchmark_command_lines():
    (example,) = examples_under(CONTRIBUTING, "Benchmarks")
    for argv in commands(example.text):
        assert argv[:2] == ["./dev", "bench"]
        bench_parser().parse_args(argv[2:])  # exits 2 on an unknown option or row


#: Inline commands of the prose and tables: ``nvrx-seghealth SUBCOMMAND --option ...``.
_INLINE = re.compile(r"`((?:srun [^`]*?)?nvrx-seghealth (?!run)[a-z-]+ --[^`]*)`")


def test_inline_operator_commands_parse():
    spans = [
        " ".join(span.replace("[", "").replace("]", "").split())  # [--optional]
        for page in PAGES
        for span in _INLINE.findall((ROOT / page).read_text())
    ]
    assert len(spans) >= 8, spans
    for span in spans:
        argv = without_srun(shlex.split(span))
        assert argv[0] == "nvrx-seghealth", span
        try:
            build_parser().parse_args(argv[1:])
        except SystemExit as error:  # argparse refused it
            pytest.fail(f"the documented `{span}` does not parse: exit {error.code}")


def test_exit_code_table_is_the_code_s():
    """The documented exit codes are :data:`EXIT_STATUSES`, the source of every ``--help``."""
    from nvrx_seghealth._commands.output import EXIT_STATUSES

    text = section("docs/reference/exit-codes.md", "The commands")
    table = text[text.index("| command | 0 | 1 | 2 |") :].split("\n\n", 1)[0].splitlines()[2:]
    rows = {}
    for row in table:
        command, *cells = [cell.strip().replace("`", "") for cell in row.strip("|").split("|")]
        rows[command] = cells
    expected = {
        command: [dict(statuses).get(code, "—") for code in (0, 1, 2)]
        for command, statuses in EXIT_STATUSES.items()
    }
    assert rows == expected
    # argparse's own record of the subcommands: private, and typed as optional.
    actions = build_parser()._subparsers._group_actions  # type: ignore[union-attr]
    subcommands = set(actions[0].choices)  # type: ignore[arg-type]
    assert set(rows) == subcommands - {
        "run",
        "demo",
    }  # run exits as torchrun does; the demo: its own section


def test_the_ft_launcher_table_names_tests_that_exist():
    table = section(RUN, "Where ft_launcher differs")
    paths = re.findall(r"`((?:tests|integration)/[^`]*)`", table)
    assert len(paths) >= 6, paths
    assert [p for p in paths if not (ROOT / p).exists()] == []


def test_producer_wakeup_lines():
    """The producer's command parses, the signalling script it names is the example's, and
    the trigger runs that script with the same pid file."""
    signal_block, trigger_block = examples_under(
        "docs/operators.md", "A pass now: SIGUSR1 or a Slurm trigger"
    )
    producer, drain, poke = commands(signal_block.text)
    assert producer[-1] == "&" and producer[:2] == ["nvrx-seghealth", "publish-drained"]
    options = build_parser().parse_args(producer[1:-1])
    assert options.pid_file == poke[1] and options.interval == 300
    assert drain[:3] == ["scontrol", "update", "nodename=gpu017"]
    script = ROOT / poke[0]
    assert script.name == "publish-drained-now.sh" and os.access(script, os.X_OK)
    (trigger,) = commands(trigger_block.text)
    assert trigger[:5] == ["strigger", "--set", "--node", "--drained", "--flags=PERM"]
    program = shlex.split(trigger[5].removeprefix("--program="))
    assert Path(program[0]).name == script.name and program[1:] == [options.pid_file]
