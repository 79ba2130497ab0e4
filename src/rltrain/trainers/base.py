"""The trainer's loop, shared by every kind: epochs of training steps, each closed by a test
step; stop score, signals, non-finite checks, timing and the state a checkpoint keeps."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import torch

from rltrain.algorithms.base import Algorithm, OffPolicyAlgorithm, Stat, UpdateReport
from rltrain.common.errors import NonFiniteError, TrainingError, is_env_failure
from rltrain.common.stats import Best, Episodes, EpochStats, InfoStats, Timing, flatten, mean_stats
from rltrain.common.types import Progress
from rltrain.config.schemas import AlgoConfig, TrainerParams
from rltrain.data.collector import CollectionStopped, Collector
from rltrain.data.reading import ReadPath
from rltrain.data.storage import ReplayBuffer
from rltrain.loggers import Logger
from rltrain.trainers.storage import Storage, StoragePlan, StorageRequest

#: check every parameter for non-finite values every this many training steps (and at every
#: epoch's end); the losses are checked after every step
PARAMETER_CHECK_INTERVAL = 64


@dataclass(frozen=True)
class Callbacks:
    """The trainer's extension points; each is optional."""

    #: after each epoch's test step (e.g. write a checkpoint)
    on_epoch_end: Callable[[EpochStats], None] | None = None
    #: when an epoch's test score is the best so far (e.g. save the policy weights)
    on_best: Callable[[EpochStats], None] | None = None
    #: once, when training ends for any reason (e.g. save final weights)
    on_stop: Callable[[InfoStats], None] | None = None


