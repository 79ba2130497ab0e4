"""PPO's written-out log-probabilities and entropies equal torch.distributions'."""

import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal

from rltrain.algorithms.ppo import PPOActor
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
