"""SAC (rltrain.algorithms.sac): the temperature follows the entropy target, the target critics
move by Polyak averaging only, and delayed actor steps measure nothing they did not do."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from algo_helpers import BOX, CPU, SMALL, progress, random_batch
from rltrain.algorithms.sac import SAC, SACConfig
from rltrain.core import Progress


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