class Trainer(Iterator[EpochStats]):
    """Base trainer: an iterator over epochs; :meth:`run` runs them all.

    Each subclass is a trainer kind (``trainer=<name>``) and answers, for the composition
    root, what differs between kinds: its params' schema, whether it collects from train
    envs, which settings cannot work with it (:meth:`check`), how its storage is made
    (:meth:`storage`), what its checkpoint state holds (:meth:`storage_state`), and which
    step count its epochs and curves go by (:attr:`step_key`).
    """

    #: ``trainer=<name>``
    name: ClassVar[str]
    #: the schema of its params (``trainer.*``)
    params_type: ClassVar[type[TrainerParams]]
    #: the count an epoch's steps advance and the loggers plot against: env steps online,
    #: gradient steps offline
    step_key: ClassVar[str] = "env_step"
    #: whether it steps train envs (offline, only test envs are made)
    collects: ClassVar[bool] = True
    #: whether its checkpoints can hold a replay buffer of what it collected
    keeps_replay_buffer: ClassVar[bool] = False

    # ------------------------------------------------------------------ the kind
    @classmethod
    def check(cls, params: Any, algo: AlgoConfig, num_train_envs: int, buffer_size: int
              ) -> None:
        """Refuse settings that are each valid but cannot work together (a run that would end
        with exit 0 and an agent that never learnt), naming them; raises ConfigError."""

    @classmethod
    def check_algorithm(cls, params: Any, algorithm: Algorithm, request: StorageRequest
                        ) -> None:
        """Refuse an algorithm, once built and before anything is written, that this kind
        cannot feed with these settings (what it stores beside a transition); raises
        ConfigError."""

    @classmethod
    def storage_plan(cls, params: Any, request: StorageRequest) -> StoragePlan | None:
        """The buffer :meth:`storage` will make, sized before it is (None: none of its own to
        size; an offline run's dataset is sized by its reader)."""
        return None

    @classmethod
    def storage(cls, params: Any, request: StorageRequest) -> Storage:
        """Make the storage this kind learns from (before any file of the run is written)."""
        raise NotImplementedError

    def __init__(
        self,
        algorithm: Algorithm,
        params: TrainerParams,
        buffer: ReplayBuffer,
        test_collector: Collector,
        *,
        train_collector: Collector | None = None,
        reward_threshold: float | None,
        loggers: Sequence[Logger] = (),
        callbacks: Callbacks = Callbacks(),
        seed: int = 0,
        test_seed: int = 0,
    ) -> None:
        """:param seed: the run's seed (a replay sampler's and a random warm-up's stream).
        :param test_seed: the base of the test steps' env seeds."""
        self.algorithm, self.params, self.buffer = algorithm, params, buffer
        self.train_collector, self.test_collector = train_collector, test_collector
        #: test step k resets the test envs with a seed derived from (test_seed, k), so a
        #: test step's episodes depend on nothing else (an interrupted test step reruns
        #: exactly, and test envs need no state carried between test steps)
        self.test_seed, self.test_steps = test_seed, 0
        self.reward_threshold = reward_threshold
        self.stop_score: float | None = (
            reward_threshold if params.stop_score == "auto" else params.stop_score
        )
        self.loggers, self.callbacks = list(loggers), callbacks
        self.epoch = self.env_step = self.gradient_step = 0
        self.best = Best(score=None, epoch=None)
        self.stopped_early = self.interrupted = False
        #: set by :meth:`prune` (a tuning study's pruner stopped this trial); not part of the
        #: training state, so a resumed run trains on
        self.pruned = False
        self.totals = Timing()
        self.log_time = 0.0
        self._start = time.perf_counter()
        # set by a training step whose in-training test reached the stop score
        self._early_test: Episodes | None = None
        self._partial: _EpochInProgress | None = None
        #: the signal that asked the run to stop, if any
        self.stop_signal: int | None = None
        #: what ended the run early, if it failed (recorded by run(), said in the summary)
        self.failure: BaseException | None = None
        self.failure_at = ""
        #: added to the message of a failure raised in an env's own code
        #: (rltrain.common.errors.is_env_failure)
        self.crash_hint = ""

    # ------------------------------------------------------------------ progress
    def planned_env_steps(self) -> int:
        return 0

    def planned_steps(self) -> int:
        """The run's budget in :attr:`step_key` units (0 if not known)."""
        return self.planned_env_steps()

    def steps_done(self) -> int:
        return int(getattr(self, self.step_key))

    def epoch_steps(self) -> int:
        """The steps an epoch runs (:attr:`step_key` units), as the console and the run's
        header say them: ``epoch_num_steps`` here; online, whole collection steps
        (:meth:`OnlineTrainer.epoch_steps`)."""
        return self.params.epoch_num_steps

    def epoch_steps_note(self) -> str:
        """Why :meth:`epoch_steps` is not ``trainer.epoch_num_steps`` ("" when it is), for
        the run's header."""
        return ""

    def progress(self) -> Progress:
        planned = self.planned_env_steps()
        fraction = min(self.env_step / planned, 1.0) if planned else 0.0
        return Progress(self.env_step, self.gradient_step, fraction)

    # ------------------------------------------------------------------ the loop
    def training_step(self) -> tuple[int, Episodes | None, list[Any], Timing]:
        """Run one training step; return (steps counted towards the epoch, the
        collected episodes or None, the update stats, the time spent)."""
        raise NotImplementedError

    def test_step(self, interruptible: bool = False) -> Episodes:
        """``test_step_num_episodes`` deterministic episodes on freshly seeded test envs.

        :param interruptible: a stop request ends the test step early (the epoch's own test
            step, which a resume reruns; not a test inside a training step).
        """
        self.test_collector.reset(seed=derived_seed(self.test_seed, self.test_steps))
        policy = self.algorithm.policy(self.progress(), deterministic=True)
        should_stop = (lambda: self.stop_signal is not None) if interruptible else None
        try:
            episodes = self.test_collector.collect(
                policy, n_episodes=self.params.test_step_num_episodes, quota=True,
                should_stop=should_stop,
                max_episode_steps=self.params.test_step_max_episode_steps,
                on_progress=self._test_progress if interruptible else None,
            )
        except CollectionStopped:
            raise Interrupted(self.stop_signal or 0) from None
        self.test_steps += 1
        return episodes

    def _test_progress(self, steps: int, episodes: int) -> None:
        for logger in self.loggers:
            logger.test_progress(steps, episodes)

    def done(self) -> bool:
        """Whether every epoch is done; an interrupted epoch (resumed) is not done yet."""
        if self._partial is not None:
            return False
        return self.epoch >= self.params.max_epochs or self.stopped_early or self.pruned

    def prune(self) -> None:
        """End the run after the current epoch (called from ``on_epoch_end``): a tuning
        study's pruner judged it not worth finishing. The run ends complete, status pruned."""
        self.pruned = True

    def _reached_stop(self, episodes: Episodes) -> bool:
        return (
            self.stop_score is not None
            and len(episodes.returns) > 0
            and float(np.mean(episodes.returns)) >= self.stop_score
        )

    def request_stop(self, signum: int) -> None:
        """Ask the run to stop after the training step in flight (safe from a signal handler)."""
        self.stop_signal = signum

    def __next__(self) -> EpochStats:
        if self.done():
            raise StopIteration
        if self._partial is None:
            self.epoch += 1
            self._partial = _EpochInProgress()
        part = self._partial
        epoch_start, steps_before = time.perf_counter(), self.steps_done()
        for logger in self.loggers:
            logger.start_epoch(self.epoch, self.epoch_steps(), done=part.steps)
        self._early_test = None
        while part.steps < self.params.epoch_num_steps and self._early_test is None:
            if self.stop_signal is not None:
                self._settle(part)  # the checkpoint an interruption writes is good
                self._check_parameters()
                raise Interrupted(self.stop_signal)
            n, episodes, update_stats, spent = self.training_step()
            # what each update measured (a stat it did not measure this time is None), read
            # as Python numbers only at the checks below (see _settle)
            part.unread += [{k: v for k, v in vars(s).items() if v is not None}
                            for s in update_stats]
            if update_stats and (part.training_steps + 1) % PARAMETER_CHECK_INTERVAL == 0:
                self._settle(part)
                self._check_parameters()
            part.steps += n
            part.training_steps += 1
            if episodes is not None:
                part.collected.append(episodes)
            part.timing = _add(part.timing, spent)
            for logger in self.loggers:
                logger.advance(n)

        # every loss and parameter before the epoch's test and checkpoint (between the checks
        # above a non-finite weight almost always shows in the next loss first)
        self._settle(part)
        self._check_parameters()
        t0 = time.perf_counter()
        if self._early_test is None:
            for logger in self.loggers:
                logger.start_test(self.epoch, self.params.test_step_num_episodes)
        test = self._early_test if self._early_test is not None else self.test_step(
            interruptible=True)
        timing = replace(part.timing, test=part.timing.test + time.perf_counter() - t0)
        score = float(np.mean(test.returns)) if len(test.returns) else -math.inf
        is_best = self.best.score is None or score > self.best.score
        if is_best:
            self.best = Best(score=score, epoch=self.epoch)
        self.stopped_early = self._reached_stop(test)
        self._partial = None
        stats = EpochStats(
            epoch=self.epoch,
            env_step=self.env_step,
            gradient_step=self.gradient_step,
            time=self.elapsed(),
            train=Episodes.merge(part.collected).stats(),
            test=test.stats(),
            update=mean_stats(part.updates),
            best=self.best,
            timing=timing,
            training_steps=part.training_steps,
            steps_per_s=_rate(self.steps_done() - steps_before, time.perf_counter() - epoch_start),
        )
        t0 = time.perf_counter()
        if is_best and self.callbacks.on_best:
            self.callbacks.on_best(stats)
        stats = replace(stats, timing=replace(timing, save=time.perf_counter() - t0))
        self.totals = _add(self.totals, stats.timing)
        t0 = time.perf_counter()
        record = flatten(stats)
        for logger in self.loggers:
            logger.log_epoch(record)
        self.log_time += time.perf_counter() - t0
        # the checkpoint comes after the epoch's record is written, so that a resume from
        # it never misses a record
        t0 = time.perf_counter()
        if self.callbacks.on_epoch_end:
            self.callbacks.on_epoch_end(stats)
        self.totals = replace(self.totals, save=self.totals.save + time.perf_counter() - t0)
        return stats

    def run(self) -> InfoStats:
        """Run every epoch (until max_epochs or the stop score) and return the final info.

        After :meth:`request_stop` (SIGINT/SIGTERM), the step in flight finishes and the
        info says ``interrupted``; the on_stop callback can then save a checkpoint.
        """
        plan = {"planned_env_steps": self.planned_env_steps(), "env_step": self.env_step,
                "max_epochs": self.params.max_epochs, "step_key": self.step_key,
                "planned_steps": self.planned_steps(), "step": self.steps_done()}
        for logger in self.loggers:
            logger.start_run(plan)
        try:
            while not self.done():
                if self.stop_signal is not None:
                    raise Interrupted(self.stop_signal)
                next(self)
        except Interrupted:
            self.interrupted = True
        except Exception as e:  # noqa: BLE001 - recorded, reported, and the run stops
            self._fail(e)
        info = self.info()
        if self.callbacks.on_stop:
            try:
                self.callbacks.on_stop(info)
            except Exception as e:  # noqa: BLE001 - e.g. the disk filled up while saving
                self._fail(e)
                info = self.info()
        for logger in self.loggers:
            logger.finish(flatten(info))
        return info

    def _fail(self, error: BaseException) -> None:
        if self.failure is None:
            self.failure = error
            self.failure_at = f"epoch {self.epoch} (env step {self.env_step:,})"

    def _settle(self, part: _EpochInProgress) -> None:
        """Read the updates' stats not yet read as Python floats (those an algorithm left as
        tensors on its device, :meth:`Algorithm.stat`, in one transfer), add them to the
        epoch's, and stop at the first non-finite loss. Run where the parameters are checked:
        every :data:`PARAMETER_CHECK_INTERVAL` training steps, at the end of each epoch's
        training and before an interruption's checkpoint, so that on an accelerator the loop
        does not wait for each gradient step (a host sync per stat per step) and a
        non-finite loss is still reported within the interval. Statistics other than losses
        may be undefined (NaN) by design, e.g. PPO's explained variance of constant
        returns."""
        updates = _read_stats(part.unread)
        part.unread = []
        part.updates += updates
        for record in updates:
            for key, value in record.items():
                if key.endswith("loss") and not math.isfinite(value):
                    raise NonFiniteError(f"the update's {key} is {value}")

    def _check_parameters(self) -> None:
        """Stop at a non-finite parameter, before it can reach best/, final/ or a checkpoint:
        one reduction over each optimiser's flat buffer. Run every
        :data:`PARAMETER_CHECK_INTERVAL` training steps, at the end of every epoch's training
        (before its test and checkpoint) and before an interruption's checkpoint; checking
        after every step cost 6% of SAC's loop on Hopper."""
        bad = self.algorithm.nonfinite_parameter()
        if bad is not None:
            raise NonFiniteError(f"parameter {bad} is not finite after an update")

    def elapsed(self) -> float:
        return time.perf_counter() - self._start

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Counters, best, timing and the epoch in progress (if interrupted mid-epoch)."""
        part = self._partial
        merged = Episodes.merge(part.collected) if part else None
        return {
            "epoch": self.epoch,
            "env_step": self.env_step,
            "gradient_step": self.gradient_step,
            "best_score": self.best.score,
            "best_epoch": self.best.epoch,
            "stopped_early": self.stopped_early,
            "test_steps": self.test_steps,
            "elapsed": self.elapsed(),
            "totals": dataclasses.asdict(self.totals),
            "log_time": self.log_time,
            "storage": self.storage_state(),
            "partial": None if part is None or merged is None else {
                "steps": part.steps,
                "training_steps": part.training_steps,
                "n_steps": merged.n_steps,
                "n_transitions": merged.n_transitions,
                "returns": torch.from_numpy(merged.returns.astype(np.float64)),
                "lengths": torch.from_numpy(merged.lengths.astype(np.int64)),
                "collect_time": merged.time,
                "updates": part.updates + _read_stats(part.unread),
                "timing": dataclasses.asdict(part.timing),
            },
        }

    def storage_state(self) -> dict[str, Any] | None:
        """What a checkpoint holds of this kind's storage (None: nothing worth keeping)."""
        return None

    def load_storage_state(self, state: dict[str, Any] | None) -> list[str]:
        """Restore :meth:`storage_state`; returns what keeps the resume from being exact."""
        return []

    def load_state_dict(self, state: dict[str, Any]) -> list[str]:
        """Restore :meth:`state_dict`; returns what keeps the resume from being exact."""
        self.epoch, self.env_step = state["epoch"], state["env_step"]
        self.gradient_step = state["gradient_step"]
        self.best = Best(score=state["best_score"], epoch=state["best_epoch"])
        self.stopped_early = state["stopped_early"]
        self.test_steps = state["test_steps"]
        self._start = time.perf_counter() - state["elapsed"]
        self.totals = Timing(**state["totals"])
        self.log_time = state["log_time"]
        p = state["partial"]
        self._partial = None if p is None else _EpochInProgress(
            steps=p["steps"],
            training_steps=p["training_steps"],
            collected=[Episodes(p["n_steps"], p["n_transitions"], p["returns"].numpy(),
                                p["lengths"].numpy(), p["collect_time"])],
            updates=list(p["updates"]),
            timing=Timing(**p["timing"]),
        )
        return self.load_storage_state(state.get("storage"))

    def info(self) -> InfoStats:
        solved = (
            self.reward_threshold is not None
            and self.best.score is not None
            and self.best.score >= self.reward_threshold
        )
        return InfoStats(
            best_score=self.best.score,
            best_epoch=self.best.epoch,
            solved=solved,
            stopped_early=self.stopped_early,
            interrupted=self.interrupted,
            epochs=self.epoch,
            env_step=self.env_step,
            gradient_step=self.gradient_step,
            wall_time=time.perf_counter() - self._start,
            reward_threshold=self.reward_threshold,
            timing=self.totals,
            interrupt_signal=self.stop_signal if self.interrupted else None,
            status="failed" if self.failure is not None else (
                "interrupted" if self.interrupted else "pruned" if self.pruned else "completed"),
            error=None if self.failure is None else failure_text(self.failure) + (
                self.crash_hint if is_env_failure(self.failure) else ""),
            failed_at=self.failure_at or None,
        )


