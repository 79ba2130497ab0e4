"""The composition root: run config -> envs, algorithm, buffer, collectors, trainer, loggers.

Nothing else reads the config. Every check that can fail runs before the first
file of the run is written, so a bad config leaves nothing behind. Once training
runs, nothing fails silently: a non-finite value, a file that cannot be written or a
crash in an env stops the run with ``summary.json`` saying why, and the last good
checkpoint stays the point to resume from.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import platform
import random
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

import rltrain
from rltrain import signals
from rltrain.actions import ScaleActions
from rltrain.algorithms import CONTINUOUS, DISCRETE, Algorithm, AlgoSpec
from rltrain.algorithms import get as algorithm_spec
from rltrain.checkpoint import load_latest, save_checkpoint, save_policy
from rltrain.collector import Collector, random_policy
from rltrain.config import (
    OBJECTIVES,
    TRAINER_SCHEMAS,
    AlgoConfig,
    ConfigError,
    EnvConfig,
    LoggerConfig,
    OfflineTrainerParams,
    OffPolicyTrainerParams,
    OnlineTrainerParams,
    OnPolicyTrainerParams,
    ReplayBufferConfig,
    TrainerParams,
    TuneConfig,
    check_env,
    check_finite,
    check_known_keys,
    check_positive,
    check_seed,
    check_trainer,
    env_steps_per_collection,
    trainer_problem,
    typed_run_config,
)
from rltrain.data.buffers import ReplayBuffer
from rltrain.envs import (
    SpaceInfo,
    env_seeds,
    make_vector_env,
    max_episode_steps,
    registered_threshold_caveats,
    space_info,
)
from rltrain.errors import SaveError
from rltrain.loggers import ConsoleLogger, JsonlLogger, Logger, TensorBoardLogger
from rltrain.normalize import ObsNormalizer, RewardScaler
from rltrain.stats import EpochStats, InfoStats
from rltrain.trainer import TRAINERS, Callbacks, OffPolicyTrainer, Trainer, derived_seed

log = logging.getLogger("rltrain")


@dataclass(frozen=True)
class Settings:
    """The run config as typed objects, checked."""

    algo: AlgoConfig
    env: EnvConfig
    trainer: TrainerParams
    buffer: ReplayBufferConfig
    logger: LoggerConfig
    seed: int
    device: torch.device
    torch_threads: int
    tune: TuneConfig = field(default_factory=TuneConfig)
    #: an offline run's dataset (``dataset=PATH`` or ``minari:ID``)
    dataset: str | None = None


def settings(cfg: DictConfig) -> Settings:
    check_known_keys(cfg)
    try:
        obj = {k: OmegaConf.to_object(cfg[k])
               for k in ("algo", "env", "trainer", "buffer", "logger")}
    except MissingMandatoryValue as e:
        key = e.full_key if "env.id" not in str(e) else "env.id"
        hint = " (e.g. env=gym env.id=Acrobot-v1)" if key == "env.id" else ""
        raise ConfigError(f"{key} must be set{hint}") from None
    except OmegaConfBaseException as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    for group, value in obj.items():
        check_finite(value, group)
    obj["algo"].check()
    check_env(obj["env"])
    check_trainer(obj["trainer"])
    if not obj["buffer"].size > 0:
        raise ConfigError(f"buffer.size must be > 0, got {obj['buffer'].size}")
    if obj["logger"].progress_interval_s < 0:
        raise ConfigError("logger.progress_interval_s must be >= 0")
    from rltrain import trackers

    trackers.check(obj["logger"])
    if cfg.torch_threads <= 0:
        raise ConfigError(f"torch_threads must be > 0, got {cfg.torch_threads}")
    tune = OmegaConf.to_object(cfg.tune) if "tune" in cfg else TuneConfig()
    if tune.objective not in OBJECTIVES:
        raise ConfigError(f"tune.objective must be one of {', '.join(OBJECTIVES)}, "
                          f"got {tune.objective!r}")
    check_positive(tune, "tune", "last_k")
    dataset = cfg.get("dataset")
    if dataset is not None and not str(dataset).strip():
        raise ConfigError("dataset= is empty; give a file written by rltrain-collect (.h5, "
                          ".hdf5, .npz) or minari:ID")
    return Settings(**obj, seed=check_seed(cfg.seed), device=_device(cfg.device),
                    torch_threads=int(cfg.torch_threads), tune=tune,
                    dataset=None if dataset is None else str(dataset))


def resume_point(run_dir: Path) -> tuple[dict[str, Any], DictConfig, Path, list[str]]:
    """What a resume starts from: the run's newest usable checkpoint (``last.pt``, else the
    newest good numbered one), its config with the schemas again, the file used and the
    problems met on the way.

    :raises CheckpointError: no usable checkpoint; ConfigError: its config is not rltrain's.
    """
    from rltrain.config import register_configs

    ckpt, used, problems = load_latest(run_dir / "checkpoints")
    ckpt["_path"] = str(used)
    register_configs()
    return ckpt, typed_run_config(OmegaConf.create(ckpt["config"])), used, problems


def load_run_settings(run_dir: Path, device: str | None = None) -> Settings:
    """The checked settings of an existing run, from its ``.hydra/config.yaml``;
    ``device`` replaces the run's own (a run trained on cuda evaluates on cpu)."""
    import yaml

    path = run_dir / ".hydra" / "config.yaml"
    if not path.is_file():
        what = "is not a directory" if not run_dir.is_dir() else "has no .hydra/config.yaml"
        raise ConfigError(f"{run_dir} {what}; pass a run directory written by rltrain")
    try:
        raw = OmegaConf.load(path)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path} is damaged ({getattr(e, 'problem', None) or e}{where}); "
                          "it is the run's config, so the run cannot be rebuilt from it") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} cannot be read: {e}") from None
    if not isinstance(raw, DictConfig):
        raise ConfigError(f"{path} is damaged (not a mapping of config groups)")
    cfg = typed_run_config(raw)
    if device is not None:
        cfg.device = device
    return settings(cfg)


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    valid = "use cpu, cuda, cuda:N, mps or auto"
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ConfigError(f"device={name!r} is not a torch device; {valid}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device={name} asked for, but torch sees no CUDA device "
                              f"(torch {torch.__version__}); use device=cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device={name}: torch sees {torch.cuda.device_count()} CUDA "
                              f"device(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError("device=mps asked for, but torch sees no Apple GPU (MPS); use "
                              "device=cpu")
    elif device.type != "cpu":
        raise ConfigError(f"device={name!r}: rltrain trains on real devices only; {valid}")
    return device


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def check_actions(spec: AlgoSpec, info: SpaceInfo) -> None:
    """Refuse an action space the algorithm cannot act in, naming what would work."""
    kind = DISCRETE if info.discrete else CONTINUOUS
    if kind not in spec.actions:
        from rltrain.algorithms import ALGORITHMS

        # what would work here: the same kind of training (online or offline), this action space
        offline = "offline" in spec.trainers
        fits = sorted(name for name, other in ALGORITHMS.items() if kind in other.actions
                      and ("offline" in other.trainers) == offline)
        space = (f"discrete actions (Discrete({info.num_actions}))" if info.discrete else
                 f"continuous actions (Box, shape {info.action_shape})")
        raise ConfigError(f"algo={spec.name} needs {' or '.join(spec.actions)} actions, but "
                          f"{info.env_id} has {space}; use algo={' or algo='.join(fits)}")
    if spec.bounded_actions and not info.discrete:
        bounded = np.isfinite(info.action_low) & np.isfinite(info.action_high)
        if not bounded.all():
            raise ConfigError(
                f"algo={spec.name} squashes its actions into the env's bounds, but {info.env_id}'s "
                f"action space is unbounded in dimensions {np.flatnonzero(~bounded).tolist()}; "
                "give the env finite bounds (e.g. env.wrappers=[{name: RescaleAction, kwargs: "
                "{min_action: -1, max_action: 1}}] on a bounded copy of the space) or use "
                "algo=ppo, which passes unbounded dimensions through unscaled")


