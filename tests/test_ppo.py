"""PPO's written-out log-probabilities, entropies and sampling agree with torch.distributions."""

import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal

from rltrain.algorithms.ppo import PPOActor, sample_categorical
from rltrain.config import PPOConfig
from rltrain.envs import SpaceInfo


def test_gaussian_log_prob_and_entropy():
    torch.manual_seed(0)
    info = SpaceInfo((3,), None, (2,), np.zeros(2, np.float32), np.ones(2, np.float32), None, "x")
    actor = PPOActor(PPOConfig(init_log_std=-0.3), info)
    obs, act = torch.randn(7, 3), torch.randn(7, 2)
    logp, entropy = actor.log_prob_entropy(obs, act)
    ref = Normal(actor(obs), actor.log_std.exp())
    torch.testing.assert_close(logp, ref.log_prob(act).sum(-1))
    torch.testing.assert_close(entropy, ref.entropy().sum(-1))


@pytest.mark.parametrize("num_actions", [2, 5])
def test_categorical_log_prob_and_entropy(num_actions):
    torch.manual_seed(1)
    actor = PPOActor(PPOConfig(), SpaceInfo((3,), num_actions, (), None, None, None, "x"))
    obs, act = torch.randn(9, 3) * 50, torch.randint(0, num_actions, (9,))
    logp, entropy = actor.log_prob_entropy(obs, act)
    ref = Categorical(logits=actor(obs))
    torch.testing.assert_close(logp, ref.log_prob(act))
    torch.testing.assert_close(entropy, ref.entropy())


def test_sample_categorical_draws_softmax_probabilities():
    """Gumbel-max sampling: each action's frequency over 200,000 draws is within 5 standard
    errors of its softmax probability; rows are drawn independently."""
    torch.manual_seed(4)
    logits = torch.tensor([[0.0, 1.0, -1.0, 2.5], [3.0, 0.0, 0.0, -9.0]])
    n = 200_000
    draws = sample_categorical(logits.repeat(n // 2, 1)).reshape(n // 2, 2)
    for row in range(2):
        p = logits[row].softmax(-1)
        freq = torch.bincount(draws[:, row], minlength=4) / (n // 2)
        se = (p * (1 - p) / (n // 2)).sqrt()
        assert ((freq - p).abs() <= 5 * se + 1e-9).all(), (row, freq, p)


def test_act_takes_float64_and_reversed_observations():
    """The per-step tensor fast path falls back for arrays torch cannot share (negative
    strides) and converts dtypes; the actions equal those for a plain float32 copy."""
    from rltrain.algorithms import Progress
    from rltrain.algorithms.ppo import PPO

    torch.manual_seed(5)
    info = SpaceInfo((3,), 4, (), None, None, None, "x")
    ppo = PPO(PPOConfig(), info, torch.device("cpu"))
    obs = np.random.default_rng(0).normal(size=(6, 3))[::-1]  # float64, negative stride
    got = ppo.act(obs, deterministic=True, progress=Progress(0, 0, 0.0))
    want = ppo.act(np.ascontiguousarray(obs, np.float32), deterministic=True,
                   progress=Progress(0, 0, 0.0))
    np.testing.assert_array_equal(got, want)
    assert got.shape == (6,)
