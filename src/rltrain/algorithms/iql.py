"""IQL: Kostrikov et al. 2021, "Offline Reinforcement Learning with Implicit Q-Learning"
(arXiv:2110.06169).

Never queries Q at an action outside the dataset. Each gradient step, in the order of the
official code:

1. value: V(s) by expectile regression onto min of the twin target critics at the data action,
   loss |tau - 1(u < 0)| u^2 with u = Q(s, a) - V(s); an expectile tau above 1/2 makes V an
   upper expectile of Q over the data's actions, a soft maximum within the data's support;
2. policy: advantage-weighted regression (Peng et al. 2019), the data action's log-likelihood
   weighted by exp(beta * (Q(s, a) - V(s))), clipped at max_weight;
3. critics: twin Q(s, a) regressed onto r + discount * V(s'); the targets follow by Polyak
   averaging.

Continuous actions: a Gaussian policy with a tanh-bounded mean and a state-independent standard
deviation (as the official code's); its deterministic action is the mean. Discrete actions: a
categorical policy, and critics that take the action one-hot. The official code anneals the
actor's learning rate by a cosine schedule over the run (``actor_lr_cosine``). Offline only.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rltrain.algorithms.base import (
    Stat,
    TDAlgorithm,
    UpdateReport,
    clip_and_step,
    squared_td_error,
)
from rltrain.algorithms.registry import CONTINUOUS, DISCRETE, AlgoSpec, register
from rltrain.common.types import Progress, SpaceInfo
from rltrain.config.schemas import ConfigError, TDConfig, check_positive, check_unit_interval
from rltrain.data.batch import Batch
from rltrain.nets.actors_critics import (
    CategoricalActor,
    EncodedMLP,
    QCritics,
    TanhMeanGaussianActor,
)
from rltrain.nets.optim import Adam, flatten_parameters, soft_update


@dataclass
class IQLConfig(TDConfig):
    """Implicit Q-Learning (Kostrikov et al. 2021), offline; defaults are the official code's
    Gym-MuJoCo settings."""

    name: str = "iql"
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    value_lr: float = 3e-4
    #: anneal the actor's learning rate to 0 by a cosine over the planned gradient steps
    actor_lr_cosine: bool = True
    #: Polyak coefficient of the target critics: target <- (1 - tau) target + tau critic
    tau: float = 0.005
    #: the expectile of V's regression, in (0, 1): 0.5 is the mean, towards 1 the maximum
    expectile: float = 0.7
    #: inverse temperature of the advantage weights exp(beta * A); 0 is behaviour cloning
    beta: float = 3.0
    #: the advantage weights are clipped at this
    max_weight: float = 100.0
    #: clip the global gradient norm of each network (null: no clipping)
    max_grad_norm: float | None = None

    def check(self) -> None:
        super().check()
        check_unit_interval(self, "algo", "tau")
        check_positive(self, "algo", "actor_lr", "critic_lr", "value_lr", "tau", "max_weight",
                       "max_grad_norm")
        if not 0.0 < self.expectile < 1.0:
            raise ConfigError(f"algo.expectile must be in (0, 1), got {self.expectile}")
        if not self.beta >= 0:
            raise ConfigError(f"algo.beta must be >= 0, got {self.beta}")


@dataclass(frozen=True)
class IQLStats:
    value_loss: Stat
    critic_loss: Stat
    actor_loss: Stat
    v_mean: Stat
    #: mean advantage Q(s, a) - V(s) at the data actions
    adv_mean: Stat
    #: fraction of the advantage weights clipped at max_weight
    weight_clipped: Stat
    actor_lr: float


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """|expectile - 1(diff < 0)| * diff^2, elementwise: positive residuals (Q above V) weigh
    ``expectile``, negative ones ``1 - expectile``."""
    weight = torch.where(diff > 0, expectile, 1.0 - expectile)
    return weight * diff.pow(2)


def awr_weights(adv: torch.Tensor, beta: float, max_weight: float) -> torch.Tensor:
    """exp(beta * adv), clipped at ``max_weight`` (an overflow to inf clips too)."""
    return torch.exp(beta * adv).clamp_(max=max_weight)


def cosine_lr(lr: float, fraction: float) -> float:
    """``lr`` annealed to 0 over the run by half a cosine (optax's cosine_decay_schedule)."""
    return lr * 0.5 * (1.0 + math.cos(math.pi * min(max(fraction, 0.0), 1.0)))


class IQL(TDAlgorithm):
    cfg: IQLConfig

    def __init__(self, cfg: IQLConfig, info: SpaceInfo, device: torch.device, seed: int) -> None:
        super().__init__(cfg, info, device, seed)
        self.discrete = info.discrete
        d = info.action_dim
        if info.discrete:
            self.pi: CategoricalActor | TanhMeanGaussianActor = CategoricalActor(
                self.encoder(), cfg.hidden_sizes, d, cfg.activation)
        else:
            self.pi = TanhMeanGaussianActor(self.encoder(), cfg.hidden_sizes, d, cfg.activation)
        self.value = EncodedMLP(self.encoder(), cfg.hidden_sizes, 1, cfg.activation, 1.0)
        self.critic = QCritics(self.encoder(), d, cfg.hidden_sizes, cfg.activation, n=2)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.to(device)
        self.actor_optim = Adam(self.pi.parameters(), lr=cfg.actor_lr)
        self.value_optim = Adam(self.value.parameters(), lr=cfg.value_lr)
        self.critic_optim = Adam(self.critic.parameters(), lr=cfg.critic_lr)
        # the target critics as one flat tensor in the critic optimiser's order (one kernel)
        self.critic_target_flat = flatten_parameters(self.critic_target.parameters())

    def actor(self) -> nn.Module:
        return self.pi

    def optimizers(self) -> dict[str, Adam]:
        return {"actor": self.actor_optim, "value": self.value_optim,
                "critic": self.critic_optim}

    def _act(self, obs: np.ndarray, *, deterministic: bool, progress: Progress) -> np.ndarray:
        x = self._obs(obs)
        if self.discrete:
            act = self.pi(x).argmax(-1) if deterministic else self.pi.sample(x)
            return act.cpu().numpy()
        act = self.pi(x) if deterministic else self.pi.sample(x).clamp_(-1.0, 1.0)
        return act.reshape(len(obs), *self.info.action_shape).cpu().numpy()

    def _critic_action(self, act: torch.Tensor) -> torch.Tensor:
        """The critics' action input: the action itself, or one-hot for discrete actions."""
        return F.one_hot(act, self.info.action_dim).float() if self.discrete else act

    def _log_prob(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        if isinstance(self.pi, CategoricalActor):
            return self.pi.log_prob_entropy(obs, act)[0]
        return self.pi.log_prob(obs, act)

    def update(self, batch: Batch, *, progress: Progress) -> UpdateReport:
        cfg = self.cfg
        obs, act, rew, discount, next_obs = self.tensors(batch)
        critic_act = self._critic_action(act)

        # value: expectile regression onto the smaller target critic at the data action
        with torch.no_grad():
            target_q = self.critic_target(obs, critic_act).min(0).values
        v = self.value(obs).squeeze(-1)
        value_loss = expectile_loss(target_q - v, cfg.expectile).mean()
        clip_and_step(value_loss, self.value_optim, cfg.max_grad_norm)

        # actor: advantage-weighted regression, with the updated V
        with torch.no_grad():
            v, next_v = self.value(torch.cat((obs, next_obs))).squeeze(-1).split(len(obs))
            adv = target_q - v
            weight = awr_weights(adv, cfg.beta, cfg.max_weight)
        actor_loss = -(weight * self._log_prob(obs, act)).mean()
        if cfg.actor_lr_cosine:
            self.actor_optim.lr = cosine_lr(cfg.actor_lr, progress.fraction)
        clip_and_step(actor_loss, self.actor_optim, cfg.max_grad_norm)

        # critics: regress both onto r + discount * V(s'); then the targets follow
        target = rew + discount * next_v
        q = self.critic(obs, critic_act)
        critic_loss = squared_td_error(q, target)
        clip_and_step(critic_loss, self.critic_optim, cfg.max_grad_norm)
        soft_update(self.critic_target_flat, self.critic_optim.flat, cfg.tau)

        stat = self.stat
        return UpdateReport(IQLStats(stat(value_loss), stat(critic_loss), stat(actor_loss),
                                     stat(v.mean()), stat(adv.mean()),
                                     stat((weight >= cfg.max_weight).float().mean()),
                                     self.actor_optim.lr))


register(AlgoSpec(
    name="iql", config=IQLConfig, build=IQL, trainers=("offline",),
    actions=(DISCRETE, CONTINUOUS),
    console=(("critic_loss", "q_loss"), ("value_loss", "v_loss"), ("actor_loss", "pi"),
             ("adv_mean", "adv")),
    bounded_actions=True,
    paper="Kostrikov et al. 2021, arXiv:2110.06169",
))
