"""The Launcher class for ``hydra/launcher=batched`` (Hydra accepts plugin classes only from
the ``hydra_plugins`` package). Hydra imports this module whenever it looks for plugins, so
it imports the run's modules only when a sweep launches; the work is
:func:`rltrain.sweeps.batched.launch`."""


from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher


@dataclass
class BatchedLauncherConf:
    _target_: str = "hydra_plugins.rltrain_batched_launcher.batched_launcher.BatchedLauncher"
    #: worker processes: a group's jobs are dealt into this many batches, each in a process
    #: of its own (the jobs that run alone too); 1: every batch in this process; -1: one per
    #: CPU this process may run on (as Hydra's joblib launcher)
    n_jobs: int = -1


ConfigStore.instance().store(group="hydra/launcher", name="batched", node=BatchedLauncherConf,
                             provider="rltrain")


class BatchedLauncher(Launcher):
    """Jobs that differ only in seed as the members of a batch in one process
    (:mod:`rltrain.sweeps.batched`)."""

    #: every job's config is composed before any job runs (rltrain.commands.hydra_compat)
    composes_every_job_first = True

    def __init__(self, n_jobs: int = -1) -> None:
        super().__init__()
        self.n_jobs = n_jobs
        self.config: Any = None
        self.task_function: Any = None
        self.hydra_context: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        from rltrain.sweeps.batched import launch

        return launch(self, job_overrides, initial_job_idx)
