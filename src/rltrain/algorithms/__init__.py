"""The algorithms: every module of this package (but ``base`` and ``registry``) declares one
and registers it, so importing the package fills :data:`ALGORITHMS`.

A layer under the trainers: an algorithm may import the data path's types (``Batch``,
``Rollout``, returns, transforms, fields), :mod:`rltrain.nets`, :mod:`rltrain.spaces`,
:mod:`rltrain.config` and :mod:`rltrain.common` (its faster forms hand stacked work over
through :mod:`rltrain.common.stacking`); never the trainers, the assembly or a command."""

from rltrain.algorithms.base import (
    Algorithm,
    OffPolicyAlgorithm,
    OnPolicyAlgorithm,
    TDAlgorithm,
    UpdateReport,
)
from rltrain.algorithms.registry import (
    ALGORITHMS,
    CONTINUOUS,
    DISCRETE,
    MULTIDISCRETE,
    AlgoSpec,
    get,
    register,
)
from rltrain.common.registries import import_members

import_members(__name__, __path__, skip=("base", "registry"))

__all__ = ["ALGORITHMS", "CONTINUOUS", "DISCRETE", "MULTIDISCRETE", "AlgoSpec", "Algorithm",
           "OffPolicyAlgorithm", "OnPolicyAlgorithm", "TDAlgorithm", "UpdateReport", "get",
           "register"]