def failure_text(error: BaseException) -> str:
    """One line for a failure: a TrainingError's own message, else the exception's type
    and first line (an env's bug, say), which the traceback in rltrain.log details."""
    if isinstance(error, TrainingError):
        return str(error)
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def derived_seed(base: int, index: int) -> int:
    """A 31-bit seed derived from ``(base, index)``, well apart from ``base + small``."""
    return int(np.random.SeedSequence([base, index]).generate_state(1)[0]) & 0x7FFF_FFFF


def _rate(steps: int, seconds: float) -> float | None:
    return steps / seconds if steps and seconds > 0 else None


def _add(a: Timing, b: Timing) -> Timing:
    return Timing(a.collect + b.collect, a.update + b.update, a.test + b.test, a.save + b.save)


class Interrupted(Exception):
    """Raised between training steps once a stop was requested (SIGINT/SIGTERM)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum


@dataclass
class _EpochInProgress:
    """What an epoch has gathered so far; kept so that an interrupted epoch can resume."""

    steps: int = 0
    training_steps: int = 0
    collected: list[Episodes] = field(default_factory=list)
    updates: list[Mapping[str, float]] = field(default_factory=list)
    #: the updates' stats since the last check, as measured (floats, or tensors on the
    #: algorithm's device): :meth:`Trainer._settle` reads them into ``updates``
    unread: list[Mapping[str, Stat]] = field(default_factory=list)
    timing: Timing = field(default_factory=Timing)


def _read_stats(records: list[Mapping[str, Stat]]) -> list[dict[str, float]]:
    """Update stats as Python floats: the tensors among them read in one transfer."""
    tensors = [v for r in records for v in r.values() if isinstance(v, torch.Tensor)]
    read = iter(torch.stack(tensors).tolist() if tensors else [])
    return [{k: next(read) if isinstance(v, torch.Tensor) else float(v) for k, v in r.items()}
            for r in records]


def learn_from_a_batch(algorithm: OffPolicyAlgorithm, storage: ReplayBuffer, reader: ReadPath,
                       batch_size: int, progress: Progress) -> UpdateReport:
    """One gradient step on one batch: the read path gives the batch (sampled, gathered,
    transformed as the algorithm declared), the algorithm learns from it, and the
    priorities it reports go back to a sampler that weighs its draws."""
    batch = reader.batch(storage, batch_size, progress.fraction)
    report = algorithm.update(batch, progress=progress)
    if batch.weights is not None and report.priorities is None:
        # the settings refuse such a pairing before training
        raise TrainingError(f"{type(algorithm).__name__} reported no priorities for "
                            "prioritised replay")
    reader.learned(batch, report.priorities)
    return report
