"""The README's composition example runs as written (against a real store)."""

from __future__ import annotations

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_composition_example_builds_a_working_handler(tcp_store):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    (example,) = [b for b in blocks if "SegmentHealthRendezvousHandler(" in b]
    namespace: dict = {}
    exec(example.replace("store-host:29400", f"127.0.0.1:{tcp_store.port}"), namespace)
    handler = namespace["handler"]
    assert type(handler).__name__ == "SegmentHealthRendezvousHandler"
    assert handler.get_backend() == "c10d" and handler.get_run_id() == "run-42"
    assert handler.check is None  # not under Slurm here: nothing installed
