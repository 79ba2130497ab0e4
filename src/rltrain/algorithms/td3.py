"""TD3: Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic
Methods" (arXiv:1802.09477).

DDPG (``ddpg.py``) with its three fixes, all in :meth:`TD3.update` and :meth:`TD3.critic_step`:
clipped double Q (twin critics, the target takes the smaller value), delayed actor and target
updates (every ``policy_delay`` critic updates), and target policy smoothing (clipped Gaussian
noise on the target action). The actor's loss is DDPG's deterministic policy gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rltrain.algorithms.base import (
    UpdateReport,
    clip_and_step,
    compiled,
    td_priorities,
    weighted_mean,
)
from rltrain.algorithms.ddpg import DDPG, DDPGConfig, DDPGStats
from rltrain.algorithms.registry import CONTINUOUS, AlgoSpec, register
from rltrain.common.types import Progress
from rltrain.config.schemas import check_positive
from rltrain.data.batch import Batch


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


def smoothed(action: torch.Tensor, noise: float, noise_clip: float) -> torch.Tensor:
    """Target policy smoothing: ``action`` plus Gaussian noise clipped to [-noise_clip,
    noise_clip], kept in [-1, 1]."""
    eps = (torch.randn_like(action) * noise).clamp_(-noise_clip, noise_clip)
    return (action + eps).clamp_(-1.0, 1.0)


class TD3(DDPG):
    cfg: TD3Config
    num_critics = 2

    def critic_step(self, obs: torch.Tensor, act: torch.Tensor, rew: torch.Tensor,
                    discount: torch.Tensor, next_obs: torch.Tensor,
                    weights: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Both critics regress onto r + discount * min_i Q'_i(s', smoothed pi'(s')), each
        sample's squared error weighted by ``weights`` (prioritised replay; None: the plain
        mean); returns the critics' loss, their values at the batch's actions, ``(2, batch)``,
        and each sample's priority (:func:`td_priorities`), ``(batch,)``."""
        critic_loss, q, td_error = compiled(self, "critic_loss")(obs, act, rew, discount,
                                                                 next_obs, weights)
        clip_and_step(critic_loss, self.critic_optim, self.cfg.max_grad_norm)
        return critic_loss, q, td_priorities(td_error)

    def critic_loss(self, obs: torch.Tensor, act: torch.Tensor, rew: torch.Tensor,
                    discount: torch.Tensor, next_obs: torch.Tensor,
                    weights: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor,
                                                           torch.Tensor]:
        """DDPG's, with the smaller of the two target critics at a smoothed target action."""
        cfg = self.cfg
        with torch.no_grad():
            next_act = smoothed(self.pi_target(next_obs), cfg.target_noise, cfg.target_noise_clip)
            target = rew + discount * self.critic_target(next_obs, next_act).min(0).values
        q = self.critic(obs, act)
        td_error = q - target
        return weighted_mean(td_error.pow(2), weights).sum(), q, td_error

    def update(self, batch: Batch, *, progress: Progress) -> UpdateReport:
        obs, act, rew, discount, next_obs = self.tensors(batch)
        critic_loss, q, priorities = self.critic_step(obs, act, rew, discount, next_obs,
                                                      self.batch_weights(batch))
        # delayed policy updates: the actor (DDPG's loss) and the targets, every policy_delay
        actor_loss = None
        if progress.gradient_step % self.cfg.policy_delay == 0:
            actor_loss = self.actor_step(obs)
        return UpdateReport(DDPGStats(self.stat(critic_loss), self.stat(actor_loss),
                                      self.stat(q.detach().mean())),
                            priorities=priorities)


register(AlgoSpec(
    name="td3", config=TD3Config, build=TD3, trainers=("offpolicy",), actions=(CONTINUOUS,),
    console=(("critic_loss", "q_loss"), ("actor_loss", "pi"), ("q_mean", "q")),
    bounded_actions=True,
    paper="Fujimoto et al. 2018, arXiv:1802.09477",
    prioritized=True, compiles=True,
))
