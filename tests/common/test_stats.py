"""The stats records (rltrain.common.stats): an epoch's update stats are each stat's mean over the
records that measured it."""

from __future__ import annotations

import pytest

from rltrain.common.stats import mean_stats


def test_mean_stats_averages_each_stat_over_the_records_that_hold_it():
    """The actor's loss of a delayed policy (measured every second step) is the mean of its
    measurements, not diluted by the steps that left it out, nor by a stale copy."""
    records = [
        {"critic_loss": 1.0, "actor_loss": -2.0, "q_mean": 3.0},
        {"critic_loss": 3.0, "q_mean": 5.0},
        {"critic_loss": 5.0, "actor_loss": -4.0, "q_mean": 7.0},
        {"critic_loss": 7.0, "q_mean": 9.0},
    ]
    means = mean_stats(records)
    assert means == {"critic_loss": 4.0, "actor_loss": -3.0, "q_mean": 6.0}
    assert list(means) == ["critic_loss", "actor_loss", "q_mean"]  # order of first appearance
    assert all(type(v) is float for v in means.values())


def test_mean_stats_keeps_a_stat_first_seen_late_and_one_seen_once():
    records = [{"loss": 1.0}, {"loss": 2.0, "accuracy": 0.5}, {"loss": 6.0}]
    assert mean_stats(records) == {"loss": 3.0, "accuracy": 0.5}
    assert list(mean_stats(records)) == ["loss", "accuracy"]


@pytest.mark.parametrize(("records", "expected"), [
    ([], {}),
    ([{}], {}),
    ([{"x": 2.5}], {"x": 2.5}),
    ([{}, {"x": 1.0}, {}], {"x": 1.0}),
])
def test_mean_stats_of_few_records(records, expected):
    assert mean_stats(records) == expected
