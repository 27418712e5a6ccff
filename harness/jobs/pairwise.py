"""The configuration matrix's cells: a pairwise design over the settings the docs offer.

A cell is one :class:`~.configurations.Configuration` (store, watch, launchers per unit)
running one scenario (``integration/test_config_matrix.py``). The full product is 63
whole jobs. :data:`PAIRWISE` runs fewer, by these rules:

* every store runs every scenario it can run, once;
* every pair of two settings' values that the full product holds runs together in some
  cell (:func:`missing_pairs` names any that do not; ``tests/test_pairwise.py`` holds it);
* the settings are the store, the watch, the launchers per unit, the scenario and the
  point where a SIGTERM lands (:func:`sigterm_point`).

Why pairs: a defect that needs one setting's value shows in every store's cells; one
that needs two values together shows in the cell that holds that pair.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import combinations

from .configurations import CONFIGURATIONS, ETCD, IN_LAUNCHER, Configuration

__all__ = [
    "FULL",
    "PAIRWISE",
    "V3_ON_BOTH",
    "by_name",
    "missing_pairs",
    "scenarios",
    "sigterm_point",
]


def scenarios(config: Configuration) -> list[str]:
    """The scenarios ``config`` runs in the full product. With the watch on, a decision
    during training never waits for a restart; a launcher holding the store is not
    signalled; etcd-v2 runs with two launchers per unit (one per unit is etcd-v3's)."""
    if config.placement == ETCD and config.launchers == 1:
        return []
    training = ("during-training", "during-training-rank-0")
    restart = ("at-restart", "at-restart-rank-0")
    names = ["before-launch", *(training if config.watch else restart)]
    if config.placement != IN_LAUNCHER:
        names.append("sigterm")
    return names


def sigterm_point(config: Configuration) -> str:
    """Where the signalled launcher of ``config``'s SIGTERM cell waits: ``barrier`` (the
    watch's), ``hand-off`` (a sibling's, two launchers per unit) or ``stat``."""
    if config.watch:
        return "barrier"
    return "hand-off" if config.launchers == 2 else "stat"


#: The cells, as ``(configuration name, scenario)``.
PAIRWISE: tuple[tuple[str, str], ...] = (
    ("store-host/no-watch/2-per-unit", "before-launch"),
    ("store-host/watch/1-per-unit", "before-launch"),
    ("store-host/no-watch/1-per-unit", "at-restart"),
    ("store-host/no-watch/2-per-unit", "at-restart-rank-0"),
    ("store-host/watch/2-per-unit", "during-training"),
    ("store-host/watch/1-per-unit", "during-training-rank-0"),
    ("store-host/no-watch/1-per-unit", "sigterm"),
    ("store-host/no-watch/2-per-unit", "sigterm"),
    ("store-host/watch/2-per-unit", "sigterm"),
    ("barrier/watch/2-per-unit", "before-launch"),
    ("barrier/no-watch/2-per-unit", "at-restart"),
    ("barrier/no-watch/1-per-unit", "at-restart-rank-0"),
    ("barrier/watch/1-per-unit", "during-training"),
    ("barrier/watch/2-per-unit", "during-training-rank-0"),
    ("barrier/no-watch/1-per-unit", "sigterm"),
    ("barrier/no-watch/2-per-unit", "sigterm"),
    ("barrier/watch/1-per-unit", "sigterm"),
    ("etcd-v2/watch/2-per-unit", "before-launch"),
    ("etcd-v2/no-watch/2-per-unit", "at-restart"),
    ("etcd-v2/no-watch/2-per-unit", "at-restart-rank-0"),
    ("etcd-v2/watch/2-per-unit", "during-training"),
    ("etcd-v2/watch/2-per-unit", "during-training-rank-0"),
    ("etcd-v2/no-watch/2-per-unit", "sigterm"),
    ("etcd-v2/watch/2-per-unit", "sigterm"),
    ("etcd-v3/no-watch/1-per-unit", "before-launch"),
    ("etcd-v3/no-watch/2-per-unit", "at-restart"),
    ("etcd-v3/no-watch/1-per-unit", "at-restart-rank-0"),
    ("etcd-v3/watch/1-per-unit", "during-training"),
    ("etcd-v3/watch/2-per-unit", "during-training-rank-0"),
    ("etcd-v3/no-watch/1-per-unit", "sigterm"),
    ("etcd-v3/no-watch/2-per-unit", "sigterm"),
    ("etcd-v3/watch/1-per-unit", "sigterm"),
    ("in-launcher/no-watch/1-per-unit", "before-launch"),
    ("in-launcher/no-watch/1-per-unit", "at-restart"),
    ("in-launcher/no-watch/1-per-unit", "at-restart-rank-0"),
    ("in-launcher/watch/1-per-unit", "during-training"),
    ("in-launcher/watch/1-per-unit", "during-training-rank-0"),
)

#: The etcd-v3 cell that runs on etcd 3.4 as well as 3.5.
V3_ON_BOTH = ("etcd-v3/watch/2-per-unit", "during-training-rank-0")

#: Every cell the configurations can run: the full product.
FULL: tuple[tuple[str, str], ...] = tuple(
    (config.name, scenario) for config in CONFIGURATIONS for scenario in scenarios(config)
)

_BY_NAME = {config.name: config for config in CONFIGURATIONS}


def by_name(name: str) -> Configuration:
    """The configuration named ``name`` (e.g. ``etcd-v2/watch/2-per-unit``).

    Raises:
        KeyError: no configuration has that name.
    """
    return _BY_NAME[name]


def _settings(name: str, scenario: str) -> dict[str, object]:
    config = _BY_NAME[name]
    return {
        "store": config.placement,
        "watch": config.watch,
        "launchers": config.launchers,
        "scenario": scenario,
        "sigterm point": sigterm_point(config) if scenario == "sigterm" else None,
    }


def missing_pairs(cells: Iterable[tuple[str, str]]) -> list[str]:
    """The pairs of two settings' values that :data:`FULL` holds and no cell of ``cells``
    holds, e.g. ``store=etcd-v2, sigterm point=barrier``; empty when ``cells`` covers them."""

    Pair = tuple[tuple[str, object], ...]

    def pairs(of: Iterable[tuple[str, str]]) -> set[Pair]:
        found: set[Pair] = set()
        for name, scenario in of:
            settings = sorted(_settings(name, scenario).items())
            found.update(combinations(settings, 2))
        return found

    missing = pairs(FULL) - pairs(cells)
    return sorted(", ".join(f"{key}={value}" for key, value in pair) for pair in missing)
