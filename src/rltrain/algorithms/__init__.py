"""The algorithms: every module of this package (but ``base`` and ``registry``) declares one
and registers it, so importing the package fills :data:`ALGORITHMS`."""

import importlib
import pkgutil

from rltrain.algorithms.base import (
    Algorithm,
    OffPolicyAlgorithm,
    OnPolicyAlgorithm,
    TDAlgorithm,
    UpdateReport,
)
from rltrain.algorithms.registry import ALGORITHMS, CONTINUOUS, DISCRETE, AlgoSpec, get, register

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "registry") and not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ALGORITHMS", "CONTINUOUS", "DISCRETE", "AlgoSpec", "Algorithm", "OffPolicyAlgorithm",
           "OnPolicyAlgorithm", "TDAlgorithm", "UpdateReport", "get", "register"]
