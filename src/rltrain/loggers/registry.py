"""The logger registry: one :class:`LoggerSpec` per optional logger, declared next to its class.

The console and ``epochs.jsonl`` loggers are the run's own: always on, built by the
composition root. Every other logger (TensorBoard, W&B, MLflow) is one module of this
package that ends with ``register(LoggerSpec(...))``: its key under ``logger.``, its schema,
the package it needs and the extra that installs it, a check of its section, and how it is
built. The ``logger`` group's schema (:func:`logger_schema`), the checks
(:func:`check_loggers`) and the building (:func:`build_loggers`) derive from the registry,
so adding a logger touches nothing else.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rltrain.config.schemas import ConfigError, LoggerConfig
from rltrain.loggers.base import Logger


@dataclass(frozen=True)
class LoggerContext:
    """What a run tells the loggers it builds, besides their own section."""

    #: the run directory
    run_dir: Path
    #: the run config, resolved, as plain data (a tracker's params, TensorBoard's hparams)
    config: dict[str, Any]
    #: the run's name: ``<algo>-<env>-seed<N>``
    name: str
    #: a resumed run: the step count (in ``step_key``) its checkpoint holds; a new run: None
    resume_step: int | None = None
    #: what the run's steps count: ``env_step``, or ``gradient_step`` for an offline run
    step_key: str = "env_step"


@dataclass(frozen=True)
class LoggerSpec:
    """What rltrain needs to know of an optional logger."""

    #: its section's key: ``logger.<key>``
    key: str
    #: its section's schema: a dataclass (its fields are ``logger.<key>.*``), or ``bool`` for
    #: a plain on/off switch (``logger.<key>=true|false``)
    schema: type
    #: builds it from its section and the run's context (its class, when that takes both)
    build: Callable[[Any, LoggerContext], Logger]
    #: what the section says in the help and the schema's docstring
    doc: str = ""
    #: a switch's default (a dataclass schema's defaults are its own)
    default: bool = False
    #: the boolean field of a dataclass section that turns the logger on
    switch: str = "enabled"
    #: the module it imports when built: refused by name, before the run, if it is missing
    package: str | None = None
    #: the pip extra that installs ``package`` (None: one of rltrain's own dependencies)
    extra: str | None = None
    #: checks its section (on or off), raising ConfigError naming the key
    check: Callable[[Any], None] | None = None

    @property
    def switch_key(self) -> str:
        """The key that turns it on: ``logger.tensorboard``, ``logger.wandb.enabled``."""
        return f"logger.{self.key}" + ("" if self.schema is bool else f".{self.switch}")

    def enabled(self, section: Any) -> bool:
        """Whether ``section`` (this logger's part of the ``logger`` group) turns it on."""
        return bool(section if self.schema is bool else getattr(section, self.switch))


#: the optional loggers, by key, in the order they are built (the package's modules in
#: alphabetical order)
LOGGERS: dict[str, LoggerSpec] = {}


def register(spec: LoggerSpec) -> LoggerSpec:
    """Add ``spec`` to the registry (at the import of its module)."""
    own = {f.name for f in dataclasses.fields(LoggerConfig)}
    if not spec.key.isidentifier() or spec.key in own:
        raise ValueError(f"a logger's key must be a name other than {', '.join(sorted(own))}; "
                         f"got {spec.key!r}")
    if spec.key in LOGGERS and LOGGERS[spec.key].build is not spec.build:
        raise ValueError(f"two loggers are registered as logger.{spec.key}")
    if spec.schema is not bool:
        if not dataclasses.is_dataclass(spec.schema):
            raise ValueError(f"logger.{spec.key}: the schema must be a dataclass or bool")
        if spec.switch not in {f.name for f in dataclasses.fields(spec.schema)}:
            raise ValueError(f"{spec.schema.__name__} has no field {spec.switch!r} to turn "
                             f"logger.{spec.key} on")
    LOGGERS[spec.key] = spec
    return spec


def logger_schema() -> type[LoggerConfig]:
    """The ``logger`` group's schema: :class:`~rltrain.config.schemas.LoggerConfig` (the console's
    fields) and one section per registered logger. Made once for a given registry, so that
    Hydra's ConfigStore, a stored config read back and the Settings share one class."""
    return _schema(tuple((s.key, s.schema, s.default, s.doc) for s in LOGGERS.values()))


@functools.cache
def _schema(sections: tuple[tuple[str, type, bool, str], ...]) -> type[LoggerConfig]:
    """The schema for these (key, schema, default, doc) sections: a registry that differs in
    nothing else (a spec's package, its build) has the same class."""
    fields = [(key, tp, field(default=default) if tp is bool else field(default_factory=tp))
              for key, tp, default, _ in sections]
    schema = dataclasses.make_dataclass("LoggerSchema", fields, bases=(LoggerConfig,))
    schema.__module__ = __name__  # found by pickle through this module's __getattr__
    docs = "".join(f"\n\n``{key}``: {doc}" for key, _, _, doc in sections if doc)
    schema.__doc__ = f"{inspect.cleandoc(LoggerConfig.__doc__ or '')}{docs}"
    return schema


def __getattr__(name: str) -> Any:
    # pickle finds a class by module and name: a DictConfig of the logger schema sent to a
    # sweep's job in another process (joblib) names this module's LoggerSchema
    if name == "LoggerSchema":
        return logger_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a dotted name whose parent is missing
        return False


def check_loggers(section: LoggerConfig) -> None:
    """Refuse, before anything is built, a logger that is on but not installed, or a section
    its own check refuses; raises ConfigError naming the key."""
    for spec in LOGGERS.values():
        own = getattr(section, spec.key)
        if spec.enabled(own) and spec.package is not None and not _installed(spec.package):
            fix = f'pip install -e ".[{spec.extra}]"' if spec.extra else "pip install -e ."
            raise ConfigError(f"{spec.switch_key}=true needs {spec.package}: {fix}")
        if spec.check is not None:
            spec.check(own)


def build_loggers(section: LoggerConfig, context: LoggerContext) -> list[Logger]:
    """The loggers ``section`` turns on, built, in registry order."""
    return [spec.build(getattr(section, spec.key), context) for spec in LOGGERS.values()
            if spec.enabled(getattr(section, spec.key))]