def build_algorithm(s: Settings, info: SpaceInfo) -> Algorithm:
    """The registered algorithm for ``s.algo``, with the normalisers ``env.normalize`` asks
    for attached."""
    spec = algorithm_spec(s.algo.name)
    check_actions(spec, info)
    algorithm = spec.cls(s.algo, info, s.device, s.seed)
    norm = s.env.normalize
    obs_norm = ObsNormalizer(info.obs_dim, norm.clip_obs, norm.epsilon) if norm.obs else None
    scaler = None
    if norm.reward:
        gamma = getattr(s.algo, "gamma", 0.99)
        scaler = RewardScaler(s.env.num_train_envs, gamma, norm.clip_reward, norm.epsilon)
    algorithm.set_normalizers(obs_norm, scaler)
    return algorithm


def _available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux: MemAvailable), if known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def build_buffer(s: Settings, algorithm: Algorithm, info: SpaceInfo) -> ReplayBuffer:
    m = s.env.num_train_envs
    act_dtype = np.int64 if info.discrete else np.float32
    common = dict(num_lanes=m, obs_shape=info.obs_shape, act_shape=info.action_shape,
                  act_dtype=act_dtype, seed=s.seed)
    if isinstance(s.trainer, OnPolicyTrainerParams):
        per_collection = env_steps_per_collection(s.trainer, m)
        if per_collection:
            capacity, what = per_collection // m, "the rollout"
        else:
            # n episodes over m envs, each at most T steps: every env finishes at least
            # floor(V / T) episodes in V vector steps, so V <= T * ceil(n / m)
            n = s.trainer.collection_step_num_episodes
            capacity = info.max_episode_steps * math.ceil(n / m)
            what = (f"the rollout of {n} episodes (up to {info.max_episode_steps:,} steps each, "
                    "env.max_episode_steps)")
        circular, n_step = False, 1
    else:
        if s.buffer.size < m:
            raise ConfigError(f"buffer.size={s.buffer.size} is smaller than "
                              f"env.num_train_envs={m}")
        capacity, what, circular = s.buffer.size // m, "buffer.size", True
        n_step = getattr(s.algo, "n_step", 1)
    obs_bytes = 4 * info.obs_dim
    act_bytes = np.dtype(act_dtype).itemsize * max(1, int(np.prod(info.action_shape)))
    need = m * capacity * (2 * obs_bytes + act_bytes + 4 + 2)
    available = _available_memory()
    if available is not None and need > available:
        fix = ("lower buffer.size" if what == "buffer.size" else
               "collect fewer transitions per collection step")
        raise ConfigError(f"{what} needs {_gb(need)} of memory for {m * capacity:,} transitions "
                          f"of {info.env_id} ({info.obs_dim} floats per observation), but "
                          f"{_gb(available)} is available; {fix}")
    try:
        return ReplayBuffer(lane_capacity=capacity, circular=circular, n_step=n_step,
                            gamma=getattr(s.algo, "gamma", 0.99), **common)
    except MemoryError:
        raise ConfigError(f"{what} needs {_gb(need)} of memory, which could not be "
                          "allocated") from None


