"""Discrete SAC: Christodoulou 2019, "Soft Actor-Critic for Discrete Action Settings"
(arXiv:1910.07207).

SAC (``sac.py``) for a categorical policy. With finitely many actions nothing needs sampling
or reparameterising: the critics output every action's value, Q(s, .), and each expectation
over the policy is a sum over actions weighted by pi(.|s):

- soft target: r + discount * sum_a' pi(a'|s') (min_i Q'_i(s', a') - alpha log pi(a'|s'));
- actor: minimise sum_a pi(a|s) (alpha log pi(a|s) - min_i Q_i(s, a)), the KL to the critics'
  Boltzmann policy up to a constant;
- temperature: the entropy H(pi(.|s)) = -sum_a pi log pi, exact, tracks a target that is a
  fraction (``target_entropy_scale``) of log|A|, the uniform policy's entropy.

Twin critics (the smaller value in both the target and the actor's loss) with Polyak-averaged
targets, as in SAC. Discrete actions only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from rltrain.algorithms.base import Stat, UpdateReport, clip_and_step, td_priorities, weighted_mean
from rltrain.algorithms.registry import DISCRETE, AlgoSpec, register
from rltrain.algorithms.sac import SoftActorCritic, SoftConfig
from rltrain.common.types import Progress, SpaceInfo
from rltrain.config.schemas import ConfigError
from rltrain.data.batch import Batch
from rltrain.nets.actors_critics import CategoricalActor, DiscreteQCritics, sample_categorical


@dataclass
class DiscreteSACConfig(SoftConfig):
    """Soft Actor-Critic for discrete actions (Christodoulou 2019), off-policy."""

    name: str = "discrete_sac"
    #: the entropy target as a fraction of log|A|, the most a policy over |A| actions can
    #: have. 0.89, CleanRL's sac_atari default, rather than the paper's 0.98: a target that
    #: close to the uniform policy's entropy (with 2 actions, a 58/42 coin) holds the policy
    #: near uniform and keeps raising alpha
    target_entropy_scale: float = 0.89

    def check(self) -> None:
        super().check()
        if not 0 < self.target_entropy_scale < 1:
            raise ConfigError(
                f"algo.target_entropy_scale must be in (0, 1), got {self.target_entropy_scale}: "
                "the target is that fraction of log|A|, the uniform policy's entropy, which no "
                "other policy reaches (alpha would grow without bound at 1 or more)")

    def check_plan(self, gradient_steps: float) -> None:
        if self.target_update_interval > gradient_steps:
            raise ConfigError(
                f"algo.target_update_interval={self.target_update_interval:,} is more than the "
                f"run's ~{gradient_steps:,.0f} gradient steps: the target critics would never "
                "be updated; lower it or train longer")


@dataclass(frozen=True)
class DiscreteSACStats:
    critic_loss: Stat
    actor_loss: Stat
    alpha_loss: Stat
    alpha: Stat
    #: the policy's mean entropy over the batch's states, exact (a sum over the actions)
    entropy: Stat
    q_mean: Stat


class DiscreteSAC(SoftActorCritic):
    cfg: DiscreteSACConfig
    pi: CategoricalActor
    critic: DiscreteQCritics

    def __init__(self, cfg: DiscreteSACConfig, info: SpaceInfo, device: torch.device, seed: int
                 ) -> None:
        super().__init__(cfg, info, device, seed)
        n = info.action_dim
        self.build_nets(
            CategoricalActor(self.encoder(), cfg.hidden_sizes, n, cfg.activation,
                             self.action_mask),
            DiscreteQCritics(self.encoder(), n, cfg.hidden_sizes, cfg.activation, n=2),
            cfg.target_entropy_scale * math.log(n))

    def _act(self, obs: np.ndarray, *, deterministic: bool, progress: Progress) -> np.ndarray:
        logits = self.pi(self._obs(obs))
        act = logits.argmax(-1) if deterministic else sample_categorical(logits)
        return act.cpu().numpy()

    def td_target(self, rew: torch.Tensor, discount: torch.Tensor, next_obs: torch.Tensor,
                  alpha: torch.Tensor) -> torch.Tensor:
        """r + discount * V(s'), the soft value V(s') = sum_a' pi(a'|s') (min_i Q'_i(s', a')
        - alpha log pi(a'|s')): the policy's exact expectation, no sampled next action."""
        with torch.no_grad():
            next_logp = self.pi(next_obs).log_softmax(-1)
            next_p = next_logp.exp()
            next_q = self.critic_target(next_obs).min(0).values
            next_v = (next_p * (next_q - alpha * _finite(next_logp, next_p))).sum(-1)
            return rew + discount * next_v

    def update(self, batch: Batch, *, progress: Progress) -> UpdateReport:
        cfg = self.cfg
        obs, act, rew, discount, next_obs = self.tensors(batch)
        weights = self.batch_weights(batch)
        alpha = self.log_alpha.detach().exp()
        # critics: both regress at the batch's actions onto the soft TD target, each sample's
        # squared error weighted by its importance-sampling weight (prioritised replay)
        target = self.td_target(rew, discount, next_obs, alpha)
        index = act.reshape(1, -1, 1).expand(self.critic.n, -1, 1)
        q = self.critic(obs).gather(-1, index).squeeze(-1)
        td_error = q - target
        critic_loss = weighted_mean(td_error.pow(2), weights).sum()
        clip_and_step(critic_loss, self.critic_optim, cfg.max_grad_norm)
        # actor: the expectation over every action of alpha log pi - min_i Q_i, at the critics
        # just updated (no gradient reaches them: their values are computed without one)
        logp = self.pi(obs).log_softmax(-1)
        probs = logp.exp()
        logp = _finite(logp, probs)
        with torch.no_grad():
            q_all = self.critic(obs).min(0).values
        actor_loss = (probs * (alpha * logp - q_all)).sum(-1).mean()
        clip_and_step(actor_loss, self.actor_optim, cfg.max_grad_norm)
        # temperature: towards the target entropy, the policy's exact entropy here
        entropy = -(probs.detach() * logp.detach()).sum(-1).mean()
        alpha_loss = self.temperature_step(entropy)
        self.update_targets(progress)
        return UpdateReport(
            DiscreteSACStats(self.stat(critic_loss), self.stat(actor_loss),
                             self.stat(alpha_loss), self.stat(alpha), self.stat(entropy),
                             self.stat(q.detach().mean())),
            priorities=td_priorities(td_error))


def _finite(logp: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """log pi with 0 where pi is 0: a masked action's log-probability is the lowest float
    (rltrain.spaces.masking), which alpha times would overflow to -inf, and 0 * inf is NaN; its
    term in every expectation over actions is 0 either way."""
    return torch.where(probs > 0, logp, torch.zeros_like(logp))


register(AlgoSpec(
    name="discrete_sac", config=DiscreteSACConfig, build=DiscreteSAC, trainers=("offpolicy",),
    actions=(DISCRETE,), masks=True,
    console=(("critic_loss", "q_loss"), ("actor_loss", "pi"), ("alpha", "alpha"),
             ("entropy", "ent")),
    paper="Christodoulou 2019, arXiv:1910.07207",
    prioritized=True,
))
