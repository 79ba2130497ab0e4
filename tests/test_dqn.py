"""DQN (rltrain.algorithms.dqn): the double-Q target, the Huber loss, the target network's
copies and the epsilon schedule, each against a hand computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from algo_helpers import CPU, DISC, SMALL, progress, random_batch
from rltrain.algorithms.dqn import DQN, DQNConfig
from rltrain.core import Progress
from rltrain.data.buffers import Batch


def tensors(batch: Batch) -> tuple[torch.Tensor, ...]:
    """(obs, act, rew, discount, next_obs) as tensors, as they are stored."""
    return (torch.from_numpy(batch.obs), torch.from_numpy(batch.act),
            torch.from_numpy(batch.rew), torch.from_numpy(batch.discount),
            torch.from_numpy(batch.next_obs))


def detuned(dqn: DQN) -> DQN:
    """The target network made different from the online one."""
    with torch.no_grad():
        for p in dqn.q_target.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return dqn


@pytest.mark.parametrize("double_q", [True, False])
def test_td_target_by_hand(double_q):
    """Double Q: the target network values the online network's best next action; plain:
    the target network's own best."""
    torch.manual_seed(0)
    dqn = detuned(DQN(DQNConfig(double_q=double_q, **SMALL), DISC, CPU, 0))
    _, _, rew, discount, next_obs = tensors(random_batch(DISC, seed=1))
    with torch.no_grad():
        online, target = dqn.q(next_obs), dqn.q_target(next_obs)
    rows = torch.arange(len(rew))
    pick = online.argmax(-1) if double_q else target.argmax(-1)
    expected = rew + discount * target[rows, pick]
    torch.testing.assert_close(dqn.td_target(rew, discount, next_obs), expected)
    # the two rules disagree here: the test tells them apart
    assert not torch.equal(online.argmax(-1), target.argmax(-1))


def test_update_loss_is_the_huber_loss_against_the_td_target():
    torch.manual_seed(1)
    dqn = detuned(DQN(DQNConfig(huber_delta=0.5, **SMALL), DISC, CPU, 0))
    batch = random_batch(DISC, seed=2)
    obs, act, rew, discount, next_obs = tensors(batch)
    with torch.no_grad():
        q_sa = dqn.q(obs)[torch.arange(len(act)), act]
        target = dqn.td_target(rew, discount, next_obs)
    report = dqn.update(batch, progress=progress(0))
    assert report.gradient_steps == 1
    assert report.stats.loss == pytest.approx(float(F.smooth_l1_loss(q_sa, target, beta=0.5)),
                                              rel=1e-6)
    assert report.stats.q_mean == pytest.approx(float(q_sa.mean()), rel=1e-6)


def test_target_network_is_copied_every_target_update_interval():
    torch.manual_seed(2)
    dqn = DQN(DQNConfig(target_update_interval=3, **SMALL), DISC, CPU, 0)
    for step in range(7):
        dqn.update(random_batch(DISC, seed=step), progress=progress(step))
        same = all(torch.equal(a, b) for a, b in zip(dqn.q.parameters(),
                                                      dqn.q_target.parameters(), strict=True))
        assert same == ((step + 1) % 3 == 0), step


def test_epsilon_anneals_linearly_then_stays():
    dqn = DQN(DQNConfig(eps_start=1.0, eps_end=0.1, exploration_fraction=0.5, **SMALL), DISC,
              CPU, 0)
    assert [dqn.epsilon(f) for f in (0.0, 0.25, 0.5, 1.0)] == pytest.approx([1.0, 0.55, 0.1, 0.1])
    assert dqn.update(random_batch(DISC), progress=Progress(0, 0, 0.25)).stats.epsilon == \
        pytest.approx(0.55)
    obs = np.random.default_rng(3).normal(size=(2000, 3)).astype(np.float32)
    greedy = dqn.act(obs, deterministic=True, progress=Progress(0, 0, 0.0))
    explored = dqn.act(obs, deterministic=False, progress=Progress(0, 0, 0.25))
    # 55% of the actions are uniform, a third of which happen to be the greedy one
    assert (explored != greedy).mean() == pytest.approx(0.55 * 2 / 3, abs=0.04)
