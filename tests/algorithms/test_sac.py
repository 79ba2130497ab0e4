"""SAC (rltrain.algorithms.sac): the temperature follows the entropy target, the target critics
move by Polyak averaging only, delayed actor steps measure nothing they did not do, and
prioritised replay's weights and priorities are those of the hand-computed TD errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from algo_helpers import BOX, CPU, SMALL, progress, random_batch
from rltrain.algorithms.sac import SAC, SACConfig
from rltrain.common.types import Progress


@pytest.mark.parametrize(("target_entropy", "direction"), [(-50.0, -1), (50.0, 1)])
def test_temperature_follows_the_entropy_target(target_entropy, direction):
    """Entropy above the target (a very low target) lowers alpha; below it raises alpha."""
    torch.manual_seed(0)
    sac = SAC(SACConfig(hidden_sizes=[16], target_entropy=target_entropy, alpha_lr=1e-2),
              BOX, CPU, 0)
    alphas = [float(sac.log_alpha.detach().exp())]
    for step in range(5):
        sac.update(random_batch(BOX, seed=step), progress=Progress(step, step, 0.0))
        alphas.append(float(sac.log_alpha.detach().exp()))
    assert (direction * np.diff(alphas) > 0).all(), alphas


def test_target_critics_move_by_polyak_only():
    torch.manual_seed(1)
    sac = SAC(SACConfig(hidden_sizes=[16], tau=0.1), BOX, CPU, 0)
    before = sac.critic_target_flat.clone()
    sac.update(random_batch(BOX), progress=Progress(0, 0, 0.0))
    expected = 0.9 * before + 0.1 * sac.critic_optim.flat
    torch.testing.assert_close(sac.critic_target_flat, expected, rtol=0, atol=1e-6)


def test_target_critics_follow_every_target_update_interval():
    torch.manual_seed(2)
    sac = SAC(SACConfig(target_update_interval=3, **SMALL), BOX, CPU, 0)
    for step in range(6):
        before = sac.critic_target_flat.clone()
        sac.update(random_batch(BOX, seed=step), progress=progress(step))
        assert (not torch.equal(before, sac.critic_target_flat)) == ((step + 1) % 3 == 0)


def test_without_autotune_alpha_stays():
    sac = SAC(SACConfig(hidden_sizes=[16], autotune=False, init_alpha=0.2), BOX, CPU, 0)
    for step in range(3):
        stats = sac.update(random_batch(BOX, seed=step),
                           progress=Progress(step, step, 0.0)).stats
    assert stats.alpha == pytest.approx(0.2)
    assert "alpha" not in sac.optimizers()


def test_delayed_policy_steps_measure_no_actor_stats():
    """policy_delay=2: on odd steps neither the actor nor alpha moves and actor_loss,
    alpha_loss and entropy are None, never the values of the step before; the critics' stats
    and alpha itself are measured on every step."""
    torch.manual_seed(3)
    sac = SAC(SACConfig(policy_delay=2, **SMALL), BOX, CPU, 0)
    for step in range(5):
        actor, log_alpha = sac.actor_optim.flat.clone(), sac.log_alpha.detach().clone()
        report = sac.update(random_batch(BOX, seed=step), progress=progress(step))
        stats = report.stats
        measured = step % 2 == 0
        assert report.gradient_steps == 1
        assert [stats.actor_loss is not None, stats.alpha_loss is not None,
                stats.entropy is not None] == [measured] * 3, (step, stats)
        assert (not torch.equal(actor, sac.actor_optim.flat)) == measured
        assert (not torch.equal(log_alpha, sac.log_alpha.detach())) == measured
        assert stats.critic_loss is not None and stats.q_mean is not None
        assert stats.alpha == pytest.approx(float(log_alpha.exp()))


def test_importance_weights_weight_the_critic_loss_and_priorities_are_td_errors():
    """With a hand-made weights vector the critics' loss is sum_i mean_b w_b (Q_i - target)^2
    against the soft target (its next actions drawn as the update draws them: same seed), and
    the priorities are mean_i |Q_i - target|, one per sample, detached."""
    torch.manual_seed(5)
    sac = SAC(SACConfig(init_alpha=0.5, **SMALL), BOX, CPU, 0)
    batch = random_batch(BOX, seed=2)
    n = len(batch.rew)
    weights = np.linspace(0.1, 2.0, n).astype(np.float32)
    obs, act, rew, discount, next_obs = (torch.from_numpy(x) for x in (
        batch.obs, batch.act, batch.rew, batch.discount, batch.next_obs))
    torch.manual_seed(9)
    with torch.no_grad():
        target = sac.td_target(rew, discount, next_obs, sac.log_alpha.exp(), entropy_bonus=True)
        td_error = sac.critic(obs, act) - target
    torch.manual_seed(9)
    report = sac.update(dataclasses.replace(batch, weights=weights), progress=progress(0))
    expected = float((torch.from_numpy(weights) * td_error.pow(2)).mean(1).sum())
    assert report.stats.critic_loss == pytest.approx(expected, rel=1e-6)
    assert report.stats.critic_loss != pytest.approx(float(td_error.pow(2).mean(1).sum()),
                                                     rel=1e-3)
    assert report.priorities is not None and report.priorities.shape == (n,)
    assert not report.priorities.requires_grad
    torch.testing.assert_close(report.priorities, td_error.abs().mean(0))


def test_weights_all_one_change_nothing():
    """Weights of 1 give the unweighted update bit for bit: stats, priorities, every
    parameter and optimiser state."""
    batch = random_batch(BOX, seed=3)
    runs = []
    for weights in (None, np.ones(len(batch.rew), np.float32)):
        torch.manual_seed(6)
        sac = SAC(SACConfig(**SMALL), BOX, CPU, 0)
        report = sac.update(dataclasses.replace(batch, weights=weights), progress=progress(0))
        runs.append((report, sac.state_dict(), sac.critic_optim.exp_avg_sq))
    (a, state_a, v_a), (b, state_b, v_b) = runs
    assert a.stats == b.stats and torch.equal(a.priorities, b.priorities)
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert torch.equal(v_a, v_b)
