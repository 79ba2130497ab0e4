"""Shared by the benchmark scripts: compose a run config and build rltrain's objects from it,
exactly as `rltrain` does (Hydra compose API + the composition root's builders)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from hydra import compose, initialize_config_dir

from rltrain.cli import conf_dir
from rltrain.collector import Collector, random_policy
from rltrain.config import register_configs
from rltrain.data.buffers import ReplayBuffer
from rltrain.envs import SpaceInfo, env_seeds, make_vector_env, space_info
from rltrain.run import Settings, build_algorithm, build_buffer, seed_everything, settings
from rltrain.trainer import TRAINERS, OffPolicyTrainer, Trainer


@dataclass
class Built:
    s: Settings
    info: SpaceInfo
    algorithm: Any
    buffer: ReplayBuffer
    train_collector: Collector
    test_collector: Collector
    trainer: Trainer


def build(overrides: list[str]) -> Built:
    register_configs()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    s = settings(cfg)
    torch.set_num_threads(s.torch_threads)
    seed_everything(s.seed)
    train_seed, test_seed = env_seeds(s.seed, s.env.num_train_envs)
    train_envs = make_vector_env(s.env, s.env.num_train_envs)
    test_envs = make_vector_env(s.env, s.env.num_test_envs)
    info = space_info(train_envs, s.env.id)
    algorithm = build_algorithm(s, info)
    buffer = build_buffer(s, algorithm, info)
    train_collector, test_collector = Collector(train_envs, buffer), Collector(test_envs)
    train_collector.reset(seed=train_seed)
    test_collector.reset(seed=test_seed)
    trainer_cls = TRAINERS[type(s.trainer)]
    kwargs: dict[str, Any] = {"reward_threshold": info.reward_threshold}
    if trainer_cls is OffPolicyTrainer:
        kwargs["random_policy"] = random_policy(train_envs, train_seed)
    trainer = trainer_cls(algorithm, s.trainer, buffer, train_collector, test_collector, **kwargs)
    return Built(s, info, algorithm, buffer, train_collector, test_collector, trainer)
