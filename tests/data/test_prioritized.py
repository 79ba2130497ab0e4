"""Prioritised replay (Schaul et al. 2016): the sum tree, the draws' frequencies against the
priorities, the importance weights by hand, new transitions at the largest priority, the
sampler's state, and the settings that refuse what cannot work."""

from __future__ import annotations

import signal

import numpy as np
import pytest
import torch

from conftest import (
    interrupt_after_first_epoch,
    learning_records,
    refusal,
    resume_in_process,
    run_in_process,
)
from rltrain.algorithms import ALGORITHMS
from rltrain.config.schemas import ConfigError, ReplayBufferConfig
from rltrain.data.samplers import check_sampler, make_sampler
from rltrain.data.samplers.prioritized import PrioritizedSampler, SumTree
from rltrain.data.samplers.uniform import UniformSampler
from rltrain.data.storage import ReplayBuffer
from rltrain.rundir.checkpoint import load_checkpoint


def filled(num_lanes: int, capacity: int, steps: int) -> ReplayBuffer:
    """A buffer after ``steps`` writes to every lane; obs holds (lane * 1000 + write count)."""
    buf = ReplayBuffer(num_lanes, capacity, (1,), (), np.int64)
    for t in range(steps):
        obs = (np.arange(num_lanes) * 1000 + t).astype(np.float32)[:, None]
        zeros = np.zeros(num_lanes)
        buf.add(obs, zeros.astype(np.int64), zeros, obs, zeros.astype(bool),
                zeros.astype(bool))
    return buf


# ------------------------------------------------------------------------------ sum tree
def test_sum_tree_sums_and_finds_by_cumulative_mass():
    tree = SumTree(5)  # 8 leaves inside, 3 of them never used
    tree.set(np.arange(5), np.array([1.0, 0.0, 2.0, 3.0, 4.0]))
    assert tree.total == 10.0
    # cumulative intervals: [0,1) -> 0, [1,3) -> 2, [3,6) -> 3, [6,10) -> 4; leaf 1 is empty
    found = tree.find(np.array([0.0, 0.999, 1.0, 2.5, 3.0, 5.99, 6.0, 9.999]))
    assert found.tolist() == [0, 0, 2, 2, 3, 3, 4, 4]
    tree.set(np.array([4, 4]), np.array([7.0, 0.5]))  # a repeated index: the last value
    assert tree.total == 6.5 and tree.leaves.tolist() == [1.0, 0.0, 2.0, 3.0, 0.5]


def test_sum_tree_never_returns_an_empty_leaf_at_the_end_of_its_mass():
    tree = SumTree(4)
    tree.set(np.array([0, 1]), np.array([0.1, 0.2]))
    # a mass at (or, by rounding, past) the total must not fall into the empty leaves
    assert tree.find(np.array([0.3, 0.30000000001, 1.0])).tolist() == [1, 1, 1]


def test_sum_tree_rebuild_matches_incremental_sets():
    rng = np.random.default_rng(0)
    a = SumTree(37)
    for _ in range(50):
        idx = rng.integers(37, size=6)
        a.set(idx, rng.random(6))
    b = SumTree(37)
    b.leaves[:] = a.leaves
    b.rebuild()
    np.testing.assert_array_equal(a.tree, b.tree)


# ------------------------------------------------------------------------------- sampler
def test_draws_follow_the_priorities_chi_square():
    """Leaf i drawn with probability p_i^alpha / sum p^alpha: over 40,000 draws the
    chi-square statistic against those probabilities stays below the 0.999 quantile of the
    chi-square distribution with 7 degrees of freedom (24.32), and a uniform expectation
    is far outside it (the test can fail)."""
    buf = filled(2, 4, 4)  # 8 stored transitions
    sampler = PrioritizedSampler(alpha=0.5, beta=0.4, eps=0.0, seed=1)
    sampler.sample(buf, 1)  # the first look: every transition at the largest priority
    lanes, positions = np.divmod(np.arange(8), 4)
    td = np.array([1.0, 4.0, 9.0, 16.0, 0.25, 1.0, 2.25, 36.0])
    sampler.update(lanes, positions, td)
    counts = np.zeros(8)
    for _ in range(625):
        lane, pos = sampler.sample(buf, 64)
        np.add.at(counts, lane * 4 + pos, 1)
    p = np.sqrt(td) / np.sqrt(td).sum()
    expected = counts.sum() * p
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 24.32, (chi2, counts, expected)
    uniform = np.full(8, counts.sum() / 8)
    assert ((counts - uniform) ** 2 / uniform).sum() > 1000


