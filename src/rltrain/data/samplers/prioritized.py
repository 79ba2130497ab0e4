"""Proportional prioritised replay (Schaul et al. 2016): ``buffer.sampler=prioritized``,
selected by ``buffer=prioritized``. Transitions are drawn in proportion to their last
reported |TD error|, through a sum tree."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from rltrain.config.schemas import ConfigError, ReplayBufferConfig
from rltrain.data.samplers import SamplerSpec, register
from rltrain.data.storage import ReplayBuffer


class SumTree:
    """Non-negative values at ``capacity`` leaves, with every subtree's sum kept, so that a
    value-proportional draw and a change of value each cost O(log capacity). Batched: a set
    of leaves is written, and a batch of draws descends, in one numpy pass per tree level.

    Each inner node is recomputed as the sum of its two children (never adjusted by a
    difference), so rounding does not build up over millions of updates. float64.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a sum tree needs at least one leaf, got {capacity}")
        self.capacity = capacity
        self._base = 1 << max(0, math.ceil(math.log2(capacity)))  # leaves at base..2*base-1
        self._depth = self._base.bit_length() - 1
        self.tree = np.zeros(2 * self._base, dtype=np.float64)

    @property
    def total(self) -> float:
        return float(self.tree[1])

    @property
    def leaves(self) -> np.ndarray:
        """The leaves' values (a view: write through :meth:`set`)."""
        return self.tree[self._base : self._base + self.capacity]

    def set(self, index: np.ndarray, values: np.ndarray | float) -> None:
        """Leaves ``index`` take ``values`` (a repeated index: its last value); every sum
        above them is recomputed."""
        node = np.asarray(index, dtype=np.int64) + self._base
        self.tree[node] = values
        for _ in range(self._depth):
            node = np.unique(node >> 1)
            self.tree[node] = self.tree[2 * node] + self.tree[2 * node + 1]

    def rebuild(self) -> None:
        """Every inner sum from the leaves (after the leaves were loaded)."""
        for level in range(self._depth - 1, -1, -1):
            start = 1 << level
            node = np.arange(start, 2 * start)
            self.tree[node] = self.tree[2 * node] + self.tree[2 * node + 1]

    def find(self, mass: np.ndarray) -> np.ndarray:
        """For each ``mass`` in [0, total), the leaf whose cumulative interval holds it.
        Only a leaf with a positive value is ever returned: a descent never enters a
        subtree whose sum is 0 (which rounding at an interval's end could otherwise do)."""
        mass = np.array(mass, dtype=np.float64)
        node = np.ones(len(mass), dtype=np.int64)
        tree = self.tree
        for _ in range(self._depth):
            left = tree[2 * node]
            right = (mass >= left) & (tree[2 * node + 1] > 0)
            mass -= np.where(right, left, 0.0)
            node = 2 * node + right
        return node - self._base


