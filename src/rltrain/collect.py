"""``rltrain-collect``: offline-RL datasets from trained policies, random policies, replay
buffers, or other datasets.

::

    rltrain-collect RUN_DIR --episodes N [--weights best|final|last] [--noise X] --out data.h5
    rltrain-collect RUN_DIR --steps N ... --out data.h5
    rltrain-collect --random --env ENV_ID [--env-kwargs JSON] --episodes N --out random.h5
    rltrain-collect RUN_DIR --random --steps N --out random.h5
    rltrain-collect RUN_DIR --buffer --out replay.h5
    rltrain-collect --merge a.h5 b.npz --out mixed.h5

A trained policy is the run's deployable policy (what ``rltrain-eval`` runs: raw
observations in, the env's actions out), rebuilt from the run's config; it acts on fresh
envs from the one env factory (the run's id, kwargs and wrappers), seeded with ``--seed``
(default ``20000 +`` the run's seed, apart from its train, test and eval seeds). The same
command gives the same transitions. The collector writes the transitions, so an episode's
last ``next_obs`` is its true final observation under either autoreset mode.

``--episodes N`` splits the episodes over the envs in fixed quotas (as a test step does) and
keeps each env's first episodes whole; ``--steps N`` keeps each env's first transitions, its
last episode marked truncated where the collection cut it.

rltrain's own modules are imported inside the functions that need them, after the arguments
are parsed: they import torch and gymnasium (1.1 s here), and ``rltrain-collect --help`` or a
wrong argument then answers in 0.08 s.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rltrain.core import Policy
from rltrain.evaluate import (
    TRUST_HELP,
    WEIGHT_FILES,
    ArgumentParser,
    UserError,
    _int_at_least,
    positive_int,
    seed_int,
    short,
)
from rltrain.streams import clip_long_words, os_error_text

if TYPE_CHECKING:
    from rltrain.envs import EnvFamily

#: the default seed is this plus the run's seed (eval's default is 10_000 plus it)
SEED_OFFSET = 20_000
#: envs of a --random --env collection unless --num-envs says otherwise
DEFAULT_NUM_ENVS = 8
#: vector steps per collection call: each call fills a fresh chunk of the lanes
CHUNK = 256
#: what :func:`collect` calls after each chunk (see :class:`RoomCheck`)
Watch = Callable[[list[dict[str, np.ndarray]]], None]


# --------------------------------------------------------------------------- collecting
def collect(envs: Any, policy: Policy, *, seed: int, episodes: int | None = None,
            steps: int | None = None, watch: Watch | None = None) -> dict[str, np.ndarray]:
    """Run ``policy`` on ``envs`` (reset with ``seed``) until every env has its quota of
    ``episodes`` or ``steps`` (:func:`rltrain.collector.episode_quotas`); returns the
    transitions as arrays, env after env, each env's in time order, cut to its quota (an
    episode the cut ends is marked truncated). ``watch`` is called after every chunk with
    its transitions, one dict of arrays per env that got some (a :class:`RoomCheck` stops the
    collection by raising when the dataset will not fit).

    The :class:`~rltrain.collector.Collector` steps the envs and writes lanes of an
    append-only buffer, which is read and cleared every :data:`CHUNK` vector steps. The
    buffer stores observations as training does (:mod:`rltrain.observations`): images as
    uint8, Dict observations as the uint8 rows the collector packs them into; the policy
    sees them so too.
    """
    import gymnasium as gym

    from rltrain.collector import Collector, episode_quotas
    from rltrain.data.buffers import ReplayBuffer
    from rltrain.data.datasets.dataset import ARRAYS
    from rltrain.observations import storage_dtype, stored_shape

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

    from rltrain.observations import storage_dtype, stored_shape

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


def noisy(act: Policy, space: Any, noise: float, seed: int) -> Policy:
    """``act`` with exploration noise: Gaussian of std ``noise`` x half the action range,
    clipped to the bounds (Box), or epsilon-greedy with epsilon ``noise`` (Discrete; each
    action of MultiDiscrete and MultiBinary ones is replaced whole)."""
    import gymnasium as gym

    rng = np.random.default_rng(seed)
    if isinstance(space, gym.spaces.Discrete):
        start, n = int(space.start), int(space.n)

        def epsilon_greedy(obs: np.ndarray) -> np.ndarray:
            a = np.asarray(act(obs))
            explore = rng.random(len(a)) < noise
            return np.where(explore, rng.integers(start, start + n, size=len(a)), a)
        return epsilon_greedy
    if isinstance(space, (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        if isinstance(space, gym.spaces.MultiDiscrete):
            low = np.asarray(space.start, dtype=np.int64)
            high = low + space.nvec
        else:
            low, high = np.zeros(space.shape, np.int64), np.full(space.shape, 2)

        def epsilon_greedy_whole(obs: np.ndarray) -> np.ndarray:
            a = np.asarray(act(obs))
            explore = (rng.random(len(a)) < noise).reshape(-1, *[1] * (a.ndim - 1))
            return np.where(explore, rng.integers(low, high, size=a.shape), a)
        return epsilon_greedy_whole
    from rltrain.actions import scaling

    _, half_range, _, _ = scaling(space.low, space.high)  # 1 where a bound is infinite
    low, high = space.low.astype(np.float32), space.high.astype(np.float32)
    std = (noise * half_range).astype(np.float32)

    def gaussian(obs: np.ndarray) -> np.ndarray:
        a = np.asarray(act(obs), dtype=np.float32)
        return np.clip(a + rng.standard_normal(a.shape).astype(np.float32) * std, low, high)
    return gaussian


def run_policy(loaded: Any, space: Any, noise: float, seed: int) -> Any:
    """The loaded run's policy as the collector steps envs with it, with exploration ``noise``
    (:func:`noisy`) on its actions: a plain policy, or for one with memory a
    :class:`rltrain.recurrent.RecurrentPolicy` whose states the collector keeps per env
    (zeros at each episode's start), as rltrain-eval threads them."""
    perturb = noisy(np.asarray, space, noise, seed) if noise else None
    if not loaded.recurrent:
        def act(obs: np.ndarray) -> np.ndarray:
            a = loaded.act(np.asarray(obs))
            return a if perturb is None else perturb(a)
        return act
    from rltrain.recurrent import RecurrentPolicy

    acting = loaded.acting()
    if perturb is None:
        return acting

    def step(obs: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
        a, after = acting.step(obs, state)
        return perturb(a), after
    return RecurrentPolicy(step, acting.state_size)


# --------------------------------------------------------------------------- sources
def _env_config(args: argparse.Namespace) -> Any:
    """The env config of ``--env ID [--env-kwargs JSON]``."""
    from rltrain.config import EnvConfig, check_env

    kwargs = {}
    if args.env_kwargs is not None:
        try:
            kwargs = json.loads(args.env_kwargs)
        except json.JSONDecodeError as e:
            raise UserError(f"--env-kwargs {args.env_kwargs!r} is not JSON ({e}); pass an "
                            "object, e.g. '{\"g\": 9.81}'") from None
        if not isinstance(kwargs, dict):
            raise UserError(f"--env-kwargs must be a JSON object, e.g. '{{\"g\": 9.81}}', got "
                            f"{args.env_kwargs!r}")
    cfg = EnvConfig(name=args.env, id=args.env, kwargs=kwargs)
    check_env(cfg)
    import gymnasium as gym

    from rltrain.envs import import_env_modules, split_id, unregistered_family

    import_env_modules(cfg)  # module:Env-v0 registers its env on import
    try:
        gym.spec(split_id(args.env)[1])
    except gym.error.Error as e:
        family = unregistered_family(args.env)
        if family is not None:
            raise UserError(unregistered_text(args.env, family)) from None
        own = "" if split_id(args.env)[0] else (
            "; for your own env, pass --env mypkg.envs:MyEnv-v0 (the module is imported first)")
        raise UserError(f"--env {args.env} is not a registered gymnasium env ({short(e)}){own}"
                        ) from None
    return cfg


def unregistered_text(env_id: str, family: EnvFamily) -> str:
    """Why ``env_id`` of a known family (:class:`rltrain.envs.EnvFamily`) is not registered,
    and the --env that works (or, where the bare env's observations cannot be stored, the
    run directory of its preset)."""
    first = f"--env {env_id} is not registered yet: {family.why}"
    if family.bare:
        return (f"{first}; pass --env {family.module}:{env_id} (MODULE:ID imports the module "
                "first)")
    return (f"{first}, and their observations need env={family.preset}'s wrappers; collect on a "
            f"run of it: rltrain env={family.preset} env.id={env_id} ..., then rltrain-collect "
            "RUN_DIR --random --episodes N --out FILE")


def _space_info(env_cfg: Any) -> Any:
    from rltrain.envs import make_vector_env, max_episode_steps, space_info

    envs = make_vector_env(env_cfg, 1)
    try:
        info = space_info(envs, env_cfg.id, max_episode_steps(env_cfg)[0],
                          env_cfg.reward_threshold)
        return info, envs.single_observation_space, envs.single_action_space
    finally:
        envs.close()


def _env_meta(env_cfg: Any, obs_space: Any, act_space: Any) -> dict[str, Any]:
    from rltrain.data.datasets.dataset import json_safe
    from rltrain.data.datasets.spaces import describe_space
    from rltrain.envs import max_episode_steps

    return {"env_id": env_cfg.id, "env_kwargs": json_safe(dict(env_cfg.kwargs)),
            "env_wrappers": json_safe(list(env_cfg.wrappers)),
            "max_episode_steps": max_episode_steps(env_cfg)[0],
            "observation_space": describe_space(obs_space),
            "action_space": describe_space(act_space)}


def from_policy(args: argparse.Namespace) -> tuple[Any, str]:
    """A dataset collected by the run's policy, or by a random one; and a line saying how."""
    run_seed = 0
    if args.random:
        if args.run_dir is not None:
            from rltrain.settings import load_run_settings

            s = load_run_settings(args.run_dir, device="cpu", consent=args.trust)
            env_cfg, run_seed = s.env, s.seed
        else:
            env_cfg = _env_config(args)
        info, obs_space, act_space = _space_info(env_cfg)
        loaded = None
    else:
        from rltrain.evaluate import load_run

        loaded = load_run(args.run_dir, args.weights or "best", device="cpu",
                          consent=args.trust)
        env_cfg, run_seed, info = loaded.settings.env, loaded.settings.seed, loaded.info
        _, obs_space, act_space = _space_info(env_cfg)
    if args.noise and info.discrete and args.noise > 1:
        raise UserError(f"--noise {args.noise} is the epsilon of epsilon-greedy for "
                        f"{info.env_id}'s discrete actions: use a value from 0 to 1")
    from rltrain.collector import random_policy
    from rltrain.data.datasets.dataset import make_dataset, new_meta
    from rltrain.envs import make_vector_env

    seed = SEED_OFFSET + run_seed if args.seed is None else args.seed
    default_envs = (DEFAULT_NUM_ENVS if args.run_dir is None else env_cfg.num_train_envs)
    num_envs = args.num_envs or default_envs
    num_envs = min(num_envs, args.episodes if args.episodes is not None else args.steps)
    room = RoomCheck(args.out, args.steps, args.episodes, transition_bytes(obs_space, act_space),
                     {**_env_meta(env_cfg, obs_space, act_space), "policy": {"kind": "sample"}})
    room.before()
    envs = make_vector_env(env_cfg, num_envs)
    try:
        if loaded is None:
            policy = random_policy(envs, seed)
            described: dict[str, Any] = {"kind": "random"}
            how = "a uniform random policy"
        else:
            policy = run_policy(loaded, act_space, args.noise, seed)
            weights = args.weights or "best"
            described = {
                "kind": "policy", "run_dir": str(args.run_dir.resolve()),
                "algo": loaded.settings.algo.name, "weights": weights,
                "weights_path": str(loaded.weights_path.resolve()), "noise": args.noise,
                "noise_kind": None if not args.noise else (
                    "epsilon-greedy" if info.discrete else "gaussian, std noise x half range"),
            }
            how = (f"{loaded.settings.algo.name}'s {weights} policy ({loaded.weights_path})"
                   + (f" with noise {args.noise:g}" if args.noise else ""))
        arrays = collect(envs, policy, seed=seed, episodes=args.episodes, steps=args.steps,
                         watch=room)
    finally:
        envs.close()
    meta = new_meta(**_env_meta(env_cfg, obs_space, act_space), policy=described,
                    source="rltrain-collect", seed=seed, num_envs=num_envs,
                    asked={"episodes": args.episodes, "steps": args.steps})
    ds = make_dataset(arrays["obs"], arrays["act"], arrays["rew"], arrays["next_obs"],
                      arrays["terminated"], arrays["truncated"], meta=meta)
    return ds, f"{how} on {num_envs} {info.env_id} env{'s' * (num_envs > 1)}, seed {seed}"


def from_buffer(args: argparse.Namespace) -> tuple[Any, str]:
    """The replay buffer in the run's newest usable checkpoint."""
    from rltrain.checkpoint import CheckpointError, load_latest
    from rltrain.data.datasets.dataset import new_meta
    from rltrain.data.datasets.replay import from_replay_buffer
    from rltrain.settings import load_run_settings
    from rltrain.trainer import TRAINERS

    s = load_run_settings(args.run_dir, device="cpu", consent=args.trust)
    if not TRAINERS[s.trainer.name].keeps_replay_buffer:
        kind = {"onpolicy": "on-policy", "offline": "offline"}.get(s.trainer.name,
                                                                  s.trainer.name)
        raise UserError(f"--buffer: {args.run_dir} is an {kind} run "
                        f"(algo={s.algo.name}), which keeps no replay buffer; collect from its "
                        "policy instead: rltrain-collect RUN_DIR --episodes N --out FILE")
    try:
        ckpt, used, _ = load_latest(args.run_dir / "checkpoints")
    except CheckpointError as e:
        raise UserError(f"--buffer: {short(e, 240)}") from None
    from rltrain.lifecycle import ForeignFile, file_identity, not_own, own_identity

    try:
        problem = not_own(used, file_identity(ckpt), own_identity(args.run_dir))
    except ForeignFile as e:
        problem = str(e)
    if problem is not None:
        raise UserError(f"--buffer: {problem}; collect from the directory of the run that "
                        "wrote it")
    buffer = (ckpt["trainer"].get("storage") or {}).get("buffer")
    if buffer is None:
        raise UserError(f"--buffer: {used} holds no replay buffer (the run was trained with "
                        "trainer.checkpoint_buffer=false); collect from its policy instead")
    info, obs_space, act_space = _space_info(s.env)
    meta = new_meta(**_env_meta(s.env, obs_space, act_space),
                    policy={"kind": "replay buffer", "run_dir": str(args.run_dir.resolve()),
                            "algo": s.algo.name, "checkpoint": str(used.resolve()),
                            "env_step": int(ckpt.get("trainer", {}).get("env_step", 0))},
                    source=f"replay buffer of {args.run_dir}")
    try:
        ds = from_replay_buffer(buffer, discrete=info.discrete,
                                action_low=info.action_low, action_high=info.action_high,
                                meta=meta)
    except (KeyError, IndexError, ValueError, TypeError) as e:
        raise UserError(f"--buffer: the replay buffer in {used} is damaged ({short(e)})"
                        ) from None
    return ds, f"the replay buffer of {s.algo.name} in {used}"


def from_merge(args: argparse.Namespace) -> tuple[Any, str]:
    """The datasets one after another; their spaces must be the same."""
    from rltrain.data.datasets.dataset import concatenate, new_meta
    from rltrain.data.datasets.sources import load_dataset
    from rltrain.data.datasets.spaces import space_mismatch, space_text

    parts = [load_dataset(str(spec)) for spec in args.merge]
    first = parts[0]
    for spec, part in zip(args.merge[1:], parts[1:], strict=True):
        for key, what in (("observation_space", "observation"), ("action_space", "action")):
            if space_mismatch(part.meta[key], first.meta[key]) is not None:
                raise UserError(f"--merge: {spec} has {what} space "
                                f"{space_text(part.meta[key])} but {args.merge[0]} has "
                                f"{space_text(first.meta[key])}; merge datasets of the same "
                                "spaces")
    env_ids = list(dict.fromkeys(str(p.meta.get("env_id")) for p in parts))
    meta = new_meta(
        env_id=first.meta.get("env_id"), env_kwargs=first.meta.get("env_kwargs", {}),
        observation_space=first.meta["observation_space"],
        action_space=first.meta["action_space"],
        policy={"kind": "merge", "parts": [
            {"spec": str(spec), "source": p.meta.get("source"), "env_id": p.meta.get("env_id"),
             "policy": p.meta.get("policy"), "transitions": len(p), "episodes": p.num_episodes}
            for spec, p in zip(args.merge, parts, strict=True)]},
        source="merge of " + ", ".join(map(str, args.merge)))
    ds = concatenate(parts, meta)
    note = f" (env ids {', '.join(env_ids)})" if len(env_ids) > 1 else ""
    return ds, f"{len(parts)} datasets merged{note}"


# --------------------------------------------------------------------------- the command
def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="rltrain-collect",
        description="Write an offline-RL dataset (.h5, .hdf5 or .npz): episodes of a trained "
        "run's policy (optionally noisy) or of a random policy on fresh seeded envs, an "
        "off-policy run's replay buffer, or several datasets merged.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  rltrain-collect RUN_DIR --episodes 100 --noise 0.1 --out expert.h5\n"
        "  rltrain-collect RUN_DIR --steps 100000 --weights last --out medium.h5\n"
        "  rltrain-collect --random --env Pendulum-v1 --steps 100000 --out random.h5\n"
        "  rltrain-collect RUN_DIR --buffer --out replay.h5\n"
        "  rltrain-collect --merge expert.h5 random.h5 --out mixed.h5",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", type=Path, nargs="?",
                   help="a run directory written by rltrain (holds .hydra/config.yaml)")
    p.add_argument("--out", type=Path, required=True, metavar="FILE",
                   help="the dataset to write: .h5 or .hdf5 (HDF5, compressed) or .npz")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--trust", action="store_true", help=TRUST_HELP)
    size = p.add_argument_group("how much (one of)")
    size.add_argument("--episodes", type=positive_int, default=None, metavar="N",
                      help="N whole episodes, in fixed per-env quotas")
    size.add_argument("--steps", type=positive_int, default=None, metavar="N",
                      help="N transitions (each env's last episode may be cut: marked "
                      "truncated)")
    pol = p.add_argument_group("policy")
    pol.add_argument("--weights", choices=tuple(WEIGHT_FILES), default=None,
                     help="the run's best/policy.pt, final/policy.pt, or the policy in "
                     "checkpoints/last.pt (default: best)")
    pol.add_argument("--noise", type=non_negative_float, default=0.0, metavar="X",
                     help="exploration: Gaussian noise of std X times half the action range "
                     "(continuous, clipped to the bounds) or epsilon-greedy with epsilon X "
                     "(discrete); default 0: the deterministic policy")
    pol.add_argument("--random", action="store_true",
                     help="a uniform random policy, on RUN_DIR's env or on --env")
    pol.add_argument("--env", metavar="ENV_ID", default=None,
                     help="with --random and no RUN_DIR: any gymnasium env id "
                     "(module:Env-v0 imports the module first)")
    pol.add_argument("--env-kwargs", metavar="JSON", default=None,
                     help="with --env: the env's keyword arguments as a JSON object")
    pol.add_argument("--seed", type=seed_int, default=None, metavar="S",
                     help=f"seed of the envs and the noise (default: {SEED_OFFSET} + the run's "
                     "seed; 20000 with --env)")
    pol.add_argument("--num-envs", type=_int_at_least(1, "positive"), default=None,
                     metavar="M", help="envs stepped together (default: the run's "
                     f"env.num_train_envs, {DEFAULT_NUM_ENVS} with --env; at most --episodes)")
    other = p.add_argument_group("other sources")
    other.add_argument("--buffer", action="store_true",
                       help="export RUN_DIR's replay buffer from its newest checkpoint "
                       "(off-policy runs with trainer.checkpoint_buffer=true)")
    other.add_argument("--merge", nargs="+", metavar="DATASET", default=None,
                       help="concatenate datasets of the same spaces (files or minari:ID)")
    return p


def check_args(p: ArgumentParser, args: argparse.Namespace) -> None:
    """Combinations of flags that do not go together: the parser's one-line error."""
    given = [flag for flag, on in (("--episodes", args.episodes is not None),
                                   ("--steps", args.steps is not None),
                                   ("--weights", args.weights is not None),
                                   ("--noise", bool(args.noise)), ("--random", args.random),
                                   ("--env", args.env is not None),
                                   ("--env-kwargs", args.env_kwargs is not None),
                                   ("--seed", args.seed is not None),
                                   ("--num-envs", args.num_envs is not None)) if on]
    if args.merge is not None or args.buffer:
        mode = "--merge" if args.merge is not None else "--buffer"
        if args.merge is not None and args.buffer:
            p.error("--merge and --buffer are different sources; pass one")
        if args.merge is not None and args.run_dir is not None:
            p.error(f"--merge takes datasets, not RUN_DIR ({args.run_dir}); put every dataset "
                    "after --merge")
        if args.buffer and args.run_dir is None:
            p.error("--buffer needs RUN_DIR, the off-policy run whose replay buffer to export")
        if given:
            p.error(f"{given[0]} does not apply to {mode}")
        return
    if args.env_kwargs is not None and args.env is None:
        p.error("--env-kwargs goes with --env")
    if args.env is not None:
        if not args.random:
            p.error("--env collects with a random policy: add --random (a trained policy "
                    "acts on its own run's env: pass RUN_DIR)")
        if args.run_dir is not None:
            p.error("pass RUN_DIR or --env, not both (with RUN_DIR, --random uses the run's env)")
    if args.run_dir is None and args.env is None:
        p.error("pass RUN_DIR (a trained run), --random --env ENV_ID, or --merge DATASET ...")
    if args.random and (args.weights is not None or args.noise):
        p.error(f"{'--weights' if args.weights is not None else '--noise'} does not apply to "
                "--random")
    if (args.episodes is None) == (args.steps is None):
        p.error("pass exactly one of --episodes N and --steps N")


def check_paths(args: argparse.Namespace) -> None:
    """--out and RUN_DIR, checked before any work."""
    from rltrain.data.datasets.files import SUFFIXES

    out: Path = args.out
    if out.suffix.lower() not in SUFFIXES:
        shown = f"suffix {out.suffix!r}" if out.suffix else "no suffix"
        raise UserError(f"--out {out} has {shown}; a dataset is written as .h5, .hdf5 (HDF5) "
                        "or .npz (numpy)")
    if out.is_dir():
        raise UserError(f"--out {out} is a directory; name the dataset file to write")
    if out.exists() and not args.force:
        raise UserError(f"--out {out} exists; pass --force to replace it, or choose another "
                        "file")
    run_dir = args.run_dir
    if run_dir is not None and not (run_dir / ".hydra" / "config.yaml").is_file():
        # what load_run_settings says, before the seconds it takes to import torch
        what = "is not a directory" if not run_dir.is_dir() else "has no .hydra/config.yaml"
        raise UserError(f"{run_dir} {what}; pass a run directory written by rltrain")


def report(ds: Any, how: str, out: Path) -> None:
    """One screen: what was collected, the returns, the file."""
    from rltrain.data.datasets.files import size_text

    s = ds.summary()
    cut = int((ds.truncated & ~ds.terminated).sum())
    print(f"{ds.meta.get('env_id')}: {s['transitions']:,} transitions, {s['episodes']:,} "
          f"episodes ({s['terminated']:,} terminated, {cut:,} truncated), from {how}")
    if s["episodes"]:
        print(f"return {s['return_mean']:.2f} ± {s['return_std']:.2f} (min "
              f"{s['return_min']:.2f}, max {s['return_max']:.2f}), mean episode length "
              f"{s['length_mean']:.1f}")
    print(f"wrote {out} ({size_text(out.stat().st_size)})")


def run(args: argparse.Namespace) -> None:
    from rltrain.data.datasets.files import save_dataset
    from rltrain.errors import NonFiniteError

    check_paths(args)
    try:
        if args.merge is not None:
            ds, how = from_merge(args)
        elif args.buffer:
            ds, how = from_buffer(args)
        else:
            ds, how = from_policy(args)
    except NonFiniteError as e:
        raise UserError(f"collection stopped: {e}") from None
    # compressing a large dataset takes a while: say what is going on
    print(f"writing {args.out} ({len(ds):,} transitions)", flush=True)
    try:
        save_dataset(ds, args.out)
    except OSError as e:
        raise UserError(f"could not write {args.out}: {e.strerror or short(e)}") from None
    report(ds, how, args.out)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP: stop as Ctrl-C does, removing what was half written."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop(signum: int, frame: Any) -> None:
    raise Stopped(signum)


def main(argv: Sequence[str] | None = None) -> None:
    p = parser()
    args = p.parse_args(argv)
    check_args(p, args)
    from rltrain.config import ConfigError

    # the default action of SIGTERM ends the process at once, leaving a half-written file
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, _stop)
    try:
        run(args)
    except (ConfigError, UserError) as e:
        print(f"rltrain-collect: error: {clip_long_words(str(e))}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:  # a path the system refuses (too long, not readable)
        print(f"rltrain-collect: error: {os_error_text(e)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt as e:
        try:
            kept = f" ({args.out} is as it was)" if args.out.is_file() else ""
        except OSError:
            kept = ""
        print(f"rltrain-collect: interrupted; nothing was written{kept}", file=sys.stderr)
        sys.exit(128 + (e.signum if isinstance(e, Stopped) else signal.SIGINT))


if __name__ == "__main__":
    main()