def check_feasible(s: Settings, algorithm: Algorithm) -> None:
    """Settings that are each valid but cannot work together: refused by name, because the
    run would otherwise end with exit 0 and an agent that never learnt."""
    t = s.trainer
    if isinstance(t, OffPolicyTrainerParams):
        m = s.env.num_train_envs
        capacity = (s.buffer.size // m) * m
        if t.batch_size > capacity:
            raise ConfigError(
                f"trainer.batch_size={t.batch_size} is larger than the replay buffer "
                f"(buffer.size={s.buffer.size}, {capacity} slots over {m} envs): no batch could "
                "ever be sampled, so nothing would be learnt; lower trainer.batch_size or raise "
                "buffer.size")
        per_collection = env_steps_per_collection(t, m)
        steps_per_epoch = (math.ceil(t.epoch_num_steps / per_collection) * per_collection
                           if per_collection else t.epoch_num_steps)
        run_steps = t.max_epochs * steps_per_epoch
        if t.random_warmup_env_steps > run_steps:
            raise ConfigError(
                f"trainer.random_warmup_env_steps={t.random_warmup_env_steps:,} is longer than "
                f"the whole training run ({t.max_epochs} epochs x {steps_per_epoch:,} env steps "
                f"= {run_steps:,}); lower it or train longer")
        u = t.update_step_num_gradient_steps_per_sample
        if per_collection and round(u * per_collection) == 0:
            raise ConfigError(
                f"trainer.update_step_num_gradient_steps_per_sample={u} gives round({u} x "
                f"{per_collection}) = 0 gradient steps per collection step: nothing would be "
                "learnt; raise it or trainer.collection_step_num_env_steps")
        s.algo.check_plan(u * run_steps)


def check_pairing(s: Settings) -> None:
    """The trainer must be one the algorithm runs with."""
    spec = algorithm_spec(s.algo.name)
    trainer = s.trainer.name
    if TRAINER_SCHEMAS.get(trainer) is not type(s.trainer):
        raise ConfigError(f"trainer.name={trainer!r} does not match the trainer's parameters; "
                          "choose a trainer with trainer=<name>, not trainer.name")
    problem = trainer_problem(spec.name, trainer)
    if problem is not None:
        raise ConfigError(problem)
    offline = isinstance(s.trainer, OfflineTrainerParams)
    if offline and s.dataset is None:
        raise ConfigError(
            f"algo={spec.name} learns offline, from a dataset: add dataset=PATH (a file written "
            "by rltrain-collect: .h5, .hdf5 or .npz) or dataset=minari:ID")
    if not offline and s.dataset is not None:
        from rltrain.algorithms import ALGORITHMS

        names = sorted(n for n, other in ALGORITHMS.items() if "offline" in other.trainers)
        raise ConfigError(
            f"dataset= is for the offline algorithms ({', '.join(names)}); algo={spec.name} "
            "learns online from its env: drop dataset= or choose an offline algo")
    if offline and s.env.normalize.reward:
        raise ConfigError(
            "env.normalize.reward=true scales rewards as they are collected, and an offline run "
            "collects none: drop it (env.normalize.obs=true works: its statistics come from "
            "the dataset)")


def _git(cwd: Path) -> dict[str, Any] | None:
    """The commit of the git checkout holding ``cwd``, and whether it has local changes."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                                text=True, timeout=5)
        if commit.returncode != 0:
            return None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=cwd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}


def system_info(command: str, overrides: list[str] | None = None) -> dict[str, Any]:
    """Versions, the command (a sweep job: its own overrides), and the git commits of
    rltrain's source and of the working directory, when they are git checkouts."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gymnasium": gym.__version__,
        "rltrain": rltrain.__version__,
        "command": command,
    }
    if overrides is not None:
        info["overrides"] = list(overrides)
    source = Path(rltrain.__file__).resolve().parents[2]
    git = {}
    if (found := _git(source)) is not None:
        git["rltrain"] = found
    cwd = _git(Path.cwd())
    if cwd is not None and cwd != git.get("rltrain"):
        git["cwd"] = {"path": os.getcwd(), **cwd}
    if git:
        info["git"] = git
    return info