def test_importance_weights_by_hand():
    buf = filled(1, 4, 4)
    sampler = PrioritizedSampler(alpha=1.0, beta=0.5, eps=0.0, seed=0)
    sampler.sample(buf, 1)
    sampler.update(np.zeros(4, np.int64), np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    lanes, positions = np.zeros(3, np.int64), np.array([0, 1, 3])
    # P = p / 10; w = (N P)^-beta with N = 4, then divided by the batch's largest
    raw = (4 * np.array([0.1, 0.2, 0.4])) ** -0.5
    np.testing.assert_allclose(sampler.weights(lanes, positions, 0.0), raw / raw.max(),
                               rtol=1e-6)
    # beta rises linearly to 1: halfway through the run it is 0.75
    raw = (4 * np.array([0.1, 0.2, 0.4])) ** -0.75
    np.testing.assert_allclose(sampler.weights(lanes, positions, 0.5), raw / raw.max(),
                               rtol=1e-6)
    assert sampler.weights(lanes, positions, 1.0).dtype == np.float32


def test_new_transitions_get_the_largest_priority_seen():
    buf = filled(2, 3, 2)
    sampler = PrioritizedSampler(alpha=1.0, eps=0.0, seed=0)
    sampler.sample(buf, 1)
    np.testing.assert_array_equal(sampler.tree.leaves, [1, 1, 0, 1, 1, 0])
    sampler.update(np.array([0, 1]), np.array([0, 1]), np.array([5.0, 0.5]))
    assert sampler.max_priority == 5.0
    # two more writes per lane: slot 2 (new) and slot 0 (overwritten) take the largest
    for t in range(2):
        obs = np.full((2, 1), 100.0 + t, np.float32)
        buf.add(obs, np.zeros(2, np.int64), np.zeros(2), obs, np.zeros(2, bool),
                np.zeros(2, bool))
    sampler.sample(buf, 1)
    np.testing.assert_array_equal(sampler.tree.leaves, [5, 1, 5, 5, 0.5, 5])


def test_more_writes_than_a_lane_holds_renew_every_slot():
    buf = filled(1, 4, 2)
    sampler = PrioritizedSampler(alpha=1.0, eps=0.0, seed=0)
    sampler.sample(buf, 1)
    sampler.update(np.zeros(2, np.int64), np.arange(2), np.array([0.1, 9.0]))
    for t in range(9):  # wraps the lane twice
        obs = np.full((1, 1), float(t), np.float32)
        buf.add(obs, np.zeros(1, np.int64), np.zeros(1), obs, np.zeros(1, bool),
                np.zeros(1, bool))
    sampler.sample(buf, 1)
    np.testing.assert_array_equal(sampler.tree.leaves, [9, 9, 9, 9])


def test_a_non_finite_priority_keeps_the_old_one():
    buf = filled(1, 3, 3)
    sampler = PrioritizedSampler(alpha=1.0, eps=0.0, seed=0)
    sampler.sample(buf, 1)
    sampler.update(np.zeros(3, np.int64), np.arange(3), np.array([2.0, np.nan, np.inf]))
    np.testing.assert_array_equal(sampler.tree.leaves, [2, 1, 1])
    assert np.isfinite(sampler.tree.total)


def test_state_round_trip_continues_the_same_draws():
    buf = filled(3, 8, 10)
    a = PrioritizedSampler(seed=4)
    for _ in range(5):
        lanes, positions = a.sample(buf, 16)
        a.update(lanes, positions, np.random.default_rng(len(lanes)).random(16))
    state = a.state_dict()
    assert all(isinstance(v, (torch.Tensor, dict, float, int)) for v in state.values())
    b = PrioritizedSampler(seed=99)
    b.load_state_dict(state)
    for _ in range(3):
        la, pa = a.sample(buf, 16)
        lb, pb = b.sample(buf, 16)
        np.testing.assert_array_equal(la, lb)
        np.testing.assert_array_equal(pa, pb)
        np.testing.assert_array_equal(a.weights(la, pa, 0.3), b.weights(lb, pb, 0.3))
        a.update(la, pa, np.arange(16.0))
        b.update(lb, pb, np.arange(16.0))
    np.testing.assert_array_equal(a.tree.tree, b.tree.tree)


def test_a_state_with_bad_priorities_is_refused_by_name():
    sampler = PrioritizedSampler()
    state = PrioritizedSampler().state_dict()
    state.update(leaves=torch.tensor([1.0, float("nan")]), seen=torch.zeros(1, dtype=torch.long),
                 lane_capacity=2)
    with pytest.raises(ValueError, match="sampler leaves"):
        sampler.load_state_dict(state)


def test_a_buffer_that_started_again_drops_the_old_priorities():
    """A checkpoint without its buffer (trainer.checkpoint_buffer=false): the buffer starts
    empty, and nothing it held keeps a priority."""
    buf = filled(1, 4, 4)
    a = PrioritizedSampler(seed=0)
    a.sample(buf, 2)
    b = PrioritizedSampler(seed=0)
    b.load_state_dict(a.state_dict())
    fresh = filled(1, 4, 1)
    lanes, positions = b.sample(fresh, 8)
    assert (positions == 0).all() and b.tree.leaves.tolist() == [1, 0, 0, 0]


def test_buffer_counts_every_write_and_keeps_the_count_in_its_state():
    buf = filled(2, 3, 5)
    assert buf.added.tolist() == [5, 5]
    other = ReplayBuffer(2, 3, (1,), (), np.int64)
    other.load_state_dict(buf.state_dict())
    assert other.added.tolist() == [5, 5]
    state = buf.state_dict()
    del state["added"]  # a state from before the counter: what is stored was written
    other.load_state_dict(state)
    assert other.added.tolist() == [3, 3]
    state["added"] = torch.tensor([1, 1])
    with pytest.raises(ValueError, match="buffer added"):
        other.load_state_dict(state)


# ------------------------------------------------------------------------------ settings
def test_make_sampler_follows_the_buffer_group():
    assert isinstance(make_sampler(ReplayBufferConfig(), 0), UniformSampler)
    per = make_sampler(ReplayBufferConfig(sampler="prioritized", priority_alpha=0.7), 0)
    assert isinstance(per, PrioritizedSampler) and per.alpha == 0.7


@pytest.mark.parametrize(("fields", "message"), [
    ({"sampler": "rank"}, "buffer.sampler='rank' is not a sampler"),
    ({"priority_beta": 0.5}, "buffer.priority_beta is for prioritised replay"),
    ({"sampler": "prioritized", "priority_alpha": 1.5}, "priority_alpha must be in"),
    ({"sampler": "prioritized", "priority_beta": -0.1}, "priority_beta must be in"),
    ({"sampler": "prioritized", "priority_eps": 0.0}, "priority_eps must be > 0"),
])
def test_replay_settings_that_cannot_work_are_refused(fields, message):
    with pytest.raises(ConfigError, match=message):
        check_sampler(ReplayBufferConfig(**fields))


# ------------------------------------------------------------------------- runs
PRIORITIZED = sorted(name for name, spec in ALGORITHMS.items() if spec.prioritized)


def test_prioritized_replay_is_offered_by_the_off_policy_family():
    assert {"dqn", "sac", "td3", "ddpg"} <= set(PRIORITIZED)


def test_sigterm_then_resume_with_prioritized_replay_equals_unbroken_run(tmp_path):
    """The priorities, the largest priority and the counts the sampler has seen are in the
    checkpoint: a resumed run draws the same batches as an unbroken one."""
    full, broken = tmp_path / "full", tmp_path / "broken"
    args = ["algo=dqn", "buffer=prioritized", "trainer.max_epochs=3",
            "trainer.epoch_num_steps=1024", "buffer.size=20000", "trainer.stop_score=null",
            "seed=1", "logger.progress_bar=false", "env.num_test_envs=5",
            "trainer.test_step_num_episodes=5"]
    run_in_process(full, *args)
    res = interrupt_after_first_epoch([*args, f"hydra.run.dir={broken}"], tmp_path,
                                      signal.SIGTERM, unbroken=full)
    assert res.returncode == 143, res.stderr
    ckpt = load_checkpoint(broken / "checkpoints" / "last.pt")
    assert ckpt["trainer"]["partial"] is not None, "the signal did not land mid-epoch"
    assert "leaves" in ckpt["trainer"]["storage"]["sampler"]
    assert resume_in_process(broken) == (0, [])
    assert learning_records(broken) == learning_records(full)


@pytest.mark.parametrize(("args", "message"), [
    (["algo=ppo", "buffer=prioritized"], "algo=ppo runs with trainer=onpolicy"),
    (["algo=dqn", "buffer.priority_alpha=0.5"], "add buffer=prioritized, or drop it"),
])
def test_prioritized_replay_is_refused_where_it_cannot_work(tmp_path, args, message):
    refused = refusal(tmp_path / "run", "experiment=smoke", *args)
    assert message in refused and "Traceback" not in refused
