"""The loggers: the run's own (console, ``epochs.jsonl`` + ``summary.json``), and the
optional ones, each one module of this package that registers itself (TensorBoard, W&B,
MLflow), so importing the package fills :data:`LOGGERS`."""

import importlib
import pkgutil

from rltrain.loggers.base import Logger, numeric_values, read_run_id
from rltrain.loggers.console import LINE_WIDTH, ConsoleLogger
from rltrain.loggers.jsonl import JsonlLogger, read_records
from rltrain.loggers.registry import (
    LOGGERS,
    LoggerContext,
    LoggerSpec,
    build_loggers,
    check_loggers,
    logger_schema,
    register,
)

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "registry") and not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["LINE_WIDTH", "LOGGERS", "ConsoleLogger", "JsonlLogger", "Logger", "LoggerContext",
           "LoggerSpec", "build_loggers", "check_loggers", "logger_schema", "numeric_values",
           "read_records", "read_run_id", "register"]
