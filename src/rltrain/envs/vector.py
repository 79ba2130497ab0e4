"""Vector envs for training and testing, their seeds, and what the algorithm needs to know.

Gymnasium 1.x explicitly. The autoreset mode is chosen here, once: an env's own
vector implementation keeps whatever it supports (CartPole's is next-step), and
sync/async vector envs are built in same-step mode, which wastes no step on
resets. The collector handles both modes (see ``data/collector.py``).
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

from rltrain.common.moved import current_name
from rltrain.common.types import DEFAULT_MAX_EPISODE_STEPS, SpaceInfo
from rltrain.config.schemas import ConfigError, EnvConfig, split_id, train_only, wrapper_entry
from rltrain.envs.wrappers import record_sticky_action
from rltrain.spaces.actions import integer_start
from rltrain.spaces.observations import ObservationSpaceError, layout, stored_shape


def env_seeds(seed: int, num_train_envs: int) -> tuple[int, int]:
    """Base seeds for the train and test vector envs.

    A vector env seeds sub-env i with ``base + i``; the train envs take
    ``[seed, seed + m)`` and the test envs start at ``seed + m``, so the two
    ranges never overlap within a run.
    """
    return seed, seed + num_train_envs


# --------------------------------------------------------------------------- the env factory
def _import(module: str, what: str) -> Any:
    # a user's env package in the directory rltrain runs from, as `python -m` would find it
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        # a module's former path (a run made before rltrain's modules moved names
        # rltrain.wrappers) is read as its path now
        return importlib.import_module(current_name(module))
    except ModuleNotFoundError as e:
        top = module.partition(".")[0]
        extra = IMPORT_EXTRAS.get(top)
        if extra is not None and (e.name or "").partition(".")[0] == top:  # not a dependency's
            raise ConfigError(f"{what}: {module} is rltrain's {extra} extra, which is not "
                              f'installed: pip install -e ".[{extra}]" (from a checkout) or '
                              f'pip install "rltrain[{extra}]"') from None
        raise ConfigError(f"{what}: could not import {module!r} ({e}); is the package installed, "
                          "or in the directory you run rltrain from?") from None
    except SyntaxError as e:
        raise ConfigError(f"{what}: {module!r} has a syntax error ({e.filename}, line "
                          f"{e.lineno}: {e.msg})") from None
    except Exception as e:  # noqa: BLE001 - the user's module raised while importing
        raise ConfigError(f"{what}: importing {module!r} failed: {type(e).__name__}: "
                          f"{e}") from None


def import_env_modules(cfg: EnvConfig) -> None:
    """Import ``env.imports`` and the module of a ``module:Env-v0`` id (which register envs)."""
    for module in cfg.imports:
        _import(module, "env.imports")
    id_module, _ = split_id(cfg.id)
    if id_module is not None:
        _import(id_module, f"env.id={cfg.id}")


def _spec(env_id: str) -> gym.envs.registration.EnvSpec:
    _, name = split_id(env_id)
    try:
        return gym.spec(name)
    except gym.error.Error as e:
        family = unregistered_family(env_id)
        if family is not None:  # gymnasium's "have you installed the package?" is wrong here
            raise ConfigError(f"env.id={env_id!r} is not registered yet: {family.why}, which "
                              f"env={family.preset} does; use env={family.preset} "
                              f"env.id={name}") from None
        hint = ("; for your own env, name the module that registers it: "
                "env.id=mypkg.envs:MyEnv-v0, or env.imports=[mypkg.envs]")
        raise ConfigError(f"env.id={env_id!r} is not a registered gymnasium env: {e}"
                          f"{hint if split_id(env_id)[0] is None else ''}") from None


@dataclass(frozen=True)
class EnvFamily:
    """Envs whose ids exist only once a module is imported, and rltrain's preset for them."""

    #: how the family's ids begin
    prefix: str
    #: the module whose import registers them
    module: str
    #: the preset (``env=NAME``) that imports it, with the wrappers the family needs
    preset: str
    #: whether the bare env (no preset wrappers) gives observations rltrain can store
    bare: bool = True

    @property
    def why(self) -> str:
        return f"{self.prefix} ids are registered by importing {self.module}"


