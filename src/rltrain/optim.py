"""Adam for the small networks of RL, with multi-tensor (fused) updates.

Why not ``torch.optim.Adam``: its ``step()`` imports ``torch._dynamo`` on first
use (about 0.9 s, half of rltrain's start-up on a laptop CPU) and wraps each step in
bookkeeping that costs as much as the maths itself for 64x64 MLPs. The update
below is the same arithmetic as torch's Adam (Kingma & Ba 2015, with bias
correction); ``tests/test_optim.py`` checks that both give the same parameters.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch


class Adam:
    """Adam over a fixed list of parameters. ``lr`` may be changed between steps."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.betas, self.eps = lr, betas, eps
        self.steps = 0
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        beta1, beta2 = self.betas
        self.steps += 1
        torch._foreach_lerp_(self.exp_avg, grads, 1.0 - beta1)
        torch._foreach_mul_(self.exp_avg_sq, beta2)
        torch._foreach_addcmul_(self.exp_avg_sq, grads, grads, 1.0 - beta2)
        step_size = self.lr / (1.0 - beta1**self.steps)
        denom = torch._foreach_sqrt(self.exp_avg_sq)
        torch._foreach_div_(denom, math.sqrt(1.0 - beta2**self.steps))
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(self.params, self.exp_avg, denom, -step_size)

    def state_dict(self) -> dict[str, Any]:
        return {"lr": self.lr, "steps": self.steps, "exp_avg": self.exp_avg,
                "exp_avg_sq": self.exp_avg_sq}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lr, self.steps = state["lr"], state["steps"]
        for mine, saved in ((self.exp_avg, state["exp_avg"]),
                            (self.exp_avg_sq, state["exp_avg_sq"])):
            if len(mine) != len(saved):
                raise ValueError("optimizer state does not match the parameters")
            for a, b in zip(mine, saved, strict=True):
                a.copy_(b)
