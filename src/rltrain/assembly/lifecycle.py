"""A run's life on disk: checkpoints, the ``best/`` and ``final/`` policies, what a resume
restores, the RNG state, and the one path that reads a checkpoint back.

:class:`Lifecycle` owns what a run keeps besides its logs; the trainer reaches it through its
callbacks (an epoch ended, a best score, the end). ``rltrain resume=RUN_DIR`` and a sweep job
that continues itself both start from :func:`resume_point` and hand it to
:func:`rltrain.assembly.run.run`, which builds the parts afresh and calls :meth:`Lifecycle.restore`;
``rltrain-eval --weights last`` loads the algorithm's modules through
:func:`restore_algorithm`, as a resume does.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from rltrain.algorithms import Algorithm
from rltrain.assembly.build import Parts
from rltrain.assembly.checked_config import Settings
from rltrain.assembly.registered_schemas import register_configs, typed_run_config
from rltrain.common.errors import SaveError
from rltrain.common.stats import EpochStats, InfoStats
from rltrain.config.schemas import ConfigError
from rltrain.loggers.jsonl import read_records
from rltrain.process.streams import FILE_ONLY
from rltrain.rundir import directory as rundir
from rltrain.rundir import stored_data, trust
from rltrain.rundir.checkpoint import (
    CheckpointError,
    load_latest,
    load_policy,
    save_checkpoint,
    save_policy,
)
from rltrain.rundir.directory import RunDirRemoved, RunDirWatch
from rltrain.trainers import Callbacks, Trainer, derived_seed

log = logging.getLogger("rltrain")


@dataclass
class RunContext:
    """What the CLI knows of a run besides its config, and what it reads back after it."""

    run_dir: Path
    #: the command as typed (a sweep job: ``rltrain`` and the job's own overrides)
    command: str = field(default_factory=lambda: " ".join(["rltrain", *sys.argv[1:]]))
    #: the job's overrides (Hydra's ``overrides.task``), for summary.json
    overrides: list[str] | None = None
    #: called once the run is accepted and built, before its first file: writes ``.hydra/``
    on_accept: Callable[[], None] | None = None
    started: float = field(default_factory=time.perf_counter)
    #: the newest checkpoint written or resumed from: path, epoch, env_step, epochs_complete
    checkpoint: dict[str, Any] | None = None
    #: the Optuna trial this run reports to (rltrain.assembly.optuna_trial.TrialReporter), if any
    trial: Any = None
    #: the run directory was removed while the run trained: nothing of the run is on disk,
    #: no checkpoint, no summary.json (the failure's message says so)
    lost: bool = False


# --------------------------------------------------------------------------- resume
@dataclass(frozen=True)
class ResumePoint:
    """Where a resume starts: the newest usable checkpoint of a run and its config."""

    #: the checkpoint's contents (rltrain.rundir.checkpoint.load_checkpoint)
    state: dict[str, Any]
    #: its config, with the schemas again (the run's own, whatever the command line says)
    cfg: DictConfig
    #: the file it came from
    path: Path
    #: what was wrong with newer checkpoint files, skipped on the way
    problems: list[str]
    #: the run's identity: the checkpoint's, which is the directory's (see
    #: :func:`check_own`); minted for a run made before runs had ids
    identity: dict[str, Any] = field(default_factory=dict)

    @property
    def trainer(self) -> dict[str, Any]:
        return self.state["trainer"]

    @property
    def epochs_complete(self) -> int:
        return completed_epochs(self.trainer)


def resume_point(run_dir: Path, *, consent: bool = False,
                 allow: str = "add --trust to rltrain resume=...") -> ResumePoint:
    """The run's newest usable checkpoint (``last.pt``, else the newest good numbered one).
    Its config would run no code that was not set up here, unless ``consent``
    (:mod:`rltrain.rundir.trust`).

    :raises CheckpointError: no usable checkpoint; ConfigError: its config is not rltrain's,
        or (UntrustedError) it would run code without consent.
    """
    state, used, problems = load_latest(run_dir / "checkpoints")
    config = state.get("config")
    # plain data within bounds: a pickle shares objects as YAML aliases do, and a config of
    # parts repeated a billion times would be expanded by OmegaConf.create below
    stored_data.check_plain(config, f"the config in {used}")
    stored_data.check_plain(state.get("run"), f"the run identity in {used}")
    identity = check_own(run_dir, state, used)
    env = config.get("env") if isinstance(config, dict) else None
    trust.check(trust.env_surface(env), f"the config in {used}", consent=consent, allow=allow)
    register_configs()
    cfg = typed_run_config(OmegaConf.create(state["config"]))
    cfg.trust = consent  # the consent of this command, never a stored one
    _dataset_where_it_was(cfg, (state.get("dataset") or {}).get("path"))
    return ResumePoint(state, cfg, used, problems, identity)


class ForeignFile(CheckpointError):
    """A file in a run directory that another run wrote; the message names both runs."""


def own_identity(run_dir: Path) -> dict[str, Any] | None:
    """Who the directory's run is: its ``run.json``, else (a run made before runs had ids)
    what its ``.hydra/config.yaml`` says it trains; None when neither says.

    :raises ForeignFile: run.json is damaged."""
    try:
        identity = rundir.read_identity(run_dir)
    except rundir.RunDirError as e:
        raise ForeignFile(str(e)) from None
    if identity is not None:
        return identity
    try:
        config = stored_data.read_yaml(run_dir / ".hydra" / "config.yaml")
    except (OSError, stored_data.StoredDataError):
        return None
    return rundir.config_identity(config)


def file_identity(state: Any) -> dict[str, Any] | None:
    """Whose a checkpoint or a saved policy is: its ``run`` (or, written before runs had ids,
    what its config or meta says it trains)."""
    if not isinstance(state, dict):
        return None
    if isinstance(state.get("run"), dict):
        return state["run"]
    if isinstance(state.get("config"), dict):
        return rundir.config_identity(state["config"])
    meta = state.get("meta")
    if isinstance(meta, dict):
        if isinstance(meta.get("run"), dict):
            return dict(meta["run"])
        if "algo" in meta and "env_id" in meta:  # no seed: compared on what it has
            return {"algo": meta["algo"], "env": meta["env_id"]}
    return None


def not_own(path: Path, theirs: dict[str, Any] | None, ours: dict[str, Any] | None
            ) -> str | None:
    """Why ``path`` is not the directory's own file (None when it is, or when either side
    says nothing of its run)."""
    if theirs is None or ours is None or rundir.same_run(theirs, ours):
        return None
    return (f"{path} is another run's ({rundir.describe_identity(theirs)}); this "
            f"directory's run is {rundir.describe_identity(ours)}")


def check_own(run_dir: Path, state: dict[str, Any], used: Path) -> dict[str, Any]:
    """Before a resume writes anything: the checkpoint, the saved policies and the epoch
    records are the directory's own run's, or the resume is refused naming both runs (a
    checkpoint copied in from another run once trained that run inside this directory,
    overwriting its records, checkpoints and best policy). Returns the run's identity: the
    checkpoint's, or for a run made before runs had ids, a new one with what it trains.

    :raises ForeignFile: naming the file and both runs."""
    ours = own_identity(run_dir)
    theirs = file_identity(state)
    way_out = ("a resume continues the directory's own run: move the other run's files out "
               "(or start a new run)")
    problem = not_own(used, theirs, ours)
    if problem is None:
        for name in ("best", "final"):
            path = run_dir / name / "policy.pt"
            if path.is_file():
                with contextlib.suppress(CheckpointError):
                    problem = not_own(path, file_identity(load_policy(path)), ours)
            if problem is not None:
                break
    if problem is None and ours is not None and isinstance(ours.get("id"), str):
        problem = foreign_record(run_dir, ours)
    if problem is not None:
        raise ForeignFile(f"{problem}; {way_out}")
    if theirs is not None and isinstance(theirs.get("id"), str):
        return theirs
    if ours is not None and isinstance(ours.get("id"), str):
        return ours
    base = ours or theirs or {}
    return rundir.new_identity(str(base.get("algo")), str(base.get("env")),
                               base.get("seed", 0), run_dir)


def foreign_record(run_dir: Path, ours: dict[str, Any]) -> str | None:
    """Why a record of ``epochs.jsonl`` is not the directory's own run's, or None (records
    written before runs had ids carry none, and are taken as its)."""
    path = run_dir / "epochs.jsonl"
    if not path.is_file():
        return None
    try:
        for number, record in enumerate(read_records(path, warn=lambda _: None), 1):
            other = record.get("run")
            if isinstance(other, str) and other != ours["id"]:
                return (f"{path} holds another run's records (run {other}, line {number}: "
                        f"epoch {record['epoch']}); this directory's run is "
                        f"{rundir.describe_identity(ours)}")
    except stored_data.StoredDataError:
        return None
    return None


def _dataset_where_it_was(cfg: DictConfig, recorded: str | None) -> None:
    """A resume from another working directory: a relative ``dataset=`` path that does not
    resolve from here is the file the run began with (its absolute path is in the
    checkpoint); whether it is still the same data, its hash says (:meth:`Lifecycle.restore`)."""
    spec = cfg.get("dataset")
    if (recorded and spec and not str(spec).startswith("minari:")
            and not Path(spec).is_absolute() and not Path(spec).exists()
            and Path(recorded).exists()):
        cfg.dataset = recorded


def completed_epochs(trainer_state: dict[str, Any]) -> int:
    """Epochs fully done (and logged) at a checkpoint."""
    return trainer_state["epoch"] - (trainer_state["partial"] is not None)


def restore_algorithm(algorithm: Algorithm, state: dict[str, Any], *,
                      training: bool = True) -> None:
    """Load a checkpoint's algorithm: its modules, and with ``training`` its optimisers and
    noise too (a resume); without, the modules alone (``rltrain-eval --weights last``)."""
    if training:
        algorithm.load_training_state(state["algorithm"])
    else:
        algorithm.load_state_dict(state["algorithm"]["modules"])


# --------------------------------------------------------------------------- RNG
def rng_state() -> dict[str, Any]:
    np_state = np.random.get_state(legacy=False)
    return {
        "python": random.getstate(),
        "numpy": {**np_state, "state": {"key": torch.from_numpy(
            np_state["state"]["key"].astype(np.int64)), "pos": np_state["state"]["pos"]}},
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np_state = state["numpy"]
    np.random.set_state({**np_state, "state": {
        "key": np_state["state"]["key"].numpy().astype(np.uint32),
        "pos": np_state["state"]["pos"]}})
    torch.set_rng_state(state["torch"])


# --------------------------------------------------------------------------- the run's files
class Lifecycle:
    """A run's checkpoints, policy files and restore: the trainer's callbacks.

    :param config: the resolved run config, stored in every checkpoint.
    :param summary: facts for ``summary.json`` this object keeps current (the newest
        checkpoint, whether the envs' state is captured exactly, the resumes), shared with
        the jsonl logger that writes the file.
    """

    def __init__(self, ctx: RunContext, s: Settings, parts: Parts, config: dict[str, Any],
                 summary: dict[str, Any], history: dict[str, Any],
                 identity: dict[str, Any]) -> None:
        """:param identity: the run's (rltrain.rundir.directory.new_identity), in every checkpoint
               and
            saved policy, so that a file copied in from another run is told apart."""
        self.ctx, self.s, self.parts = ctx, s, parts
        self.config, self.summary, self.history = config, summary, history
        self.identity = identity
        self.meta = {"algo": s.algo.name, "env_id": s.env.id,
                     "obs_shape": list(parts.info.obs_shape), "discrete": parts.info.discrete,
                     "action_dim": parts.info.action_dim, "run": identity}
        self.trainer: Trainer | None = None
        self._warned_inexact = False
        #: every file of the run is written after checking that its directory is still there
        self.watch = RunDirWatch(ctx.run_dir)

    def callbacks(self) -> Callbacks:
        return Callbacks(on_epoch_end=self.on_epoch_end, on_best=lambda _: self.save("best"),
                         on_stop=self.on_stop)

    def attach(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def close(self) -> None:
        """The run ended: stop watching its directory; a removed one is recorded in the
        context (:attr:`RunContext.lost`), with no checkpoint left to point at."""
        if self.trainer is not None and isinstance(self.trainer.failure, RunDirRemoved):
            self.ctx.lost = True
            self.ctx.checkpoint = None
        self.watch.close()

    def _check_dir(self) -> None:
        """RunDirRemoved if the run directory is gone: nothing may be written in its place."""
        self.watch.check(self.trainer.epoch if self.trainer is not None else 0)

    @property
    def _trainer(self) -> Trainer:
        assert self.trainer is not None, "attach() the trainer first"
        return self.trainer

    # ------------------------------------------------------------------ callbacks
    def on_epoch_end(self, stats: EpochStats) -> None:
        self._check_dir()  # every epoch, also those that write no checkpoint
        trainer, trial = self._trainer, self.ctx.trial
        if trial is not None and trial.report(stats.epoch, stats.test.return_mean) \
                and not trainer.done():
            log.info(f"the study's pruner stopped this trial after epoch {stats.epoch}")
            trainer.prune()
        if stats.epoch % self.s.trainer.checkpoint_every == 0 or trainer.done():
            self.checkpoint()

    def on_stop(self, info: InfoStats) -> None:
        if info.status == "failed":
            return  # what the failure left is not worth keeping: last.pt stays the last good one
        self.save("final")
        if info.interrupted:
            self.checkpoint()

    # ------------------------------------------------------------------ writing
    def save(self, directory: str) -> None:
        """The deployable policy (weights alone) to ``RUN_DIR/<directory>/policy.pt``."""
        run_dir = self.ctx.run_dir
        self._check_dir()
        try:
            save_policy(run_dir / directory, self.parts.algorithm.deployable().state_dict(),
                        self.meta)
        except OSError as e:
            raise SaveError(f"could not write {run_dir / directory / 'policy.pt'}: "
                            f"{e.strerror or e}") from None

    def checkpoint(self) -> None:
        """The whole training state to ``checkpoints/`` (``last.pt`` and the newest K), said
        to be inexact, once, when the envs' state cannot be captured."""
        trainer, parts = self._trainer, self.parts
        self._check_dir()
        collectors = {name: c.state_dict() for name, c in (("train", parts.train_collector),
                                                             ("test", parts.test_collector))
                      if c is not None}
        missing = [f"{name} envs: {what}" for name, c in collectors.items()
                   for what in c["not_captured"]]
        caveats = [f"{name} envs: {what}" for name, c in collectors.items()
                   for what in c["caveats"]]
        if (missing or caveats) and not self._warned_inexact:
            self._warned_inexact = True
            self.summary["env_state"] = {"exact": False, "not_captured": missing,
                                         **({"caveats": caveats} if caveats else {})}
            if missing:
                log.warning(unsaved_state_line(self.s.env.id, missing))
            else:
                log.warning(partial_state_line(self.s.env.id, caveats))
            log.info(state_detail(missing + caveats), extra=FILE_ONLY)
        trainer_state = trainer.state_dict()  # with its kind's storage
        state = {
            "run": self.identity,
            "config": self.config,
            "algorithm": parts.algorithm.training_state(),
            "trainer": trainer_state,
            "collectors": collectors,
            # offline: the dataset by reference (its hash)
            "dataset": parts.storage.dataset,
            "rng": rng_state(),
            "history": self.history,
        }
        run_dir = self.ctx.run_dir
        name = f"ckpt_{trainer.env_step:010d}_{trainer.epoch:05d}.pt"
        try:
            path = save_checkpoint(run_dir / "checkpoints", state, name,
                                   self.s.trainer.keep_checkpoints)
        except OSError as e:
            raise SaveError(f"could not write the checkpoint {run_dir / 'checkpoints' / name}: "
                            f"{e.strerror or e}") from None
        self.ctx.checkpoint = self.summary["checkpoint"] = {
            "path": str(path), "epoch": trainer.epoch, "env_step": trainer.env_step,
            "epochs_complete": completed_epochs(trainer_state)}

    # ------------------------------------------------------------------ reading
    def restore(self, point: ResumePoint) -> list[str]:
        """Load a checkpoint into the built parts and the trainer; returns what made the
        resume inexact (also logged, and recorded in the run's history)."""
        trainer, parts, ckpt = self._trainer, self.parts, point.state
        self.ctx.checkpoint = self.summary["checkpoint"] = {
            "path": str(point.path), "epoch": point.trainer["epoch"],
            "env_step": point.trainer["env_step"], "epochs_complete": point.epochs_complete}
        restore_algorithm(parts.algorithm, ckpt)
        notes = trainer.load_state_dict(ckpt["trainer"])
        old_max_epochs = ckpt["config"]["trainer"]["max_epochs"]
        best = trainer.best.score
        reached = trainer.stop_score is not None and best is not None and best >= trainer.stop_score
        if self.s.trainer.max_epochs > old_max_epochs or not reached:
            # the run is being extended, or its stop score was raised (or dropped) past its best
            trainer.stopped_early = False
        env_step = ckpt["trainer"]["env_step"]
        for name, collector, seed in (("train", parts.train_collector, parts.train_seed),
                                      ("test", parts.test_collector, parts.test_seed)):
            if collector is None:
                continue
            problems = collector.load_state_dict(ckpt["collectors"][name],
                                                 seed=derived_seed(seed, env_step))
            # what the envs' own state is known to leave out, read off the live envs (a
            # checkpoint written before caveats were recorded holds none)
            caveats = collector.state_caveats()
            if caveats and not problems:
                notes.append(f"the {name} envs' state was restored, but not all of it "
                             f"({grouped(caveats)})")
            if problems and name == "train":
                notes.append(f"the train envs' state could not be restored ({grouped(problems)})"
                             ": training continues with fresh episodes from a seeded reset")
            elif problems:
                notes.append(f"the test envs' state could not be restored ({grouped(problems)})")
        set_rng_state(ckpt["rng"])
        for note in notes:
            log.warning(f"inexact resume: {resume_note_line(note)}; records from here on will "
                        "differ from an unbroken run's")
            log.info(f"inexact resume: {note}", extra=FILE_ONLY)
        log.info(f"resumed at epoch {trainer.epoch}, env step {trainer.env_step:,}"
                 + ("" if notes else " (exact)"))
        self.history["resumes"].append({"epoch": point.trainer["epoch"],
                                        "env_step": point.trainer["env_step"],
                                        "exact": not notes, "notes": notes})
        return notes


def check_same_dataset(point: ResumePoint, parts: Parts) -> None:
    """An offline run resumes only on the data it began with: the checkpoint holds the
    dataset's content hash, not a copy. Checked before anything of the run is written."""
    now = parts.storage.dataset
    if now is None:
        return
    then = point.state.get("dataset") or {}
    if then.get("sha256") != now["sha256"]:
        raise ConfigError(
            f"the dataset {now['spec']} is not the one this run began with ({then.get('path')}, "
            f"sha256 {str(then.get('sha256'))[:12]}...; now {now['path']}, sha256 "
            f"{now['sha256'][:12]}...): a resume must learn from the same data; restore that "
            "file, or start a new run")


def grouped(entries: list[str], limit: int = 3) -> str:
    """Entries that differ only by sub-env index, once: ``envs.envs[0].sim`` ... ``envs[7]``
    -> ``envs.envs[0-7].sim``."""
    groups: dict[str, list[int]] = {}
    for entry in entries:
        indices = [int(i) for i in re.findall(r"envs\.envs\[(\d+)\]", entry)[:1]]
        key = re.sub(r"(envs\.envs)\[\d+\]", r"\1[{}]", entry, count=1)
        groups.setdefault(key, []).extend(indices)
    parts = []
    for key, indices in groups.items():
        span = (f"{min(indices)}-{max(indices)}" if len(set(indices)) > 1 else
                str(indices[0]) if indices else "")
        parts.append(key.replace("[{}]", f"[{span}]") if "{}" in key else key)
    more = f"; and {len(parts) - limit} more" if len(parts) > limit else ""
    return "; ".join(parts[:limit]) + more


# --------------------------------------------------------------------------- inexact state, said
#: the kinds of env state a checkpoint may miss, in a user's words: (a part of the type's
#: module.qualname, what it is, the setting that captures it or None when none does)
STATE_KINDS: tuple[tuple[str, str, str | None], ...] = (
    ("AsyncVectorEnv", "state, in subprocesses (env.vectorization=async)",
     "env.vectorization=sync saves them"),
    ("Box2D", "Box2D physics", None),
    ("box2d", "Box2D physics", None),
    ("pygame", "pygame drawing state", None),
    ("ale_py", "Atari emulator", None),
    ("mujoco", "MuJoCo simulation", None),
)
#: a value's type as envstate names it, ``(module.qualname)`` or ``(module.qualname: why)``
#: (the why may hold one level of parentheses), in a snapshot's gaps and caveats and in a
#: restore's problems alike
_STATE_TYPE = re.compile(r"\(([A-Za-z_][\w.]*\.[\w.]+)(?::\s*([^()]*(?:\([^()]*\)[^()]*)*))?\)")


def state_kinds(text: str) -> tuple[list[str], list[str]]:
    """The kinds of state the values named in ``text`` are, in a user's words, each once, and
    the settings that would capture them."""
    kinds, settings = [], []
    for type_name, _ in _STATE_TYPE.findall(text):
        kind, setting = next(((k, s) for part, k, s in STATE_KINDS if part in type_name),
                             (f"{type_name.rpartition('.')[2]} objects", None))
        if kind not in kinds:
            kinds.append(kind)
        if setting is not None and setting not in settings:
            settings.append(setting)
    return kinds, settings


def _caveat_texts(text: str) -> list[str]:
    """What the caveats named in ``text`` say (their own words name the setting), each once."""
    return list(dict.fromkeys(why for _, why in _STATE_TYPE.findall(text) if why))


def _which_envs(entries: list[str]) -> str:
    names = [name for name in ("train", "test") if any(e.startswith(f"{name} envs:")
                                                        for e in entries)]
    return " and ".join(names) or "the"


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def unsaved_state_line(env_id: str, missing: list[str]) -> str:
    """The console's one line for envs whose state a checkpoint cannot hold: what is not
    saved in a user's words, what a resume does then, and the setting that changes it (the
    values themselves: :func:`state_detail`, for rltrain.log)."""
    kinds, settings = state_kinds(" ".join(missing))
    way = "; ".join(settings) if settings else "no setting changes this"
    n = len(missing)
    return (f"the envs' state cannot be saved exactly: checkpoints do not hold {env_id}'s "
            f"{_which_envs(missing)} envs' {_and(kinds or ['state'])}, so a resume starts fresh "
            "episodes from a seeded reset and its records will differ from an unbroken run's "
            f"({way}; {n:,} value{'' if n == 1 else 's'}, listed in rltrain.log)")


def partial_state_line(env_id: str, caveats: list[str]) -> str:
    """The console's one line for envs whose state is saved but known to leave something out:
    each caveat once, in its own words (which name the setting that changes it)."""
    said = _caveat_texts(" ".join(caveats)) or ["details in rltrain.log"]
    return (f"the envs' state is saved, but not all of it ({env_id}'s {_which_envs(caveats)} "
            f"envs): {'; '.join(said)}; a resume continues the episodes in flight, and its "
            "records may differ from an unbroken run's")


def resume_note_line(note: str) -> str:
    """A resume's note for the console: the values it lists (``(envs.envs[0-7]...; and 614
    more)``) said as the kinds of state they are, or as their caveats' own words; the note
    as it is when it names no value (rltrain.log keeps it whole)."""
    kinds, settings = state_kinds(note)
    start = note.find("(")
    if not kinds or start < 0:
        return note
    depth, end = 0, start
    for end in range(start, len(note)):
        depth += {"(": 1, ")": -1}.get(note[end], 0)
        if depth == 0:
            break
    said = _caveat_texts(note) if "not all of it" in note else [
        f"{_and(kinds)}; {'; '.join(settings) or 'no setting changes this'}"]
    return f"{note[:start]}({'; '.join(said)}; listed in rltrain.log){note[end + 1:]}"


def state_detail(entries: list[str]) -> str:
    """Every value of ``entries``, one a line, sub-env indices folded (``envs.envs[0-7]``):
    the detail behind the console's line, for rltrain.log."""
    groups: dict[str, list[str]] = {}
    for entry in entries:
        key = re.sub(r"envs\.envs\[\d+\]", "envs.envs[]", entry, count=1)
        groups.setdefault(key, []).append(entry)
    return "\n  ".join(["the envs' state a checkpoint does not hold whole, value by value:",
                        *(grouped(members) for members in groups.values())])
