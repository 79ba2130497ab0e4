"""Recording a dataset: episodes or steps collected from vector envs in chunks, each chunk
written as it comes, and the room check that refuses a collection the disk cannot hold
before it fills the disk (its size measured from the first chunk)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rltrain.common.errors import UserError
from rltrain.common.types import Policy

#: vector steps per collection call: each call fills a fresh chunk of the lanes
CHUNK = 256
#: what :func:`collect` calls after each chunk (see :class:`RoomCheck`)
Watch = Callable[[list[dict[str, np.ndarray]]], None]


# --------------------------------------------------------------------------- collecting


def collect(envs: Any, policy: Policy, *, seed: int, episodes: int | None = None,
            steps: int | None = None, watch: Watch | None = None) -> dict[str, np.ndarray]:
    """Run ``policy`` on ``envs`` (reset with ``seed``) until every env has its quota of
    ``episodes`` or ``steps`` (:func:`rltrain.data.collector.episode_quotas`); returns the
    transitions as arrays, env after env, each env's in time order, cut to its quota (an
    episode the cut ends is marked truncated). ``watch`` is called after every chunk with
    its transitions, one dict of arrays per env that got some (a :class:`RoomCheck` stops the
    collection by raising when the dataset will not fit).

    The :class:`~rltrain.data.collector.Collector` steps the envs and writes lanes of an
    append-only buffer, which is read and cleared every :data:`CHUNK` vector steps. The
    buffer stores observations as training does (:mod:`rltrain.spaces.observations`): images as
    uint8, Dict observations as the uint8 rows the collector packs them into; the policy
    sees them so too.
    """
    import gymnasium as gym

    from rltrain.data.collector import Collector, episode_quotas
    from rltrain.data.datasets.dataset import ARRAYS
    from rltrain.data.storage import ReplayBuffer
    from rltrain.spaces.observations import storage_dtype, stored_shape

    if (episodes is None) == (steps is None):
        raise ValueError("pass exactly one of episodes and steps")
    m = envs.num_envs
    n = episodes if episodes is not None else steps
    assert n is not None  # exactly one of the two is given (checked above)
    quotas = episode_quotas(n, m)
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    discrete = not isinstance(act_space, gym.spaces.Box)  # Discrete, MultiDiscrete, MultiBinary
    buffer = ReplayBuffer(m, CHUNK, stored_shape(obs_space), act_space.shape,
                          np.int64 if discrete else np.float32,
                          obs_dtype=storage_dtype(obs_space), circular=False)
    collector = Collector(envs, buffer)
    collector.reset(seed=seed)
    lanes: list[list[dict[str, np.ndarray]]] = [[] for _ in range(m)]
    have = np.zeros(m, dtype=np.int64)  # episodes ended, or transitions, per env
    while (have < quotas).any():
        buffer.clear()
        collector.collect(policy, n_steps=CHUNK * m)
        rollout = buffer.rollout()
        chunk: list[dict[str, np.ndarray]] = []
        for i in range(m):
            n = int(rollout.valid[i].sum())
            if have[i] >= quotas[i] or n == 0:
                continue
            part = {name: np.array(getattr(rollout, name)[i, :n]) for name in ARRAYS}
            dones = part["terminated"] | part["truncated"]
            if episodes is not None:
                ends = np.flatnonzero(dones)
                need = quotas[i] - have[i]
                if len(ends) >= need:  # this chunk ends the env's last episode: cut after it
                    part = {k: v[: ends[need - 1] + 1] for k, v in part.items()}
                have[i] += min(len(ends), need)
            else:
                part = {k: v[: quotas[i] - have[i]] for k, v in part.items()}
                have[i] += len(part["rew"])
            lanes[i].append(part)
            chunk.append(part)
        if watch is not None:
            watch(chunk)
    out: dict[str, list[np.ndarray]] = {name: [] for name in ARRAYS}
    for parts in lanes:
        if not parts:
            continue
        for name in ARRAYS:
            out[name].append(np.concatenate([p[name] for p in parts]))
        last_trunc = out["truncated"][-1]
        if not (last_trunc[-1] or out["terminated"][-1][-1]):
            last_trunc[-1] = True  # --steps cut this env's episode
    return {name: np.concatenate(arrays) for name, arrays in out.items()}


def transition_bytes(obs_space: Any, act_space: Any) -> int:
    """Bytes one transition takes in a dataset file before compression, at the least: its
    observation and next observation (a stack of uint8 frames counted as one new frame plus
    the stack's frame indices, as a file keeps chained stacks), action, reward and the two end
    flags."""
    import gymnasium as gym

    from rltrain.spaces.observations import storage_dtype, stored_shape

    shape = stored_shape(obs_space)
    obs = math.prod(shape) * storage_dtype(obs_space).itemsize
    if storage_dtype(obs_space) == np.uint8 and len(shape) >= 3 and shape[0] >= 2:
        obs_part = obs // shape[0] + 2 * shape[0] * 8  # one frame, two rows of int64 indices
    else:
        obs_part = 2 * obs
    discrete = not isinstance(act_space, gym.spaces.Box)
    act = math.prod(act_space.shape or ()) * (8 if discrete else 4)  # int64 or float32
    return obs_part + act + 4 + 2  # float32 reward, bool terminated and truncated


@dataclass
class RoomCheck:
    """Whether the dataset will fit where it is written, known as soon as it can be, not after
    the whole collection (two million CartPole steps took 107 s before that refusal).

    Before collecting, where the size is sure: ``--steps N`` into an ``.npz`` (which holds the
    arrays as they are) needs at least N x :func:`transition_bytes`. Otherwise what a
    transition takes in the file, compressed as the file will be, is measured on what has
    been collected (:func:`rltrain.data.datasets.files.encoded_size`): ``--steps N`` is estimated
    from it, and ``--episodes``, whose count of transitions is not known until they end, is
    checked against what is already collected. A small sample compresses worse than the whole
    (CartPole: 39 bytes a transition over 2,000, 27 over 200,000), so an estimate over the
    free space is refused at once only when it is more than :data:`SURE` times it; else it is
    measured again as the collection doubles, and refused once it has settled (two
    measurements within :data:`SETTLED`) or covers everything in hand. The refusal
    (UserError) names the sizes, the free space and what to change."""

    #: an estimate this many times the free space is refused at once
    SURE = 2.0
    #: an estimate is settled when two measurements differ by less than this fraction
    SETTLED = 0.05

    out: Path
    steps: int | None
    episodes: int | None
    #: bytes of a transition before compression (:func:`transition_bytes`)
    per_transition: int
    #: the dataset's meta fields, to make a sample dataset of what was collected
    meta: dict[str, Any]
    parts: list[dict[str, np.ndarray]] = field(default_factory=list)
    collected: int = 0
    #: (transitions measured, fixed bytes, bytes per transition) of each measurement
    measured: list[tuple[int, float, float]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def before(self) -> None:
        if self.steps is not None and self.out.suffix.lower() == ".npz":
            self._refuse_over(self.steps * self.per_transition,
                              f"at least {{size}} ({self.steps:,} transitions x "
                              f"{self.per_transition:,} bytes)", self.per_transition)

    def __call__(self, chunk: list[dict[str, np.ndarray]]) -> None:
        self.parts += chunk
        self.collected += sum(len(part["rew"]) for part in chunk)
        if not self.collected:
            return
        if not self.measured:
            self._measure()
        free = self._free()
        while free is not None and self._need() > free:
            if self._need() > self.SURE * free or self._settled():
                self._refuse_over(self._need(), self._how(), self.measured[-1][2])
            if self.collected < 2 * self.measured[-1][0]:
                return  # measured again once there is twice as much
            self._measure()

    def _need(self) -> int:
        _, fixed, each = self.measured[-1]
        return int(fixed + (self.steps or self.collected) * each)

    def _settled(self) -> bool:
        if self.measured[-1][0] == self.collected and (self.steps is None
                                                       or self.collected >= self.steps):
            return True  # measured on everything there will be (or, --episodes, in hand)
        if self.steps is None:
            return False
        if len(self.measured) < 2:
            return False
        (_, _, before), (_, _, now) = self.measured[-2:]
        return abs(before - now) <= self.SETTLED * now

    def _how(self) -> str:
        n, _, each = self.measured[-1]
        took = f"{time.monotonic() - self.started:.1f} s"
        if self.steps is not None:
            return (f"about {{size}} ({self.steps:,} transitions of about {each:,.0f} bytes "
                    f"each in the file, as {n:,} collected in {took} came out)")
        return (f"more than {{size}} (the {self.collected:,} transitions collected in {took}, "
                f"before all {self.episodes:,} episodes ended, already take that)")

    def _measure(self) -> None:
        """Measure the file's fixed bytes and bytes per transition on everything collected:
        each env's part ends where the collection's end would cut it."""
        from rltrain.data.datasets.dataset import make_dataset, new_meta
        from rltrain.data.datasets.files import encoded_size

        def size(parts: list[dict[str, np.ndarray]]) -> int:
            parts = [dict(p, truncated=p["truncated"].copy()) for p in parts if len(p["rew"])]
            for p in parts:
                p["truncated"][-1] = True  # as collect() marks an env's last transition
            obs, act, rew, next_obs, terminated, truncated = (
                np.concatenate([p[name] for p in parts])
                for name in ("obs", "act", "rew", "next_obs", "terminated", "truncated"))
            ds = make_dataset(obs, act, rew, next_obs, terminated, truncated,
                              meta=new_meta(**self.meta))
            return encoded_size(ds, self.out.suffix)

        first = [{k: v[:1] for k, v in self.parts[0].items()}]
        one = size(first)
        each = (size(self.parts) - one) / (self.collected - 1) if self.collected > 1 else one
        self.measured.append((self.collected, one - each, each))

    def _free(self) -> int | None:
        from rltrain.data.datasets.files import free_bytes

        return free_bytes(_existing(self.out.parent))

    def _refuse_over(self, need: int, how: str, each: float | None) -> None:
        """UserError if ``need`` bytes do not fit in the output's folder; ``how`` says how the
        need was worked out ({size} stands for it); ``each``: bytes per transition, for the
        --steps that would fit."""
        from rltrain.data.datasets.files import size_text

        free = self._free()
        if free is None or need <= free:
            return
        if self.steps is not None and each:
            fewer = f"collect fewer (--steps {max(1, int(free // (each * 1.1))):,} would fit)"
        else:
            fewer = "collect fewer (--episodes N, or --steps N, a number known in advance)"
        held = ""
        if self.out.is_file():  # --force: replaced only once the new file is whole
            held = (f" (the {self.out.name} it replaces keeps its "
                    f"{size_text(self.out.stat().st_size)} until the new one is whole)")
        raise UserError(f"--out {self.out}: the dataset will not fit: it needs "
                        f"{how.format(size=size_text(need))}, and {size_text(free)} is free "
                        f"in {_existing(self.out.parent)}{held}; {fewer}, or write it where "
                        "there is room (--out)")


def _existing(folder: Path) -> Path:
    """``folder``, or its nearest ancestor that exists (where --out's folders will be made)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder
