"""TD3 (rltrain.algorithms.td3): target policy smoothing, clipped double Q, delayed actor and
target updates whose skipped steps measure no actor loss, and prioritised replay's weights and
priorities."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from algo_helpers import BOX, CPU, SMALL, progress, random_batch
from rltrain.algorithms.td3 import TD3, TD3Config, smoothed
from rltrain.common.stats import mean_stats


def test_target_smoothing_noise_is_clipped():
    torch.manual_seed(2)
    clean = torch.rand(4000, 2) * 2 - 1
    noisy = smoothed(clean, 10.0, 0.3)
    diff = (noisy - clean).abs()
    assert float(diff.max()) <= 0.3 + 1e-6  # clipped (and within [-1, 1] below)
    assert float(diff.mean()) > 0.2  # huge noise: almost every draw hits the clip
    assert float(noisy.abs().max()) <= 1.0
    small = smoothed(torch.zeros(20000, 2), 0.1, 0.5)  # rarely clipped: Gaussian, std 0.1
    assert float(small.std()) == pytest.approx(0.1, abs=0.003)


def test_critics_regress_onto_the_smaller_target_at_a_smoothed_action():
    """critic_step's loss is the twin critics' summed squared TD error against
    r + discount * min_i Q'_i(s', clip(pi'(s') + clipped noise)), the noise drawn as it draws
    it (same seed); its values are both critics' at the batch's actions."""
    torch.manual_seed(3)
    td3 = TD3(TD3Config(target_noise=0.3, target_noise_clip=0.4, **SMALL), BOX, CPU, 0)
    batch = random_batch(BOX, seed=1)
    obs, act, rew, discount, next_obs = (torch.from_numpy(x) for x in (
        batch.obs, batch.act, batch.rew, batch.discount, batch.next_obs))
    torch.manual_seed(9)
    with torch.no_grad():
        next_act = smoothed(td3.pi_target(next_obs), 0.3, 0.4)
        target = rew + discount * td3.critic_target(next_obs, next_act).min(0).values
        q = td3.critic(obs, act)
        expected = float((q - target).pow(2).mean(1).sum())
        unsmoothed = rew + discount * td3.critic_target(
            next_obs, td3.pi_target(next_obs)).min(0).values
        assert float((q - unsmoothed).pow(2).mean(1).sum()) != pytest.approx(expected)
    torch.manual_seed(9)
    loss, values, priorities = td3.critic_step(obs, act, rew, discount, next_obs)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-6)
    torch.testing.assert_close(values.detach(), q)
    assert values.shape == (2, len(obs))
    # prioritised replay: each sample's |TD error|, averaged over the twin critics
    assert priorities.shape == (len(obs),) and not priorities.requires_grad
    torch.testing.assert_close(priorities, (q - target).abs().mean(0))


def test_importance_weights_weight_each_sample_of_the_critics_loss():
    """critic_step with a hand-made weights vector: sum_i mean_b w_b (Q_i - target)^2."""
    torch.manual_seed(3)
    td3 = TD3(TD3Config(**SMALL), BOX, CPU, 0)
    batch = random_batch(BOX, seed=4)
    obs, act, rew, discount, next_obs = (torch.from_numpy(x) for x in (
        batch.obs, batch.act, batch.rew, batch.discount, batch.next_obs))
    weights = torch.linspace(0.1, 2.0, len(obs))
    torch.manual_seed(9)
    with torch.no_grad():
        next_act = smoothed(td3.pi_target(next_obs), 0.2, 0.5)
        target = rew + discount * td3.critic_target(next_obs, next_act).min(0).values
        td_error = td3.critic(obs, act) - target
    torch.manual_seed(9)
    loss, _, priorities = td3.critic_step(obs, act, rew, discount, next_obs, weights)
    assert float(loss.detach()) == pytest.approx(
        float((weights * td_error.pow(2)).mean(1).sum()), rel=1e-6)
    assert float(loss.detach()) != pytest.approx(float(td_error.pow(2).mean(1).sum()), rel=1e-3)
    torch.testing.assert_close(priorities, td_error.abs().mean(0))


def test_update_passes_the_batch_weights_and_reports_priorities():
    """update() weights by the batch's weights: all 1 is the unweighted update bit for bit;
    other weights change the critics' step; the priorities come back either way."""
    batch = random_batch(BOX, seed=5)
    n = len(batch.rew)
    runs = []
    for weights in (None, np.ones(n, np.float32), np.linspace(0.1, 2, n).astype(np.float32)):
        torch.manual_seed(7)
        td3 = TD3(TD3Config(**SMALL), BOX, CPU, 0)
        report = td3.update(dataclasses.replace(batch, weights=weights), progress=progress(0))
        assert report.priorities is not None and report.priorities.shape == (n,)
        runs.append((report, td3.critic_optim.flat.clone()))
    (plain, flat), (ones, flat_ones), (weighted, flat_weighted) = runs
    assert plain.stats == ones.stats and torch.equal(plain.priorities, ones.priorities)
    assert torch.equal(flat, flat_ones)
    assert weighted.stats.critic_loss != plain.stats.critic_loss
    assert not torch.equal(flat, flat_weighted)


def test_delays_actor_and_target_updates():
    """With policy_delay=2 the actor and both targets change on even gradient steps only;
    the critics change on every step."""
    torch.manual_seed(3)
    td3 = TD3(TD3Config(hidden_sizes=[16], policy_delay=2), BOX, CPU, 0)
    for step in range(4):
        actor, critic = td3.actor_optim.flat.clone(), td3.critic_optim.flat.clone()
        targets = (td3.pi_target_flat.clone(), td3.critic_target_flat.clone())
        td3.update(random_batch(BOX, seed=step), progress=progress(step))
        assert not torch.equal(td3.critic_optim.flat, critic)
        moved = [not torch.equal(a, b) for a, b in (
            (td3.actor_optim.flat, actor), (td3.pi_target_flat, targets[0]),
            (td3.critic_target_flat, targets[1]))]
        assert moved == [step % 2 == 0] * 3, (step, moved)


def test_skipped_actor_steps_report_no_actor_loss():
    """policy_delay=2: odd steps report actor_loss None (never the last even step's value);
    an epoch's mean of the records averages the measured ones only."""
    torch.manual_seed(4)
    td3 = TD3(TD3Config(policy_delay=2, **SMALL), BOX, CPU, 0)
    records = []
    for step in range(6):
        report = td3.update(random_batch(BOX, seed=step), progress=progress(step))
        stats = report.stats
        assert report.gradient_steps == 1
        assert (stats.actor_loss is None) == (step % 2 == 1), (step, stats)
        assert stats.critic_loss is not None and stats.q_mean is not None
        records.append({k: v for k, v in vars(stats).items() if v is not None})
    measured = [r["actor_loss"] for r in records[::2]]
    assert mean_stats(records)["actor_loss"] == pytest.approx(sum(measured) / 3)
