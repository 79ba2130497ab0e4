"""A run as one trial of an Optuna study (the job side of ``hydra/sweeper=optuna``).

The sweeper asks the study for a trial, launches a job with the trial's parameters and
``tune.storage``, ``tune.study`` and ``tune.trial`` set; the job's run reports its score after
every epoch to the study (``trial.report``), stops when the study's pruner says so, and
returns its final score, which the sweeper tells the study.

The score of a trial (``tune.objective``) comes from its epochs' test scores:

* ``auc`` (the default): the mean test score over every planned epoch, the area under the
  learning curve. A run that stops early at the stop score carries that score over the
  epochs it skipped, so solving sooner scores higher. Every epoch's test is a noisy estimate;
  averaging them lowers the noise roughly by the square root of the number of epochs, and
  unlike ``best`` it does not reward one lucky test, nor saturate at the reward threshold
  (where many configurations tie on their best) as ``best`` does.
* ``last_k``: the mean of the last ``tune.last_k`` test scores (the final policy's quality,
  less noisy than ``final``).
* ``best``: the best test score (what the run saves as ``best/``); noisy and saturating.
* ``final``: the last test score.

During the run, the value reported after epoch t is the same formula applied to the epochs
so far (for ``auc``, the last score carried to the planned end), so a pruner compares like
with like at every step.

Optuna is imported where it is used (0.18 s): it belongs to the ``tune`` extra, and this module
is imported by every Hydra start of rltrain (through the sweeper plugin Hydra imports while it
looks for plugins), which must neither pay for Optuna nor need it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltrain.config.schemas import ConfigError, TuneConfig
from rltrain.rundir.stored_data import StoredDataError, json_lines

if TYPE_CHECKING:
    import optuna

log = logging.getLogger(__name__)

#: a storage URL of this form is Optuna's journal file (no database server, safe for
#: several processes on one file system)
JOURNAL_PREFIX = "journal:"


def objective(scores: Sequence[float], planned_epochs: int, kind: str = "auc",
              last_k: int = 3) -> float:
    """A trial's score from its test scores so far (see the module's text)."""
    if not scores:
        raise ValueError("no test scores yet")
    if kind == "best":
        return float(max(scores))
    if kind == "final":
        return float(scores[-1])
    if kind == "last_k":
        tail = scores[-last_k:]
        return float(sum(tail) / len(tail))
    if kind == "auc":
        epochs = max(planned_epochs, len(scores))
        return float((sum(scores) + scores[-1] * (epochs - len(scores))) / epochs)
    raise ValueError(f"unknown objective {kind!r}")


#: the study's user attribute that holds its pruner's settings (Optuna's storage keeps the
#: sampler and pruner of no study: each process that opens the study builds its own)
PRUNER_ATTR = "rltrain_pruner"


def make_pruner(spec: dict[str, Any]) -> optuna.pruners.BasePruner:
    """An Optuna pruner from the sweeper's ``pruner`` settings: median, halving or none."""
    import optuna  # the tune extra, 0.18 s: see the module's text

    name = spec.get("name", "median")
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=int(spec["n_startup_trials"]),
                                           n_warmup_steps=int(spec["n_warmup_steps"]))
    if name == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=int(spec["min_resource"]),
            reduction_factor=int(spec["reduction_factor"]))
    return optuna.pruners.NopPruner()


def open_storage(url: str, heartbeat: tuple[float, float] | None = None
                 ) -> optuna.storages.BaseStorage:
    """An Optuna storage from a URL: ``journal:PATH`` (a journal file), or an RDB URL
    (``sqlite:///PATH``, ``postgresql://...``) with a generous lock timeout for SQLite,
    which several trial processes write at once. ``heartbeat`` (interval, grace period in
    seconds) switches on an RDB storage's own heartbeat table (:class:`Heartbeats`)."""
    import optuna  # the tune extra, 0.18 s: see the module's text

    if url.startswith(JOURNAL_PREFIX):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        path = url[len(JOURNAL_PREFIX):]
        return JournalStorage(JournalFileBackend(path))
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
    if heartbeat is not None:
        # whole seconds: Optuna types them so, and SQLite's clock (CURRENT_TIMESTAMP) counts
        # whole seconds anyway; the interval only switches the table on (Heartbeats beats)
        kwargs["heartbeat_interval"] = math.ceil(heartbeat[0])
        kwargs["grace_period"] = math.ceil(heartbeat[1])
    for attempt in range(_CREATE_TRIES):
        try:
            with warnings.catch_warnings():
                # Optuna marks heartbeat_interval experimental (since 2.9, unchanged through 5)
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, **kwargs)
        except Exception as e:
            # sweeps started together into a new database: Optuna creates its tables and
            # stamps their version in steps, not in one transaction, so another process's
            # creation can collide with this one's (four processes at once on a new SQLite
            # file: a collision in 4 of 5 tries); the tables are there on the next attempt
            if attempt == _CREATE_TRIES - 1 or not _created_beside(e):
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")  # the loop returns or raises


