"""rltrain's Hydra callback (``conf/config.yaml``: ``hydra.callbacks``), and what a sweep
sets up as it starts.

* A single run's directory is checked before Hydra makes it (:meth:`HydraCallback.on_run_start`).
* A sweep's (:meth:`HydraCallback.on_multirun_start`): its directory checked; each job named
  by what differs between jobs (:func:`name_jobs_by_what_differs`); a value given twice said
  to run twice (:func:`warn_repeated_jobs`); submitit's launcher swapped for its watched form
  (:func:`rltrain.sweeps.submitit_launcher.watched`); the stop file of an earlier sweep
  forgotten and the signal handler between jobs set (:mod:`~rltrain.sweeps.stopping`); the
  main process marked for its workers (:mod:`~rltrain.sweeps.orphans`); a ledger of refused
  jobs opened (:mod:`~rltrain.sweeps.status`).

Imports those modules and :mod:`~rltrain.sweeps.command` of the package (the submitit one
only for a submitit sweep: it needs that plugin), and the ground floor.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.experimental.callback import Callback
from omegaconf import open_dict, read_write

from rltrain.config.schemas import overrides_as_typed
from rltrain.process import signals
from rltrain.rundir import directory
from rltrain.sweeps import orphans, status, stopping
from rltrain.sweeps.command import STATE


class HydraCallback(Callback):
    """rltrain's hooks into Hydra, installed by ``conf/config.yaml`` (``hydra.callbacks``)."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        """Check the run directory before Hydra creates it (a file there, a read-only place:
        Hydra's own ``mkdir`` would end in a traceback)."""
        HydraConfig.instance().set_config(config)  # as run_job does next: ${hydra:...} resolves
        path = Path(str(config.hydra.run.dir)).absolute()
        # what this run will create above its directory: removed again if it is refused
        STATE.made = [p for p in path.parents if not p.exists()]
        try:
            STATE.run_dir_existed = directory.ensure_dir(path)
        except directory.RunDirError as e:
            print(f"rltrain: error: {e}", file=sys.stderr)
            sys.exit(2)

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        path = Path(str(config.hydra.sweep.dir)).absolute()
        try:
            directory.ensure_dir(path, "hydra.sweep.dir")
        except directory.RunDirError as e:
            print(f"rltrain: error: {e}", file=sys.stderr)
            sys.exit(2)
        STATE.directory, STATE.started = path, time.time()
        name_jobs_by_what_differs(config)
        warn_repeated_jobs(config)
        if str(config.hydra.launcher.get("_target_", "")).startswith(
                "hydra_plugins.hydra_submitit_launcher."):
            from rltrain.sweeps import submitit_launcher  # needs that plugin (extra: cluster)

            submitit_launcher.watched(config.hydra.launcher)  # a wait that says what happens
        stopping.arm(path)
        orphans.mark_main_process()
        status.open_refusals(path)
        signals.between_jobs(stopping.stop_sweep)


def name_jobs_by_what_differs(config: Any) -> None:
    """Leave out of each job's directory name (``hydra.job.override_dirname``) the overrides
    every job of the sweep shares: the command line's overrides that sweep nothing, and the
    ``tune.*`` keys the Optuna sweeper gives its trials. What remains differs between jobs
    (the swept values, a search space's sampled ones). Each job's config is composed again
    from the sweep's ``hydra.overrides.hydra`` (whatever the launcher), so the exclusion is
    added there."""
    typed = overrides_as_typed(config.hydra.overrides.task)
    parsed = OverridesParser.create().parse_overrides(typed)
    constant = {o.key_or_group for o in parsed if not o.is_sweep_override()}
    constant |= {f"tune.{key}" for key in ("storage", "study", "trial", "objective", "last_k",
                                           "prune")}
    constant |= set(config.hydra.job.config.override_dirname.exclude_keys)
    quoted = ",".join("'" + key.replace("\\", "\\\\").replace("'", "\\'") + "'"
                      for key in sorted(constant))
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.overrides.hydra.append(
            f"hydra.job.config.override_dirname.exclude_keys=[{quoted}]")
        config.hydra.job.config.override_dirname.exclude_keys = sorted(constant)


def warn_repeated_jobs(config: Any) -> None:
    """Hydra's basic sweeper runs a value given twice (``seed=0,0``, ``lr=1e-3,0.001``) as two
    jobs of one config, each in its own directory, without a word: say which jobs repeat
    which, that it costs only time, and how to give each value once."""
    if not str(config.hydra.sweeper.get("_target_", "")).endswith(".BasicSweeper"):
        return  # another sweeper makes its own jobs (Optuna: the study's trials)
    parser = OverridesParser.create()
    params = config.hydra.sweeper.get("params") or {}
    lines = [f"{k}={v}" for k, v in params.items()]
    try:
        parsed = parser.parse_overrides(lines + overrides_as_typed(config.hydra.overrides.task))
        jobs = BasicSweeper.split_arguments(parsed, None)[0]
    except Exception:  # noqa: BLE001 - what Hydra cannot split it refuses itself, next
        return
    first: dict[tuple[tuple[str, str], ...], int] = {}
    repeats: list[str] = []
    for num, job in enumerate(jobs):
        same = first.setdefault(_as_set(parser, job), num)
        if same != num:
            shown = " ".join(o for o in job if o.split("=", 1)[0] in _swept(parsed))
            repeats.append(f"job {num} repeats job {same}" + (f" ({shown})" if shown else ""))
    if not repeats:
        return
    once = [f"{o.get_key_element()}={','.join(dict.fromkeys(o.sweep_string_iterator()))}"
            for o in parsed if o.is_sweep_override() and o.is_discrete_sweep()
            and len(set(o.sweep_string_iterator())) < len(list(o.sweep_string_iterator()))]
    hint = f" ({' '.join(once)})" if once else ""
    print(f"rltrain: warning: {'; '.join(repeats)}: a value given twice runs the same config "
          "twice, each copy in its own directory (harmless: rltrain-report counts one run per "
          f"seed, but the time is spent twice); give each value once{hint} to run it once",
          file=sys.stderr, flush=True)


def _swept(parsed: list[Override]) -> set[str]:
    return {o.get_key_element() for o in parsed if o.is_sweep_override()}


def _as_set(parser: OverridesParser, job: list[str]) -> tuple[tuple[str, str], ...]:
    """A job's overrides as values, not text: ``seed=0`` and ``seed=00`` are one job."""
    return tuple(sorted((o.get_key_element(), f"{type(o.value()).__name__}:{o.value()!r}")
                        for o in parser.parse_overrides(job)))
