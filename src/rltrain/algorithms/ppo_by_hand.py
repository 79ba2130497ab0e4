"""PPO's minibatch steps with the gradient written out instead of recorded by autograd: the
loss of ``PPO.clipped_losses`` (``ppo.py``) differentiated by hand with respect to each
sample's log-probability, entropy and value (:func:`clipped_gradients`), then through the
distribution and the networks (``ActorCritic.evaluate_kept``).

On a CPU, autograd's bookkeeping costs about as much as the maths of a 64x64 step: this runs
the step 1.5-2x faster and the whole loop 1.3x (``scripts/bench_throughput.py --only-ppo``,
``--loop-rounds``). PPO takes this form for plain PPO with MLPs on vector observations, not
compiled (``PPO.by_hand``, set by its constructor); ``tests/test_ppo_by_hand.py`` checks it
against the autograd form in float64.

It reads of the algorithm only what ``ActorCritic`` has (the networks' passes kept for the
written-out backward, ``algo.max_grad_norm``, ``algo.normalize_advantage``), its optimiser
and the loss's coefficients (:class:`Coefficients`), and of the loss only its shared terms
(``ppo_terms.py``): ``ppo.py`` chooses it and imports it, never the other way round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rltrain.algorithms.actor_critic import ActorCritic
from rltrain.algorithms.ppo_terms import clamp, neg_normalized, rows, stats, surrogate
from rltrain.nets.nograd import no_grad
from rltrain.nets.optim import Adam


@dataclass(frozen=True)
class Coefficients:
    """The numbers in PPO's loss: a run's own (floats), or in a stacked step one column
    ``(runs, 1)`` of each run's (``ppo_stacked.stacked_coefficients``), which broadcasts over
    the runs' rows."""

    clip_ratio: float | torch.Tensor
    value_clip: float | torch.Tensor | None
    ent_coef: float | torch.Tensor
    vf_coef: float | torch.Tensor

    def no_entropy_bonus(self) -> bool:
        c = self.ent_coef
        return not bool(c.any()) if isinstance(c, torch.Tensor) else c == 0.0


