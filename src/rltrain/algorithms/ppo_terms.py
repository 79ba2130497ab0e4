"""The terms of PPO's loss that its three forms share: the paper's, through autograd
(``ppo.py``), its gradient written out (``ppo_by_hand.py``) and the members of a batch
stepped as one (``ppo_stacked.py``). One copy of each, so that the forms cannot drift apart:
the clipped surrogate's parts, a minibatch's advantages as the loss takes them, and the
per-sample rows PPO's stats are reduced from.

Each term takes a run's own numbers, or (stacked) one column ``(runs, 1)`` of each run's,
which broadcasts over the runs' rows; ``weight`` (1 or 0 per sample, ``(runs, samples)``)
leaves out the padding of stacked minibatches.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def surrogate(logp: torch.Tensor, old_logp: torch.Tensor, neg_adv: torch.Tensor,
              clip: float | torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(log-ratio, ratio, -adv * ratio, -adv * clipped ratio)``: the clipped surrogate's
    parts (Schulman et al. 2017, eq. 7, negated: the loss is minimised)."""
    logratio = logp - old_logp
    ratio = logratio.exp()
    return logratio, ratio, neg_adv * ratio, neg_adv * clamp(ratio, 1.0 - clip, 1.0 + clip)


def neg_normalized(adv: torch.Tensor, weight: torch.Tensor | None, normalize: bool
                   ) -> torch.Tensor:
    """The minibatch's advantages normalised to mean 0 and standard deviation 1 (each
    copy's over its own samples, with ``weight``) when ``normalize``
    (``algo.normalize_advantage``), and negated (the surrogate is minimised)."""
    if not normalize:
        return -adv
    if weight is None:
        return -((adv - adv.mean()) / (adv.std() + 1e-8)) if len(adv) > 1 else -adv
    count = weight.sum(-1)
    centred = adv - mean_over(weight)(adv).unsqueeze(-1)
    std = ((centred.pow(2) * weight).sum(-1) / (count - 1.0)).sqrt().unsqueeze(-1)
    return -torch.where((count > 1.0).unsqueeze(-1), centred / (std + 1e-8), adv)


def rows(*per_sample: torch.Tensor) -> torch.Tensor:
    """A minibatch's per-sample values that :func:`stats` reduces (plain and clipped
    surrogate, value error and clipped value error, entropy, ratio, log-ratio), stacked as
    ``(..., 7, samples)``: one op a step, the stats' dozen ops once an update."""
    return torch.stack(per_sample, dim=-2)


def stats(per_sample_rows: torch.Tensor, weight: torch.Tensor | None,
          clip: float | torch.Tensor) -> torch.Tensor:
    """The stats (pg_loss, v_loss, entropy, approx_kl, clipfrac) of minibatches from their
    per-sample rows (:func:`rows`, ``(..., 7, samples)``), as ``(..., 5)``; with ``weight``
    (``(copies, samples)``, a copy's minibatch a row), each copy's weighted."""
    plain, clipped, v_err, v_err_clipped, entropy, ratio, logratio = per_sample_rows.unbind(-2)
    per_sample = torch.stack((
        torch.max(plain, clipped),
        0.5 * torch.max(v_err.pow(2), v_err_clipped.pow(2)),
        entropy,
        (ratio - 1.0) - logratio,
        ((ratio - 1.0).abs() > clip).to(per_sample_rows.dtype)), dim=-2)
    if weight is None:
        return per_sample.mean(-1)
    w = weight.unsqueeze(-2)
    return (per_sample * w).sum(-1) / w.sum(-1).clamp(min=1.0)


def mean_over(weight: torch.Tensor | None) -> Callable[[torch.Tensor], torch.Tensor]:
    """The mean of a minibatch's values; with ``weight``, each row is a copy's minibatch (the
    last dimension) and its mean is weighted (padding 0)."""
    if weight is None:
        return torch.mean
    count = weight.sum(-1).clamp(min=1.0)
    return lambda x: (x * weight).sum(-1) / count


def clamp(x: torch.Tensor, low: float | torch.Tensor, high: float | torch.Tensor
          ) -> torch.Tensor:
    """``x`` clamped to bounds that are numbers or columns (one per stacked run)."""
    if isinstance(low, torch.Tensor) or isinstance(high, torch.Tensor):
        return x.clamp(torch.as_tensor(low), torch.as_tensor(high))
    return x.clamp(low, high)
