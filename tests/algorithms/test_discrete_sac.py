"""Discrete SAC (rltrain.algorithms.discrete_sac): the soft target takes the policy's exact
expectation over the next actions, the actor's loss and the entropy are exact sums over the
actions, the temperature follows its target, and prioritised replay's weights and priorities
are those of the hand-computed TD errors."""

from __future__ import annotations

import copy
import dataclasses
import math
import signal

import numpy as np
import pytest
import torch

from algo_helpers import CPU, DISC, SMALL, progress, random_batch
from conftest import (
    interrupt_after_first_epoch,
    learning_records,
    resume_in_process,
    run_in_process,
)
from rltrain.algorithms.discrete_sac import DiscreteSAC, DiscreteSACConfig
from rltrain.common.types import SpaceInfo
from rltrain.config.schemas import ConfigError
from rltrain.data.batch import Batch
from rltrain.rundir.checkpoint import load_checkpoint


def make(seed: int = 0, **fields) -> DiscreteSAC:
    torch.manual_seed(seed)
    return DiscreteSAC(DiscreteSACConfig(**{**SMALL, **fields}), DISC, CPU, 0)


def batch_tensors(batch: Batch) -> tuple[torch.Tensor, ...]:
    return tuple(torch.from_numpy(np.asarray(x)) for x in (
        batch.obs, batch.act, batch.rew, batch.discount, batch.next_obs))


def reference_target(algo: DiscreteSAC, batch: Batch, alpha: float) -> np.ndarray:
    """r + discount * sum_a' pi(a'|s') (min(Q'_1, Q'_2)(s', a') - alpha log pi(a'|s')), one
    sample and one action at a time in plain Python."""
    _, _, rew, discount, next_obs = batch_tensors(batch)
    with torch.no_grad():
        logits = algo.pi(next_obs).double().numpy()
        q_next = algo.critic_target(next_obs).double().numpy()  # (2, batch, actions)
    out = []
    for b in range(len(rew)):
        z = logits[b] - logits[b].max()
        logp = z - math.log(sum(math.exp(v) for v in z))
        v = 0.0
        for a in range(DISC.action_dim):
            v += math.exp(logp[a]) * (min(q_next[0, b, a], q_next[1, b, a]) - alpha * logp[a])
        out.append(float(rew[b]) + float(discount[b]) * v)
    return np.array(out)


def test_soft_target_is_the_policy_expectation_over_next_actions():
    algo = make(1, init_alpha=0.3)
    batch = random_batch(DISC, seed=2)
    _, _, rew, discount, next_obs = batch_tensors(batch)
    got = algo.td_target(rew, discount, next_obs, torch.tensor(0.3))
    np.testing.assert_allclose(got.numpy(), reference_target(algo, batch, 0.3), rtol=1e-5,
                               atol=1e-5)


def test_critic_loss_and_priorities_are_the_hand_computed_td_errors():
    """critic_loss = sum over the twin critics of the batch mean of (Q_i(s, a) - target)^2;
    priorities = mean over the critics of |Q_i(s, a) - target|, one per sample."""
    algo = make(2, init_alpha=0.5)
    batch = random_batch(DISC, seed=3)
    obs, act, *_ = batch_tensors(batch)
    target = reference_target(algo, batch, 0.5)
    with torch.no_grad():
        q_all = algo.critic(obs).double().numpy()
    q = np.stack([q_all[i, np.arange(len(act)), act.numpy()] for i in range(2)])
    report = algo.update(batch, progress=progress(0))
    assert report.stats.critic_loss == pytest.approx(((q - target) ** 2).mean(1).sum(), rel=1e-5)
    assert report.priorities is not None and report.priorities.shape == (len(act),)
    assert not report.priorities.requires_grad
    np.testing.assert_allclose(report.priorities.numpy(), np.abs(q - target).mean(0),
                               rtol=1e-5, atol=1e-6)