def clipped_gradients(
    logp: torch.Tensor,
    entropy_all: torch.Tensor,
    v: torch.Tensor,
    neg_adv: torch.Tensor,
    ret: torch.Tensor,
    old_v: torch.Tensor,
    old_logp: torch.Tensor,
    coef: Coefficients,
    weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """The gradient of ``PPO.clipped_losses``'s loss (each copy's, with ``weight``; with
    ``coef`` of columns, each copy's own coefficients) with respect to each sample's
    log-probability, entropy (None when ``ent_coef`` is 0) and value, and the per-sample rows
    :func:`~rltrain.algorithms.ppo_terms.stats` reduces to the stats. ``neg_adv``: the
    advantages as :func:`~rltrain.algorithms.ppo_terms.neg_normalized` gives them. It is
    autograd's up to rounding, but where ``max``'s two arguments are exactly equal with
    ``clamp`` cutting: autograd then passes half the gradient, this none (an event of
    probability 0 but for a zero advantage, whose gradient is 0)."""
    c = coef
    # d mean(x) / d x_i: 1/n, or a copy's weight over its count (padding weighted 0)
    per = (1.0 / logp.shape[-1] if weight is None
           else weight / weight.sum(-1, keepdim=True).clamp(min=1.0))
    logratio, ratio, plain, clipped = surrogate(logp, old_logp, neg_adv, c.clip_ratio)
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
        v_err_clipped = old_v + clamp(dv, -c.value_clip, c.value_clip) - ret
        passes_v = (v_err.pow(2) > v_err_clipped.pow(2)).logical_or_(dv.abs() <= c.value_clip)
        grad_v = torch.where(passes_v, v_err, 0.0).mul_(per).mul_(c.vf_coef)
    grad_entropy = (None if c.no_entropy_bonus()
                    else torch.zeros_like(entropy_all).add_(per).mul_(-c.ent_coef))
    per_sample = rows(plain, clipped, v_err, v_err_clipped, entropy_all, ratio, logratio)
    return grad_logp, grad_entropy, grad_v, per_sample


def minibatch(algo: ActorCritic, optim: Adam, coef: Coefficients, obs: torch.Tensor,
              act: torch.Tensor, adv: torch.Tensor, ret: torch.Tensor, old_v: torch.Tensor,
              old_logp: torch.Tensor) -> torch.Tensor:
    """One minibatch step (``PPO._minibatch``'s, by hand); its stats (pg_loss, v_loss,
    entropy, approx_kl, clipfrac)."""
    neg_adv = neg_normalized(adv, None, algo.cfg.normalize_advantage)
    per_sample = step(algo, optim, coef, obs, act, neg_adv, ret, old_v, old_logp)
    return stats(per_sample, None, coef.clip_ratio)


def step(algo: ActorCritic, optim: Adam, coef: Coefficients, obs: torch.Tensor,
         act: torch.Tensor, neg_adv: torch.Tensor, ret: torch.Tensor, old_v: torch.Tensor,
         old_logp: torch.Tensor) -> torch.Tensor:
    """One minibatch step of ``algo`` with the gradient written out: its networks' passes
    kept, :func:`clipped_gradients`, their backward written over the optimiser's gradient,
    then clipping and Adam's step as through autograd. ``neg_adv``: the advantages as
    :func:`~rltrain.algorithms.ppo_terms.neg_normalized` gives them. Returns the step's
    per-sample rows for :func:`~rltrain.algorithms.ppo_terms.stats`."""
    logp, entropy_all, v, backward = algo.evaluate_kept(obs, act)
    grad_logp, grad_entropy, grad_v, per_sample = clipped_gradients(
        logp, entropy_all, v, neg_adv, ret, old_v, old_logp, coef)
    optim.zero_grad()
    backward(grad_logp, grad_entropy, grad_v)
    if algo.cfg.max_grad_norm is not None:
        optim.clip_grad_norm_(algo.cfg.max_grad_norm)
    optim.step()
    return per_sample


@no_grad
def update_steps(algo: ActorCritic, optim: Adam, coef: Coefficients,
                 tensors: Sequence[torch.Tensor], perms: Sequence[torch.Tensor], size: int
                 ) -> tuple[torch.Tensor, int]:
    """An update's minibatch steps by hand (:func:`step`), with what does not depend on the
    parameters done once for all of them rather than once a step: every pass's minibatches
    gathered in one indexing of each tensor (obs, act, adv, ret, old_v, old_logp), the
    advantages normalised within each minibatch in one pass over all of them, and the stats
    reduced at the end from each step's per-sample rows. The same steps as
    ``PPO._minibatch`` on each minibatch in turn, bit for bit (``tests/test_ppo_by_hand.py``),
    in about 30 fewer small ops a step: 13% of a step at CartPole's batch of 256
    (``scripts/bench_throughput.py --only-ppo``: 1,801 against 1,574 steps a second).
    Returns the stats summed over the steps, and the number of steps."""
    n = len(perms[0]) if perms else 0
    if not n:  # no samples
        return torch.zeros(5, device=algo.device), 0
    obs, act, adv, ret, old_v, old_logp = (t[torch.cat(tuple(perms))] for t in tensors)
    neg_adv = neg_normalized_minibatches(adv, n, size, algo.cfg.normalize_advantage)
    # each step's minibatch: a pass's last is shorter when size does not divide n
    sizes = [min(size, n - a) for _ in perms for a in range(0, n, size)]
    steps = [step(algo, optim, coef, *minibatch) for minibatch in zip(
        *(t.split(sizes) for t in (obs, act, neg_adv, ret, old_v, old_logp)), strict=True)]
    clip = coef.clip_ratio
    if all(r.shape == steps[0].shape for r in steps):
        return stats(torch.stack(steps), None, clip).sum(0), len(steps)
    return torch.stack([stats(r, None, clip) for r in steps]).sum(0), len(steps)


def neg_normalized_minibatches(adv: torch.Tensor, n: int, size: int, normalize: bool
                               ) -> torch.Tensor:
    """:func:`~rltrain.algorithms.ppo_terms.neg_normalized` of every minibatch of an update
    at once: ``adv`` holds the passes' ``n`` samples one pass after another, each pass cut
    into minibatches of ``size`` (the last one shorter when ``size`` does not divide ``n``).
    The same numbers as one minibatch at a time: a reduction along a row is the
    one-dimensional reduction's, bit for bit."""
    out = adv.clone()
    if normalize:
        by_pass = out.view(-1, n)
        full = n - n % size
        for part in (by_pass[:, :full].unflatten(1, (-1, size)),
                     by_pass[:, full:].unsqueeze(1)):
            if part.numel() and part.shape[-1] > 1:
                mean, std = part.mean(-1, keepdim=True), part.std(-1, keepdim=True)
                part.sub_(mean).div_(std.add_(1e-8))
    return out.neg_()