#: the families rltrain ships presets for
ENV_FAMILIES = (EnvFamily("MinAtar/", "rltrain.envs.wrappers", "minatar"),
                EnvFamily("ALE/", "ale_py", "atari"),
                # its observations hold the mission text, which the preset's wrapper drops
                EnvFamily("MiniGrid-", "minigrid", "minigrid", bare=False))


def unregistered_family(env_id: str) -> EnvFamily | None:
    """The family of ``env_id`` when its registering module has not been imported (so that
    gymnasium does not know the id yet), else None."""
    module, name = split_id(env_id)
    if module is not None:
        return None
    return next((f for f in ENV_FAMILIES
                 if name.startswith(f.prefix) and f.module not in sys.modules), None)


def max_episode_steps(cfg: EnvConfig) -> tuple[int, str]:
    """The time limit of every env of the run, and where it comes from (config, env,
    default). An env with no limit gets one, so that no test episode can run forever."""
    if cfg.max_episode_steps is not None:
        return cfg.max_episode_steps, "env.max_episode_steps"
    import_env_modules(cfg)
    registered = _spec(cfg.id).max_episode_steps
    if registered is not None:
        return registered, "the env's registration"
    return DEFAULT_MAX_EPISODE_STEPS, "rltrain's default for envs without a time limit"


def registered_threshold_caveats(cfg: EnvConfig) -> list[str]:
    """Why the env's registered reward threshold may not mean what it says for this run: it
    was set for the env's own rewards and time limit, so a reward wrapper in ``env.wrappers``
    or another ``env.max_episode_steps`` can put it out of reach (or make it trivial)."""
    out = [f"env.wrappers changes the rewards ({spec.label})"
           for spec in run_wrappers(cfg, train=False)  # the returns tests report
           if isinstance(spec.factory, type) and issubclass(
               spec.factory, (gym.RewardWrapper, gym.wrappers.NormalizeReward))]
    registered = _spec(cfg.id).max_episode_steps
    if cfg.max_episode_steps is not None and cfg.max_episode_steps != registered:
        out.append(f"env.max_episode_steps={cfg.max_episode_steps:,} is not the registered "
                   f"{registered if registered is None else format(registered, ',')}")
    return out


#: rltrain's extras, by the package of gymnasium's envs that needs them (pyproject.toml)
EXTRAS = {"gymnasium.envs.mujoco": "mujoco", "gymnasium.envs.box2d": "box2d",
          "ale_py": "atari", "minatar": "minatar", "minigrid": "minigrid"}
#: rltrain's extras, by the package an env file imports to register its envs (env.imports)
IMPORT_EXTRAS = {"ale_py": "atari", "minatar": "minatar", "minigrid": "minigrid"}


def needed_extra(spec: gym.envs.registration.EnvSpec) -> str | None:
    """The rltrain extra an env needs, from the module of its entry point: gymnasium's own
    advice (``pip install "gymnasium[mujoco]"``) would not install what rltrain pins."""
    entry = spec.entry_point
    module = entry.partition(":")[0] if isinstance(entry, str) else getattr(
        entry, "__module__", None) or ""
    for package, extra in EXTRAS.items():
        if module == package or module.startswith(f"{package}."):
            return extra
    return None


def missing_extra_message(env_id: str, extra: str, error: Exception) -> str:
    """One line naming the pip install. Gymnasium raises DependencyNotInstalled when the
    package itself is missing (its text is the wrong advice, so it is left out); a plain
    ImportError means one of the package's own imports failed, which it names."""
    what = "" if isinstance(error, gym.error.DependencyNotInstalled) else f" ({error})"
    return (f"env {env_id} needs the {extra} extra, which is not installed{what}: "
            f'pip install -e ".[{extra}]" (from a checkout) or pip install "rltrain[{extra}]"')


_mujoco_warnings: set[str] | None = None


