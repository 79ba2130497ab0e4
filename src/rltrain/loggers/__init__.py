"""The loggers: the run's own (console, ``epochs.jsonl`` + ``summary.json``), and the
optional ones, each one module of this package that registers itself (TensorBoard, W&B,
MLflow), so importing the package fills :data:`LOGGERS`."""

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
from rltrain.modules import import_members

import_members(__name__, __path__, skip=("base", "registry"))

__all__ = ["LINE_WIDTH", "LOGGERS", "ConsoleLogger", "JsonlLogger", "Logger", "LoggerContext",
           "LoggerSpec", "build_loggers", "check_loggers", "logger_schema", "numeric_values",
           "read_records", "read_run_id", "register"]