def test_importance_weights_weight_each_sample_of_the_critic_loss():
    """With a hand-made weights vector the critic loss is sum_i mean_b w_b (Q_i - target)^2;
    with weights all 1 it is the unweighted loss, and the whole update the same, bit for bit."""
    batch = random_batch(DISC, seed=4)
    n = len(batch.rew)
    weights = np.linspace(0.1, 1.0, n).astype(np.float32)
    algo = make(3)
    obs, act, *_ = batch_tensors(batch)
    target = reference_target(algo, batch, 1.0)
    with torch.no_grad():
        q_all = algo.critic(obs).double().numpy()
    q = np.stack([q_all[i, np.arange(n), act.numpy()] for i in range(2)])
    weighted = algo.update(dataclasses.replace(batch, weights=weights), progress=progress(0))
    expected = (weights * (q - target) ** 2).mean(1).sum()
    assert weighted.stats.critic_loss == pytest.approx(expected, rel=1e-5)
    assert weighted.stats.critic_loss != pytest.approx(((q - target) ** 2).mean(1).sum(),
                                                       rel=1e-3)

    plain, ones = make(4), make(4)
    a = plain.update(batch, progress=progress(0))
    b = ones.update(dataclasses.replace(batch, weights=np.ones(n, np.float32)),
                    progress=progress(0))
    assert a.stats == b.stats
    assert torch.equal(a.priorities, b.priorities)
    for (k, x), (_, y) in zip(plain.state_dict().items(), ones.state_dict().items(), strict=True):
        assert torch.equal(x, y), k


def test_actor_loss_is_the_exact_expectation_at_the_updated_critics():
    """actor_loss = mean_s sum_a pi(a|s) (alpha log pi(a|s) - min_i Q_i(s, a)), with the
    policy before its step and the critics after theirs; the entropy is exact too."""
    algo = make(5, init_alpha=0.2)
    batch = random_batch(DISC, seed=5)
    obs, *_ = batch_tensors(batch)
    pi_before = copy.deepcopy(algo.pi)
    stats = algo.update(batch, progress=progress(0)).stats
    with torch.no_grad():
        logp = pi_before(obs).log_softmax(-1)
        q = algo.critic(obs).min(0).values
        p = logp.exp()
        expected = float((p * (0.2 * logp - q)).sum(-1).mean())
        entropy = float(-(p * logp).sum(-1).mean())
    assert stats.actor_loss == pytest.approx(expected, rel=1e-5)
    assert stats.entropy == pytest.approx(entropy, rel=1e-6)
    assert stats.alpha == pytest.approx(0.2)


def test_no_gradient_of_the_actor_reaches_the_critics():
    """The critics take one step (the TD loss); the actor's loss leaves their gradients alone,
    and the actor's step leaves them unchanged."""
    algo = make(6)
    batch = random_batch(DISC, seed=6)
    algo.update(batch, progress=progress(0))
    # the critics' step alone, from the same start: the same parameters and gradients
    other = make(6)
    obs, act, rew, discount, next_obs = batch_tensors(batch)
    target = other.td_target(rew, discount, next_obs, torch.tensor(1.0))
    q = other.critic(obs).gather(-1, act.reshape(1, -1, 1).expand(2, -1, 1)).squeeze(-1)
    other.critic_optim.zero_grad()
    (q - target).pow(2).mean(1).sum().backward()
    other.critic_optim.step()
    assert torch.equal(other.critic_optim.grad, algo.critic_optim.grad)
    assert torch.equal(other.critic_optim.flat, algo.critic_optim.flat)


@pytest.mark.parametrize(("peaked", "direction"), [(False, -1), (True, 1)])
def test_temperature_follows_the_entropy_target(peaked, direction):
    """A near-uniform policy (entropy above 0.5 log|A|) lowers alpha; a peaked one (entropy
    near 0) raises it."""
    algo = make(7, target_entropy_scale=0.5, alpha_lr=1e-2, actor_lr=1e-9)
    if peaked:
        with torch.no_grad():
            algo.pi.net.layers[-1].bias.copy_(torch.tensor([12.0, 0.0, 0.0]))
    alphas = [float(algo.log_alpha.detach().exp())]
    for step in range(5):
        stats = algo.update(random_batch(DISC, seed=step), progress=progress(step)).stats
        assert (stats.entropy > 0.5 * math.log(3)) == (not peaked)
        alphas.append(float(algo.log_alpha.detach().exp()))
    assert (direction * np.diff(alphas) > 0).all(), alphas


