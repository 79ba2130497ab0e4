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

from dataclasses import dataclass

import torch.nn.functional as F

from rltrain.algorithms.base import Stat, UpdateReport, clip_and_step, frozen
from rltrain.algorithms.registry import CONTINUOUS, AlgoSpec, register
from rltrain.algorithms.td3 import TD3, TD3Config
from rltrain.common.types import Progress
from rltrain.config.schemas import check_positive
from rltrain.data.batch import Batch


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
    critic_loss: Stat
    actor_loss: Stat | None
    q_mean: Stat
    #: the behaviour-cloning term of the actor's loss, mean (pi(s) - a)^2 (None when the
    #: actor is not updated, as for actor_loss)
    bc_mse: Stat | None
    #: the Q term's weight, alpha / mean |Q1(s, pi(s))|
    lmbda: Stat | None


class TD3BC(TD3):
    cfg: TD3BCConfig

    def update(self, batch: Batch, *, progress: Progress) -> UpdateReport:
        cfg = self.cfg
        obs, act, rew, discount, next_obs = self.tensors(batch)
        critic_loss, q, _ = self.critic_step(obs, act, rew, discount, next_obs)  # TD3's critics
        # the actor, every policy_delay gradient steps: TD3's objective scaled by lambda, plus
        # behaviour cloning; then the targets follow
        actor_loss = bc_mse = lmbda = None
        if progress.gradient_step % cfg.policy_delay == 0:
            with frozen(self.critic):
                pi = self.pi(obs)
                q_pi = self.critic(obs, pi)[0]
                lmbda = cfg.alpha / q_pi.abs().mean().detach()
                bc_mse = F.mse_loss(pi, act)
                actor_loss = -lmbda * q_pi.mean() + bc_mse
                clip_and_step(actor_loss, self.actor_optim, cfg.max_grad_norm)
            self.follow_targets()
        return UpdateReport(TD3BCStats(self.stat(critic_loss), self.stat(actor_loss),
                                       self.stat(q.detach().mean()), self.stat(bc_mse),
                                       self.stat(lmbda)))


register(AlgoSpec(
    name="td3bc", config=TD3BCConfig, build=TD3BC, trainers=("offline",), actions=(CONTINUOUS,),
    console=(("critic_loss", "q_loss"), ("actor_loss", "pi"), ("bc_mse", "bc"),
             ("q_mean", "q")),
    bounded_actions=True,
    paper="Fujimoto & Gu 2021, arXiv:2106.06860",
))
