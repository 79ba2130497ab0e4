"""Behaviour cloning (rltrain.algorithms.bc): its losses against hand computations, learning
an expert's mapping, and its one-step batches."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from algo_helpers import BOX, CPU, DISC, OBS_DIM, SMALL, filled_buffer, make_batch, progress
from rltrain.algorithms.bc import BC, BCConfig
from rltrain.data.reading import read


def test_continuous_loss_is_zero_at_the_actors_own_actions():
    torch.manual_seed(0)
    bc = BC(BCConfig(**SMALL), BOX, CPU, 0)
    obs = np.random.default_rng(0).normal(size=(64, OBS_DIM)).astype(np.float32)
    own = bc.act(obs, deterministic=True, progress=progress(0))
    assert bc.update(make_batch(obs, own), progress=progress(0)).stats.loss < 1e-12
    other = np.clip(own + 0.1, -1, 1)
    with torch.no_grad():
        now = bc.pi(torch.from_numpy(obs)).numpy()  # the actor after that (zero-gradient) step
    loss = bc.update(make_batch(obs, other), progress=progress(1)).stats.loss
    assert loss == pytest.approx(float(np.mean((now - other) ** 2)), rel=1e-5)
    assert loss > 1e-3


def test_continuous_mimics_a_linear_expert():
    torch.manual_seed(1)
    rng = np.random.default_rng(1)
    w = rng.normal(size=(OBS_DIM, 2)) * 0.5
    obs = rng.normal(size=(512, OBS_DIM)).astype(np.float32)
    expert = np.clip(obs @ w, -1, 1).astype(np.float32)
    bc = BC(BCConfig(hidden_sizes=[64, 64], lr=1e-3), BOX, CPU, 0)
    first = None
    for step in range(300):
        idx = rng.integers(len(obs), size=64)
        stats = bc.update(make_batch(obs[idx], expert[idx]), progress=progress(step, 300)).stats
        first = stats.loss if first is None else first
    test_obs = rng.normal(size=(256, OBS_DIM)).astype(np.float32)
    err = bc.act(test_obs, deterministic=True, progress=progress(0)) - np.clip(test_obs @ w, -1, 1)
    assert float(np.mean(err ** 2)) < 0.02 < first


def test_discrete_cross_entropy_falls_and_accuracy_reaches_one():
    """A fixed expert mapping (the action is the index of the largest of the three features):
    cross-entropy falls and the batch accuracy reaches 1."""
    torch.manual_seed(2)
    rng = np.random.default_rng(2)
    obs = rng.normal(size=(256, OBS_DIM)).astype(np.float32)
    expert = obs.argmax(1)
    bc = BC(BCConfig(hidden_sizes=[64, 64], lr=3e-3), DISC, CPU, 0)
    batch = make_batch(obs, expert)
    stats = [bc.update(batch, progress=progress(step)).stats for step in range(300)]
    assert stats[-1].loss < 0.2 * stats[0].loss
    assert stats[0].accuracy < 0.7 and stats[-1].accuracy == 1.0
    greedy = bc.act(obs, deterministic=True, progress=progress(0))
    assert (greedy == expert).all()


@pytest.mark.parametrize("info", [BOX, DISC], ids=["box", "discrete"])
def test_batches_are_the_stored_one_step_transitions(info):
    """The loss reads states and actions: BC declares no transform, so its batch is each
    sampled transition as stored (its own reward and next state, no n-step return, no
    discount)."""
    bc = BC(BCConfig(**SMALL), info, CPU, 0)
    buffer = filled_buffer(info)
    lanes, positions = np.array([0, 1, 1, 0, 1]), np.array([2, 0, 5, 7, 11])
    assert bc.transforms() == ()
    batch = read(buffer, lanes, positions, bc.transforms())
    held = {name: codec.array[lanes, positions] for name, codec in buffer.codecs.items()}
    np.testing.assert_array_equal(batch.obs, held["obs"])
    np.testing.assert_array_equal(batch.act, held["act"])
    np.testing.assert_array_equal(batch.rew, held["rew"])
    np.testing.assert_array_equal(batch.next_obs, buffer.next_obs_at(lanes, positions))
    assert batch.discount is None
    assert "gamma" not in {f.name for f in dataclasses.fields(BCConfig)}
