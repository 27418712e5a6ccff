"""The producer's world without a cluster: a fake Slurm, and producer state files to plant.

The fake Slurm (:class:`FakeSlurm`) is a directory of small shell scripts named ``sinfo``
and ``squeue``, put first on ``PATH``: they print canned answers (:data:`NODES`,
:data:`TASKS`), fail, or hang in a real ``sleep``. That is the only way to make Slurm
misbehave on demand; the real cluster's behaviour is covered by ``integration/slurm/``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from harness.commands import nvrx_seghealth
from nvrx_seghealth._producer.debounce import NodeRecord
from nvrx_seghealth._producer.publisher import producer_tag
from nvrx_seghealth._producer.state import ProducerState

__all__ = [
    "ALL_FINE",
    "NODES",
    "PRODUCER",
    "TASK1_DRAINED",
    "TASKS",
    "FakeSlurm",
    "dump",
    "planted",
]

#: ``sinfo``'s answer: node n3 (task 1's) draining, listed twice (two partitions).
NODES = """n1|alloc|none
n2|alloc|none
n3|drng|disk errors | smart
n4|alloc|none
n3|drng|disk errors | smart
n5|mix|none
"""
#: Every node of the fake Slurm idle or allocated: nothing is unavailable.
ALL_FINE = NODES.replace("drng", "alloc")
#: ``squeue``'s answer: array job 500, tasks 0, 1 and 2.
TASKS = "500|0|gpu|n[1-2]\n500|1|gpu|n[3-4]\n500|2|cpu|n5\n"
#: The producer id of :meth:`FakeSlurm.args`.
PRODUCER = "t1"
#: What producer :data:`PRODUCER` publishes for task 1, whose node n3 drains.
TASK1_DRAINED = f"{producer_tag(PRODUCER)} unavailable nodes: n3 drng (disk errors | smart)\n"


class FakeSlurm:
    """Shell scripts standing in for the Slurm client commands under ``root``; each
    records its arguments in ``root/NAME.args``. ``shc`` is the decision directory of
    array job 500, ``audit`` the producer's audit log."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        self.shc = root / "shc"
        self.shc.mkdir()
        self.audit = root / "audit.jsonl"
        self.answer("sinfo", NODES)
        self.answer("squeue", TASKS)

    def script(self, name: str, body: str) -> None:
        path = self.bin / name
        record = f'echo "$@" >> {self.root}/{name}.args\n'
        path.write_text("#!/bin/sh\n" + record + body)
        path.chmod(0o755)

    def answer(self, name: str, text: str) -> None:
        self.script(name, f"cat <<'EOF'\n{text}EOF\n")

    @property
    def env(self) -> dict[str, str]:
        return {"PATH": f"{self.bin}:{os.environ['PATH']}"}

    def args(self, *extra: str, producer: str = PRODUCER) -> list[str]:
        return [
            "publish-drained",
            "--dir",
            str(self.shc),
            "--job-id",
            "500",
            "--audit-log",
            str(self.audit),
            "--producer-id",
            producer,
            *extra,
        ]

    def run(
        self, *extra: str, producer: str = PRODUCER, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return nvrx_seghealth(*self.args(*extra, producer=producer), env=self.env, timeout=timeout)

    def calls(self, name: str) -> int:
        """How often the command ``name`` has been called so far (a line each in its
        record)."""
        path = self.root / f"{name}.args"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def decision(self, task: int | str) -> Path:
        return self.shc / f"segment_health_check.500.{task}"

    def audit_events(self) -> list[dict[str, Any]]:
        if not self.audit.exists():
            return []
        return [json.loads(line) for line in self.audit.read_text().splitlines()]

    def files(self) -> dict[str, tuple[bytes, int, int]]:
        """Every decision file (not the lock or state files) with content and identity."""
        return {
            p.name: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino)
            for p in self.shc.iterdir()
            if not p.name.startswith(".")
        }


def planted(producer_id: str = "t1", job_id: str = "500", **changes: Any) -> dict[str, Any]:
    """A state file body: node n2 (task 0's) unavailable for 9999 more clean passes,
    then ``changes`` (a value ``...`` removes the key)."""
    state = ProducerState(
        producer_id=producer_id,
        job_id=job_id,
        passes={"drain": 1},
        interval=None,
        clear_after_failing=None,
        last_pass=1.7e9,
        last_ok=1.7e9,
        failing_since=None,
        failed_passes=0,
        last_error=None,
        stale_cleared=False,
        unreadable=(),
        nodes={"n2": NodeRecord({"drain": 1}, True, 9999, 0, "n2 drain (planted)")},
    )
    body = json.loads(state.to_json())
    body.update(changes)
    return {key: value for key, value in body.items() if value is not ...}


def dump(body: dict[str, Any]) -> bytes:
    """``body`` as a state file's bytes (NaN stays NaN: Python's json writes it)."""
    return json.dumps(body).encode()
