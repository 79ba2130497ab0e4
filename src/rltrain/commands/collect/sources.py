"""Where a collection's transitions come from: a run's trained policy (with noise), a random
policy, a run's replay buffer, or datasets merged; the envs each is played on, and the meta
each dataset records."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from rltrain.common.errors import UserError
from rltrain.process.streams import short

if TYPE_CHECKING:
    from rltrain.envs.vector import EnvFamily

from rltrain.commands.collect.recording import RoomCheck, collect, transition_bytes

#: observations in, actions out (a loaded policy's: nothing stored beside them)
Actions = Callable[[np.ndarray], np.ndarray]

#: the default seed is this plus the run's seed (eval's default is 10_000 plus it)
SEED_OFFSET = 20_000
#: envs of a --random --env collection unless --num-envs says otherwise
DEFAULT_NUM_ENVS = 8


def noisy(act: Actions, space: Any, noise: float, seed: int) -> Actions:
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
    from rltrain.spaces.actions import scaling

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
    :class:`rltrain.nets.recurrent.RecurrentPolicy` whose states the collector keeps per env
    (zeros at each episode's start), as rltrain-eval threads them."""
    perturb = noisy(np.asarray, space, noise, seed) if noise else None
    if not loaded.recurrent:
        def act(obs: np.ndarray) -> np.ndarray:
            a = loaded.act(np.asarray(obs))
            return a if perturb is None else perturb(a)
        return act
    from rltrain.nets.recurrent import RecurrentPolicy

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
    from rltrain.config.schemas import EnvConfig, check_env

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

    from rltrain.envs.vector import import_env_modules, split_id, unregistered_family

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
    """Why ``env_id`` of a known family (:class:`rltrain.envs.vector.EnvFamily`) is not registered,
    and the --env that works (or, where the bare env's observations cannot be stored, the
    run directory of its preset)."""
    first = f"--env {env_id} is not registered yet: {family.why}"
    if family.bare:
        return (f"{first}; pass --env {family.module}:{env_id} (MODULE:ID imports the module "
                "first)")
    return (f"{first}, and their observations need env={family.preset}'s wrappers; collect on a "
            f"run of it: rltrain env={family.preset} env.id={env_id} ..., then rltrain-collect "
            "RUN_DIR --random --episodes N --out FILE")


def _env_meta(env_cfg: Any, obs_space: Any, act_space: Any) -> dict[str, Any]:
    from rltrain.data.datasets.dataset import json_safe
    from rltrain.data.datasets.spaces import describe_space
    from rltrain.envs.vector import max_episode_steps

    return {"env_id": env_cfg.id, "env_kwargs": json_safe(dict(env_cfg.kwargs)),
            "env_wrappers": json_safe(list(env_cfg.wrappers)),
            "max_episode_steps": max_episode_steps(env_cfg)[0],
            "observation_space": describe_space(obs_space),
            "action_space": describe_space(act_space)}


def from_policy(args: argparse.Namespace) -> tuple[Any, str]:
    """A dataset collected by the run's policy, or by a random one; and a line saying how."""
    from rltrain.assembly.orchestrator import env_spaces, open_run

    run_seed = 0
    if args.random:
        if args.run_dir is not None:
            from rltrain.assembly.checked_config import load_run_settings

            s = load_run_settings(args.run_dir, device="cpu", consent=args.trust)
            env_cfg, run_seed = s.env, s.seed
        else:
            env_cfg = _env_config(args)
        info, obs_space, act_space = env_spaces(env_cfg)
        loaded = None
    else:
        loaded = open_run(args.run_dir, args.weights or "best", device="cpu",
                          consent=args.trust)
        env_cfg, run_seed, info = loaded.settings.env, loaded.settings.seed, loaded.info
        _, obs_space, act_space = env_spaces(env_cfg)
    if args.noise and info.discrete and args.noise > 1:
        raise UserError(f"--noise {args.noise} is the epsilon of epsilon-greedy for "
                        f"{info.env_id}'s discrete actions: use a value from 0 to 1")
    from rltrain.data.collector import random_policy
    from rltrain.data.datasets.dataset import make_dataset, new_meta
    from rltrain.envs.vector import make_vector_env

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
    from rltrain.assembly.checked_config import load_run_settings
    from rltrain.assembly.orchestrator import env_spaces, newest_checkpoint
    from rltrain.data.datasets.dataset import new_meta
    from rltrain.data.datasets.replay import from_replay_buffer
    from rltrain.trainers import TRAINERS

    s = load_run_settings(args.run_dir, device="cpu", consent=args.trust)
    if not TRAINERS[s.trainer.name].keeps_replay_buffer:
        kind = {"onpolicy": "on-policy", "offline": "offline"}.get(s.trainer.name,
                                                                  s.trainer.name)
        raise UserError(f"--buffer: {args.run_dir} is an {kind} run "
                        f"(algo={s.algo.name}), which keeps no replay buffer; collect from its "
                        "policy instead: rltrain-collect RUN_DIR --episodes N --out FILE")
    try:
        ckpt, used = newest_checkpoint(args.run_dir)
    except UserError as e:
        raise UserError(f"--buffer: {e}") from None
    buffer = (ckpt["trainer"].get("storage") or {}).get("buffer")
    if buffer is None:
        raise UserError(f"--buffer: {used} holds no replay buffer (the run was trained with "
                        "trainer.checkpoint_buffer=false); collect from its policy instead")
    info, obs_space, act_space = env_spaces(s.env)
    meta = new_meta(**_env_meta(s.env, obs_space, act_space),
                    policy={"kind": "replay buffer", "run_dir": str(args.run_dir.resolve()),
                            "algo": s.algo.name, "checkpoint": str(used.resolve()),
                            "env_step": int(ckpt.get("trainer", {}).get("env_step", 0))},
                    source=f"replay buffer of {args.run_dir}")
    from rltrain.algorithms import get as algorithm_spec

    # with the fields its algorithm stored beside each transition (AlgoSpec.stored)
    stored = algorithm_spec(s.algo.name).stored_fields(s.algo, info)
    try:
        ds = from_replay_buffer(buffer, discrete=info.discrete,
                                action_low=info.action_low, action_high=info.action_high,
                                meta=meta, fields=stored)
    except (KeyError, IndexError, ValueError, TypeError) as e:
        raise UserError(f"--buffer: the replay buffer in {used} is damaged ({short(e)})"
                        ) from None
    return ds, f"the replay buffer of {s.algo.name} in {used}"


def from_merge(args: argparse.Namespace) -> tuple[Any, str]:
    """The datasets one after another; their spaces must be the same."""
    from rltrain.data.datasets.dataset import concatenate, fields_text, new_meta
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
        if part.declared != first.declared:
            raise UserError(f"--merge: {spec} holds {fields_text(part.declared)} beside each "
                            f"transition but {args.merge[0]} {fields_text(first.declared)}; "
                            "merge datasets that hold the same fields")
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