#: attempts at opening an RDB storage whose tables another process is creating
_CREATE_TRIES = 5


def _created_beside(e: Exception) -> bool:
    """Whether ``e`` is what creating Optuna's tables raises when another process created
    them at the same moment (a table or its version row already there)."""
    text = str(e)
    return (type(e).__name__ in ("IntegrityError", "OperationalError")
            and ("already exists" in text or "alembic_version" in text))


#: a trial's system attribute, set once the sweep that runs it has recorded its first
#: heartbeat: that sweep's settings, ``{"interval": s, "grace": s}``. A running trial without
#: it never had a heartbeat (left by an rltrain before heartbeats, or by another program)
HEARTBEAT_ATTR = "rltrain_heartbeat"
#: a trial's system attribute in a journal file, whose storage keeps no heartbeats of its own
#: (Optuna 4 and 5): the time of its last heartbeat, seconds since the epoch, by the clock of
#: the machine that recorded it
HEARTBEAT_AT_ATTR = "rltrain_heartbeat_at"


class Heartbeats:
    """Running trials' heartbeats in a study's storage: who records them and which are stale.

    An RDB storage (SQLite, PostgreSQL, ...) uses Optuna's own heartbeat table, written and
    judged by the database's clock (``RDBStorage(heartbeat_interval=..., grace_period=...)``,
    ``record_heartbeat``, and the stale-trial query behind ``optuna.storages.fail_stale_trials``);
    it is opened here a second time with the heartbeat switched on, so that the study's own
    storage asks and tells as usual (Optuna warns when a heartbeat storage asks outside
    ``Study.optimize``, which a sweeper never calls). A journal file has no heartbeat in
    Optuna 4 and 5: there the heartbeat is the trial's :data:`HEARTBEAT_AT_ATTR`, judged by
    this machine's clock (machines sharing a journal file must keep their clocks within a
    fraction of the grace period, as NTP does)."""

    def __init__(self, url: str, storage: optuna.storages.BaseStorage, interval: float,
                 grace: float) -> None:
        import optuna  # the tune extra, 0.18 s: see the module's text

        self.interval, self.grace = interval, grace
        self.storage = storage
        self._rdb: optuna.storages.RDBStorage | None = None
        if not url.startswith(JOURNAL_PREFIX):
            rdb = open_storage(url, (interval, grace))
            assert isinstance(rdb, optuna.storages.RDBStorage)  # not a journal: an RDB URL
            self._rdb = rdb

    def record(self, trial_id: int) -> None:
        """A heartbeat of a running trial (of a finished one: nothing)."""
        from optuna.exceptions import UpdateFinishedTrialError  # the tune extra

        if self._rdb is not None:
            self._rdb.record_heartbeat(trial_id)
            return
        with contextlib.suppress(UpdateFinishedTrialError):  # told between two beats
            self.storage.set_trial_system_attr(trial_id, HEARTBEAT_AT_ATTR, time.time())

    def stale(self, study_id: int, grace: float) -> list[int]:
        """The ids of the study's running trials whose last heartbeat is more than ``grace``
        seconds old (trials that never recorded one are not among them)."""
        from optuna.trial import TrialState  # the tune extra

        if self._rdb is not None:
            # the query Optuna's fail_stale_trials runs, with this grace period (Optuna's
            # RDBStorage keeps it as a plain attribute, read by each query)
            self._rdb.grace_period = math.ceil(grace)
            return self._rdb._get_stale_trial_ids(study_id)  # noqa: SLF001 - see above
        now = time.time()
        return [self.storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
                for t in self.storage.get_all_trials(study_id, deepcopy=False,
                                                     states=(TrialState.RUNNING,))
                if isinstance(at := t.system_attrs.get(HEARTBEAT_AT_ATTR), int | float)
                and now - at > grace]


def storage_file(url: str) -> Path | None:
    """The file a storage URL names (a journal file, an SQLite database), or None (a
    database server, SQLite in memory)."""
    if url.startswith(JOURNAL_PREFIX):
        return Path(url[len(JOURNAL_PREFIX):])
    if url.startswith("sqlite"):
        from sqlalchemy.engine import make_url  # Optuna's RDB storage needs SQLAlchemy

        database = make_url(url).database
        if database and database != ":memory:" and not database.startswith("file:"):
            return Path(database)
    return None


