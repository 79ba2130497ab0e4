"""PPO: Schulman et al. 2017, "Proximal Policy Optimization Algorithms" (arXiv:1707.06347).

Clipped surrogate objective, GAE (Schulman et al. 2016), optional value clipping,
per-minibatch advantage normalisation, entropy bonus, global gradient-norm
clipping and linear learning-rate annealing, as in the implementation details
catalogued by Huang et al. 2022 ("The 37 implementation details of PPO").
Discrete (categorical) and continuous (diagonal Gaussian) actions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass

import torch

from rltrain import lanes
from rltrain.algorithms.actor_critic import ActorCritic, ActorCriticConfig, explained_variance
from rltrain.algorithms.base import UpdateReport, clip_and_step, compiled
from rltrain.algorithms.registry import (
    CONTINUOUS,
    DISCRETE,
    MULTIDISCRETE,
    AlgoSpec,
    lane_settings,
    register,
)
from rltrain.config import check_positive, check_unit_interval
from rltrain.core import Progress, SpaceInfo
from rltrain.data.batch import Rollout
from rltrain.data.returns import gae
from rltrain.nograd import no_grad
from rltrain.optim import Adam, StackedAdam


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


#: the settings each lane of a batch of PPO runs takes as its own (``hydra/launcher=batched``):
#: they act before the stacked minibatch steps (the learning rate's schedule, the discount,
#: GAE), enter them as one column per lane (:class:`Coefficients`, the gradient clipping of
#: :meth:`StackedAdam.step`, each lane's learning rate) or as each lane's own number of
#: passes (a lane with fewer sits out the last ones), or only set the initial parameters
LANE_FIELDS = tuple(f"algo.{name}" for name in (
    "lr", "lr_annealing", "gamma", "gae_lambda", "clip_ratio", "value_clip", "ent_coef",
    "vf_coef", "max_grad_norm", "init_log_std")) + ("trainer.update_step_num_repetitions",)


@dataclass(frozen=True)
class Coefficients:
    """The numbers in PPO's loss: a run's own (floats), or in a stacked step one column
    ``(runs, 1)`` of each run's (:meth:`stacked`), which broadcasts over the runs' rows."""

    clip_ratio: float | torch.Tensor
    value_clip: float | torch.Tensor | None
    ent_coef: float | torch.Tensor
    vf_coef: float | torch.Tensor

    @classmethod
    def of(cls, cfg: PPOConfig) -> Coefficients:
        return cls(cfg.clip_ratio, cfg.value_clip, cfg.ent_coef, cfg.vf_coef)

    @classmethod
    def stacked(cls, cfgs: Sequence[PPOConfig], like: torch.Tensor) -> Coefficients:
        """Each config's numbers as a column (the configs agree on whether value_clip is
        null: :meth:`_Minibatches.batch_key`)."""

        def column(name: str) -> torch.Tensor:
            return like.new_tensor([[float(getattr(c, name))] for c in cfgs])

        return cls(column("clip_ratio"),
                   None if cfgs[0].value_clip is None else column("value_clip"),
                   column("ent_coef"), column("vf_coef"))

    def no_entropy_bonus(self) -> bool:
        c = self.ent_coef
        return not bool(c.any()) if isinstance(c, torch.Tensor) else c == 0.0


class PPO(ActorCritic):
    cfg: PPOConfig

    def __init__(self, cfg: PPOConfig, info: SpaceInfo, device: torch.device, seed: int) -> None:
        super().__init__(cfg, info, device, seed)
        self.to(device)
        self.optim = Adam(self.parameters(), lr=cfg.lr, eps=1e-5)
        #: the minibatch step differentiates by hand (:meth:`_minibatch_by_hand`): plain PPO
        #: with MLPs on vector observations, not compiled; tests set it False to compare with
        #: autograd
        self.by_hand = type(self) is PPO and self.stackable() and not cfg.compile

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
        # each pass's permutation, drawn first (the steps draw no random numbers: the same
        # stream as drawing each before its pass)
        perms = [torch.randperm(n, device=self.device) for _ in range(repetitions)]
        work = _Minibatches(self, (obs, act, adv_t, ret, old_v, old_logp), perms, size)
        if lanes.current() is not None and self.batchable():
            # one of several seeds in one process: their minibatch steps as one computation
            sums, steps = lanes.meet(work)
        else:
            sums, steps = work.alone()
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
        """One minibatch step; its stats (pg_loss, v_loss, entropy, approx_kl, clipfrac)."""
        if self.by_hand:
            rows = self._minibatch_by_hand(obs, act, self._neg_normalized(adv, None), ret,
                                           old_v, old_logp)
            return self._stats(rows, None, self.cfg.clip_ratio)
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

    @no_grad
    def _minibatches_by_hand(self, tensors: Sequence[torch.Tensor], perms: Sequence[torch.Tensor],
                             size: int) -> tuple[torch.Tensor, int]:
        """An update's minibatch steps by hand (:meth:`_minibatch_by_hand`), with what does not
        depend on the parameters done once for all of them rather than once a step: every
        pass's minibatches gathered in one indexing of each tensor, the advantages normalised
        within each minibatch in one pass over all of them, and the stats reduced at the end
        from each step's per-sample rows. The same steps as :meth:`_minibatch` on each
        minibatch in turn, bit for bit (``tests/test_ppo_by_hand.py``), in about 30 fewer
        small ops a step: 13% of a step at CartPole's batch of 256 (``scripts/
        bench_throughput.py --only-ppo``: 1,801 against 1,574 steps a second).
        Returns the stats summed over the steps, and the number of steps."""
        n = len(perms[0]) if perms else 0
        if not n:  # no samples
            return torch.zeros(5, device=self.device), 0
        obs, act, adv, ret, old_v, old_logp = (t[torch.cat(tuple(perms))] for t in tensors)
        neg_adv = self._neg_normalized_minibatches(adv, n, size)
        # each step's minibatch: a pass's last is shorter when size does not divide n
        sizes = [min(size, n - a) for _ in perms for a in range(0, n, size)]
        rows = [self._minibatch_by_hand(*minibatch) for minibatch in zip(
            *(t.split(sizes) for t in (obs, act, neg_adv, ret, old_v, old_logp)), strict=True)]
        clip = self.cfg.clip_ratio
        if all(r.shape == rows[0].shape for r in rows):
            return self._stats(torch.stack(rows), None, clip).sum(0), len(rows)
        return torch.stack([self._stats(r, None, clip) for r in rows]).sum(0), len(rows)

    def _minibatch_by_hand(
        self,
        obs: torch.Tensor,
        act: torch.Tensor,
        neg_adv: torch.Tensor,
        ret: torch.Tensor,
        old_v: torch.Tensor,
        old_logp: torch.Tensor,
    ) -> torch.Tensor:
        """:meth:`_minibatch` with the gradient written out instead of recorded by autograd:
        the loss of :meth:`clipped_losses` differentiated by hand with respect to each
        sample's log-probability, entropy and value (:meth:`clipped_gradients`), then through
        the distribution and the networks (:meth:`ActorCritic.evaluate_kept`). On a CPU,
        autograd's bookkeeping costs about as much as the maths of a 64x64 step: this runs
        the step 1.5-2x faster and the whole loop 1.3x (``scripts/bench_throughput.py
        --only-ppo``, ``--loop-rounds``). ``neg_adv``: the advantages as
        :meth:`_neg_normalized` gives them. Returns the step's per-sample rows for
        :meth:`_stats`.
        ``tests/test_ppo_by_hand.py`` checks it against autograd in float64."""
        logp, entropy_all, v, backward = self.evaluate_kept(obs, act)
        grad_logp, grad_entropy, grad_v, rows = self.clipped_gradients(
            logp, entropy_all, v, neg_adv, ret, old_v, old_logp)
        self.optim.zero_grad()
        backward(grad_logp, grad_entropy, grad_v)
        if self.cfg.max_grad_norm is not None:
            self.optim.clip_grad_norm_(self.cfg.max_grad_norm)
        self.optim.step()
        return rows

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
        a batch of seeds pads each seed's minibatches to one size (:class:`_Minibatches`)."""
        cfg = self.cfg
        mean = _mean(weight)
        logratio, ratio, plain, clipped = _surrogate(
            logp, old_logp, self._neg_normalized(adv, weight), cfg.clip_ratio)
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
            rows = _rows(plain, clipped, v_err, v_err_clipped, entropy_all, ratio, logratio)
            return loss, self._stats(rows, weight, cfg.clip_ratio)

    def clipped_gradients(
        self,
        logp: torch.Tensor,
        entropy_all: torch.Tensor,
        v: torch.Tensor,
        neg_adv: torch.Tensor,
        ret: torch.Tensor,
        old_v: torch.Tensor,
        old_logp: torch.Tensor,
        weight: torch.Tensor | None = None,
        coef: Coefficients | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
        """The gradient of :meth:`clipped_losses`'s loss (each copy's, with ``weight``; with
        ``coef``, each copy's own coefficients, else this run's) with respect to each
        sample's log-probability, entropy (None when ``ent_coef`` is 0) and value, and the
        per-sample rows :meth:`_stats` reduces to the stats. ``neg_adv``: the advantages as
        :meth:`_neg_normalized` gives them. It is autograd's up to rounding, but where
        ``max``'s two arguments are exactly equal with ``clamp`` cutting: autograd then
        passes half the gradient, this none (an event of probability 0 but for a zero
        advantage, whose gradient is 0)."""
        c = Coefficients.of(self.cfg) if coef is None else coef
        # d mean(x) / d x_i: 1/n, or a copy's weight over its count (padding weighted 0)
        per = (1.0 / logp.shape[-1] if weight is None
               else weight / weight.sum(-1, keepdim=True).clamp(min=1.0))
        logratio, ratio, plain, clipped = _surrogate(logp, old_logp, neg_adv, c.clip_ratio)
        # the plain term is the max (inside the clip range the two are equal; outside it they
        # are equal only for a zero advantage, whose gradient is 0 either way):
        # d pg_loss / d logp = d pg_loss / d ratio * ratio = -adv * ratio / n
        grad_logp = torch.where(plain >= clipped, plain, 0.0).mul_(per)
        v_err = v - ret
        if c.value_clip is None:
            v_err_clipped = v_err
            grad_v = v_err * c.vf_coef * per
        else:
            dv = v - old_v
            v_err_clipped = old_v + _clamp(dv, -c.value_clip, c.value_clip) - ret
            passes_v = (v_err.pow(2) > v_err_clipped.pow(2)).logical_or_(dv.abs() <= c.value_clip)
            grad_v = torch.where(passes_v, v_err, 0.0).mul_(per).mul_(c.vf_coef)
        grad_entropy = (None if c.no_entropy_bonus()
                        else torch.zeros_like(entropy_all).add_(per).mul_(-c.ent_coef))
        rows = _rows(plain, clipped, v_err, v_err_clipped, entropy_all, ratio, logratio)
        return grad_logp, grad_entropy, grad_v, rows

    @staticmethod
    def _stats(rows: torch.Tensor, weight: torch.Tensor | None, clip: float | torch.Tensor
               ) -> torch.Tensor:
        """The stats (pg_loss, v_loss, entropy, approx_kl, clipfrac) of minibatches from their
        per-sample rows (:func:`_rows`, ``(..., 7, samples)``), as ``(..., 5)``; with
        ``weight`` (``(copies, samples)``, a copy's minibatch a row), each copy's weighted."""
        plain, clipped, v_err, v_err_clipped, entropy, ratio, logratio = rows.unbind(-2)
        per_sample = torch.stack((
            torch.max(plain, clipped),
            0.5 * torch.max(v_err.pow(2), v_err_clipped.pow(2)),
            entropy,
            (ratio - 1.0) - logratio,
            ((ratio - 1.0).abs() > clip).to(rows.dtype)), dim=-2)
        if weight is None:
            return per_sample.mean(-1)
        w = weight.unsqueeze(-2)
        return (per_sample * w).sum(-1) / w.sum(-1).clamp(min=1.0)

    def _neg_normalized(self, adv: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        """The minibatch's advantages normalised to mean 0 and standard deviation 1 (each
        copy's over its own samples, with ``weight``), when the config asks for it, and
        negated (the surrogate is minimised)."""
        if not self.cfg.normalize_advantage:
            return -adv
        if weight is None:
            return -((adv - adv.mean()) / (adv.std() + 1e-8)) if len(adv) > 1 else -adv
        count = weight.sum(-1)
        centred = adv - _mean(weight)(adv).unsqueeze(-1)
        std = ((centred.pow(2) * weight).sum(-1) / (count - 1.0)).sqrt().unsqueeze(-1)
        return -torch.where((count > 1.0).unsqueeze(-1), centred / (std + 1e-8), adv)

    def _neg_normalized_minibatches(self, adv: torch.Tensor, n: int, size: int) -> torch.Tensor:
        """:meth:`_neg_normalized` of every minibatch of an update at once: ``adv`` holds
        the passes' ``n`` samples one pass after another, each pass cut into minibatches of
        ``size`` (the last one shorter when ``size`` does not divide ``n``). The same numbers
        as one minibatch at a time: a reduction along a row is the one-dimensional
        reduction's, bit for bit."""
        out = adv.clone()
        if self.cfg.normalize_advantage:
            by_pass = out.view(-1, n)
            full = n - n % size
            for part in (by_pass[:, :full].unflatten(1, (-1, size)),
                         by_pass[:, full:].unsqueeze(1)):
                if part.numel() and part.shape[-1] > 1:
                    mean, std = part.mean(-1, keepdim=True), part.std(-1, keepdim=True)
                    part.sub_(mean).div_(std.add_(1e-8))
        return out.neg_()

    def batchable(self) -> bool:
        """Whether this run's minibatch steps can run stacked with other seeds' (plain PPO
        on a :meth:`stackable` network). Any other PPO run in a batched sweep updates alone,
        as it would in its own process."""
        return type(self) is PPO and self.stackable() and not self.cfg.compile


@dataclass(eq=False)
class _Minibatches(lanes.Work):
    """One PPO update's minibatch steps, to run stacked with other seeds' (:mod:`rltrain.lanes`):
    the update's tensors (obs, act, adv, ret, old_v, old_logp), the permutation of each pass
    (drawn by the run itself, so its random numbers are its own) and the minibatch size."""

    algo: PPO
    tensors: tuple[torch.Tensor, ...]
    perms: list[torch.Tensor]
    size: int

    def batch_key(self) -> Hashable:
        # written by hand, the stacked step takes each run's own LANE_FIELDS; value clipping
        # or none are two forms of the step
        cfg = self.algo.cfg
        settings = (lane_settings(asdict(cfg), LANE_FIELDS) if self.algo.by_hand
                    else asdict(cfg))
        return (repr(settings), self.algo.by_hand, cfg.value_clip is None,
                tuple(t.shape[1:] for t in self.tensors), self.size,
                self.algo.optim.flat.shape, str(self.algo.device))

    def alone(self) -> tuple[torch.Tensor, int]:
        """The minibatch steps of this seed by itself (PPO.update's own loop)."""
        if self.algo.by_hand:
            return self.algo._minibatches_by_hand(self.tensors, self.perms, self.size)
        sums = torch.zeros(5, device=self.algo.device)
        steps = 0
        for perm in self.perms:
            for start in range(0, len(perm), self.size):
                idx = perm[start : start + self.size]
                sums += self.algo._minibatch(*(t[idx] for t in self.tensors))
                steps += 1
        return sums, steps

    @classmethod
    def run_batch(cls, works: Sequence[_Minibatches]) -> list[tuple[torch.Tensor, int]]:
        """Each seed's minibatch steps, stacked: step k of every seed at once. Seeds whose
        rollouts kept different numbers of transitions (an env's reset step is not one) pad
        their minibatches, with weight 0, to the longest seed's; a seed with no k-th
        minibatch in a pass leaves its parameters as they are at that step."""
        if len(works) == 1:  # one seed left in the batch: its own update, as run alone
            return [works[0].alone()]
        first, size = works[0].algo, works[0].size
        device = first.device
        optim = StackedAdam([w.algo.optim for w in works])
        names = {id(p): name for name, p in first.named_parameters()}
        keys = [names[id(p)] for p in first.optim.params]
        lengths = [len(w.tensors[0]) for w in works]
        longest = max(lengths)
        chunks = -(-longest // size)
        stacked = [_padded(group, longest)
                   for group in zip(*(w.tensors for w in works), strict=True)]
        rows = torch.arange(len(works), device=device).unsqueeze(1)
        dtype = optim.flat.dtype
        # by hand (as each seed's own step is): the gradient rows written here, no graph
        grad = torch.zeros_like(optim.flat, requires_grad=False)
        grads = dict(zip(keys, optim.stacked_views(grad), strict=True))
        sums = torch.zeros(len(works), 5, dtype=dtype, device=device)
        steps = torch.zeros(len(works), dtype=torch.long, device=device)
        cfgs = [w.algo.cfg for w in works]
        coef = Coefficients.stacked(cfgs, sums)  # each run's own, a column each
        max_norm = (None if all(c.max_grad_norm is None for c in cfgs) else sums.new_tensor(
            [[math.inf if c.max_grad_norm is None else c.max_grad_norm] for c in cfgs]))
        for r in range(max(len(w.perms) for w in works)):
            perm = torch.zeros(len(works), chunks * size, dtype=torch.long, device=device)
            weight = torch.zeros(len(works), chunks * size, dtype=dtype, device=device)
            for i, w in enumerate(works):
                if r < len(w.perms):  # a seed with fewer passes sits out the last ones
                    perm[i, : lengths[i]] = w.perms[r]
                    weight[i, : lengths[i]] = 1.0
            for c in range(chunks):
                part = slice(c * size, (c + 1) * size)
                idx, wt = perm[:, part], weight[:, part]
                active = wt[:, 0] > 0  # a seed has a k-th minibatch: its first sample
                obs, act, adv, ret, old_v, old_logp = (t[rows, idx] for t in stacked)
                params = dict(zip(keys, optim.stacked_views(), strict=True))
                if first.by_hand:
                    with torch.no_grad():
                        logp, entropy, v, backward = first.stacked_evaluate_kept(
                            params, grads, obs, act)
                        grad_logp, grad_entropy, grad_v, per_sample = first.clipped_gradients(
                            logp, entropy, v, first._neg_normalized(adv, wt), ret, old_v,
                            old_logp, wt, coef)
                        backward(grad_logp, grad_entropy, grad_v)
                        stats = first._stats(per_sample, wt, coef.clip_ratio)
                else:
                    logp, entropy, v = first.stacked_evaluate(params, obs, act)
                    loss, stats = first.clipped_losses(logp, entropy, v, adv, ret, old_v,
                                                       old_logp, wt)
                    (grad,) = torch.autograd.grad(loss.sum(), optim.flat)
                optim.step(grad, max_norm, active)
                sums += stats * active.unsqueeze(1)
                steps += active
        optim.write_back()
        return [(sums[i], int(steps[i])) for i in range(len(works))]


def _surrogate(logp: torch.Tensor, old_logp: torch.Tensor, neg_adv: torch.Tensor,
               clip: float | torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(log-ratio, ratio, -adv * ratio, -adv * clipped ratio)``: the clipped surrogate's
    parts, shared by :meth:`PPO.clipped_losses` and :meth:`PPO.clipped_gradients`."""
    logratio = logp - old_logp
    ratio = logratio.exp()
    return logratio, ratio, neg_adv * ratio, neg_adv * _clamp(ratio, 1.0 - clip, 1.0 + clip)


def _rows(*per_sample: torch.Tensor) -> torch.Tensor:
    """A minibatch's per-sample values that :meth:`PPO._stats` reduces (plain and clipped
    surrogate, value error and clipped value error, entropy, ratio, log-ratio), stacked as
    ``(..., 7, samples)``: one op a step, the stats' dozen ops once an update."""
    return torch.stack(per_sample, dim=-2)


def _mean(weight: torch.Tensor | None) -> Callable[[torch.Tensor], torch.Tensor]:
    """The mean of a minibatch's values; with ``weight``, each row is a copy's minibatch (the
    last dimension) and its mean is weighted (padding 0)."""
    if weight is None:
        return torch.mean
    count = weight.sum(-1).clamp(min=1.0)
    return lambda x: (x * weight).sum(-1) / count


def _clamp(x: torch.Tensor, low: float | torch.Tensor, high: float | torch.Tensor
           ) -> torch.Tensor:
    """``x`` clamped to bounds that are numbers or columns (one per stacked run)."""
    if isinstance(low, torch.Tensor) or isinstance(high, torch.Tensor):
        return x.clamp(torch.as_tensor(low), torch.as_tensor(high))
    return x.clamp(low, high)


def _padded(tensors: Sequence[torch.Tensor], length: int) -> torch.Tensor:
    """Tensors of up to ``length`` rows stacked, each padded with zeros to ``length``."""
    out = tensors[0].new_zeros((len(tensors), length, *tensors[0].shape[1:]))
    for i, t in enumerate(tensors):
        out[i, : len(t)] = t
    return out


register(AlgoSpec(
    name="ppo", config=PPOConfig, build=PPO, trainers=("onpolicy",),
    actions=(DISCRETE, MULTIDISCRETE, CONTINUOUS),
    console=(("pg_loss", "pg"), ("v_loss", "vf"), ("entropy", "ent"), ("approx_kl", "kl")),
    paper="Schulman et al. 2017, arXiv:1707.06347", masks=True, batched=True, compiles=True,
    lane_fields=LANE_FIELDS,
))
