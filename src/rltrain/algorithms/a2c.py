"""A2C: the synchronous advantage actor-critic of Mnih et al. 2016, "Asynchronous Methods for
Deep Reinforcement Learning" (ICML 2016, arXiv:1602.01783), in the synchronous form OpenAI
Baselines and Stable-Baselines3 run (A3C's workers replaced by a batch of envs stepped
together, one learner).

Each update learns from the short rollout every env has just collected (5 steps each by
default): advantages from GAE (Schulman et al. 2016, arXiv:1506.02438), where lambda = 1 (the
default) gives A3C's n-step returns bootstrapped from the critic's value of the rollout's last
state; one gradient step on the whole rollout of the policy-gradient loss, the critic's mean
squared error to the returns and an entropy bonus; a clipped global gradient norm; RMSprop
as A3C and SB3 use it. Discrete (categorical), MultiDiscrete and MultiBinary (a categorical
per entry) and continuous (diagonal Gaussian) actions.

:class:`PolicyGradient` is what A2C and REINFORCE (``algorithms/reinforce.py``) share: the
actor, the critic, the optimiser and the update; each says how its advantages are estimated
and which transitions they are known for.

One gradient step per update comes from the trainer's settings that ``algo=a2c`` starts from
(``conf/trainer/defaults/a2c.yaml``: ``batch_size: null``, ``update_step_num_repetitions:
1``). Other values are honoured as for any on-policy algorithm (several steps of the same
loss, in minibatches), which makes later steps learn from data of an older policy: that is
what PPO's clipped objective is for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rltrain.algorithms.actor_critic import (
    ActorCritic,
    ActorCriticConfig,
    explained_variance,
    learnt_slots,
)
from rltrain.algorithms.base import UpdateReport, clip_and_step
from rltrain.algorithms.registry import (
    CONTINUOUS,
    DISCRETE,
    MULTIDISCRETE,
    AlgoSpec,
    register,
)
from rltrain.common.types import Progress, SpaceInfo
from rltrain.config.schemas import ConfigError, check_positive, check_unit_interval
from rltrain.data.batch import Rollout
from rltrain.data.transforms import Transform
from rltrain.data.transforms.gae import GAE
from rltrain.nets.optim import Adam, FlatOptimizer, RMSprop

OPTIMIZERS = ("rmsprop", "adam")


@dataclass
class PolicyGradientConfig(ActorCriticConfig):
    """What A2C and REINFORCE share: an actor, a state-value critic, one optimiser for both."""

    lr: float = 7e-4
    #: rmsprop (A3C's and SB3's A2C's) or adam
    optimizer: str = "rmsprop"
    #: RMSprop's decay of the mean squared gradient
    rmsprop_alpha: float = 0.99
    #: the optimiser's epsilon (SB3's A2C: 1e-5)
    eps: float = 1e-5

    def check(self) -> None:
        super().check()
        check_positive(self, "algo", "eps")
        check_unit_interval(self, "algo", "rmsprop_alpha")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"algo.optimizer must be {' or '.join(OPTIMIZERS)}, got "
                              f"{self.optimizer!r}")


@dataclass
class A2CConfig(PolicyGradientConfig):
    """Advantage actor-critic (Mnih et al. 2016), synchronous, on-policy."""

    name: str = "a2c"
    #: lambda of GAE; 1 (the default) gives n-step returns over the rollout, as A3C's
    gae_lambda: float = 1.0

    def check(self) -> None:
        super().check()
        check_unit_interval(self, "algo", "gae_lambda")


@dataclass(frozen=True)
class A2CStats:
    """The losses are None for an update that had nothing to learn from (REINFORCE's, when
    no episode ended in the rollout)."""

    pg_loss: float | None
    v_loss: float | None
    entropy: float | None
    explained_variance: float
    lr: float


class PolicyGradient(ActorCritic):
    """An actor and a state-value critic learnt by the policy gradient with advantages
    (the critic as the baseline), one loss, one optimiser. Subclasses say how the advantages
    are estimated, and which slots they are known for, by the transforms they declare
    (:meth:`transforms`)."""

    cfg: PolicyGradientConfig

    def __init__(self, cfg: PolicyGradientConfig, info: SpaceInfo, device: torch.device,
                 seed: int) -> None:
        super().__init__(cfg, info, device, seed)
        self.to(device)
        self.optim: FlatOptimizer = (
            RMSprop(self.parameters(), lr=cfg.lr, alpha=cfg.rmsprop_alpha, eps=cfg.eps)
            if cfg.optimizer == "rmsprop" else Adam(self.parameters(), lr=cfg.lr, eps=cfg.eps))

    def optimizers(self) -> dict[str, FlatOptimizer]:
        return {"optim": self.optim}

    def update_stats(self, rollout: Rollout, learn: np.ndarray, stats: A2CStats) -> A2CStats:
        """The stats record of an update (a subclass adds its own facts)."""
        return stats

    def update(
        self, rollout: Rollout, *, batch_size: int | None, repetitions: int, progress: Progress
    ) -> UpdateReport:
        learn = learnt_slots(rollout)
        obs, act, adv_t, old_v, ret = self.learning_tensors(rollout, learn)
        lr = self.step_lr(progress)
        n = len(obs)
        size = n if batch_size is None else min(batch_size, n)
        sums = torch.zeros(3, device=self.device)
        steps = 0
        for _ in range(repetitions if n else 0):
            order = torch.randperm(n, device=self.device) if size < n else None
            for start in range(0, n, size):
                idx = slice(None) if order is None else order[start : start + size]
                sums += self._step(obs[idx], act[idx], adv_t[idx], ret[idx])
                steps += 1
        means: list[float | None] = (sums / steps).tolist() if steps else [None] * 3
        pg_loss, v_loss, entropy = means
        stats = A2CStats(pg_loss, v_loss, entropy, explained_variance(ret, old_v), lr)
        return UpdateReport(self.update_stats(rollout, learn, stats), gradient_steps=steps)

    def _step(self, obs: torch.Tensor, act: torch.Tensor, adv: torch.Tensor, ret: torch.Tensor
              ) -> torch.Tensor:
        """One gradient step; returns (pg_loss, v_loss, entropy), detached."""
        cfg = self.cfg
        if cfg.normalize_advantage and len(adv) > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        logp, entropy_all, v = self.evaluate(obs, act)
        pg_loss = -(adv * logp).mean()
        # the mean squared error itself (SB3's A2C), not half of it (PPO's here)
        v_loss = (v - ret).pow(2).mean()
        entropy = entropy_all.mean()
        loss = pg_loss - cfg.ent_coef * entropy + cfg.vf_coef * v_loss
        clip_and_step(loss, self.optim, cfg.max_grad_norm)
        return torch.stack((pg_loss, v_loss, entropy)).detach()


class A2C(PolicyGradient):
    cfg: A2CConfig

    def transforms(self) -> tuple[Transform, ...]:
        """GAE over each lane by its critic as it is at the update; every collected
        transition is learnt from (the last of a lane bootstraps from the critic's value of
        its next state)."""
        return (GAE(self, self.cfg.gamma, self.cfg.gae_lambda),)


register(AlgoSpec(
    name="a2c", config=A2CConfig, build=A2C, trainers=("onpolicy",),
    actions=(DISCRETE, MULTIDISCRETE, CONTINUOUS),
    console=(("pg_loss", "pg"), ("v_loss", "vf"), ("entropy", "ent")),
    paper="Mnih et al. 2016, arXiv:1602.01783", masks=True,
))
