"""The algorithm interface: a policy that acts on a batch of observations, an update
that returns a small typed stats record, and state for checkpoints.

An algorithm owns its networks and optimisers. It never touches an env, a file
or a logger; what an update needs (data, progress) arrives as arguments.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from rltrain.collector import Policy
from rltrain.data.buffers import Batch, Rollout
from rltrain.optim import Adam


@dataclass(frozen=True)
class Progress:
    """Where training stands, for schedules (learning rate, exploration, target updates)."""

    env_step: int
    gradient_step: int
    #: env_step / planned env steps, in [0, 1]
    fraction: float


class Algorithm(nn.Module, ABC):
    #: which trainer drives it: "onpolicy" or "offpolicy"
    kind: ClassVar[str]

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device

    def act(self, obs: np.ndarray, *, deterministic: bool, progress: Progress) -> np.ndarray:
        """Actions for a batch of observations."""
        with torch.inference_mode():
            return self._act(obs, deterministic=deterministic, progress=progress)

    def policy(self, progress: Progress, *, deterministic: bool = False) -> Policy:
        """:meth:`act` as a collector's policy. The collector runs it under
        ``torch.inference_mode()``, entered once per collection rather than once per step
        (that context costs as much as a small layer)."""
        return partial(self._act, deterministic=deterministic, progress=progress)

    @abstractmethod
    def _act(self, obs: np.ndarray, *, deterministic: bool, progress: Progress) -> np.ndarray:
        """:meth:`act`'s work; runs under ``torch.inference_mode()``."""

    @abstractmethod
    def policy_module(self) -> nn.Module:
        """The networks that act (saved alone to best/ and final/)."""

    @abstractmethod
    def optimizers(self) -> dict[str, Adam]: ...

    def nonfinite_parameter(self) -> str | None:
        """The name of a parameter holding NaN or inf, or None. One reduction per optimiser
        over its flat buffer (every trained parameter), so it is cheap after each update."""
        if all(bool(torch.isfinite(o.flat).all()) for o in self.optimizers().values()):
            return None
        for name, p in self.named_parameters():
            if not bool(torch.isfinite(p).all()):
                return name
        return "(an optimiser's buffer)"

    def training_state(self) -> dict[str, Any]:
        """Everything needed to continue training exactly (checkpoints)."""
        return {
            "modules": self.state_dict(),
            "optimizers": {k: o.state_dict() for k, o in self.optimizers().items()},
        }

    def load_training_state(self, state: dict[str, Any]) -> None:
        self.load_state_dict(state["modules"])
        for k, o in self.optimizers().items():
            o.load_state_dict(state["optimizers"][k])

    def _tensor(self, x: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        if isinstance(x, np.ndarray) and x.flags.writeable:
            # half the cost of as_tensor(x, dtype, device) on the per-env-step path
            try:
                return torch.from_numpy(x).to(self.device, dtype)
            except (TypeError, ValueError):  # a dtype torch lacks, negative strides
                x = np.ascontiguousarray(x)
        return torch.as_tensor(x, dtype=dtype, device=self.device)


class OnPolicyAlgorithm(Algorithm):
    kind = "onpolicy"

    @abstractmethod
    def update(
        self, rollout: Rollout, *, batch_size: int | None, repetitions: int, progress: Progress
    ) -> Any:
        """Learn from the whole rollout, ``repetitions`` passes in minibatches."""


class OffPolicyAlgorithm(Algorithm):
    kind = "offpolicy"

    @abstractmethod
    def update(self, batch: Batch, *, progress: Progress) -> Any:
        """One gradient step on a sampled batch."""


def clip_and_step(loss: torch.Tensor, optimizer: Adam, max_norm: float | None) -> None:
    optimizer.zero_grad()
    loss.backward()
    if max_norm is not None:
        optimizer.clip_grad_norm_(max_norm)
    optimizer.step()
