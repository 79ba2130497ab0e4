"""The algorithms: every module of this package (but ``base`` and ``registry``) declares one
and registers it, so importing the package fills :data:`ALGORITHMS`."""

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
from rltrain.modules import import_members

import_members(__name__, __path__, skip=("base", "registry"))

__all__ = ["ALGORITHMS", "CONTINUOUS", "DISCRETE", "MULTIDISCRETE", "AlgoSpec", "Algorithm",
           "OffPolicyAlgorithm", "OnPolicyAlgorithm", "TDAlgorithm", "UpdateReport", "get",
           "register"]
