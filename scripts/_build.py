"""Shared by the benchmark scripts: compose a run config and build rltrain's objects from it
with the composition root's own builders, exactly as `rltrain` does."""

from __future__ import annotations

from dataclasses import dataclass

from hydra import compose, initialize_config_dir

from rltrain.assembly.build import Parts, build_parts, build_trainer
from rltrain.assembly.checked_config import Settings, settings
from rltrain.assembly.registered_schemas import register_configs
from rltrain.commands.train import conf_dir
from rltrain.trainers import Trainer


@dataclass
class Built:
    s: Settings
    parts: Parts
    trainer: Trainer

    def __getattr__(self, name: str):  # built.algorithm, built.train_collector, ...
        return getattr(self.parts, name)

    @property
    def buffer(self):
        return self.parts.storage.buffer


def build(overrides: list[str]) -> Built:
    register_configs()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    s = settings(cfg)
    parts = build_parts(s)
    return Built(s, parts, build_trainer(s, parts))