def route_mujoco_warnings() -> None:
    """MuJoCo prints its warnings to the console, once per env (HalfCheetah's model uses a
    deprecated attribute: 11 identical lines for 1 train and 10 test envs), and appends them to
    MUJOCO_LOG.TXT in the working directory. Send each distinct one to rltrain's log once
    instead (console and rltrain.log). Without the mujoco package this does nothing: making the
    env then reports the missing extra."""
    global _mujoco_warnings
    if _mujoco_warnings is not None:
        return
    try:
        import mujoco
    except ImportError:
        return
    _mujoco_warnings = set()

    def warn(message: str) -> None:
        if message not in _mujoco_warnings:
            _mujoco_warnings.add(message)
            logging.getLogger("rltrain").warning(f"MuJoCo: {message}")

    mujoco.set_mju_user_warning(warn)


@dataclass(frozen=True)
class WrapperSpec:
    """One entry of ``env.wrappers``, resolved."""

    label: str
    factory: Callable[..., Any]
    kwargs: dict[str, Any]
    #: wraps the whole vector env (a gymnasium VectorWrapper) rather than each env
    vector: bool
    #: the entry's place, for messages: ``env.wrappers[2]``
    where: str = "env.wrappers"
    #: wraps the training envs alone (``train_only: true``)
    train_only: bool = False


def resolve_wrappers(entries: list[Any]) -> list[WrapperSpec]:
    """``env.wrappers`` entries: ``"gymnasium.wrappers.FlattenObservation"`` (a bare class
    name means gymnasium's), ``{name: ..., kwargs: {...}}`` (``train_only: true``: for the
    training envs alone) or Hydra's ``{_target_: ..., key: value}``."""
    out = []
    for i, entry in enumerate(entries):
        where = f"env.wrappers[{i}]"
        parsed = wrapper_entry(entry)
        if parsed is None:
            raise ConfigError(f"{where} must be a wrapper's dotted name or {{name: ..., kwargs: "
                              f"{{...}}}} (and train_only: true for the training envs alone), "
                              f"got {entry!r}")
        name, kwargs = parsed
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: the wrapper's name must be a string, got {name!r}")
        only = train_only(entry)
        if only is None:
            raise ConfigError(f"{where}: train_only must be true or false, got "
                              f"{entry['train_only']!r}")
        module, _, attr = name.rpartition(".")
        target = _import(module, where) if module else gym.wrappers
        factory = getattr(target, attr, None)
        if factory is None:
            place = module or "gymnasium.wrappers"
            raise ConfigError(f"{where}: {place} has no {attr!r}")
        if not callable(factory):
            raise ConfigError(f"{where}: {name} is not a wrapper class or function")
        vector = isinstance(factory, type) and issubclass(factory, VectorWrapper)
        out.append(WrapperSpec(name, factory, kwargs, vector, where, only))
    return out


def run_wrappers(cfg: EnvConfig, train: bool) -> list[WrapperSpec]:
    """The wrappers of one vector env, in order: all of ``env.wrappers`` for the training
    envs, those not ``train_only`` for the others."""
    return [w for w in resolve_wrappers(list(cfg.wrappers)) if train or not w.train_only]


def _spaces(env: Any) -> tuple[gym.Space, gym.Space]:
    """The observation and action spaces of one env (of each env of a vector env)."""
    if isinstance(env, VectorEnv):
        return env.single_observation_space, env.single_action_space
    return env.observation_space, env.action_space


def _wrap(env: Any, spec: WrapperSpec) -> Any:
    before = _spaces(env)
    try:
        wrapped = spec.factory(env, **spec.kwargs)
    except Exception as e:  # noqa: BLE001 - a wrapper refusing its env or arguments
        if isinstance(e, gym.error.DependencyNotInstalled) and not spec.vector:
            raise  # make_vector_env names the env's extra (AtariPreprocessing needs opencv)
        raise ConfigError(f"{spec.where} {spec.label}{spec.kwargs or ''} failed: "
                          f"{type(e).__name__}: {e}") from None
    expected = VectorEnv if spec.vector else gym.Env
    if not isinstance(wrapped, expected):
        raise ConfigError(f"{spec.where} {spec.label} returned "
                          f"{type(wrapped).__name__}, not a gymnasium {expected.__name__}")
    after = _spaces(wrapped)
    if spec.train_only and after != before:
        i = 0 if after[0] != before[0] else 1
        raise ConfigError(
            f"{spec.where} {spec.label} changes the {('observation', 'action')[i]} space "
            f"({before[i]} -> {after[i]}), but it is train_only: the test envs and the saved "
            "policy see the spaces without it; wrap every env with it, or none")
    return wrapped


