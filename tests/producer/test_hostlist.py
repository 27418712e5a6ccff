"""Slurm host lists expanded in process (the real ``scontrol`` agrees: see
``integration/slurm/test_publish_drained.py``)."""

from __future__ import annotations

import pytest

from nvrx_seghealth._producer.hostlist import MAX_HOSTS, HostlistError, expand


@pytest.mark.parametrize(
    "hostlist,hosts",
    [
        ("n5", ["n5"]),
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("n[1,3-4],gpu7", ["n1", "n3", "n4", "gpu7"]),
        ("n[08-11]", ["n08", "n09", "n10", "n11"]),
        ("r[1-2]n[1,3]", ["r1n1", "r1n3", "r2n1", "r2n3"]),
        ("a-b.c[1-2]-ib", ["a-b.c1-ib", "a-b.c2-ib"]),
    ],
)
def test_expand(hostlist, hosts):
    assert expand(hostlist) == hosts


@pytest.mark.parametrize(
    "hostlist",
    [
        "",
        "n1,,n2",
        ",n1",
        "n[1-",
        "n1]",
        "n[[1]]",
        "n[2-1]",
        "n[a]",
        "n[1-2-3]",
        "n[]",
        "n 1",
        f"n[0-{MAX_HOSTS}]",
    ],
)
def test_malformed_lists_are_refused(hostlist):
    with pytest.raises(HostlistError):
        expand(hostlist)