@dataclass(frozen=True)
class Parts:
    """The objects a run is made of, built before any file is written."""

    info: SpaceInfo
    algorithm: Algorithm
    buffer: ReplayBuffer
    #: None offline: nothing is collected in training
    train_collector: Collector | None
    test_collector: Collector
    train_seed: int
    test_seed: int
    #: an offline run's dataset: its fingerprint (spec, path, sha256) and summary
    dataset: dict[str, Any] | None = None

    def close(self) -> None:
        if self.train_collector is not None:
            self.train_collector.envs.close()
        self.test_collector.envs.close()


def build_parts(s: Settings) -> Parts:
    """Seed, then build envs, algorithm, buffer and collectors (envs reset, seeded)."""
    torch.set_num_threads(s.torch_threads)
    seed_everything(s.seed)
    train_seed, test_seed = env_seeds(s.seed, s.env.num_train_envs)
    limit, source = max_episode_steps(s.env)
    if source.startswith("rltrain"):
        log.warning(f"env {s.env.id} registers no time limit: its episodes are cut at "
                    f"{limit:,} steps ({source}); set env.max_episode_steps to choose")
    # a test env without a quota of episodes would only idle
    num_test_envs = min(s.env.num_test_envs, s.trainer.test_step_num_episodes)
    offline = isinstance(s.trainer, OfflineTrainerParams)
    # offline, training takes no env step: only the test envs are made
    train_envs = None if offline else make_vector_env(s.env, s.env.num_train_envs)
    try:
        test_envs = make_vector_env(s.env, num_test_envs)
    except BaseException:
        if train_envs is not None:
            train_envs.close()
        raise
    dataset = None
    try:
        info = space_info(test_envs if train_envs is None else train_envs, s.env.id, limit,
                          s.env.reward_threshold)
        if s.env.reward_threshold is None and info.reward_threshold is not None:
            caveats = registered_threshold_caveats(s.env)
            if caveats:
                log.warning(
                    f"the reward threshold {info.reward_threshold:g} is {s.env.id}'s registered "
                    f"one, for its own rewards and time limit, but {'; '.join(caveats)}: "
                    "'solved' and trainer.stop_score=auto may be out of reach or trivial; set "
                    "env.reward_threshold (or trainer.stop_score) for this setting")
        check_pairing(s)
        algorithm = build_algorithm(s, info)
        if offline:
            buffer, dataset = build_offline_buffer(s, algorithm, info, test_envs)
        else:
            check_feasible(s, algorithm)
            buffer = build_buffer(s, algorithm, info)
    except BaseException:
        if train_envs is not None:
            train_envs.close()
        test_envs.close()
        raise
    if not info.discrete:  # the algorithm acts in [-1, 1]; the envs scale to their bounds
        test_envs = ScaleActions(test_envs)
        train_envs = None if train_envs is None else ScaleActions(train_envs)
    train_collector = None
    if train_envs is not None:
        scaler = algorithm.reward_scaler
        train_collector = Collector(train_envs, buffer,
                                    on_step=None if scaler is None else scaler.observe)
        train_collector.reset(seed=train_seed)
    test_collector = Collector(test_envs)
    test_collector.reset(seed=test_seed)
    return Parts(info, algorithm, buffer, train_collector, test_collector, train_seed, test_seed,
                 dataset)


