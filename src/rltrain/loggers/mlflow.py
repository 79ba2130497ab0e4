"""MLflow (extra ``mlflow``): the run's config as params (flattened) and ``config.yaml``,
every epoch's numeric metrics at its step, the summary as ``summary/*`` metrics, the
``rltrain.status`` tag and the run's status. Works without a network in its default store,
``sqlite:///mlflow.db`` in the working directory. A resumed run continues the same MLflow
run: its id is kept in the run directory (``.mlflow_run_id``)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rltrain.loggers.base import Logger, numeric_values, read_run_id
from rltrain.loggers.registry import LoggerContext, LoggerSpec, register
from rltrain.rundir.files import write_new

log = logging.getLogger(__name__)


@dataclass
class MlflowConfig:
    """MLflow (extra ``mlflow``): the config as params, every epoch's metrics, the summary."""

    enabled: bool = False
    #: any MLflow tracking URI; default: sqlite:///mlflow.db in the working directory (MLflow
    #: 3 keeps its plain-file store for old data only)
    tracking_uri: str | None = None
    experiment: str = "rltrain"


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.update(_flat(value, name))
        else:
            out[name] = value
    return out


class MlflowLogger(Logger):
    #: MLflow takes at most this many params or metrics in one batch
    BATCH = 100

    def __init__(self, cfg: MlflowConfig, context: LoggerContext) -> None:
        # imported here, when the logger is built: mlflow is an extra (absent unless
        # installed; check_loggers refuses a run that needs it first), and mlflow.tracking
        # takes 1.0 s to import (-X importtime), which a run without MLflow need not pay
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        # MLflow (and alembic, creating a new store) log INFO lines to the console
        for noisy in ("mlflow", "alembic"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        run_dir = context.run_dir
        self.uri = cfg.tracking_uri or f"sqlite:///{Path.cwd() / 'mlflow.db'}"
        new_store = self.uri.startswith("sqlite:///") and not Path(
            self.uri.removeprefix("sqlite:///")).exists()
        # said before the wait: creating a new SQLite store (its schema's migrations) takes
        # seconds (14 s measured on a loaded 2-core machine) of an otherwise blank console
        log.info(f"mlflow: logging to {self.uri}"
                 + (" (creating the store: its first run takes a few seconds more)"
                    if new_store else ""))
        self.client = MlflowClient(tracking_uri=self.uri)
        run_id = read_run_id(run_dir, ".mlflow_run_id")
        if run_id is not None:
            self.client.update_run(run_id, status="RUNNING")
            self.run_id = run_id
            self._say_where(cfg.experiment, "continued")
            return
        experiment = self.client.get_experiment_by_name(cfg.experiment)
        experiment_id = (experiment.experiment_id if experiment is not None
                         else self.client.create_experiment(cfg.experiment))
        run = self.client.create_run(experiment_id, run_name=context.name,
                                     tags={"rltrain.run_dir": str(run_dir)})
        self.run_id = run.info.run_id
        write_new(run_dir / ".mlflow_run_id", self.run_id)
        params = [Param(k, str(v)[:6000]) for k, v in _flat(context.config).items()]
        for i in range(0, len(params), self.BATCH):
            self.client.log_batch(self.run_id, params=params[i:i + self.BATCH])
        self.client.log_dict(self.run_id, context.config, "config.yaml")
        self._say_where(cfg.experiment, "created")

    def _say_where(self, experiment: str, what: str) -> None:
        log.info(f"mlflow: run {self.run_id} {what} in experiment {experiment!r}; browse it "
                 f"with: mlflow ui --backend-store-uri {self.uri}")

    def _metrics(self, values: dict[str, float], step: int) -> None:
        # the extra, as in __init__ (loaded by then: this import is a look-up in sys.modules)
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for k, v in values.items()]
        for i in range(0, len(metrics), self.BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[i:i + self.BATCH])

    def log_epoch(self, record: dict[str, Any]) -> None:
        self._metrics(numeric_values(record), int(record[self.step_key]))

    def finish(self, info: dict[str, Any]) -> None:
        self._metrics({f"summary/{k}": v for k, v in numeric_values(info).items()},
                      int(info.get(self.step_key) or 0))
        status = str(info.get("status") or "completed")
        self.client.set_tag(self.run_id, "rltrain.status", status)
        self.client.set_terminated(self.run_id, {"completed": "FINISHED", "pruned": "FINISHED",
                                                 "interrupted": "KILLED"}.get(status, "FAILED"))


register(LoggerSpec(key="mlflow", schema=MlflowConfig, build=MlflowLogger, package="mlflow",
                    extra="mlflow", check=None,
                    doc="MLflow: logger.mlflow.enabled=true (a local SQLite store by default)"))
