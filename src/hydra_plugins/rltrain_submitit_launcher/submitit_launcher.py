"""The Launcher classes rltrain runs for ``hydra/launcher=submitit_local`` and
``submitit_slurm``: Hydra accepts plugin classes only from the ``hydra_plugins`` package. The
work lives in :mod:`rltrain.sweeps.submitit_launcher`;
:func:`rltrain.sweeps.submitit_launcher.watched` selects these.
Without Hydra's submitit plugin (extra: cluster) this module defines nothing (Hydra imports it
on every run while it looks for plugins)."""

from __future__ import annotations

import importlib.util

__all__: list[str] = []

if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is not None:
    from hydra_plugins.hydra_submitit_launcher import (  # type: ignore[import-untyped]
        submitit_launcher as plugin,
    )

    from rltrain.sweeps.submitit_launcher import Watched

    class LocalLauncher(Watched, plugin.LocalLauncher):
        """``hydra/launcher=submitit_local``, watched."""

    class SlurmLauncher(Watched, plugin.SlurmLauncher):
        """``hydra/launcher=submitit_slurm`` (and ``hydra/launcher=slurm``), watched."""

    __all__ += ["LocalLauncher", "SlurmLauncher"]
