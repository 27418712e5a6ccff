"""The configuration matrix's cells (``harness.jobs.pairwise``): a pairwise design."""

from __future__ import annotations

from harness.jobs.pairwise import FULL, PAIRWISE, V3_ON_BOTH, missing_pairs


def test_every_cell_is_one_its_configuration_can_run_and_runs_once():
    assert set(PAIRWISE) <= set(FULL)
    assert len(set(PAIRWISE)) == len(PAIRWISE)
    assert V3_ON_BOTH in PAIRWISE


def test_every_store_runs_every_scenario_it_can():
    def by_store(cells):
        return {(name.split("/")[0], scenario) for name, scenario in cells}

    assert by_store(PAIRWISE) == by_store(FULL)


def test_every_pair_of_two_settings_values_runs_together_in_a_cell():
    assert missing_pairs(PAIRWISE) == []
    assert missing_pairs(FULL) == []


def test_a_pair_no_cell_holds_is_named():
    without = [cell for cell in PAIRWISE if cell != ("etcd-v2/watch/2-per-unit", "sigterm")]
    assert missing_pairs(without) == ["sigterm point=barrier, store=etcd-v2"]
    assert "store=etcd-v2, watch=True" in missing_pairs(
        [cell for cell in PAIRWISE if not cell[0].startswith("etcd-v2/watch")]
    )
