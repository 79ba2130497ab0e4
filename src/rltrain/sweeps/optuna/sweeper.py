"""The sweep itself, what the plugin's ``OptunaSweeper`` runs (:class:`OptunaSweeperImpl`).

The loop: ask the study for up to ``n_jobs`` trials, turn each into a job's overrides
(:mod:`.trials`), let the configured launcher run them (basic: one after the other; joblib,
submitit, Ray: in parallel), tell the study each job's outcome, until the study holds
``n_trials`` finished trials, counted with the other sweeps into the same study
(:mod:`.shared`); then the study's results (:mod:`.outputs`). A stop (a signal, the sweep's
stop file) ends the loop after the jobs under way; the outputs are still written.

Imports every other module of this package, ``rltrain.process.signals``, and, when a sweep starts,
Optuna and ``rltrain.sweeps`` (the sweep's stop file and exit code: see the package's
text)."""

from __future__ import annotations

import logging
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.plugins import Plugins
from omegaconf import OmegaConf

from rltrain.process import signals
from rltrain.sweeps.optuna.conf import OptunaSweeperConf, SweepError, check_conf
from rltrain.sweeps.optuna.outputs import finish, tuned_budget
from rltrain.sweeps.optuna.shared import SharedStudy, open_study
from rltrain.sweeps.optuna.space import check_keys, grid_of, make_sampler, search_space
from rltrain.sweeps.optuna.trials import job_overrides, tell

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

    from rltrain.assembly.optuna_trial import StudyLock

log = logging.getLogger(__name__)


class OptunaSweeperImpl:
    """What the plugin's ``OptunaSweeper`` (a Hydra Sweeper, which Hydra wants defined in
    the ``hydra_plugins`` package) does."""

    def __init__(self, **kwargs: Any) -> None:
        conf = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(OptunaSweeperConf),
                                                   kwargs))
        assert isinstance(conf, OptunaSweeperConf)  # a structured config's object is its class
        self.conf = conf
        self.config: Any = None
        self.launcher: Any = None
        self.hydra_context: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        from rltrain.sweeps.command import judge  # when a sweep runs: see the package's text

        try:
            code = self._sweep(arguments)
        except SweepError as e:
            print(f"rltrain: error: {e}", file=sys.stderr)
            code = 2
        judge(code)
        return None

    def _sweep(self, arguments: list[str]) -> int:
        """The sweep from its settings to its outputs; its exit code."""
        # the tune extra first (0.18 s): without it, the sweep ends before it writes anything
        import optuna  # noqa: F401

        c = self.conf
        check_conf(c)
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        fixed, space = search_space(arguments, c.params)
        algo = str(self.config.algo.name)
        env = str(self.config.env.name)
        check_keys(space, algo)
        storage_url = c.storage or f"sqlite:///{sweep_dir / 'optuna.db'}"
        study_name = c.study_name or f"rltrain-{algo}-{env}"
        study, storage, heartbeats, lock = open_study(c, storage_url, study_name)
        n_trials = c.n_trials
        grid = grid_of(space) if c.sampler.name == "grid" else None
        if grid is not None:
            size = math.prod(len(v) for v in grid.values())
            if n_trials > size:
                log.info(f"the grid has {size} points: the study runs {size} trials, "
                         f"not {n_trials}")
                n_trials = size
        shared = SharedStudy(study, storage, heartbeats, c)
        try:
            with lock:
                shared.take_stale()
                if grid is not None:
                    shared.enqueue_grid(grid)
                tally = shared.tally()
        except OSError as e:  # the lock file beside the storage
            raise SweepError(str(e)) from None
        running = f", {len(tally.running)} running" if tally.running else ""
        print(f"rltrain: study {study_name!r} in {storage_url}: {tally.finished} of {n_trials} "
              f"trials finished{running}; searching {', '.join(space) or 'nothing'}"
              + (f"; fixed {' '.join(fixed)}" if fixed else ""), flush=True)
        try:
            self._run_trials(shared, lock, n_trials, space, fixed, sweep_dir, storage_url)
        finally:
            shared.close()
        return finish(study, sweep_dir, storage_url, algo, env, c.objective,
                      lambda best: tuned_budget(best, algo, env, self.hydra_context,
                                                self.config))

    def _run_trials(self, shared: SharedStudy, lock: StudyLock, n_trials: int,
                    space: dict[str, BaseDistribution], fixed: list[str], sweep_dir: Path,
                    storage_url: str) -> None:
        """Ask, launch and tell until the study holds ``n_trials`` finished trials (this
        sweep's and the others'), or the sweep is asked to stop."""
        from rltrain.sweeps.stopping import stop_requested  # when a sweep runs: the package's text

        c, study = self.conf, shared.study
        waiting: tuple[int, ...] = ()
        while not stop_requested(sweep_dir):
            with lock:  # count and ask as one step: sweeps started together ask no more
                shared.take_stale()
                tally = shared.tally()
                if tally.finished >= n_trials:
                    break
                wanted = min(c.n_jobs, n_trials - tally.finished - len(tally.running))
                if wanted > 0:
                    seed = None if c.sampler.seed is None else c.sampler.seed + tally.total
                    study.sampler = make_sampler(c.sampler, seed, space)
                    batch = [shared.ask(space) for _ in range(wanted)]
            if wanted <= 0:  # the study's last trials run in other sweeps: wait for them
                numbers = tuple(sorted(t.number for t in tally.running))
                if numbers != waiting:
                    waiting = numbers
                    print(f"rltrain: waiting for trial(s) {', '.join(map(str, numbers))}, "
                          "run by another sweep (taken over if its heartbeat stops for "
                          f"{shared.grace:g} s)", flush=True)
                time.sleep(min(1.0, c.heartbeat_interval))
                continue
            waiting = ()
            jobs = [job_overrides(fixed, trial, storage_url, study.study_name, c)
                    for trial in batch]
            returns = self.launcher.launch(jobs, initial_job_idx=batch[0].number)
            for trial, ret in zip(batch, returns, strict=True):
                shared.done(trial)
                tell(study, trial, ret, c.grace_period)
            if signals.requested() is not None:
                break
