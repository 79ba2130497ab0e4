"""The loggers: the run's own (console, ``epochs.jsonl`` + ``summary.json``), and the
optional ones, each one module of this package that registers itself (TensorBoard, W&B,
MLflow), so importing the package fills :data:`LOGGERS`.

A layer beside :mod:`rltrain.envs` and :mod:`rltrain.nets`, under the data path: the loggers
may import :mod:`rltrain.rundir` (the files they write, the run's records read back),
:mod:`rltrain.process`, :mod:`rltrain.config` and :mod:`rltrain.common`."""

from rltrain.common.registries import import_members
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

import_members(__name__, __path__, skip=("base", "registry"))

__all__ = ["LINE_WIDTH", "LOGGERS", "ConsoleLogger", "JsonlLogger", "Logger", "LoggerContext",
           "LoggerSpec", "build_loggers", "check_loggers", "logger_schema", "numeric_values",
           "read_records", "read_run_id", "register"]
