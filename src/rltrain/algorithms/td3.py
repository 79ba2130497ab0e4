"""TD3: Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic
Methods" (arXiv:1802.09477).

DDPG (``ddpg.py``) with its three fixes: clipped double Q (twin critics, the target takes the
smaller value), delayed actor and target updates (every ``policy_delay`` critic updates), and
target policy smoothing (clipped Gaussian noise on the target action).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rltrain.algorithms.ddpg import DDPG, DDPGConfig
from rltrain.algorithms.registry import CONTINUOUS, AlgoSpec, register
from rltrain.config import check_positive


@dataclass
class TD3Config(DDPGConfig):
    """Twin Delayed DDPG (Fujimoto et al. 2018), off-policy."""

    name: str = "td3"
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    policy_delay: int = 2
    #: standard deviation of the target policy smoothing noise (normalised action space)
    target_noise: float = 0.2
    #: the smoothing noise is clipped to [-target_noise_clip, target_noise_clip]
    target_noise_clip: float = 0.5

    def check(self) -> None:
        super().check()
        check_positive(self, "algo", "target_noise", "target_noise_clip")


class TD3(DDPG):
    num_critics = 2

    def target_action(self, next_obs: torch.Tensor) -> torch.Tensor:
        """The target actor's action plus clipped Gaussian noise, kept in [-1, 1]."""
        a = self.pi_target(next_obs)
        c = self.cfg.target_noise_clip
        noise = (torch.randn_like(a) * self.cfg.target_noise).clamp_(-c, c)
        return (a + noise).clamp_(-1.0, 1.0)


register(AlgoSpec(
    name="td3", config=TD3Config, cls=TD3, trainers=("offpolicy",), actions=(CONTINUOUS,),
    console=(("critic_loss", "q_loss"), ("actor_loss", "pi"), ("q_mean", "q")),
    bounded_actions=True,
    paper="Fujimoto et al. 2018, arXiv:1802.09477",
))
