"""PPO: Schulman et al. 2017, "Proximal Policy Optimization Algorithms" (arXiv:1707.06347).

Clipped surrogate objective, GAE (Schulman et al. 2016), optional value clipping,
per-minibatch advantage normalisation, entropy bonus, global gradient-norm
clipping and linear learning-rate annealing, as in the implementation details
catalogued by Huang et al. 2022 ("The 37 implementation details of PPO").
Discrete (categorical) and continuous (diagonal Gaussian) actions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from rltrain.algorithms.base import OnPolicyAlgorithm, UpdateReport, clip_and_step
from rltrain.algorithms.registry import CONTINUOUS, DISCRETE, MULTIDISCRETE, AlgoSpec, register
from rltrain.config import DiscountedConfig, check_positive, check_unit_interval
from rltrain.core import Progress, SpaceInfo
from rltrain.data.buffers import Rollout
from rltrain.data.returns import gae
from rltrain.nets import CategoricalActor, EncodedMLP, GaussianActor, MultiCategoricalActor
from rltrain.observations import raw_tensors
from rltrain.optim import Adam


@dataclass
class PPOConfig(DiscountedConfig):
    """Proximal Policy Optimization (Schulman et al. 2017), on-policy."""

    name: str = "ppo"
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    activation: str = "tanh"
    lr: float = 3e-4
    #: anneal the learning rate linearly to 0 over the planned env steps
    lr_annealing: bool = True
    gae_lambda: float = 0.95
    #: epsilon of the clipped surrogate objective
    clip_ratio: float = 0.2
    #: clip the value update around the old value by this much (null: no value clipping)
    value_clip: float | None = None
    #: normalise advantages per minibatch
    normalize_advantage: bool = True
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    #: clip the global gradient norm (null: no clipping)
    max_grad_norm: float | None = 0.5
    #: initial log standard deviation of the Gaussian policy (continuous actions, in the
    #: normalised action space where the env's bounds are -1 and 1)
    init_log_std: float = 0.0
    #: one encoder for the actor and the critic, trained by both losses (null: auto, shared
    #: for image and Dict observations, as the published Atari agents share their CNN (Mnih
    #: et al. 2016's A3C, Schulman et al. 2017's PPO, CleanRL's ppo_atari); separate for
    #: vectors, whose flat encoder has no parameters to share)
    share_encoder: bool | None = None

    def check(self) -> None:
        super().check()
        check_unit_interval(self, "algo", "gae_lambda")
        check_positive(self, "algo", "lr", "clip_ratio", "value_clip", "max_grad_norm")


@dataclass(frozen=True)
class PPOStats:
    pg_loss: float
    v_loss: float
    entropy: float
    approx_kl: float
    clipfrac: float
    explained_variance: float
    lr: float


class PPO(OnPolicyAlgorithm):
    cfg: PPOConfig

    def __init__(self, cfg: PPOConfig, info: SpaceInfo, device: torch.device, seed: int) -> None:
        super().__init__(cfg, info, device, seed)
        self.discrete = info.discrete
        encoder = self.encoder()
        share = raw_tensors(info.obs_space) if cfg.share_encoder is None else cfg.share_encoder
        self.pi: CategoricalActor | MultiCategoricalActor | GaussianActor
        if info.nvec is not None:  # MultiDiscrete, MultiBinary: a categorical per entry
            self.pi = MultiCategoricalActor(encoder, cfg.hidden_sizes, info.nvec,
                                            cfg.activation, info.action_shape)
        elif info.discrete:
            self.pi = CategoricalActor(
                encoder, cfg.hidden_sizes, info.action_dim, cfg.activation, self.action_mask)
        else:
            self.pi = GaussianActor(encoder, cfg.hidden_sizes, info.action_dim,
                                    cfg.activation, cfg.init_log_std)
        self.critic = EncodedMLP(encoder if share else self.encoder(), cfg.hidden_sizes, 1,
                                 cfg.activation, 1.0)
        #: the actor and the critic read one encoder: a minibatch encodes its observations once
        self.shared = share
        self.to(device)
        self.optim = Adam(self.parameters(), lr=cfg.lr, eps=1e-5)

    def actor(self) -> nn.Module:
        return self.pi

    def optimizers(self) -> dict[str, Adam]:
        return {"optim": self.optim}

    def _act(self, obs: np.ndarray, *, deterministic: bool, progress: Progress) -> np.ndarray:
        x = self._obs(obs)
        if deterministic:
            out = self.pi.forward(x)
            act = out.argmax(-1) if self.discrete else out
        else:
            act = self.pi.sample(x)
        if not self.discrete:
            act = act.reshape(len(obs), *self.info.action_shape)
        return act.cpu().numpy()

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def update(
        self, rollout: Rollout, *, batch_size: int | None, repetitions: int, progress: Progress
    ) -> UpdateReport:
        cfg = self.cfg
        lanes, t = rollout.valid.shape
        with torch.no_grad():
            # V(s) and V(s') of every slot at once; s' is each transition's own next
            # observation, so truncated episodes bootstrap from their true final state.
            both = self._obs(np.concatenate([rollout.obs, rollout.next_obs]).reshape(
                2 * lanes * t, *rollout.obs.shape[2:]))
            features = self.pi.encoder(both) if self.shared else None
            v_both = (self.value(both) if features is None
                      else self.critic.head(features).squeeze(-1))
            values, next_values = v_both.cpu().numpy().reshape(2, lanes, t)
        adv = gae(self._rew(rollout.rew), values, next_values, rollout.terminated, rollout.dones,
                  rollout.valid, cfg.gamma, cfg.gae_lambda)
        valid = rollout.valid
        obs = self._obs(rollout.obs[valid])
        act_dtype = torch.long if self.discrete else torch.float32
        act = self._tensor(rollout.act[valid], act_dtype)
        adv_t = self._tensor(adv[valid])
        old_v = self._tensor(values[valid])
        ret = adv_t + old_v
        with torch.no_grad():
            if features is None:
                old_logp, _ = self.pi.log_prob_entropy(obs, act)
            else:  # the valid slots' features, already computed above
                mask = torch.from_numpy(valid.reshape(-1)).to(self.device)
                old_logp, _ = self.pi.log_prob_entropy(
                    obs, act, features=features[: lanes * t][mask])

        lr = cfg.lr * (1.0 - progress.fraction) if cfg.lr_annealing else cfg.lr
        self.optim.lr = lr
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
        var_ret = float(ret.var()) if n > 1 else math.nan
        explained = 1.0 - float((ret - old_v).var()) / var_ret if var_ret > 0 else math.nan
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
        if self.shared:  # one pass of the encoder for both losses (its gradient sums both)
            features = self.pi.encoder(obs)
            logp, entropy_all = self.pi.log_prob_entropy(obs, act, features=features)
            v = self.critic.head(features).squeeze(-1)
        else:
            logp, entropy_all = self.pi.log_prob_entropy(obs, act)
            v = self.value(obs)
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