def build_offline_buffer(s: Settings, algorithm: Algorithm, info: SpaceInfo, envs: Any
                         ) -> tuple[ReplayBuffer, dict[str, Any]]:
    """An offline run's data: the dataset loaded, checked against the env's spaces and the
    trainer's settings, as a one-lane buffer in the algorithm's action space; with
    ``env.normalize.obs``, the observation statistics are the dataset's (fixed)."""
    from rltrain.data import dataset as datasets

    assert s.dataset is not None  # check_pairing
    data = datasets.load_dataset(s.dataset)
    datasets.check_spaces(data, envs.single_observation_space, envs.single_action_space,
                          s.env.id, s.dataset)
    t = s.trainer
    if t.batch_size is None:
        raise ConfigError("trainer.batch_size=null: an offline gradient step samples a batch "
                          "from the dataset; give it a size, e.g. trainer.batch_size=256")
    if t.batch_size > len(data):
        raise ConfigError(
            f"trainer.batch_size={t.batch_size} is larger than the dataset ({len(data):,} "
            f"transitions in {s.dataset}): lower trainer.batch_size or collect more data")
    s.algo.check_plan(t.max_epochs * t.epoch_num_steps)
    if algorithm.obs_norm is not None:
        algorithm.obs_norm.update(torch.as_tensor(data.obs, dtype=torch.float32,
                                                  device=s.device).flatten(1))
    buffer = datasets.to_buffer(data, discrete=info.discrete, action_low=info.action_low,
                                action_high=info.action_high,
                                n_step=getattr(s.algo, "n_step", 1),
                                gamma=getattr(s.algo, "gamma", 0.99), seed=s.seed)
    returns = np.asarray(data.episode_returns(), dtype=np.float64)
    facts = {**datasets.dataset_fingerprint(s.dataset), "transitions": len(data),
             "episodes": int(returns.size),
             "return_mean": float(returns.mean()) if returns.size else None,
             "source": data.meta.get("source"), "policy": data.meta.get("policy")}
    return buffer, facts


def build_trainer(s: Settings, parts: Parts, **kwargs: Any) -> Trainer:
    """The trainer the algorithm runs with; ``kwargs`` go to it (loggers, callbacks)."""
    trainer_cls = TRAINERS[type(s.trainer)]
    if parts.train_collector is None:  # offline
        return trainer_cls(parts.algorithm, s.trainer, parts.buffer, parts.test_collector,
                           reward_threshold=parts.info.reward_threshold,
                           test_seed=parts.test_seed, **kwargs)
    assert isinstance(s.trainer, OnlineTrainerParams)
    if trainer_cls is OffPolicyTrainer:
        kwargs["random_policy"] = random_policy(parts.train_collector.envs, parts.train_seed)
    return trainer_cls(parts.algorithm, s.trainer, parts.buffer, parts.train_collector,
                       parts.test_collector, reward_threshold=parts.info.reward_threshold,
                       test_seed=parts.test_seed, **kwargs)


