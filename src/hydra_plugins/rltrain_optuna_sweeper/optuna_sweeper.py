"""The Hydra Sweeper class of ``hydra/sweeper=optuna``: Hydra accepts plugin classes only
from the ``hydra_plugins`` package. The work lives in the package :mod:`rltrain.sweeps.optuna`
(the loop in its ``sweeper`` module, the config this plugin registers in its ``conf``), which
imports Optuna only when a sweep starts (Hydra imports this module on every run while it looks
for plugins)."""

from __future__ import annotations

from typing import Any

from hydra.plugins.sweeper import Sweeper

from rltrain.sweeps.optuna.conf import OptunaSweeperConf
from rltrain.sweeps.optuna.sweeper import OptunaSweeperImpl

__all__ = ["OptunaSweeper", "OptunaSweeperConf"]


class OptunaSweeper(Sweeper):
    def __init__(self, **kwargs: Any) -> None:
        self._impl = OptunaSweeperImpl(**kwargs)

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self._impl.setup(hydra_context=hydra_context, task_function=task_function,
                         config=config)

    def sweep(self, arguments: list[str]) -> Any:
        return self._impl.sweep(arguments)
