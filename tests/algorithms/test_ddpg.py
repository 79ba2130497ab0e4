"""DDPG (rltrain.algorithms.ddpg): Gaussian exploration clipped to the box, a noiseless target,
the deterministic policy gradient step, stats left unmeasured on delayed steps, and prioritised
replay's weights and priorities."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from algo_helpers import BOX, CPU, SMALL, progress, random_batch
from rltrain.algorithms.ddpg import DDPG, DDPGConfig
from rltrain.common.types import Progress


def test_exploration_noise_is_gaussian_and_clipped_to_the_box():
    torch.manual_seed(4)
    ddpg = DDPG(DDPGConfig(hidden_sizes=[16], exploration_noise=0.1), BOX, CPU, 0)
    obs = np.zeros((20000, 3), np.float32)
    greedy = ddpg.act(obs, deterministic=True, progress=Progress(0, 0, 0.0))
    explored = ddpg.act(obs, deterministic=False, progress=Progress(0, 0, 0.0))
    noise = explored - greedy
    assert abs(float(noise.std()) - 0.1) < 0.005
    assert np.abs(explored).max() <= 1.0


def test_critic_regresses_onto_the_noiseless_target_action():
    """The critic's loss is the squared TD error against r + discount * Q'(s', pi'(s')), the
    target actor's action as it is (no smoothing noise: TD3's addition); so it is the same
    whatever torch's random state."""
    batch = random_batch(BOX, seed=1)
    obs, act, rew, discount, next_obs = (torch.from_numpy(x) for x in (
        batch.obs, batch.act, batch.rew, batch.discount, batch.next_obs))
    losses = []
    for seed in (0, 1):
        torch.manual_seed(5)
        ddpg = DDPG(DDPGConfig(**SMALL), BOX, CPU, 0)
        with torch.no_grad():
            target = rew + discount * ddpg.critic_target(next_obs, ddpg.pi_target(next_obs))[0]
            expected = float((ddpg.critic(obs, act)[0] - target).pow(2).mean())
        torch.manual_seed(seed)
        losses.append(ddpg.update(batch, progress=progress(0)).stats.critic_loss)
        assert losses[-1] == pytest.approx(expected, rel=1e-6)
    assert losses[0] == losses[1]


def test_actor_step_ascends_the_critic_and_the_targets_follow():
    """actor_step returns -mean Q(s, pi(s)) before its step, leaves the critic (and its
    gradients) alone, and moves both targets by Polyak averaging."""
    torch.manual_seed(6)
    ddpg = DDPG(DDPGConfig(tau=0.1, **SMALL), BOX, CPU, 0)
    obs = torch.randn(32, 3)
    with torch.no_grad():
        expected = float(-ddpg.critic(obs, ddpg.pi(obs))[0].mean())
    critic, critic_grad = ddpg.critic_optim.flat.clone(), ddpg.critic_optim.grad.clone()
    actor = ddpg.actor_optim.flat.clone()
    targets = ddpg.pi_target_flat.clone(), ddpg.critic_target_flat.clone()
    loss = ddpg.actor_step(obs)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-6)
    assert torch.equal(ddpg.critic_optim.flat, critic)
    assert torch.equal(ddpg.critic_optim.grad, critic_grad)  # no gradient reached the critic
    assert all(p.requires_grad for p in ddpg.critic.parameters())  # unfrozen again
    assert not torch.equal(ddpg.actor_optim.flat, actor)
    torch.testing.assert_close(ddpg.pi_target_flat, 0.9 * targets[0] + 0.1 * ddpg.actor_optim.flat,
                               rtol=0, atol=1e-6)
    torch.testing.assert_close(ddpg.critic_target_flat, 0.9 * targets[1] + 0.1 * critic,
                               rtol=0, atol=1e-6)


def test_delayed_steps_measure_no_actor_loss():
    """With policy_delay=3 the actor is updated (and its loss measured) on steps 0 and 3 only;
    on the others actor_loss is None, not the last measured value."""
    torch.manual_seed(7)
    ddpg = DDPG(DDPGConfig(policy_delay=3, **SMALL), BOX, CPU, 0)
    for step in range(5):
        actor = ddpg.actor_optim.flat.clone()
        stats = ddpg.update(random_batch(BOX, seed=step), progress=progress(step)).stats
        updated = not torch.equal(actor, ddpg.actor_optim.flat)
        assert updated == (step % 3 == 0) == (stats.actor_loss is not None), step
        assert stats.critic_loss is not None and stats.q_mean is not None


def test_importance_weights_weight_the_critic_loss_and_priorities_are_td_errors():
    """With a hand-made weights vector the critic's loss is mean_b w_b (Q - target)^2; the
    priorities are |Q - target| per sample; weights all 1 are the unweighted update, bit for
    bit."""
    batch = random_batch(BOX, seed=2)
    n = len(batch.rew)
    weights = np.linspace(0.1, 2.0, n).astype(np.float32)
    obs, act, rew, discount, next_obs = (torch.from_numpy(x) for x in (
        batch.obs, batch.act, batch.rew, batch.discount, batch.next_obs))
    runs = []
    for w in (weights, None, np.ones(n, np.float32)):
        torch.manual_seed(8)
        ddpg = DDPG(DDPGConfig(**SMALL), BOX, CPU, 0)
        with torch.no_grad():
            target = rew + discount * ddpg.critic_target(next_obs, ddpg.pi_target(next_obs))[0]
            td_error = ddpg.critic(obs, act)[0] - target
        report = ddpg.update(dataclasses.replace(batch, weights=w), progress=progress(0))
        assert report.priorities is not None and report.priorities.shape == (n,)
        torch.testing.assert_close(report.priorities, td_error.abs())
        runs.append((report, ddpg.state_dict()))
    (weighted, _), (plain, state), (ones, state_ones) = runs
    expected = float((torch.from_numpy(weights) * td_error.pow(2)).mean())
    assert weighted.stats.critic_loss == pytest.approx(expected, rel=1e-6)
    assert plain.stats.critic_loss == pytest.approx(float(td_error.pow(2).mean()), rel=1e-6)
    assert weighted.stats.critic_loss != pytest.approx(plain.stats.critic_loss, rel=1e-3)
    assert plain.stats == ones.stats and torch.equal(plain.priorities, ones.priorities)
    assert all(torch.equal(state[k], state_ones[k]) for k in state)