def _make_one(cfg: EnvConfig, limit: int | None, render_mode: str | None,
              extra: Callable[[gym.Env, int], gym.Env] | None, train: bool,
              index: int) -> gym.Env:
    """One env of a sync or async vector env (module level, so subprocesses can pickle it)."""
    import_env_modules(cfg)
    kwargs = dict(cfg.kwargs)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    env = gym.make(split_id(cfg.id)[1], max_episode_steps=limit, **kwargs)
    # Atari with sticky actions: the action the emulator repeats, kept for exact resumes
    env = record_sticky_action(env)
    for spec in run_wrappers(cfg, train):
        if not spec.vector:
            env = _wrap(env, spec)
    return extra(env, index) if extra is not None else env


def make_vector_env(cfg: EnvConfig, num_envs: int, *, train: bool = False,
                    render_mode: str | None = None,
                    extra: Callable[[gym.Env, int], gym.Env] | None = None) -> VectorEnv:
    """The one env factory: ``num_envs`` copies of the configured env (imports, id, kwargs,
    time limit, wrappers in order) as a vector env, for training, testing, eval and video.

    :param train: the training envs, which ``train_only`` wrappers wrap too (Atari's episodic
        life and reward clipping); every other env (test, eval, video, export, collect) is
        the env whose returns are reported, without them.
    :param extra: a last per-env wrapper ``extra(env, index)`` (eval's video recorder).
    """
    import_env_modules(cfg)
    spec = _spec(cfg.id)
    if needed_extra(spec) == "mujoco":
        route_mujoco_warnings()
    wrappers = run_wrappers(cfg, train)
    limit, _ = max_episode_steps(cfg)
    mode = cfg.vectorization
    if mode == "auto":
        # not ALE's AtariVectorEnv: by its defaults it clips every env's rewards, presses FIRE
        # and stacks frames (test returns would not be the game's score), and its emulators,
        # in C++ threads, offer no state to save (scripts/bench_atari_vector.py)
        native = (spec.vector_entry_point is not None and not wrappers and render_mode is None
                  and extra is None and needed_extra(spec) != "atari")
        mode = "vector_entry_point" if native else "sync"
    try:
        if mode == "vector_entry_point":
            kwargs = dict(cfg.kwargs)
            if cfg.max_episode_steps is not None or spec.max_episode_steps is None:
                kwargs["max_episode_steps"] = limit
            envs = gym.make_vec(split_id(cfg.id)[1], num_envs=num_envs,
                                vectorization_mode=mode, **kwargs)
        else:
            fns = [functools.partial(_make_one, cfg, limit, render_mode, extra, train, i)
                   for i in range(num_envs)]
            vector_cls = gym.vector.SyncVectorEnv if mode == "sync" else gym.vector.AsyncVectorEnv
            envs = vector_cls(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    except ConfigError:
        raise
    except (gym.error.DependencyNotInstalled, ImportError) as e:
        package_extra = needed_extra(spec)
        if package_extra is not None:
            raise ConfigError(missing_extra_message(cfg.id, package_extra, e)) from None
        if render_mode is not None or not isinstance(e, gym.error.DependencyNotInstalled):
            raise  # rltrain-eval --video names the extra that renders
        raise ConfigError(f"env {cfg.id!r} needs a package that is not installed: {e}") from None
    except (gym.error.Error, TypeError, ValueError, AssertionError) as e:
        raise ConfigError(f"could not make env {cfg.id!r} with env.kwargs={dict(cfg.kwargs)}: "
                          f"{type(e).__name__}: {e}") from None
    for w in wrappers:
        if w.vector:
            envs = _wrap(envs, w)
    # Continuous actions: the composition root wraps train and test envs in
    # rltrain.spaces.actions.ScaleActions (the algorithm acts in [-1, 1]); eval and export use the
    # deployable policy, which scales (and clips) to the env's bounds itself.
    return envs


def autoreset_mode(envs: VectorEnv) -> AutoresetMode:
    mode = envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
        raise ConfigError(f"vector envs with autoreset mode {mode} are not supported")
    return mode


def _empty_part(obs_space: gym.Space, act_space: gym.Space) -> str | None:
    """The part of the spaces that holds no values (a Box of shape ``(0,)``, a Dict key of
    one), said as the user would look for it; None when every part holds some."""
    def size(space: gym.Space) -> int | None:
        shape = getattr(space, "shape", None)
        return None if shape is None else int(np.prod(shape))

    parts = [("the action space", act_space)]
    if isinstance(obs_space, gym.spaces.Dict):
        parts += [(f"observation key {key!r}", sub) for key, sub in obs_space.spaces.items()]
    else:
        parts.append(("the observation space", obs_space))
    for what, space in parts:
        if size(space) == 0:
            return f"{what} ({space})"
    return None


def space_info(envs: VectorEnv, env_id: str, max_steps: int = DEFAULT_MAX_EPISODE_STEPS,
               reward_threshold: float | None = None) -> SpaceInfo:
    """:param reward_threshold: the config's (``env.reward_threshold``); None: the env's
        registered one, if any."""
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    if isinstance(obs_space, gym.spaces.Tuple):
        raise ConfigError(
            f"{env_id} has Tuple observations; rltrain takes a Box or a Dict: flatten them with "
            "env.wrappers=[gymnasium.wrappers.FlattenObservation] (in YAML, under env:  "
            "wrappers: [gymnasium.wrappers.FlattenObservation])"
        )
    if isinstance(obs_space, gym.spaces.Dict):
        try:
            layout(obs_space)  # every key one rltrain can store and encode
        except ObservationSpaceError as e:
            raise ConfigError(f"{env_id}: {e}") from None
    elif not isinstance(obs_space, gym.spaces.Box):
        raise ConfigError(
            f"{env_id} has observation space {obs_space}; rltrain supports Box observations "
            "(turn them into a Box with a wrapper listed in env.wrappers)"
        )
    empty = _empty_part(obs_space, act_space)
    if empty is not None:
        raise ConfigError(f"{env_id}: {empty} holds no values, so there is nothing to "
                          "observe or act with; fix the env's space (or a wrapper in "
                          "env.wrappers that changes it)")
    # whether a network can take the observations is the encoders' question (images: no encoder
    # yet; rltrain.nets.encoders.registry.choose refuses them, naming why)
    shape: tuple[int, ...]
    nvec: tuple[int, ...] | None = None
    if isinstance(act_space, gym.spaces.Discrete):
        num_actions, shape, low, high = int(act_space.n), (), None, None
    elif isinstance(act_space, gym.spaces.Box):
        num_actions, shape = None, act_space.shape
        low, high = act_space.low.astype(np.float32), act_space.high.astype(np.float32)
    elif isinstance(act_space, (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        num_actions, shape, low, high = None, tuple(act_space.shape), None, None
        counts = (act_space.nvec if isinstance(act_space, gym.spaces.MultiDiscrete)
                  else np.full(shape, 2))
        nvec = tuple(int(n) for n in np.asarray(counts).reshape(-1))
        if not nvec:
            raise ConfigError(f"{env_id} has action space {act_space}, which has no entries")
    else:
        raise ConfigError(
            f"{env_id} has action space {act_space}; rltrain supports Discrete, MultiDiscrete, "
            "MultiBinary and Box actions (a Tuple or Dict of them: flatten it into one with a "
            "wrapper listed in env.wrappers)"
        )
    return SpaceInfo(
        obs_shape=stored_shape(obs_space),
        num_actions=num_actions,
        action_shape=tuple(shape),
        action_low=low,
        action_high=high,
        reward_threshold=(_spec(env_id).reward_threshold if reward_threshold is None
                          else float(reward_threshold)),
        env_id=env_id,
        max_episode_steps=max_steps,
        obs_space=obs_space,
        action_space=act_space,
        nvec=nvec,
        action_start=integer_start(act_space),
    )