def test_target_entropy_is_a_fraction_of_log_the_number_of_actions():
    info = SpaceInfo((3,), 6, (), None, None, None, "test")
    algo = DiscreteSAC(DiscreteSACConfig(target_entropy_scale=0.89, **SMALL), info, CPU, 0)
    assert algo.target_entropy == pytest.approx(0.89 * math.log(6))


def test_without_autotune_alpha_stays():
    algo = make(8, autotune=False, init_alpha=0.05)
    for step in range(3):
        stats = algo.update(random_batch(DISC, seed=step), progress=progress(step)).stats
    assert stats.alpha == pytest.approx(0.05)
    assert "alpha" not in algo.optimizers()


def test_target_critics_move_by_polyak_every_target_update_interval():
    algo = make(9, tau=0.1, target_update_interval=2)
    for step in range(4):
        before = algo.critic_target_flat.clone()
        algo.update(random_batch(DISC, seed=step), progress=progress(step))
        if step % 2 == 1:
            torch.testing.assert_close(algo.critic_target_flat,
                                       0.9 * before + 0.1 * algo.critic_optim.flat,
                                       rtol=0, atol=1e-6)
        else:
            assert torch.equal(algo.critic_target_flat, before)


def test_acting_samples_the_policy_and_greedy_takes_its_argmax():
    algo = make(10)
    probs = torch.tensor([0.7, 0.2, 0.1])
    with torch.no_grad():
        layer = algo.pi.net.layers[-1]
        layer.weight.zero_()
        layer.bias.copy_(probs.log())
    obs = np.random.default_rng(0).normal(size=(20000, 3)).astype(np.float32)
    assert (algo.act(obs[:50], deterministic=True, progress=progress(0)) == 0).all()
    sampled = algo.act(obs, deterministic=False, progress=progress(0))
    freq = np.bincount(sampled, minlength=3) / len(sampled)
    np.testing.assert_allclose(freq, probs.numpy(), atol=0.01)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("target_entropy_scale", 1.0, "algo.target_entropy_scale must be in \\(0, 1\\), got 1.0"),
    ("target_entropy_scale", 0.0, "algo.target_entropy_scale must be in \\(0, 1\\), got 0.0"),
    ("tau", 1.5, "algo.tau must be in \\[0, 1\\]"),
    ("alpha_lr", 0.0, "algo.alpha_lr must be > 0"),
    ("target_update_interval", 0, "algo.target_update_interval must be > 0"),
])
def test_bad_settings_are_refused_by_name(field, value, message):
    with pytest.raises(ConfigError, match=message):
        DiscreteSACConfig(**{field: value}).check()


def test_a_target_that_would_never_update_is_refused():
    with pytest.raises(ConfigError, match="algo.target_update_interval=1,000 is more than the "
                                          "run's ~500 gradient steps"):
        DiscreteSACConfig(target_update_interval=1000).check_plan(500)


@pytest.mark.slow  # 12 s; prioritised replay's resume: tests/data/test_prioritized.py, by default
def test_sigterm_then_resume_with_prioritized_replay_equals_unbroken_run(tmp_path):
    """Through the CLI on CartPole with buffer=prioritized: a run stopped by SIGTERM mid-epoch
    and resumed logs the same epochs as an unbroken one (the networks, optimisers, torch's
    random state for the sampled actions, and the sampler's priorities all resume)."""
    full, broken = tmp_path / "full", tmp_path / "broken"
    args = ["algo=discrete_sac", "env=cartpole", "buffer=prioritized", "trainer.max_epochs=3",
            "trainer.epoch_num_steps=512", "buffer.size=20000", "trainer.stop_score=null",
            "seed=1", "logger.progress_bar=false", "env.num_test_envs=5",
            "trainer.test_step_num_episodes=5", "trainer.batch_size=64"]
    run_in_process(full, *args)
    res = interrupt_after_first_epoch([*args, f"hydra.run.dir={broken}"], tmp_path,
                                      signal.SIGTERM, unbroken=full)
    assert res.returncode == 143, res.stderr
    assert load_checkpoint(broken / "checkpoints" / "last.pt")["trainer"]["partial"] is not None
    assert resume_in_process(broken) == (0, [])
    assert learning_records(broken) == learning_records(full)