class StudyLock:
    """An exclusive lock for the moments a sweep counts a shared study's trials and asks for
    new ones, so that sweeps started together neither ask more trials than the study needs
    nor retry a stale trial twice: ``flock`` on ``<storage file>.rltrain-lock`` beside a
    journal file or SQLite database (the kernel drops it when its holder dies, killed or
    not). A database server has no such file: there, sweeps that ask at the same instant may
    ask one trial too many."""

    SUFFIX = ".rltrain-lock"

    def __init__(self, url: str) -> None:
        found = storage_file(url)
        self.path = None if found is None else found.with_name(found.name + self.SUFFIX)
        self._fd: int | None = None

    def __enter__(self) -> StudyLock:
        if self.path is None:
            return self
        try:  # never through a link (rltrain.rundir.files): O_NOFOLLOW refuses one
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o644)
        except OSError as e:
            raise OSError(e.errno, f"the study's lock file {self.path} cannot be opened: "
                          f"{e.strerror}") from None
        # a file system without locks (some network mounts): unguarded, as before
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


class TrialReporter:
    """Reports a run's epochs to its trial; says when the pruner wants it stopped."""

    def __init__(self, tune: TuneConfig, planned_epochs: int) -> None:
        import optuna  # the tune extra, 0.18 s: see the module's text

        if tune.trial is None:
            raise ValueError("a TrialReporter is for a trial's run: tune.trial is not set")
        if tune.storage is None or tune.study is None:
            raise ConfigError("tune.trial is set, so tune.storage and tune.study must be too "
                              "(the Optuna sweeper sets all three)")
        self.tune, self.planned_epochs = tune, planned_epochs
        try:
            storage = open_storage(tune.storage)
            study_id = storage.get_study_id_from_name(tune.study)
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, tune.trial)
            self.study = optuna.load_study(study_name=tune.study, storage=storage)
            spec = self.study.user_attrs.get(PRUNER_ATTR)
            if spec:
                self.study.pruner = make_pruner(spec)
        except KeyError as e:
            raise ConfigError(f"tune: no trial {tune.trial} in study {tune.study!r} at "
                              f"{tune.storage} ({e})") from None
        self.storage, self.trial_id = storage, trial_id
        self.trial = optuna.trial.Trial(self.study, trial_id)
        self.active = self._running()
        if not self.active:
            log.warning(f"trial {tune.trial} of study {tune.study!r} is already finished: "
                        "this run reports nothing to the study")
        self.scores: list[float] = []

    def load_scores(self, run_dir: Path) -> None:
        """A resumed run: the test scores of the epochs it already has."""
        self.scores = [_score(r["test"].get("return_mean")) for r in _records(run_dir)]

    def _running(self) -> bool:
        import optuna  # the tune extra, 0.18 s: see the module's text

        return self.storage.get_trial(self.trial_id).state == optuna.trial.TrialState.RUNNING

    def value(self) -> float:
        return objective(self.scores, self.planned_epochs, self.tune.objective,
                         self.tune.last_k)

    def report(self, epoch: int, score: float | None) -> bool:
        """Record an epoch's test score; True if the pruner says stop."""
        self.scores.append(_score(score))
        if not self.active:
            return False
        value = self.value()
        if not math.isfinite(value):
            return False  # the run's own checks stop it
        from optuna.exceptions import UpdateFinishedTrialError  # the tune extra

        try:
            self.trial.report(value, step=epoch)
        except UpdateFinishedTrialError:
            # failed as stale by a sweep (its own sweep stopped beating for longer than the
            # grace period: killed, or stalled); the run goes on, unreported
            self.active = False
            log.warning(f"trial {self.tune.trial} of study {self.tune.study!r} was ended by "
                        "another sweep (its heartbeat had stopped): this run reports nothing "
                        "more to the study")
            return False
        return bool(self.tune.prune and self.trial.should_prune())


def _score(value: float | None) -> float:
    """An epoch's test score (an epoch without a finished test episode: -inf, as the
    trainer counts it)."""
    return -math.inf if value is None else float(value)


def _records(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "epochs.jsonl"
    if not path.is_file():
        return []
    out = []
    # a line at a time, each bounded (rltrain.rundir.stored_data.json_lines); up to the first that
    # is not a record
    with contextlib.suppress(StoredDataError):
        for line in json_lines(path):
            if line.problem is not None or not isinstance(line.value, dict):
                break
            out.append(line.value)
    return out
