"""PPO: Schulman et al. 2017, "Proximal Policy Optimization Algorithms" (arXiv:1707.06347).

Clipped surrogate objective, GAE (Schulman et al. 2016), optional value clipping,
per-minibatch advantage normalisation, entropy bonus, global gradient-norm
clipping and linear learning-rate annealing, as in the implementation details
catalogued by Huang et al. 2022 ("The 37 implementation details of PPO").
Discrete (categorical) and continuous (diagonal Gaussian) actions.

The loss is :meth:`PPO.clipped_losses`, through autograd. Faster forms of the same minibatch
steps live beside it, chosen by the constructor where they apply and tested equal to it:
``ppo_by_hand.py`` (the gradient written out: plain PPO on MLPs over vector observations) and
``ppo_stacked.py`` (the members of a batched sweep stepped as one); ``ppo_terms.py`` holds the
terms the three share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rltrain.algorithms import ppo_by_hand
from rltrain.algorithms.actor_critic import (
    ActorCritic,
    ActorCriticConfig,
    explained_variance,
    learnt_slots,
)
from rltrain.algorithms.base import UpdateReport, clip_and_step, compiled
from rltrain.algorithms.ppo_by_hand import Coefficients
from rltrain.algorithms.ppo_stacked import MEMBER_FIELDS, StackedSteps
from rltrain.algorithms.ppo_terms import mean_over, neg_normalized, rows, stats, surrogate
from rltrain.algorithms.registry import CONTINUOUS, DISCRETE, MULTIDISCRETE, AlgoSpec, register
from rltrain.common import stacking
from rltrain.common.types import Progress, SpaceInfo
from rltrain.config.schemas import check_positive, check_unit_interval
from rltrain.data.batch import Rollout
from rltrain.data.transforms import Transform
from rltrain.data.transforms.gae import GAE
from rltrain.nets.optim import Adam


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
        #: the minibatch steps write their gradient out (``ppo_by_hand.py``): plain PPO with
        #: MLPs on vector observations, not compiled; tests set it False to compare with
        #: autograd
        self.by_hand = type(self) is PPO and self.stackable() and not cfg.compile
        #: its minibatch steps may run stacked with other members' of a batched sweep (plain
        #: PPO on a stackable network, not compiled), decided once: any other PPO run in a
        #: batched sweep updates alone, as it would in its own process
        self.batchable = self.by_hand
        #: where it hands its minibatch steps over, to run stacked with the other members'
        #: (the batch scheduler attends a member's thread before the run is built on it);
        #: None outside a batched sweep, or when not batchable: it runs its own
        self.meeting = stacking.meeting() if self.batchable else None

    def optimizers(self) -> dict[str, Adam]:
        return {"optim": self.optim}

    def transforms(self) -> tuple[Transform, ...]:
        """GAE by its critic as it is at the update (rollout_values)."""
        return (GAE(self, self.cfg.gamma, self.cfg.gae_lambda),)

    def update(
        self, rollout: Rollout, *, batch_size: int | None, repetitions: int, progress: Progress
    ) -> UpdateReport:
        learn = learnt_slots(rollout)
        obs, act, adv_t, old_v, ret = self.learning_tensors(rollout, learn)
        features = rollout.fields.get("features")
        with torch.no_grad():
            if features is None:
                old_logp, _ = self.pi.log_prob_entropy(obs, act)
            else:  # the slots' features, computed with the values (rollout_values)
                mask = torch.from_numpy(learn.reshape(-1)).to(self.device)
                old_logp, _ = self.pi.log_prob_entropy(obs, act, features=features[mask])

        lr = self.step_lr(progress)
        n = len(obs)
        size = n if batch_size is None else min(batch_size, n)
        # each pass's permutation, drawn first (the steps draw no random numbers: the same
        # stream as drawing each before its pass)
        perms = [torch.randperm(n, device=self.device) for _ in range(repetitions)]
        tensors = (obs, act, adv_t, ret, old_v, old_logp)
        if self.meeting is not None:
            # in a member of a batched sweep, the members' minibatch steps run as one
            # computation (ppo_stacked.py); anywhere else, this run's own
            sums, steps = self.meeting.meet(StackedSteps(self, tensors, perms, size))
        else:
            sums, steps = self.minibatch_steps(tensors, perms, size)
        pg_loss, v_loss, entropy, approx_kl, clipfrac = (sums / max(steps, 1)).tolist()
        explained = explained_variance(ret, old_v)
        return UpdateReport(PPOStats(pg_loss, v_loss, entropy, approx_kl, clipfrac, explained, lr),
                            gradient_steps=steps)

    def minibatch_steps(self, tensors: Sequence[torch.Tensor], perms: Sequence[torch.Tensor],
                        size: int) -> tuple[torch.Tensor, int]:
        """An update's minibatch steps: each pass's permutation ``perms`` cut into minibatches
        of ``size`` of the update's ``tensors`` (obs, act, adv, ret, old_v, old_logp).
        Returns the stats summed over the steps, and the number of steps."""
        if self.by_hand:
            return ppo_by_hand.update_steps(self, self.optim, self.coefficients(), tensors,
                                            perms, size)
        sums = torch.zeros(5, device=self.device)
        steps = 0
        for perm in perms:
            for start in range(0, len(perm), size):
                idx = perm[start : start + size]
                sums += self._minibatch(*(t[idx] for t in tensors))
                steps += 1
        return sums, steps

    def _minibatch(
        self,
        obs: torch.Tensor,
        act: torch.Tensor,
        adv: torch.Tensor,
        ret: torch.Tensor,
        old_v: torch.Tensor,
        old_logp: torch.Tensor,
    ) -> torch.Tensor:
        """One minibatch step; its stats (pg_loss, v_loss, entropy, approx_kl, clipfrac)."""
        if self.by_hand:
            return ppo_by_hand.minibatch(self, self.optim, self.coefficients(), obs, act, adv,
                                         ret, old_v, old_logp)
        if self.cfg.compile:
            loss, stats = compiled(self, "_minibatch_loss")(obs, act, adv, ret, old_v, old_logp)
            clip_and_step(loss, self.optim, self.cfg.max_grad_norm)
            return stats
        logp, entropy_all, v = self.evaluate(obs, act)
        return self._clipped_step(logp, entropy_all, v, adv, ret, old_v, old_logp)

    def _minibatch_loss(self, obs: torch.Tensor, act: torch.Tensor, adv: torch.Tensor,
                        ret: torch.Tensor, old_v: torch.Tensor, old_logp: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """The minibatch's loss and stats (what ``algo.compile=true`` compiles)."""
        logp, entropy_all, v = self.evaluate(obs, act)
        return self.clipped_losses(logp, entropy_all, v, adv, ret, old_v, old_logp)

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
        loss, stats = self.clipped_losses(logp, entropy_all, v, adv, ret, old_v, old_logp)
        clip_and_step(loss, self.optim, self.cfg.max_grad_norm)
        return stats

    def clipped_losses(
        self,
        logp: torch.Tensor,
        entropy_all: torch.Tensor,
        v: torch.Tensor,
        adv: torch.Tensor,
        ret: torch.Tensor,
        old_v: torch.Tensor,
        old_logp: torch.Tensor,
        weight: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss of one minibatch, and its stats (pg_loss, v_loss, entropy, approx_kl,
        clipfrac) as one tensor, detached. ``weight`` (1 or 0 per sample) leaves out padding:
        the members of a batch pad their minibatches to one size (``ppo_stacked.py``). The
        terms it shares with its faster forms are in ``ppo_terms.py``."""
        cfg = self.cfg
        mean = mean_over(weight)
        neg_adv = neg_normalized(adv, weight, cfg.normalize_advantage)
        logratio, ratio, plain, clipped = surrogate(logp, old_logp, neg_adv, cfg.clip_ratio)
        pg_loss = mean(torch.max(plain, clipped))
        v_err_clipped = v_err = v - ret
        if cfg.value_clip is None:
            v_loss = 0.5 * mean(v_err.pow(2))
        else:
            v_err_clipped = old_v + (v - old_v).clamp(-cfg.value_clip, cfg.value_clip) - ret
            v_loss = 0.5 * mean(torch.max(v_err.pow(2), v_err_clipped.pow(2)))
        entropy = mean(entropy_all)
        loss = pg_loss - cfg.ent_coef * entropy + cfg.vf_coef * v_loss
        with torch.no_grad():
            per_sample = rows(plain, clipped, v_err, v_err_clipped, entropy_all, ratio, logratio)
            return loss, stats(per_sample, weight, cfg.clip_ratio)

    def coefficients(self) -> Coefficients:
        """The numbers in this run's loss, as its faster forms take them."""
        cfg = self.cfg
        return Coefficients(cfg.clip_ratio, cfg.value_clip, cfg.ent_coef, cfg.vf_coef)


register(AlgoSpec(
    name="ppo", config=PPOConfig, build=PPO, trainers=("onpolicy",),
    actions=(DISCRETE, MULTIDISCRETE, CONTINUOUS),
    console=(("pg_loss", "pg"), ("v_loss", "vf"), ("entropy", "ent"), ("approx_kl", "kl")),
    paper="Schulman et al. 2017, arXiv:1707.06347", masks=True, batched=True, compiles=True,
    member_fields=MEMBER_FIELDS,
))
