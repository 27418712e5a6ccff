"""``nvrx-seghealth doctor --etcd`` against a real three-member etcd with the v2 API off:
every named member asked alone, the members the list leaves out, the cluster's alarms."""

from __future__ import annotations

import json

import pytest

from harness.commands import nvrx_seghealth
from harness.ports import free_port
from harness.session.fixtures import started_etcd
from harness.slurmenv import slurm_env

pytestmark = pytest.mark.etcd

STEP = {"SLURM_STEP_TASKS_PER_NODE": "1(x2)"}


def etcd_findings(tmp_path, endpoints: str, *conf: str) -> tuple[int, list[tuple[str, str]]]:
    """doctor's exit code and its findings that mention etcd."""
    done = nvrx_seghealth(
        "doctor", "--dir", str(tmp_path), "--json", "--etcd", endpoints, *conf,
        env={**slurm_env(task=1, array_job=500), **STEP},
    )  # fmt: skip
    found = json.loads(done.stdout)["findings"]
    return done.returncode, [(f["level"], f["message"]) for f in found if "etcd" in f["message"]]


def test_a_cluster_named_whole_answers_with_no_alarm(etcd_v3_cluster, tmp_path):
    endpoints = ",".join(m.server.endpoint for m in etcd_v3_cluster.members)
    code, findings = etcd_findings(tmp_path, endpoints)
    assert code == 0, findings
    levels = [level for level, _ in findings]
    assert levels == ["ok", "ok", "ok", "ok"], findings  # three members, then the cluster
    for member in etcd_v3_cluster.members:
        assert any(member.server.endpoint in message for _, message in findings)


def test_a_dead_member_warns_and_one_left_out_is_a_hint(etcd_v3_cluster, tmp_path):
    dead = etcd_v3_cluster.follower()  # the leader's death would be an election to wait out
    alive, left_out = (m for m in etcd_v3_cluster.members if m is not dead)
    dead.process.kill()
    dead.process.wait()
    code, findings = etcd_findings(tmp_path, f"{alive.server.endpoint},{dead.server.endpoint}")
    assert code == 0, findings
    assert ("ok", "warn") == (findings[0][0], findings[1][0]) and dead.server.endpoint in findings[
        1
    ][1]
    hints = [message for level, message in findings if level == "hint"]
    assert len(hints) == 1 and left_out.server.endpoint in hints[0], findings


def test_no_member_answering_fails(tmp_path):
    code, findings = etcd_findings(tmp_path, f"127.0.0.1:{free_port()}")
    assert code == 1
    assert findings[-1][0] == "FAIL"


def test_a_password_on_the_command_line_fails_before_asking(tmp_path):
    code, findings = etcd_findings(
        tmp_path, f"127.0.0.1:{free_port()}", "--etcd-conf", "user=u,password=secret"
    )
    assert code == 1
    assert [level for level, _ in findings] == ["FAIL"]


def test_a_member_of_another_cluster_fails_naming_it(etcd_v3_server, tmp_path):
    with started_etcd("nvrx-doctor-other", v2=False) as other:
        code, findings = etcd_findings(tmp_path, f"{etcd_v3_server.endpoint},{other.endpoint}")
    assert code == 1, findings
    failed = [message for level, message in findings if level == "FAIL"]
    assert len(failed) == 1 and other.endpoint in failed[0], findings
    warned = [message for level, message in findings if level == "warn"]
    assert len(warned) == 1 and other.endpoint in warned[0], findings  # no member of the first


def test_a_user_confined_to_its_runs_keys_passes(etcd_v3_auth, tmp_path):
    """The set-up the docs recommend: the user may use its own prefix alone."""
    secret = tmp_path / "password"
    secret.write_text(etcd_v3_auth.password)
    secret.chmod(0o600)
    conf = f"user={etcd_v3_auth.user},password_file={secret}"
    code, findings = etcd_findings(tmp_path, etcd_v3_auth.server.endpoint, "--etcd-conf", conf)
    assert code == 0, findings
    assert [level for level, _ in findings] == ["ok", "ok"], findings
