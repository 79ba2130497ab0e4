"""Observation normalisation and reward scaling, as modules whose statistics are buffers.

Both live in the algorithm (``Algorithm.obs_norm``, ``Algorithm.reward_scaler``), so their
statistics are part of the training state that checkpoints save and resumes restore, and the
observation statistics are part of the deployable policy that ``best/``, ``final/``,
``rltrain-eval`` and ``rltrain-export`` use: nothing to carry by hand beside the weights.

Statistics are updated only from training collection (and the random warm-up): the composition
root registers :meth:`ObsNormalizer.observe` and :meth:`RewardScaler.observe` once, as the
training collector's observers; an offline run folds in its dataset once. Tests, eval and
export apply them frozen. Running moments are kept in float64 (Chan et al.'s parallel update,
as in Welford's algorithm) and applied in float32.
"""

from __future__ import annotations

from typing import overload

import numpy as np
import torch
from torch import nn


class RunningMoments(nn.Module):
    """Mean and variance of a stream of batches, per feature."""

    # buffers (registered in __init__), float64: mean and variance of shape ``shape``, and the
    # number of samples folded in so far (a scalar)
    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold in a batch ``x`` of shape ``(n, *shape)``."""
        n = x.shape[0]
        if n == 0:
            return
        x = x.to(torch.float64)
        batch_mean = x.mean(0)
        batch_var = x.var(0, unbiased=False) if n > 1 else torch.zeros_like(batch_mean)
        total = self.count + n
        delta = batch_mean - self.mean
        # the first batch replaces the prior (mean 0, var 1) rather than averaging with it
        m2 = self.var * self.count + batch_var * n + delta.pow(2) * self.count * n / total
        self.mean.add_(delta * n / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)


class ObsNormalizer(nn.Module):
    """``clip((obs - mean) / sqrt(var + eps), -clip, clip)`` with running statistics."""

    # buffers (registered in __init__), float32, of shape [obs_dim]: the mean and
    # 1 / sqrt(var + eps) of ``moments``
    shift: torch.Tensor
    scale: torch.Tensor

    def __init__(self, obs_dim: int, clip: float, epsilon: float) -> None:
        super().__init__()
        self.moments = RunningMoments((obs_dim,))
        self.clip, self.epsilon = clip, epsilon
        # float32 copies applied in forward (and in the ONNX graph), refreshed by update()
        self.register_buffer("shift", torch.zeros(obs_dim))
        self.register_buffer("scale", torch.ones(obs_dim))
        self._refresh()

    @torch.no_grad()
    def update(self, obs: torch.Tensor) -> None:
        self.moments.update(obs.reshape(obs.shape[0], -1))
        self._refresh()

    def observe(self, obs: np.ndarray) -> None:
        """Fold a batch of observations (numpy, as the env gives them) into the statistics:
        the training collector calls this before its policy acts on them."""
        device = self.shift.device
        if isinstance(obs, np.ndarray) and obs.flags.writeable and obs.dtype.kind == "f":
            x = torch.from_numpy(obs).to(device, self.shift.dtype)  # the per-step path
        else:  # a copy: torch warns of (and cannot share) a read-only array
            x = torch.as_tensor(np.array(obs, dtype=np.float32)).to(device, self.shift.dtype)
        self.update(x)

    def _refresh(self) -> None:
        self.shift.copy_(self.moments.mean)
        self.scale.copy_((self.moments.var + self.epsilon).rsqrt())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.dim() == 2:  # a batch of vectors: the per-step path, no reshaping
            return ((obs - self.shift) * self.scale).clamp(-self.clip, self.clip)
        flat = obs.reshape(obs.shape[0], -1)
        return ((flat - self.shift) * self.scale).clamp(-self.clip, self.clip).view_as(obs)


class RewardScaler(nn.Module):
    """Divides rewards by the running standard deviation of the discounted return
    ``R_t = gamma * R_{t-1} + r_t`` of each training env (reset when its episode ends), as
    in Engstrom et al. 2020, "Implementation matters in deep policy gradients"."""

    # buffer (registered in __init__), float64, of shape [num_envs]: each env's running
    # discounted return
    returns: torch.Tensor

    def __init__(self, num_envs: int, gamma: float, clip: float, epsilon: float) -> None:
        super().__init__()
        self.moments = RunningMoments(())
        self.gamma, self.clip, self.epsilon = gamma, clip, epsilon
        self.register_buffer("returns", torch.zeros(num_envs, dtype=torch.float64))

    @torch.no_grad()
    def observe(self, rew: np.ndarray, done: np.ndarray, valid: np.ndarray | None) -> None:
        """One vector step of training collection: rewards, episode ends, and which lanes hold
        a real transition (None: all of them), each of shape ``(num_envs,)``."""
        r = torch.from_numpy(rew).to(torch.float64)
        mask = None if valid is None else torch.from_numpy(valid)
        if mask is None:
            self.returns.mul_(self.gamma).add_(r)
            self.moments.update(self.returns)
        else:
            self.returns.copy_(torch.where(mask, self.returns * self.gamma + r, self.returns))
            self.moments.update(self.returns[mask])
        if done.any():
            self.returns[torch.from_numpy(done)] = 0.0

    def factor(self) -> float:
        """What rewards are multiplied by now."""
        return float((self.moments.var + self.epsilon).rsqrt())

    @overload
    def scale(self, rew: np.ndarray) -> np.ndarray: ...

    @overload
    def scale(self, rew: torch.Tensor) -> torch.Tensor: ...

    def scale(self, rew: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """Rewards scaled: host arrays, or tensors (the same float32 maths: the factor, a
        Python float, enters either in float32)."""
        return (rew * self.factor()).clip(-self.clip, self.clip)
