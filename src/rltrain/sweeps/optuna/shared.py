"""The shared-study protocol: how several sweeps fill one study (the same ``storage`` and
``study_name``, on one machine or many) with each trial run and counted once.

Each sweep asks only for the trials the study still lacks (``n_trials`` less those finished
and those running, whoever runs them), counting and asking as one step under the study's lock
(``rltrain.assembly.optuna_trial.StudyLock``); it waits for the others' trials when none is left to
ask, and ends once the study holds ``n_trials`` finished trials. Re-running the same command with
the same storage continues the study: finished trials count, and a trial a killed sweep left
running is marked failed and asked again.

A sweep proves that it is alive with a heartbeat: every ``heartbeat_interval`` seconds, for as
long as a trial it asked for runs, its own process (which asks and tells, whichever launcher
runs the job) records one in the study's storage (``rltrain.assembly.optuna_trial.Heartbeats``:
Optuna's heartbeat table in an RDB storage; a trial attribute in a journal file). A running trial
whose heartbeat is more than ``grace_period`` seconds old was left by a sweep that died (killed, its
machine lost): the next sweep to look marks it failed (``interrupted``, not counted) and asks
for its parameters again. A live trial is never taken, however long it trains.

Imports :mod:`.conf` of this package and ``rltrain.assembly.optuna_trial`` (the storage, heartbeats,
lock and pruner both sides of a trial share); Optuna only inside functions (see the package's
text)."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rltrain.assembly.optuna_trial import (
    HEARTBEAT_ATTR,
    PRUNER_ATTR,
    Heartbeats,
    StudyLock,
    make_pruner,
    open_storage,
)
from rltrain.sweeps.optuna.conf import OptunaSweeperConf, SweepError

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

log = logging.getLogger(__name__)


def open_study(c: OptunaSweeperConf, storage_url: str, study_name: str
               ) -> tuple[optuna.Study, optuna.storages.BaseStorage, Heartbeats, StudyLock]:
    """The study (created, or loaded to continue it), its storage, the heartbeats of the
    trials this sweep will run and the lock sweeps into it share; a storage that cannot be
    used is one line (:class:`SweepError`)."""
    import optuna  # the tune extra, 0.18 s: see the package's text

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        storage = open_storage(storage_url)
        pruner = dataclasses.asdict(c.pruner)
        study = optuna.create_study(
            study_name=study_name, storage=storage, load_if_exists=True,
            direction=optuna.study.StudyDirection[c.direction.upper()],
            pruner=make_pruner(pruner))
        # Optuna's storage keeps no pruner: the trials' runs build this one from it
        study.set_user_attr(PRUNER_ATTR, pruner)
        heartbeats = Heartbeats(storage_url, storage, c.heartbeat_interval, c.grace_period)
        lock = StudyLock(storage_url)
    except Exception as e:  # noqa: BLE001 - a bad URL, a server that is not there
        hint = (" (PostgreSQL needs its driver: pip install -e \".[postgres]\")"
                if isinstance(e, ImportError) and storage_url.startswith("postgres") else "")
        raise SweepError(f"the study's storage {storage_url} cannot be used: "
                         f"{type(e).__name__}: {str(e).splitlines()[0]}{hint}") from None
    return study, storage, heartbeats, lock


def interrupted(trial: optuna.trial.FrozenTrial) -> bool:
    """A failed trial that does not count: its run was interrupted, or its sweep died."""
    return bool(trial.user_attrs.get("interrupted"))


@dataclass
class Tally:
    #: finished trials (complete, pruned or failed), each once: an interrupted one is not
    finished: int
    #: the running trials, whichever sweep runs them
    running: list[optuna.trial.FrozenTrial]
    #: every trial the study holds
    total: int


class SharedStudy:
    """A study as one of several sweeps sees it: its tally, the trials this sweep asked for
    and keeps alive with a heartbeat thread, and the trials whose sweep died."""

    def __init__(self, study: optuna.Study, storage: optuna.storages.BaseStorage,
                 heartbeats: Heartbeats, conf: OptunaSweeperConf) -> None:
        self.study, self.storage, self.heartbeats = study, storage, heartbeats
        self.study_id = storage.get_study_id_from_name(study.study_name)
        self.mark = {"interval": conf.heartbeat_interval, "grace": conf.grace_period}
        #: the grace period the last look for stale trials used (see take_stale)
        self.grace = conf.grace_period
        self._mine: dict[int, int] = {}  # trial id -> number, of the trials this sweep runs
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tally(self) -> Tally:
        from optuna.trial import TrialState  # the tune extra: see the package's text

        trials = self.study.get_trials(deepcopy=False)
        return Tally(
            finished=sum(t.state.is_finished() and not interrupted(t) for t in trials),
            running=[t for t in trials if t.state == TrialState.RUNNING], total=len(trials))

    def ask(self, space: dict[str, BaseDistribution]) -> optuna.Trial:
        """A trial for this sweep, its first heartbeat recorded before any other sweep can
        see it without one, then beating every interval until :meth:`done`."""
        trial = self.study.ask(space)
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id,
                                                                         trial.number)
        self.heartbeats.record(trial_id)
        # the mark says it beats, and how often: a trial without it never had a heartbeat
        self.storage.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, self.mark)
        with self._guard:
            self._mine[trial_id] = trial.number
        if self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="rltrain-heartbeat",
                                            daemon=True)
            self._thread.start()
        return trial

    def done(self, trial: optuna.Trial) -> None:
        """The trial's job has ended: no more heartbeats (it is told next)."""
        with self._guard:
            self._mine = {k: v for k, v in self._mine.items() if v != trial.number}

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _beat(self) -> None:
        """The heartbeat thread: alive in this (the sweep's) process for as long as it runs
        trials, so a trial's heartbeat stops exactly when its sweep dies, whichever launcher
        (in this process, joblib's workers, a cluster) runs its job."""
        failing = False
        while not self._stop.wait(self.heartbeats.interval):
            with self._guard:
                mine = dict(self._mine)
            try:
                for trial_id in mine:
                    self.heartbeats.record(trial_id)
                failing = False
            except Exception as e:  # noqa: BLE001 - a busy or lost storage: try again next beat
                if not failing:
                    log.warning(f"the heartbeat of trial(s) {', '.join(map(str, mine.values()))} "
                                f"could not be recorded ({type(e).__name__}: "
                                f"{str(e).splitlines()[0] if str(e) else ''}); trying again "
                                f"every {self.heartbeats.interval:g} s")
                failing = True

    def take_stale(self) -> None:
        """Running trials whose sweep died: failed (interrupted, not counted), their
        parameters asked again. Stale is a heartbeat more than the grace period old (the
        longest any running trial's sweep declared, so sweeps with other settings never take
        a live one), or, for a trial that never had a heartbeat (an older rltrain, another
        program), a start that long ago."""
        import datetime as dt

        from optuna.exceptions import UpdateFinishedTrialError  # the tune extra
        from optuna.trial import TrialState  # the tune extra: see the package's text

        running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if not running:
            return
        self.grace = grace = max([self.heartbeats.grace] + [
            float(mark["grace"]) for t in running
            if isinstance(mark := t.system_attrs.get(HEARTBEAT_ATTR), dict)
            and isinstance(mark.get("grace"), int | float)])
        stale = set(self.heartbeats.stale(self.study_id, grace))
        now = dt.datetime.now()
        for t in running:
            trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id,
                                                                             t.number)
            if trial_id in stale:
                why = f"no heartbeat for more than {grace:g} s"
            elif (HEARTBEAT_ATTR not in t.system_attrs and t.datetime_start is not None
                  and (now - t.datetime_start).total_seconds() > grace):
                why = f"running for more than {grace:g} s without a heartbeat"
            else:
                continue
            try:  # marked first: a finished trial takes no attribute
                self.storage.set_trial_user_attr(trial_id, "interrupted", True)
                self.storage.set_trial_user_attr(
                    trial_id, "error", f"interrupted: {why} (its sweep was stopped or killed)")
                if not self.storage.set_trial_state_values(trial_id, TrialState.FAIL):
                    continue
            except UpdateFinishedTrialError:
                continue  # told by its sweep after all, or taken by another sweep
            self.study.enqueue_trial(t.params, user_attrs={"retry_of": t.number},
                                     skip_if_exists=False)
            log.warning(f"trial {t.number} was left running by a sweep that is gone ({why}): "
                        "marked failed (interrupted); its parameters are tried again")

    def enqueue_grid(self, grid: dict[str, list[Any]]) -> None:
        """Queue every point of the grid the study has not tried (or queued) yet, by this
        sweep or another."""
        keys = list(grid)
        # a queued trial holds its point as fixed_params until it is asked (another sweep's
        # queue, a retried trial's parameters)
        seen = {tuple(repr((t.params or t.system_attrs.get("fixed_params", {})).get(k))
                      for k in keys)
                for t in self.study.get_trials(deepcopy=False) if not interrupted(t)}
        for point in itertools.product(*(grid[k] for k in keys)):
            if tuple(repr(v) for v in point) not in seen:
                self.study.enqueue_trial(dict(zip(keys, point, strict=True)),
                                         skip_if_exists=False)