def rng_state() -> dict[str, Any]:
    np_state = np.random.get_state(legacy=False)
    return {
        "python": random.getstate(),
        "numpy": {**np_state, "state": {"key": torch.from_numpy(
            np_state["state"]["key"].astype(np.int64)), "pos": np_state["state"]["pos"]}},
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np_state = state["numpy"]
    np.random.set_state({**np_state, "state": {
        "key": np_state["state"]["key"].numpy().astype(np.uint32),
        "pos": np_state["state"]["pos"]}})
    torch.set_rng_state(state["torch"])


def completed_epochs(trainer_state: dict[str, Any]) -> int:
    """Epochs fully done (and logged) at a checkpoint."""
    return trainer_state["epoch"] - (trainer_state["partial"] is not None)


@dataclass
class RunContext:
    """What the CLI knows of a run besides its config."""

    run_dir: Path
    #: the command as typed (a sweep job: ``rltrain`` and the job's own overrides)
    command: str = field(default_factory=lambda: " ".join(["rltrain", *sys.argv[1:]]))
    #: the job's overrides (Hydra's ``overrides.task``), for summary.json
    overrides: list[str] | None = None
    #: called once the run is accepted and built, before its first file: writes ``.hydra/``
    on_accept: Callable[[], None] | None = None
    started: float = field(default_factory=time.perf_counter)
    #: the newest checkpoint written or resumed from: path, epoch, env_step, epochs_complete
    checkpoint: dict[str, Any] | None = None
    #: the Optuna trial this run reports to (rltrain.tune.TrialReporter), if any
    trial: Any = None


class StoppedAtOnce(Exception):
    """A second signal stopped training at once; ``summary.json`` has been written."""

    def __init__(self, signum: int, checkpoint: dict[str, Any] | None) -> None:
        super().__init__(signals.name(signum))
        self.signum, self.checkpoint = signum, checkpoint


def run(cfg: DictConfig, ctx: RunContext | Path, started: float | None = None,
        resume: dict[str, Any] | None = None) -> InfoStats:
    """Build everything from ``cfg`` and train; ``ctx.run_dir`` receives every file.

    With ``resume`` (a loaded checkpoint of this run), continue exactly where it stopped,
    or, where that cannot be exact, say so and continue from a seeded reset.
    """
    if isinstance(ctx, Path):
        ctx = RunContext(ctx)
    if started is not None:
        ctx.started = started
    if resume and (resume.get("dataset") or {}).get("path"):
        _dataset_where_it_was(cfg, resume["dataset"]["path"])
    s = settings(cfg)
    parts = build_parts(s)
    try:
        if resume and parts.dataset is not None:
            _check_same_dataset(resume, parts.dataset)
        return _train(cfg, s, ctx, parts, resume)
    finally:
        parts.close()


def _dataset_where_it_was(cfg: DictConfig, recorded: str) -> None:
    """A resume from another working directory: a relative ``dataset=`` path that does not
    resolve from here is the file the run began with (its absolute path is in the
    checkpoint); whether it is still the same data, its hash says next."""
    spec = cfg.get("dataset")
    if (spec and not str(spec).startswith("minari:") and not Path(spec).is_absolute()
            and not Path(spec).exists() and Path(recorded).exists()):
        cfg.dataset = recorded


def _check_same_dataset(ckpt: dict[str, Any], now: dict[str, Any]) -> None:
    """An offline run resumes only on the data it began with: the checkpoint holds the
    dataset's content hash, not a copy."""
    then = ckpt.get("dataset") or {}
    if then.get("sha256") != now["sha256"]:
        raise ConfigError(
            f"the dataset {now['spec']} is not the one this run began with ({then.get('path')}, "
            f"sha256 {str(then.get('sha256'))[:12]}...; now {now['path']}, sha256 "
            f"{now['sha256'][:12]}...): a resume must learn from the same data; restore that "
            "file, or start a new run")


def _train(cfg: DictConfig, s: Settings, ctx: RunContext, parts: Parts,
           resume: dict[str, Any] | None) -> InfoStats:
    run_dir = ctx.run_dir
    info, algorithm, buffer = parts.info, parts.algorithm, parts.buffer
    train_collector, test_collector = parts.train_collector, parts.test_collector
    if s.tune.trial is not None:
        from rltrain.tune import TrialReporter

        ctx.trial = TrialReporter(s.tune, s.trainer.max_epochs)
    if ctx.on_accept is not None:
        ctx.on_accept()

    # ---- from here on, files are written
    done_epochs = completed_epochs(resume["trainer"]) if resume else 0
    history: dict[str, Any] = dict(resume.get("history") or {}) if resume else {}
    history.setdefault("resumes", [])
    summary_extra: dict[str, Any] = {
        "run_dir": str(run_dir),
        "system": system_info(ctx.command, ctx.overrides),
        "env_state": {"exact": True, "not_captured": []},
        "resumes": history["resumes"],
        "checkpoint": None,
    }
    if parts.dataset is not None:
        summary_extra["dataset"] = parts.dataset
    jsonl = JsonlLogger(run_dir, keep_epochs=done_epochs if resume else None,
                        extra_summary=summary_extra)
    if ctx.trial is not None and resume:
        ctx.trial.load_scores(run_dir)
    loggers: list[Logger] = [ConsoleLogger(s.trainer.max_epochs, s.logger.progress_bar, run_dir,
                                           quiet=s.logger.quiet,
                                           progress_interval_s=s.logger.progress_interval_s,
                                           stats=algorithm_spec(s.algo.name).console),
                             jsonl]
    if s.logger.tensorboard:
        step_key = "gradient_step" if parts.dataset is not None else "env_step"
        purge = resume["trainer"][step_key] + 1 if resume else None
        loggers.append(TensorBoardLogger(run_dir / "tb", purge_step=purge,
                                         config=OmegaConf.to_container(cfg, resolve=True)))
    if s.logger.wandb.enabled or s.logger.mlflow.enabled:
        from rltrain.trackers import MlflowLogger, WandbLogger

        tracked = OmegaConf.to_container(cfg, resolve=True)
        name = f"{s.algo.name}-{s.env.name}-seed{s.seed}"
        for on, kind in ((s.logger.wandb.enabled, WandbLogger),
                         (s.logger.mlflow.enabled, MlflowLogger)):
            if on:
                loggers.append(kind(s.logger, run_dir, tracked, name))
    meta = {"algo": s.algo.name, "env_id": s.env.id, "obs_shape": list(info.obs_shape),
            "discrete": info.discrete, "action_dim": info.action_dim}
    trainer: Trainer
    # an on-policy rollout is consumed within its training step: nothing to keep
    save_buffer = isinstance(s.trainer, OffPolicyTrainerParams) and s.trainer.checkpoint_buffer
    warned_inexact = False

    def checkpoint() -> None:
        nonlocal warned_inexact
        collectors = {name: c.state_dict() for name, c in (("train", train_collector),
                                                             ("test", test_collector))
                      if c is not None}
        missing = [f"{name} envs: {what}" for name, c in collectors.items()
                   for what in c["not_captured"]]
        if missing and not warned_inexact:
            warned_inexact = True
            summary_extra["env_state"] = {"exact": False, "not_captured": missing}
            log.warning(f"the envs' state cannot be saved exactly ({_grouped(missing)}): a resume "
                        "from a checkpoint will start fresh episodes from a seeded reset, so "
                        "its records will differ from an unbroken run's")
        state = {
            "config": OmegaConf.to_container(cfg, resolve=True),
            "algorithm": algorithm.training_state(),
            "trainer": trainer.state_dict(),
            "collectors": collectors,
            "buffer": buffer.state_dict() if save_buffer else None,
            # offline: the dataset by reference (its hash), and where sampling stands
            "dataset": parts.dataset,
            "buffer_rng": buffer.rng.bit_generator.state if parts.dataset is not None else None,
            "rng": rng_state(),
            "history": history,
        }
        name = f"ckpt_{trainer.env_step:010d}_{trainer.epoch:05d}.pt"
        try:
            path = save_checkpoint(run_dir / "checkpoints", state, name,
                                   s.trainer.keep_checkpoints)
        except OSError as e:
            raise SaveError(f"could not write the checkpoint {run_dir / 'checkpoints' / name}: "
                            f"{e.strerror or e}") from None
        ctx.checkpoint = summary_extra["checkpoint"] = {
            "path": str(path), "epoch": trainer.epoch, "env_step": trainer.env_step,
            "epochs_complete": completed_epochs(state["trainer"])}

    def save(directory: str) -> None:
        try:
            save_policy(run_dir / directory, algorithm.deployable().state_dict(), meta)
        except OSError as e:
            raise SaveError(f"could not write {run_dir / directory / 'policy.pt'}: "
                            f"{e.strerror or e}") from None

    def on_epoch_end(stats: EpochStats) -> None:
        if ctx.trial is not None and ctx.trial.report(stats.epoch, stats.test.return_mean) \
                and not trainer.done():
            log.info(f"the study's pruner stopped this trial after epoch {stats.epoch}")
            trainer.prune()
        if stats.epoch % s.trainer.checkpoint_every == 0 or trainer.done():
            checkpoint()

    def on_stop(info_stats: InfoStats) -> None:
        if info_stats.status == "failed":
            return  # what the failure left is not worth keeping: last.pt stays the last good one
        save("final")
        if info_stats.interrupted:
            checkpoint()

    callbacks = Callbacks(on_epoch_end=on_epoch_end, on_best=lambda _: save("best"),
                          on_stop=on_stop)
    trainer = build_trainer(s, parts, loggers=loggers, callbacks=callbacks)
    if resume:
        ctx.checkpoint = summary_extra["checkpoint"] = {
            "path": resume.get("_path"), "epoch": resume["trainer"]["epoch"],
            "env_step": resume["trainer"]["env_step"], "epochs_complete": done_epochs}
        notes = _restore(resume, s, parts, trainer)
        history["resumes"].append({"epoch": resume["trainer"]["epoch"],
                                   "env_step": resume["trainer"]["env_step"],
                                   "exact": not notes, "notes": notes})
    if s.env.kwargs:
        # a crash in the env's own code: its arguments are the usual suspect
        trainer.crash_hint = f" (the env was made with env.kwargs={dict(s.env.kwargs)})"
    _log_build(s, info, train_collector, trainer, run_dir, parts.dataset)
    jsonl.extra_summary["startup_time"] = time.perf_counter() - ctx.started
    try:
        with signals.training(trainer.request_stop):
            result = trainer.run()
    except signals.StopNow as e:
        trainer.interrupted = True
        _finish_loggers(loggers, trainer)
        raise StoppedAtOnce(e.signum, ctx.checkpoint) from None
    if trainer.failure is not None:
        _log_traceback(run_dir, trainer.failure)
    return result


def _grouped(entries: list[str], limit: int = 3) -> str:
    """Entries that differ only by sub-env index, once: ``envs.envs[0].sim`` ... ``envs[7]``
    -> ``envs.envs[0-7].sim``."""
    groups: dict[str, list[int]] = {}
    for entry in entries:
        indices = [int(i) for i in re.findall(r"envs\.envs\[(\d+)\]", entry)[:1]]
        key = re.sub(r"(envs\.envs)\[\d+\]", r"\1[{}]", entry, count=1)
        groups.setdefault(key, []).extend(indices)
    parts = []
    for key, indices in groups.items():
        span = (f"{min(indices)}-{max(indices)}" if len(set(indices)) > 1 else
                str(indices[0]) if indices else "")
        parts.append(key.replace("[{}]", f"[{span}]") if "{}" in key else key)
    more = f"; and {len(parts) - limit} more" if len(parts) > limit else ""
    return "; ".join(parts[:limit]) + more


def _finish_loggers(loggers: list[Logger], trainer: Trainer) -> None:
    from rltrain.stats import flatten

    info = trainer.info()
    for logger in loggers:
        with contextlib.suppress(Exception):
            logger.finish(flatten(info))


def _log_traceback(run_dir: Path, error: BaseException) -> None:
    """The traceback of a failure, for whoever debugs it: in rltrain.log, not the console."""
    from rltrain.errors import TrainingError

    if isinstance(error, TrainingError):
        return
    try:
        with open(run_dir / "rltrain.log", "a", encoding="utf-8") as f:
            f.write("The run failed with this traceback:\n")
            traceback.print_exception(error, file=f)
    except OSError:
        pass


def _restore(ckpt: dict[str, Any], s: Settings, parts: Parts, trainer: Trainer) -> list[str]:
    """Load a checkpoint into the built parts; returns what made the resume inexact."""
    notes: list[str] = []
    algorithm, buffer = parts.algorithm, parts.buffer
    algorithm.load_training_state(ckpt["algorithm"])
    old_max_epochs = ckpt["config"]["trainer"]["max_epochs"]
    trainer.load_state_dict(ckpt["trainer"])
    best = trainer.best.score
    reached = trainer.stop_score is not None and best is not None and best >= trainer.stop_score
    if s.trainer.max_epochs > old_max_epochs or not reached:
        # the run is being extended, or its stop score was raised (or dropped) past its best
        trainer.stopped_early = False
    if ckpt["buffer"] is not None:
        buffer.load_state_dict(ckpt["buffer"])
    elif ckpt.get("buffer_rng") is not None:  # offline: the data is the dataset's
        buffer.rng.bit_generator.state = ckpt["buffer_rng"]
    elif isinstance(s.trainer, OffPolicyTrainerParams):
        notes.append("the checkpoint holds no replay buffer (trainer.checkpoint_buffer=false): "
                     "the buffer starts empty")
    env_step = ckpt["trainer"]["env_step"]
    for name, collector, seed in (("train", parts.train_collector, parts.train_seed),
                                  ("test", parts.test_collector, parts.test_seed)):
        if collector is None:
            continue
        problems = collector.load_state_dict(ckpt["collectors"][name],
                                             seed=derived_seed(seed, env_step))
        if problems and name == "train":
            notes.append(f"the train envs' state could not be restored ({_grouped(problems)}): "
                         "training continues with fresh episodes from a seeded reset")
        elif problems:
            notes.append(f"the test envs' state could not be restored ({_grouped(problems)})")
    set_rng_state(ckpt["rng"])
    for note in notes:
        log.warning(f"inexact resume: {note}; records from here on will differ from an "
                    "unbroken run's")
    log.info(f"resumed at epoch {trainer.epoch}, env step {trainer.env_step:,}"
             + ("" if notes else " (exact)"))
    return notes


def _log_build(s: Settings, info: SpaceInfo, collector: Collector | None, trainer: Trainer,
               run_dir: Path, dataset: dict[str, Any] | None = None) -> None:
    actions = f"Discrete({info.num_actions})" if info.discrete else f"Box{info.action_shape}"
    mode = "next-step" if (collector or trainer.test_collector).next_step_mode else "same-step"
    train = f"{s.env.num_train_envs} train / " if collector is not None else ""
    log.info(f"env {s.env.id}: {train}{trainer.test_collector.num_envs} "
             f"test envs ({mode} autoreset), obs {info.obs_shape}, actions {actions}, "
             f"reward threshold {info.reward_threshold}, episodes of at most "
             f"{info.max_episode_steps:,} steps")
    if dataset is not None:
        mean = dataset["return_mean"]
        log.info(f"dataset {dataset['spec']}: {dataset['transitions']:,} transitions, "
                 f"{dataset['episodes']:,} episodes"
                 + ("" if mean is None else f" (mean return {mean:.1f})")
                 + f", sha256 {dataset['sha256'][:12]}")
    if s.env.wrappers:
        log.info(f"env wrappers: {', '.join(map(str, s.env.wrappers))}")
    log.info(f"algorithm {type(trainer.algorithm).__name__}: "
             f"{sum(p.numel() for p in trainer.algorithm.parameters()):,} parameters on "
             f"{s.device}, seed {s.seed}")
    unit = "gradient steps" if trainer.step_key == "gradient_step" else "env steps"
    log.info(f"trainer {type(trainer).__name__}: up to {s.trainer.max_epochs} epochs of "
             f"{s.trainer.epoch_num_steps} {unit}, stop score {trainer.stop_score}")
    log.info(f"run directory {run_dir}")
