"""Experiment trackers as loggers: Weights & Biases and MLflow, each an extra, each working
without a network in its local mode (W&B offline, MLflow's SQLite store).

Each logs the run's config (W&B config; MLflow params, flattened, and ``config.yaml``), every
epoch's numeric metrics at the env step, and the final summary. A resumed run continues the
same tracker run: its id is kept in the run directory (``.wandb_id``, ``.mlflow_run_id``).
"""

from __future__ import annotations

import importlib.util
import math
import time
from pathlib import Path
from typing import Any

from rltrain.config import ConfigError, LoggerConfig
from rltrain.loggers import Logger

#: logger.<name>.enabled=true needs this package, from this extra
EXTRAS = {"wandb": ("wandb", "wandb"), "mlflow": ("mlflow", "mlflow")}
WANDB_MODES = ("offline", "online")


def check(cfg: LoggerConfig) -> None:
    """Refuse, before anything is built, a tracker that is on but not installed, or set
    wrong."""
    for name, (module, extra) in EXTRAS.items():
        if getattr(cfg, name).enabled and importlib.util.find_spec(module) is None:
            raise ConfigError(f"logger.{name}.enabled=true needs {module}: "
                              f"pip install -e \".[{extra}]\"")
    if cfg.wandb.mode not in WANDB_MODES:
        raise ConfigError(f"logger.wandb.mode must be offline or online, got {cfg.wandb.mode!r}")


def _numbers(record: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in record.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[key] = float(value)
    return out


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.update(_flat(value, name))
        else:
            out[name] = value
    return out


def _run_id(run_dir: Path, name: str) -> str | None:
    try:
        return (run_dir / name).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


class WandbLogger(Logger):
    def __init__(self, cfg: LoggerConfig, run_dir: Path, config: dict[str, Any],
                 name: str) -> None:
        import wandb

        w = cfg.wandb
        run_id = _run_id(run_dir, ".wandb_id")
        self.run = wandb.init(
            project=w.project, entity=w.entity, mode=w.mode, dir=str(run_dir), config=config,
            name=name, group=w.group, tags=list(w.tags) or None, id=run_id,
            resume="allow" if run_id else None,
            settings=wandb.Settings(silent=True, console="off"))
        (run_dir / ".wandb_id").write_text(self.run.id, encoding="utf-8")

    def log_epoch(self, record: dict[str, Any]) -> None:
        self.run.log(_numbers(record), step=int(record[self.step_key]))

    def finish(self, info: dict[str, Any]) -> None:
        summary = _numbers(info)
        summary.update({k: v for k, v in info.items() if isinstance(v, str)})
        self.run.summary.update(summary)
        self.run.finish(exit_code=0 if info.get("status") in ("completed", "pruned") else 1)


class MlflowLogger(Logger):
    #: MLflow takes at most this many params or metrics in one batch
    BATCH = 100

    def __init__(self, cfg: LoggerConfig, run_dir: Path, config: dict[str, Any],
                 name: str) -> None:
        import logging

        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        # MLflow (and alembic, creating a new store) log INFO lines to the console
        for noisy in ("mlflow", "alembic"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        m = cfg.mlflow
        self.uri = m.tracking_uri or f"sqlite:///{Path.cwd() / 'mlflow.db'}"
        self.client = MlflowClient(tracking_uri=self.uri)
        run_id = _run_id(run_dir, ".mlflow_run_id")
        if run_id is not None:
            self.client.update_run(run_id, status="RUNNING")
            self.run_id = run_id
            return
        experiment = self.client.get_experiment_by_name(m.experiment)
        experiment_id = (experiment.experiment_id if experiment is not None
                         else self.client.create_experiment(m.experiment))
        run = self.client.create_run(experiment_id, run_name=name,
                                     tags={"rltrain.run_dir": str(run_dir)})
        self.run_id = run.info.run_id
        (run_dir / ".mlflow_run_id").write_text(self.run_id, encoding="utf-8")
        params = [Param(k, str(v)[:6000]) for k, v in _flat(config).items()]
        for i in range(0, len(params), self.BATCH):
            self.client.log_batch(self.run_id, params=params[i:i + self.BATCH])
        self.client.log_dict(self.run_id, config, "config.yaml")

    def _metrics(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for k, v in values.items()]
        for i in range(0, len(metrics), self.BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[i:i + self.BATCH])

    def log_epoch(self, record: dict[str, Any]) -> None:
        self._metrics(_numbers(record), int(record[self.step_key]))

    def finish(self, info: dict[str, Any]) -> None:
        self._metrics({f"summary/{k}": v for k, v in _numbers(info).items()},
                      int(info.get(self.step_key) or 0))
        status = str(info.get("status") or "completed")
        self.client.set_tag(self.run_id, "rltrain.status", status)
        self.client.set_terminated(self.run_id, {"completed": "FINISHED", "pruned": "FINISHED",
                                                 "interrupted": "KILLED"}.get(status, "FAILED"))
