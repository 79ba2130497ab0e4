"""Weights & Biases (extra ``wandb``): the run's config, every epoch's numeric metrics at its
step, and the final summary. Offline by default (files under ``<run dir>/wandb/``, uploaded
later with ``wandb sync``). A resumed run continues the same W&B run: its id is kept in the
run directory (``.wandb_id``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from rltrain.config.schemas import ConfigError
from rltrain.loggers.base import Logger, numeric_values, read_run_id
from rltrain.loggers.registry import LoggerContext, LoggerSpec, register
from rltrain.rundir.files import write_new

log = logging.getLogger(__name__)

MODES = ("offline", "online")


@dataclass
class WandbConfig:
    """Weights & Biases (extra ``wandb``): the config, every epoch's metrics and the summary."""

    enabled: bool = False
    project: str = "rltrain"
    entity: str | None = None
    #: offline (files under the run directory; upload later with ``wandb sync``), online
    mode: str = "offline"
    group: str | None = None
    tags: list[str] = field(default_factory=list)


def check(cfg: WandbConfig) -> None:
    if cfg.mode not in MODES:
        raise ConfigError(f"logger.wandb.mode must be offline or online, got {cfg.mode!r}")


class WandbLogger(Logger):
    def __init__(self, cfg: WandbConfig, context: LoggerContext) -> None:
        # imported here, when the logger is built: wandb is an extra (absent unless
        # installed; check_loggers refuses a run that needs it first), and takes 0.4 s to
        # import (-X importtime), which a run without W&B need not pay
        import wandb

        run_dir = context.run_dir
        run_id = read_run_id(run_dir, ".wandb_id")
        # the schema's str (OmegaConf has no Literal), one of MODES: check() refused the rest
        mode = cast(Literal["offline", "online"], cfg.mode)
        self.run = wandb.init(
            project=cfg.project, entity=cfg.entity, mode=mode, dir=str(run_dir),
            config=context.config, name=context.name, group=cfg.group,
            tags=list(cfg.tags) or None, id=run_id, resume="allow" if run_id else None,
            settings=wandb.Settings(silent=True, console="off"))
        write_new(run_dir / ".wandb_id", self.run.id)
        if mode == "offline":  # the run's files: RUN/wandb/offline-run-<time>-<id>/files
            local = Path(self.run.dir).parent
            log.info(f"wandb: offline run {self.run.id} in {local}; upload it with: "
                     f"wandb sync {local}")
        else:
            log.info(f"wandb: run {self.run.id} at {self.run.url}")

    def log_epoch(self, record: dict[str, Any]) -> None:
        self.run.log(numeric_values(record), step=int(record[self.step_key]))

    def finish(self, info: dict[str, Any]) -> None:
        summary: dict[str, Any] = numeric_values(info)
        summary.update({k: v for k, v in info.items() if isinstance(v, str)})
        self.run.summary.update(summary)
        self.run.finish(exit_code=0 if info.get("status") in ("completed", "pruned") else 1)


register(LoggerSpec(key="wandb", schema=WandbConfig, build=WandbLogger, package="wandb",
                    extra="wandb", check=check,
                    doc="Weights & Biases: logger.wandb.enabled=true (offline by default)"))
