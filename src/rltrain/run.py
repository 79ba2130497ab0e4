"""The composition root: run config -> envs, algorithm, buffer, collectors, trainer, loggers.

Nothing else reads the config. Every check that can fail runs before the first
file of the run is written, so a bad config leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import logging
import math
import platform
import random
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

import rltrain
from rltrain.algorithms import DQN, PPO, Algorithm
from rltrain.checkpoint import save_checkpoint, save_policy
from rltrain.collector import Collector, random_policy
from rltrain.config import (
    ConfigError,
    DQNConfig,
    EnvConfig,
    LoggerConfig,
    OfflineTrainerParams,
    OnlineTrainerParams,
    OnPolicyTrainerParams,
    PPOConfig,
    ReplayBufferConfig,
    TrainerParams,
    check_algo,
    check_env,
    check_trainer,
    env_steps_per_collection,
    typed_run_config,
)
from rltrain.data.buffers import ReplayBuffer
from rltrain.envs import SpaceInfo, env_seeds, make_vector_env, space_info
from rltrain.loggers import ConsoleLogger, JsonlLogger, Logger, TensorBoardLogger
from rltrain.stats import EpochStats, InfoStats
from rltrain.trainer import TRAINERS, Callbacks, OffPolicyTrainer, Trainer

log = logging.getLogger("rltrain")

#: files that mark a directory as holding a run already
RUN_FILES = ("epochs.jsonl", "summary.json", "checkpoints")


@dataclass(frozen=True)
class Settings:
    """The run config as typed objects, checked."""

    algo: PPOConfig | DQNConfig
    env: EnvConfig
    trainer: TrainerParams
    buffer: ReplayBufferConfig
    logger: LoggerConfig
    seed: int
    device: torch.device
    torch_threads: int


def settings(cfg: DictConfig) -> Settings:
    try:
        obj = {k: OmegaConf.to_object(cfg[k])
               for k in ("algo", "env", "trainer", "buffer", "logger")}
    except MissingMandatoryValue as e:
        key = e.full_key if "env.id" not in str(e) else "env.id"
        hint = " (e.g. env=gym env.id=Acrobot-v1)" if key == "env.id" else ""
        raise ConfigError(f"{key} must be set{hint}") from None
    check_algo(obj["algo"])
    check_env(obj["env"])
    check_trainer(obj["trainer"])
    if obj["buffer"].size <= 0:
        raise ConfigError(f"buffer.size must be > 0, got {obj['buffer'].size}")
    if cfg.torch_threads <= 0:
        raise ConfigError(f"torch_threads must be > 0, got {cfg.torch_threads}")
    return Settings(**obj, seed=int(cfg.seed), device=_device(cfg.device),
                    torch_threads=int(cfg.torch_threads))


def load_run_settings(run_dir: Path, device: str | None = None) -> Settings:
    """The checked settings of an existing run, from its ``.hydra/config.yaml``;
    ``device`` replaces the run's own (a run trained on cuda evaluates on cpu)."""
    path = run_dir / ".hydra" / "config.yaml"
    if not path.is_file():
        what = "is not a directory" if not run_dir.is_dir() else "has no .hydra/config.yaml"
        raise ConfigError(f"{run_dir} {what}; pass a run directory written by rltrain")
    cfg = typed_run_config(OmegaConf.load(path))
    if device is not None:
        cfg.device = device
    return settings(cfg)


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"device={name!r} is not a torch device; use cpu, cuda, cuda:N or auto"
                          ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={name} asked for, but torch sees no CUDA device; use device=cpu")
    return device


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_algorithm(s: Settings, info: SpaceInfo) -> Algorithm:
    if isinstance(s.algo, PPOConfig):
        return PPO(s.algo, info, s.device)
    if not info.discrete:
        raise ConfigError(
            f"algo=dqn needs a discrete action space, but {info.env_id} has continuous actions "
            f"(Box, shape {info.action_shape}); use algo=ppo for continuous actions"
        )
    return DQN(s.algo, info, s.device, seed=s.seed)


def build_buffer(s: Settings, algorithm: Algorithm, info: SpaceInfo) -> ReplayBuffer:
    m = s.env.num_train_envs
    act_dtype = np.int64 if info.discrete else np.float32
    common = dict(num_lanes=m, obs_shape=info.obs_shape, act_shape=info.action_shape,
                  act_dtype=act_dtype, seed=s.seed)
    if algorithm.kind == "onpolicy":
        per_collection = env_steps_per_collection(s.trainer, m)
        capacity = per_collection // m if per_collection else math.ceil(s.buffer.size / m)
        return ReplayBuffer(lane_capacity=capacity, circular=False, **common)
    if s.buffer.size < m:
        raise ConfigError(f"buffer.size={s.buffer.size} is smaller than env.num_train_envs={m}")
    return ReplayBuffer(lane_capacity=s.buffer.size // m, circular=True, n_step=s.algo.n_step,
                        gamma=s.algo.gamma, **common)


