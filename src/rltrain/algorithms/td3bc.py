"""TD3+BC: Fujimoto & Gu 2021, "A Minimalist Approach to Offline Reinforcement Learning"
(arXiv:2106.06860).

TD3 (``td3.py``) learnt from a fixed dataset, with one change: the actor's objective gains a
behaviour-cloning term that keeps it near the data actions,

    actor_loss = -lambda * Q1(s, pi(s)).mean() + ((pi(s) - a) ** 2).mean(),
    lambda = alpha / mean |Q1(s, pi(s))|  (held constant in the gradient),

where the normalisation by the critic's scale makes ``alpha`` (2.5 in the paper) balance the
two terms whatever the rewards' scale. The paper also standardises the dataset's states: that
is ``env.normalize.obs=true``. Continuous actions, offline only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rltrain.algorithms.base import Progress
from rltrain.algorithms.registry import CONTINUOUS, AlgoSpec, register
from rltrain.algorithms.td3 import TD3, TD3Config
from rltrain.config import check_positive
from rltrain.data.buffers import Batch
from rltrain.envs import SpaceInfo


@dataclass
class TD3BCConfig(TD3Config):
    """TD3+BC (Fujimoto & Gu 2021), offline. TD3's defaults are the paper's (learning rates
    3e-4, policy delay 2, target noise 0.2 clipped at 0.5, tau 0.005); exploration_noise and
    noise_beta are unused offline."""

    name: str = "td3bc"
    #: weight of the Q term against behaviour cloning (the paper's alpha): lambda =
    #: alpha / mean |Q|; 0 would be pure behaviour cloning, large values pure TD3
    alpha: float = 2.5

    def check(self) -> None:
        super().check()
        check_positive(self, "algo", "alpha")


@dataclass(frozen=True)
class TD3BCStats:
    critic_loss: float
    actor_loss: float
    q_mean: float
    #: the behaviour-cloning term of the actor's loss, mean (pi(s) - a)^2
    bc_mse: float
    #: the Q term's weight, alpha / mean |Q1(s, pi(s))|
    lmbda: float


class TD3BC(TD3):
    def __init__(self, cfg: TD3BCConfig, info: SpaceInfo, device: torch.device, seed: int
                 ) -> None:
        super().__init__(cfg, info, device, seed)
        # (bc_mse, lmbda) of the last actor update, reported until the next one (the actor is
        # updated every policy_delay gradient steps, as TD3's actor_loss is)
        self._bc_stats = (math.nan, math.nan)

    def actor_loss(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        pi = self.pi(obs)
        q = self.critic(obs, pi)[0]
        lmbda = self.cfg.alpha / q.abs().mean().detach()
        bc_mse = F.mse_loss(pi, act)
        self._bc_stats = tuple(torch.stack((bc_mse.detach(), lmbda)).tolist())
        return -lmbda * q.mean() + bc_mse

    def update(self, batch: Batch, *, progress: Progress) -> TD3BCStats:
        stats = super().update(batch, progress=progress)
        return TD3BCStats(stats.critic_loss, stats.actor_loss, stats.q_mean, *self._bc_stats)


register(AlgoSpec(
    name="td3bc", config=TD3BCConfig, cls=TD3BC, trainers=("offline",), actions=(CONTINUOUS,),
    console=(("critic_loss", "q_loss"), ("actor_loss", "pi"), ("bc_mse", "bc"),
             ("q_mean", "q")),
    bounded_actions=True,
    paper="Fujimoto & Gu 2021, arXiv:2106.06860",
))