class PrioritizedSampler:
    """Proportional prioritised replay (Schaul et al. 2016, "Prioritized Experience Replay",
    arXiv:1511.05952, section 3.3): transition i is drawn with probability
    p_i^alpha / sum_k p_k^alpha, where p_i is the priority the last update that learnt from
    it reported (|TD error| + eps), and a transition never learnt from has the largest
    priority seen so far (so each is replayed at least once soon after it arrives).

    Draws are stratified: the batch's k-th draw falls in the k-th of ``batch_size`` equal
    slices of the total priority, as the paper's Appendix B.2.1 does. Each draw's
    importance-sampling weight is (N P(i))^-beta divided by the largest in the batch (so
    weights only scale updates down); beta rises linearly from ``beta`` to 1 over the run
    (the paper's annealing). N is the number of stored transitions.

    The sampler finds newly stored transitions by the buffer's per-lane write counts
    (``ReplayBuffer.added``), so the collector needs no hook; its state (the leaves, the
    largest priority, the counts it has seen and its generator) is checkpointed and resumes
    exactly.

    :param alpha: how much prioritisation is used (0: uniform).
    :param beta: the importance-sampling exponent at the start of the run.
    :param eps: added to |TD error|, so that no stored transition has zero probability.
    """

    def __init__(self, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6,
                 seed: int = 0) -> None:
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self.rng = np.random.default_rng(seed)
        self.tree: SumTree | None = None
        #: the largest leaf value (priority to the power alpha) ever stored
        self.max_priority = 1.0
        #: each lane's ``buffer.added`` when this sampler last looked
        self.seen: np.ndarray | None = None
        self._cap = 0

    def _sync(self, buffer: ReplayBuffer) -> SumTree:
        """Give the transitions stored since the last look the largest priority."""
        if self.tree is None or self.seen is None:
            self.tree = SumTree(buffer.num_lanes * buffer.lane_capacity)
            self.seen = np.zeros(buffer.num_lanes, dtype=np.int64)
        self._cap = cap = buffer.lane_capacity
        if self.tree.capacity != buffer.num_lanes * cap:
            raise ValueError(f"the sampler's priorities are for {self.tree.capacity:,} slots, "
                             f"the buffer has {buffer.num_lanes * cap:,}")
        if (buffer.added < self.seen).any():
            # the buffer started again (a checkpoint without it): nothing it held is left
            self.tree.set(np.arange(self.tree.capacity), 0.0)
            self.seen[:] = 0
        new = np.minimum(buffer.added - self.seen, cap)
        if new.any():
            lanes = np.repeat(np.arange(buffer.num_lanes), new)
            back = np.arange(len(lanes)) - np.repeat(np.cumsum(new) - new, new) + 1
            self.tree.set(lanes * cap + (buffer.ptr[lanes] - back) % cap, self.max_priority)
            self.seen = buffer.added.copy()
        return self.tree

    def sample(self, buffer: ReplayBuffer, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        tree = self._sync(buffer)
        total = tree.total
        if not total > 0:
            raise ValueError("cannot sample from an empty buffer")
        mass = (np.arange(batch_size) + self.rng.random(batch_size)) * (total / batch_size)
        leaf = tree.find(np.minimum(mass, np.nextafter(total, 0)))
        return np.divmod(leaf, self._cap)

    def weights(self, lanes: np.ndarray, positions: np.ndarray, fraction: float) -> np.ndarray:
        assert self.tree is not None  # sample() came first
        beta = self.beta + (1.0 - self.beta) * min(max(fraction, 0.0), 1.0)
        prob = self.tree.leaves[lanes * self._cap + positions] / self.tree.total
        n = int(np.count_nonzero(self.tree.leaves))
        w = (n * prob) ** -beta
        return (w / w.max()).astype(np.float32)

    def update(self, lanes: np.ndarray, positions: np.ndarray, priorities: np.ndarray) -> None:
        """Store ``(|priorities| + eps)^alpha``. A non-finite priority leaves its transition's
        old one in place: the loss it came from is non-finite too, which the trainer reports
        and ends the run on within the epoch, and the tree must stay sound until then."""
        assert self.tree is not None  # sample() came first
        p = np.abs(np.asarray(priorities, dtype=np.float64).reshape(-1))
        ok = np.isfinite(p)
        if not ok.all():
            lanes, positions, p = lanes[ok], positions[ok], p[ok]
        if not len(p):
            return
        p = (p + self.eps) ** self.alpha
        self.tree.set(lanes * self._cap + positions, p)
        self.max_priority = max(self.max_priority, float(p.max()))

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"rng": self.rng.bit_generator.state,
                                 "max_priority": self.max_priority}
        if self.tree is not None and self.seen is not None:
            state["leaves"] = torch.from_numpy(self.tree.leaves.copy())
            state["seen"] = torch.from_numpy(self.seen.copy())
            state["lane_capacity"] = self._cap
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`; a state without priorities (a uniform sampler's, or
        this one's before its first draw) keeps only the generator, and every stored
        transition starts at the largest priority.

        :raises ValueError: priorities that are negative or not finite, named.
        """
        self.rng.bit_generator.state = state["rng"]
        self.max_priority = float(state.get("max_priority", 1.0))
        if "leaves" not in state:
            self.tree, self.seen = None, None
            return
        leaves = np.asarray(state["leaves"], dtype=np.float64)
        seen = np.asarray(state["seen"], dtype=np.int64)
        if leaves.ndim != 1 or not np.isfinite(leaves).all() or (leaves < 0).any():
            raise ValueError("sampler leaves: the priorities must be a vector of finite "
                             "values >= 0")
        self.tree = SumTree(len(leaves))
        self.tree.leaves[:] = leaves
        self.tree.rebuild()
        self.seen = seen.copy()
        self._cap = int(state["lane_capacity"])


def _check(cfg: ReplayBufferConfig) -> None:
    if not 0 <= cfg.priority_alpha <= 1:
        raise ConfigError(f"buffer.priority_alpha must be in [0, 1], got {cfg.priority_alpha}")
    if not 0 <= cfg.priority_beta <= 1:
        raise ConfigError(f"buffer.priority_beta must be in [0, 1], got {cfg.priority_beta}")
    if not cfg.priority_eps > 0:
        raise ConfigError(f"buffer.priority_eps must be > 0, got {cfg.priority_eps}")


def _build(cfg: ReplayBufferConfig, seed: int) -> PrioritizedSampler:
    return PrioritizedSampler(cfg.priority_alpha, cfg.priority_beta, cfg.priority_eps, seed)


register(SamplerSpec(
    name="prioritized", build=_build, check=_check, weighs=True,
    settings=("priority_alpha", "priority_beta", "priority_eps"),
    selected_by="buffer=prioritized", title="prioritised replay"))