def check_pairing(s: Settings, algorithm: Algorithm) -> None:
    if isinstance(s.trainer, OfflineTrainerParams):
        raise ConfigError("the offline trainer needs a dataset; no offline algorithm ships yet")
    expected = "onpolicy" if isinstance(s.trainer, OnPolicyTrainerParams) else "offpolicy"
    if algorithm.kind != expected:
        raise ConfigError(
            f"{type(algorithm).__name__} is {algorithm.kind} and runs with trainer="
            f"{algorithm.kind}, not trainer={expected}; leave the trainer to the algorithm"
        )


def check_run_dir(run_dir: Path) -> None:
    used = [name for name in RUN_FILES if (run_dir / name).exists()]
    if used:
        raise ConfigError(
            f"{run_dir} already holds a run ({', '.join(used)}); choose a new hydra.run.dir "
            "so nothing is overwritten"
        )


def system_info() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gymnasium": gym.__version__,
        "rltrain": rltrain.__version__,
        "command": " ".join(["rltrain", *sys.argv[1:]]),
    }


@dataclass(frozen=True)
class Parts:
    """The objects a run is made of, built before any file is written."""

    info: SpaceInfo
    algorithm: Algorithm
    buffer: ReplayBuffer
    train_collector: Collector
    test_collector: Collector
    train_seed: int
    test_seed: int


def build_parts(s: Settings) -> Parts:
    """Seed, then build envs, algorithm, buffer and collectors (envs reset, seeded)."""
    torch.set_num_threads(s.torch_threads)
    seed_everything(s.seed)
    train_seed, test_seed = env_seeds(s.seed, s.env.num_train_envs)
    train_envs = make_vector_env(s.env, s.env.num_train_envs)
    test_envs = make_vector_env(s.env, s.env.num_test_envs)
    info = space_info(train_envs, s.env.id)
    algorithm = build_algorithm(s, info)
    check_pairing(s, algorithm)
    buffer = build_buffer(s, algorithm, info)
    train_collector, test_collector = Collector(train_envs, buffer), Collector(test_envs)
    train_collector.reset(seed=train_seed)
    test_collector.reset(seed=test_seed)
    return Parts(info, algorithm, buffer, train_collector, test_collector, train_seed, test_seed)


def build_trainer(s: Settings, parts: Parts, **kwargs: Any) -> Trainer:
    """The trainer the algorithm runs with; ``kwargs`` go to it (loggers, callbacks)."""
    assert isinstance(s.trainer, OnlineTrainerParams)
    trainer_cls = TRAINERS[type(s.trainer)]
    if trainer_cls is OffPolicyTrainer:
        kwargs["random_policy"] = random_policy(parts.train_collector.envs, parts.train_seed)
    return trainer_cls(parts.algorithm, s.trainer, parts.buffer, parts.train_collector,
                       parts.test_collector, reward_threshold=parts.info.reward_threshold,
                       **kwargs)


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


