"""Counting consecutive passes: a state counts after N passes, clears after N clean ones."""

from __future__ import annotations

from nvrx_seghealth._producer.debounce import DEFAULT_PASSES, Debouncer
from nvrx_seghealth._producer.slurm import NodeState


def seen(*states):
    return [NodeState("n1", state, flags, "") for state, flags in states]


OK = ("alloc", "")
NR = ("alloc", "*")
DRAIN = ("drng", "")


def run(debouncer, passes):
    history = []
    for nodes in passes:
        debouncer.observe(seen(nodes))
        history.append((sorted(debouncer.unavailable()), sorted(debouncer.pending())))
    return history


def test_defaults_are_documented():
    assert DEFAULT_PASSES == {"drain": 1, "fail": 1, "down": 2, "no_respond": 3}


def test_no_respond_counts_on_the_third_pass_and_clears_on_the_third_clean_one():
    history = run(Debouncer(DEFAULT_PASSES), [NR, NR, NR, OK, OK, OK])
    assert history == [
        ([], ["n1"]),
        ([], ["n1"]),
        (["n1"], []),
        (["n1"], []),
        (["n1"], []),
        ([], []),
    ]


def test_a_blip_resets_the_count():
    history = run(Debouncer(DEFAULT_PASSES), [NR, NR, OK, NR, NR, OK])
    assert all(unavailable == [] for unavailable, _ in history)


def test_drain_counts_at_once_and_a_later_blip_does_not_shorten_the_hold():
    d = Debouncer(DEFAULT_PASSES)
    assert run(d, [NR, NR, NR])[-1] == (["n1"], [])
    assert run(d, [DRAIN, OK, OK]) == [(["n1"], []), (["n1"], []), (["n1"], [])]
    assert run(d, [OK]) == [([], [])]  # the hold of no_respond (3) is kept


def test_a_pass_that_does_not_list_the_node_changes_nothing_and_state_round_trips():
    d = Debouncer(DEFAULT_PASSES)
    run(d, [NR, NR])
    d.observe([])
    restored = Debouncer(DEFAULT_PASSES)
    restored.load(d.to_json())
    assert run(restored, [NR]) == [(["n1"], [])]
    drain_only = Debouncer({"drain": 1})
    drain_only.load(d.to_json())
    assert drain_only.records == {}  # states no longer watched are dropped
