"""``nvrx-seghealth publish-drained`` without a cluster: parsing, and passes against a fake Slurm.

The fake Slurm is a directory of small shell scripts named ``sinfo``, ``squeue`` and
``scontrol`` put first on PATH: they print canned answers, fail, or hang in a real
``sleep``. That is the only way to make Slurm misbehave on demand; the real-cluster
behaviour is covered by ``integration/slurm/test_publish_drained.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from nvrx_seghealth.commands.publish_drained import PRODUCER_TAG
from nvrx_seghealth.commands.slurm import (
    NodeState,
    SlurmError,
    parse_hostnames,
    parse_nodes,
    parse_running_tasks,
)

from .runner import COMMAND, nvrx_seghealth

NODES = """n1|alloc|none
n2|alloc|none
n3|drng|disk errors | smart
n4|alloc|none
n3|drng|disk errors | smart
n5|mix|none
"""
TASKS = "500|0|n[1-2]\n500|1|n[3-4]\n500|2|n5\n"
HOSTNAMES = """case "$3" in
'n[1-2]') printf 'n1\\nn2\\n' ;;
'n[3-4]') printf 'n3\\nn4\\n' ;;
n5) echo n5 ;;
*) echo "scontrol: error: bad hostlist $3" >&2; exit 1 ;;
esac
"""
TASK1_TEXT = f"{PRODUCER_TAG} unavailable nodes: n3 drng (disk errors | smart)\n"


# --- parsing -----------------------------------------------------------------------------

def test_parse_nodes_dedupes_partitions_and_keeps_reasons_with_bars():
    nodes = parse_nodes(NODES + "n6|idle*|none\nn7|down~|Not responding\n")
    assert [n.describe() for n in nodes] == [
        "n1 alloc", "n2 alloc", "n3 drng (disk errors | smart)", "n4 alloc", "n5 mix",
        "n6 idle*", "n7 down~ (Not responding)"]


@pytest.mark.parametrize("state,flags,matches", [
    ("drng", "", {"drain"}), ("drain", "", {"drain"}), ("drain", "*", {"drain", "no_respond"}),
    ("down", "", {"down"}), ("down", "*", {"down", "no_respond"}), ("fail", "", {"fail"}),
    ("failg", "", {"fail"}), ("idle", "*", {"no_respond"}), ("alloc", "", set()),
    ("mix", "-", set()), ("comp", "", set()),
])
def test_node_states(state, flags, matches):
    node = NodeState("n1", state, flags, "")
    assert {name for name in ("drain", "down", "fail", "no_respond") if node.matches([name])} \
        == matches


@pytest.mark.parametrize("text", ["", "\n", "n1 alloc none\n", "n1|alloc\n", "n1|ALLOC|x\n",
                                  "n1|alloc|none\n|idle|none\n"])
def test_parse_nodes_refuses_malformed_or_empty_answers(text):
    with pytest.raises(SlurmError):
        parse_nodes(text)


def test_parse_running_tasks():
    assert [(t.job_id, t.task_id, t.hostlist) for t in parse_running_tasks(TASKS, "500")] == [
        ("500", "0", "n[1-2]"), ("500", "1", "n[3-4]"), ("500", "2", "n5")]
    [regular] = parse_running_tasks("77|N/A|n[1-2]\n", "77")
    assert (regular.job_id, regular.task_id) == ("77", "77")
    assert parse_running_tasks("", "500") == []
    with pytest.raises(SlurmError, match=r"job 501 belongs to array job 500: give the array "
                                         r"job id \(--job-id 500\)"):
        parse_running_tasks("500|1|n[3-4]\n", "501")
    for bad in ("500|1\n", "500|x|n1\n", "500|1|n1 n2\n"):
        with pytest.raises(SlurmError):
            parse_running_tasks(bad, "500")


def test_parse_hostnames():
    assert parse_hostnames("n3\nn4\n", "n[3-4]") == ["n3", "n4"]
    for bad in ("", "n[3-4]\n", "n3 n4\n"):
        with pytest.raises(SlurmError):
            parse_hostnames(bad, "n[3-4]")


# --- passes against a fake Slurm ---------------------------------------------------------

class FakeSlurm:
    """Shell scripts standing in for the Slurm client commands."""

    def __init__(self, root):
        self.bin = root / "bin"
        self.bin.mkdir()
        self.shc = root / "shc"
        self.shc.mkdir()
        self.audit = root / "audit.jsonl"
        self.answer("sinfo", NODES)
        self.answer("squeue", TASKS)
        self.script("scontrol", HOSTNAMES)

    def script(self, name, body):
        path = self.bin / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)

    def answer(self, name, text):
        self.script(name, f"cat <<'EOF'\n{text}EOF\n")

    @property
    def env(self):
        return {"PATH": f"{self.bin}:{os.environ['PATH']}"}

    def args(self, *extra):
        return ["publish-drained", "--dir", str(self.shc), "--job-id", "500",
                "--audit-log", str(self.audit), *extra]

    def run(self, *extra, timeout=60):
        return nvrx_seghealth(*self.args(*extra), env=self.env, timeout=timeout)

    def decision(self, task):
        return self.shc / f"segment_health_check.500.{task}"

    def audit_events(self):
        if not self.audit.exists():
            return []
        return [json.loads(line) for line in self.audit.read_text().splitlines()]

    def files(self):
        return {p.name: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino)
                for p in self.shc.iterdir()}


@pytest.fixture
def slurm(tmp_path):
    return FakeSlurm(tmp_path)


def test_a_pass_publishes_affected_tasks_clears_its_own_and_keeps_others(slurm):
    slurm.decision(0).write_text(f"{PRODUCER_TAG} unavailable nodes: n1 drain (old)\n")
    slurm.decision(2).write_text("ops: bad cable\n")  # an operator's mark: not ours

    done = slurm.run()
    assert done.returncode == 0, done.stderr
    assert slurm.decision(0).read_bytes() == b""
    assert slurm.decision(1).read_text() == TASK1_TEXT
    assert slurm.decision(2).read_text() == "ops: bad cable\n"
    assert f"task 0: cleared {slurm.decision(0)}" in done.stdout
    assert f"task 1: published {slurm.decision(1)}: {TASK1_TEXT.strip()}" in done.stdout
    assert "pass done: unavailable nodes: n3 drng; 3 running tasks; 1 published, 0 updated, " \
           "1 cleared, 0 write-failed, 1 unchanged" in done.stdout
    events = slurm.audit_events()
    assert [(e["event"], e["task_id"]) for e in events] == [("cleared", "0"), ("published", "1")]
    assert events[1]["text"] == TASK1_TEXT.strip() and events[1]["job_id"] == "500"
    assert all(e["time"].endswith("+00:00") for e in events)

    before = slurm.files()
    done = slurm.run()  # nothing changed in Slurm: nothing is written, nothing audited
    assert done.returncode == 0
    assert slurm.files() == before
    assert len(slurm.audit_events()) == 2
    assert "0 published, 0 updated, 0 cleared, 0 write-failed, 3 unchanged" in done.stdout

    slurm.answer("sinfo", NODES.replace("n4|alloc|none", "n4|down*|Not responding"))
    done = slurm.run()
    assert done.returncode == 0
    assert slurm.decision(1).read_text() == (
        f"{PRODUCER_TAG} unavailable nodes: n3 drng (disk errors | smart); "
        "n4 down* (Not responding)\n")
    assert slurm.audit_events()[-1]["event"] == "updated"


def test_states_selects_what_counts_as_unavailable(slurm):
    slurm.answer("sinfo", NODES.replace("n5|mix|none", "n5|mix*|none"))
    done = slurm.run("--states", "no_respond", "--once")
    assert done.returncode == 0, done.stderr
    assert not slurm.decision(1).exists()
    assert slurm.decision(2).read_text() == f"{PRODUCER_TAG} unavailable nodes: n5 mix*\n"


@pytest.mark.parametrize("command,body", [
    ("squeue", "exec sleep 30\n"),                       # hangs
    ("scontrol", "sleep 30\necho n3\n"),                 # hangs; its child holds the pipe
    ("sinfo", "echo 'n1 alloc none'\n"),                 # malformed
    ("sinfo", "true\n"),                                 # no nodes at all
    ("sinfo", "echo 'sinfo: error: Unable to contact slurm controller' >&2; exit 1\n"),
    ("squeue", "echo '499|1|n[3-4]'\n"),                 # another array's task
    ("scontrol", "true\n"),                              # no host names
])
def test_a_failed_pass_writes_nothing_and_keeps_the_last_decisions(slurm, command, body):
    slurm.decision(0).write_text(f"{PRODUCER_TAG} unavailable nodes: n1 drain (old)\n")
    before = slurm.files()  # a good pass would clear task 0 and publish task 1
    slurm.script(command, body)

    started = time.monotonic()
    done = slurm.run("--slurm-timeout", "1")
    assert time.monotonic() - started < 15
    assert done.returncode == 1
    assert "pass failed, nothing written, last decisions kept: " in done.stderr
    assert done.stdout == ""
    assert slurm.files() == before
    [event] = slurm.audit_events()
    assert event["event"] == "pass-failed" and event["job_id"] == "500" and event["error"]


def test_one_failed_write_does_not_stop_the_others(slurm):
    slurm.answer("sinfo", NODES.replace("n5|mix|none", "n5|fail|psu"))
    slurm.decision(1).mkdir()  # a directory cannot be replaced by a file
    done = slurm.run()
    assert done.returncode == 1
    assert "task 1: published failed: [Errno 21] Is a directory" in done.stderr
    assert slurm.decision(2).read_text() == f"{PRODUCER_TAG} unavailable nodes: n5 fail (psu)\n"
    assert [(e["event"], e["task_id"]) for e in slurm.audit_events()] == [
        ("write-failed", "1"), ("published", "2")]
    assert [p.name for p in slurm.shc.iterdir() if p.name.endswith(".tmp")] == []


def test_interval_runs_passes_until_sigterm(slurm):
    process = subprocess.Popen(
        [*COMMAND, *slurm.args("--interval", "0.2")], env={**os.environ, **slurm.env},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        passes = [line for line in (process.stdout.readline() for _ in range(4))
                  if "pass done" in line]
        assert len(passes) >= 2  # the first pass publishes (2 lines), then a quiet pass
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        process.kill()
        process.communicate()
    assert [e["event"] for e in slurm.audit_events()] == ["published"]


@pytest.mark.parametrize("args,message", [
    (["--states", "drain,bogus"], "unknown state(s) bogus; choose from drain, down, fail, "
                                  "no_respond"),
    (["--once", "--interval", "5"], "not allowed with argument"),
    (["--interval", "0"], "'0' is not a positive number of seconds"),
    (["--slurm-timeout", "inf"], "'inf' is not a positive number of seconds"),
])
def test_usage_errors_exit_2(slurm, args, message):
    done = slurm.run(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert list(slurm.shc.iterdir()) == [] and not slurm.audit.exists()


def test_the_directory_must_exist(tmp_path):
    done = nvrx_seghealth("publish-drained", "--dir", str(tmp_path / "no"), "--job-id", "5")
    assert done.returncode == 2
    assert "is not an existing directory: create it first" in done.stderr