def run(cfg: DictConfig, run_dir: Path, started: float | None = None,
        resume: dict[str, Any] | None = None) -> InfoStats:
    """Build everything from ``cfg`` and train; ``run_dir`` receives every file.

    With ``resume`` (a loaded checkpoint of this run), continue exactly where it stopped.
    """
    started = time.perf_counter() if started is None else started
    s = settings(cfg)
    if resume is None:
        check_run_dir(run_dir)
    parts = build_parts(s)
    info, algorithm, buffer = parts.info, parts.algorithm, parts.buffer
    train_collector, test_collector = parts.train_collector, parts.test_collector
    train_seed, test_seed = parts.train_seed, parts.test_seed
    train_envs, test_envs = train_collector.envs, test_collector.envs

    # ---- from here on, files are written
    done_epochs = completed_epochs(resume["trainer"]) if resume else 0
    jsonl = JsonlLogger(run_dir, keep_epochs=done_epochs if resume else None,
                        extra_summary={"run_dir": str(run_dir), "system": system_info()})
    loggers: list[Logger] = [ConsoleLogger(s.trainer.max_epochs, s.logger.progress_bar, run_dir),
                             jsonl]
    if s.logger.tensorboard:
        purge = resume["trainer"]["env_step"] + 1 if resume else None
        loggers.append(TensorBoardLogger(run_dir / "tb", purge_step=purge))
    algo_name = type(algorithm).__name__.lower()
    meta = {"algo": algo_name, "env_id": s.env.id, "obs_shape": list(info.obs_shape),
            "discrete": info.discrete, "action_dim": info.action_dim}
    trainer: Trainer
    # an on-policy rollout is consumed within its training step: nothing to keep
    save_buffer = algorithm.kind == "offpolicy" and s.trainer.checkpoint_buffer

    def checkpoint() -> None:
        state = {
            "config": OmegaConf.to_container(cfg, resolve=True),
            "algorithm": algorithm.training_state(),
            "trainer": trainer.state_dict(),
            "collectors": {"train": train_collector.state_dict(),
                           "test": test_collector.state_dict()},
            "buffer": buffer.state_dict() if save_buffer else None,
            "rng": rng_state(),
        }
        name = f"ckpt_{trainer.env_step:010d}_{trainer.epoch:05d}.pt"
        save_checkpoint(run_dir / "checkpoints", state, name, s.trainer.keep_checkpoints)

    def on_epoch_end(stats: EpochStats) -> None:
        if stats.epoch % s.trainer.checkpoint_every == 0 or trainer.done():
            checkpoint()

    def on_stop(info_stats: InfoStats) -> None:
        save_policy(run_dir / "final", algorithm.policy_module().state_dict(), meta)
        if info_stats.interrupted:
            checkpoint()

    callbacks = Callbacks(
        on_epoch_end=on_epoch_end,
        on_best=lambda _: save_policy(run_dir / "best", algorithm.policy_module().state_dict(),
                                      meta),
        on_stop=on_stop,
    )
    trainer = build_trainer(s, parts, loggers=loggers, callbacks=callbacks)
    if resume:
        _restore(resume, s, algorithm, trainer, buffer, train_collector, test_collector,
                 train_seed, test_seed)
    _log_build(s, info, train_collector, trainer, run_dir)
    jsonl.extra_summary["startup_time"] = time.perf_counter() - started
    with _stop_on_signals(trainer):
        result = trainer.run()
    train_envs.close()
    test_envs.close()
    return result


def _restore(ckpt: dict[str, Any], s: Settings, algorithm: Algorithm, trainer: Trainer,
             buffer: ReplayBuffer, train_collector: Collector, test_collector: Collector,
             train_seed: int, test_seed: int) -> None:
    algorithm.load_training_state(ckpt["algorithm"])
    old_max_epochs = ckpt["config"]["trainer"]["max_epochs"]
    trainer.load_state_dict(ckpt["trainer"])
    if s.trainer.max_epochs > old_max_epochs:
        trainer.stopped_early = False  # the run is being extended
    if ckpt["buffer"] is not None:
        buffer.load_state_dict(ckpt["buffer"])
    elif algorithm.kind == "offpolicy":
        log.warning("the checkpoint holds no replay buffer (trainer.checkpoint_buffer=false): "
                    "resuming with an empty buffer, so results differ from an unbroken run")
    exact = train_collector.load_state_dict(ckpt["collectors"]["train"], seed=train_seed)
    exact &= test_collector.load_state_dict(ckpt["collectors"]["test"], seed=test_seed)
    if not exact:
        log.warning("these envs cannot be restored exactly (they run in other processes): "
                    "resuming with fresh episodes from a seeded reset")
    set_rng_state(ckpt["rng"])
    log.info(f"resumed at epoch {trainer.epoch}, env step {trainer.env_step:,}")


@contextlib.contextmanager
def _stop_on_signals(trainer: Trainer) -> Iterator[None]:
    """First SIGINT/SIGTERM: finish the step in flight, save, stop. A second one: stop at
    once (KeyboardInterrupt); checkpoints are atomic, so last.pt stays whole."""

    def first(signum: int, frame: Any) -> None:
        trainer.request_stop(signum)
        print(f"\nrltrain: {signal.Signals(signum).name} received; finishing the current step "
              "and saving (send it again to stop at once)", file=sys.stderr, flush=True)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, second)

    def second(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous = {sig: signal.signal(sig, first) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _log_build(s: Settings, info: SpaceInfo, collector: Collector, trainer: Trainer,
               run_dir: Path) -> None:
    actions = f"Discrete({info.num_actions})" if info.discrete else f"Box{info.action_shape}"
    mode = "next-step" if collector.next_step_mode else "same-step"
    log.info(f"env {s.env.id}: {s.env.num_train_envs} train / {s.env.num_test_envs} test envs "
             f"({mode} autoreset), obs {info.obs_shape}, actions {actions}, "
             f"reward threshold {info.reward_threshold}")
    log.info(f"algorithm {type(trainer.algorithm).__name__}: "
             f"{sum(p.numel() for p in trainer.algorithm.parameters()):,} parameters on "
             f"{s.device}, seed {s.seed}")
    log.info(f"trainer {type(trainer).__name__}: up to {s.trainer.max_epochs} epochs of "
             f"{s.trainer.epoch_num_steps} steps, stop score {trainer.stop_score}")
    log.info(f"run directory {run_dir}")
