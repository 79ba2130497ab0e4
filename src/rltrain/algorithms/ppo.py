"""PPO: Schulman et al. 2017, "Proximal Policy Optimization Algorithms" (arXiv:1707.06347).

Clipped surrogate objective, GAE (Schulman et al. 2016), optional value clipping,
per-minibatch advantage normalisation, entropy bonus, global gradient-norm
clipping and linear learning-rate annealing, as in the implementation details
catalogued by Huang et al. 2022 ("The 37 implementation details of PPO").
Discrete (categorical) and continuous (diagonal Gaussian) actions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rltrain.algorithms.actor_critic import ActorCritic, ActorCriticConfig, explained_variance
from rltrain.algorithms.base import UpdateReport, clip_and_step
from rltrain.algorithms.registry import CONTINUOUS, DISCRETE, MULTIDISCRETE, AlgoSpec, register
from rltrain.config import check_positive, check_unit_interval
from rltrain.core import Progress, SpaceInfo
from rltrain.data.buffers import Rollout
from rltrain.data.returns import gae
from rltrain.optim import Adam


@dataclass
class PPOConfig(ActorCriticConfig):
    """Proximal Policy Optimization (Schulman et al. 2017), on-policy."""

    name: str = "ppo"
    lr: float = 3e-4
    lr_annealing: bool = True
    normalize_advantage: bool = True
    gae_lambda: float = 0.95
    #: epsilon of the clipped surrogate objective
    clip_ratio: float = 0.2
    #: clip the value update around the old value by this much (null: no value clipping)
    value_clip: float | None = None

    def check(self) -> None:
        super().check()
        check_unit_interval(self, "algo", "gae_lambda")
        check_positive(self, "algo", "clip_ratio", "value_clip")


@dataclass(frozen=True)
class PPOStats:
    pg_loss: float
    v_loss: float
    entropy: float
    approx_kl: float
    clipfrac: float
    explained_variance: float
    lr: float


class PPO(ActorCritic):
    cfg: PPOConfig

    def __init__(self, cfg: PPOConfig, info: SpaceInfo, device: torch.device, seed: int) -> None:
        super().__init__(cfg, info, device, seed)
        self.to(device)
        self.optim = Adam(self.parameters(), lr=cfg.lr, eps=1e-5)

    def optimizers(self) -> dict[str, Adam]:
        return {"optim": self.optim}

    def update(
        self, rollout: Rollout, *, batch_size: int | None, repetitions: int, progress: Progress
    ) -> UpdateReport:
        cfg = self.cfg
        values, next_values, features = self.rollout_values(rollout)
        adv = gae(self._rew(rollout.rew), values, next_values, rollout.terminated, rollout.dones,
                  rollout.valid, cfg.gamma, cfg.gae_lambda)
        valid = rollout.valid
        obs, act, adv_t, old_v, ret = self.learning_tensors(rollout, adv, values, valid)
        with torch.no_grad():
            if features is None:
                old_logp, _ = self.pi.log_prob_entropy(obs, act)
            else:  # the valid slots' features, already computed above
                mask = torch.from_numpy(valid.reshape(-1)).to(self.device)
                old_logp, _ = self.pi.log_prob_entropy(obs, act, features=features[mask])

        lr = self.step_lr(progress)
        n = len(obs)
        size = n if batch_size is None else min(batch_size, n)
        sums = torch.zeros(5, device=self.device)
        steps = 0
        for _ in range(repetitions):
            perm = torch.randperm(n, device=self.device)
            for start in range(0, n, size):
                idx = perm[start : start + size]
                sums += self._minibatch(obs[idx], act[idx], adv_t[idx], ret[idx], old_v[idx],
                                        old_logp[idx])
                steps += 1
        pg_loss, v_loss, entropy, approx_kl, clipfrac = (sums / max(steps, 1)).tolist()
        explained = explained_variance(ret, old_v)
        return UpdateReport(PPOStats(pg_loss, v_loss, entropy, approx_kl, clipfrac, explained, lr),
                            gradient_steps=steps)

    def _minibatch(
        self,
        obs: torch.Tensor,
        act: torch.Tensor,
        adv: torch.Tensor,
        ret: torch.Tensor,
        old_v: torch.Tensor,
        old_logp: torch.Tensor,
    ) -> torch.Tensor:
        logp, entropy_all, v = self.evaluate(obs, act)
        return self._clipped_step(logp, entropy_all, v, adv, ret, old_v, old_logp)

    def _clipped_step(
        self,
        logp: torch.Tensor,
        entropy_all: torch.Tensor,
        v: torch.Tensor,
        adv: torch.Tensor,
        ret: torch.Tensor,
        old_v: torch.Tensor,
        old_logp: torch.Tensor,
    ) -> torch.Tensor:
        """The losses of one minibatch from the policy's log-probabilities, entropies and
        values at its samples, one optimiser step, and the minibatch's stats. Recurrent PPO
        (ppo_lstm) gets those from replayed sequences and shares the rest from here."""
        cfg = self.cfg
        if cfg.normalize_advantage and len(adv) > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        logratio = logp - old_logp
        ratio = logratio.exp()
        pg_loss = torch.max(
            -adv * ratio, -adv * ratio.clamp(1.0 - cfg.clip_ratio, 1.0 + cfg.clip_ratio)
        ).mean()
        if cfg.value_clip is None:
            v_loss = 0.5 * (v - ret).pow(2).mean()
        else:
            v_clipped = old_v + (v - old_v).clamp(-cfg.value_clip, cfg.value_clip)
            v_loss = 0.5 * torch.max((v - ret).pow(2), (v_clipped - ret).pow(2)).mean()
        entropy = entropy_all.mean()
        loss = pg_loss - cfg.ent_coef * entropy + cfg.vf_coef * v_loss
        clip_and_step(loss, self.optim, cfg.max_grad_norm)
        with torch.no_grad():
            approx_kl = ((ratio - 1.0) - logratio).mean()
            clipfrac = ((ratio - 1.0).abs() > cfg.clip_ratio).float().mean()
            # one small tensor: read out once per update, not once per minibatch
            return torch.stack((pg_loss, v_loss, entropy, approx_kl, clipfrac))


register(AlgoSpec(
    name="ppo", config=PPOConfig, build=PPO, trainers=("onpolicy",),
    actions=(DISCRETE, MULTIDISCRETE, CONTINUOUS),
    console=(("pg_loss", "pg"), ("v_loss", "vf"), ("entropy", "ent"), ("approx_kl", "kl")),
    paper="Schulman et al. 2017, arXiv:1707.06347", masks=True,
))
