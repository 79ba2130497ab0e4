"""Trainers: epochs of training steps, each epoch closed by a test step.

The semantics and parameter names follow Tianshou 2.0's trainer documentation:

* An epoch runs training steps until ``epoch_num_steps`` env steps (online) or
  update steps (offline) are done, then one test step.
* An online training step is a collection step, then (with ``test_in_training``)
  a test step if the collected episodes already reach the stop score, then an
  update step. Offline, a training step is one update step.
* Update step: on-policy, the whole rollout ``update_step_num_repetitions``
  times in minibatches, then the rollout is cleared; off-policy,
  ``round(u * n)`` gradient steps for the n transitions just collected;
  offline, one gradient step.

A trainer orchestrates and knows nothing of an algorithm's internals, nor of
files: saving goes through the callbacks, writing through the loggers.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import torch

from rltrain import lanes
from rltrain.algorithms.base import (
    Algorithm,
    OffPolicyAlgorithm,
    OnPolicyAlgorithm,
    Stat,
    UpdateReport,
)
from rltrain.collector import CollectionStopped, Collector, random_policy
from rltrain.config import (
    AlgoConfig,
    ConfigError,
    OfflineTrainerParams,
    OffPolicyTrainerParams,
    OnlineTrainerParams,
    OnPolicyTrainerParams,
    ReplayBufferConfig,
    TrainerParams,
    env_steps_per_collection,
)
from rltrain.core import Policy, Progress, SpaceInfo
from rltrain.data.buffers import ReplayBuffer
from rltrain.data.datasets.replay import to_buffer
from rltrain.data.datasets.sources import dataset_fingerprint, load_dataset
from rltrain.data.datasets.validation import check_spaces
from rltrain.data.reading import ReadPath
from rltrain.data.samplers import make_sampler
from rltrain.errors import NonFiniteError, TrainingError, is_env_failure
from rltrain.loggers import Logger
from rltrain.observations import storage_dtype
from rltrain.stats import Best, Episodes, EpochStats, InfoStats, Timing, flatten, mean_stats
from rltrain.system import available_memory, size_text

#: check every parameter for non-finite values every this many training steps (and at every
#: epoch's end); the losses are checked after every step
PARAMETER_CHECK_INTERVAL = 64


@dataclass(frozen=True)
class StorageRequest:
    """What a trainer kind is told to make its storage from (:meth:`Trainer.storage`)."""

    info: SpaceInfo
    num_train_envs: int
    #: ``buffer.size``: the replay capacity, in transitions
    buffer_size: int
    #: an offline run's ``dataset=`` (a file or ``minari:ID``)
    dataset: str | None = None
    #: consent to code the dataset would run (``trust=true``; rltrain.trust)
    trust: bool = False
    #: frames per observation of a frame-stacked image env (1: none), stored once each
    frame_stack: int = 1


@dataclass(frozen=True)
class Storage:
    """The transitions a trainer learns from, as its kind made them."""

    buffer: ReplayBuffer
    #: an offline run's dataset: its fingerprint (spec, path, sha256) and summary, for
    #: summary.json and checkpoints (a resume must find the same data)
    dataset: dict[str, Any] | None = None
    #: observations the statistics of ``env.normalize.obs`` start from (an offline run's
    #: dataset: nothing is collected to learn them from)
    observations: np.ndarray | None = None


@dataclass(frozen=True)
class StoragePlan:
    """The buffer a trainer kind will make, sized before it is made: the composition root
    adds it to what the run will hold in memory (rltrain.footprint) before allocating any."""

    #: lanes (one per train env) and transitions per lane
    lanes: int
    lane_capacity: int
    #: a ring that overwrites its oldest transitions (replay), or append-only (a rollout)
    circular: bool
    #: the setting behind its size, as a message names it (``buffer.size``, ``the rollout``)
    what: str
    #: what to do when it cannot fit
    fix: str
    #: frames per observation of a frame-stacked image env, stored once each (1: none)
    frame_stack: int = 1

    def per_transition(self, info: SpaceInfo) -> int:
        """Bytes one transition takes, as :class:`ReplayBuffer` stores it."""
        stack = {} if self.frame_stack == 1 else {"frame_stack": self.frame_stack}
        return ReplayBuffer.bytes_per_transition(
            info.obs_shape, storage_dtype(info.obs_space), info.action_shape,
            np.int64 if info.discrete else np.float32, **stack)

    def nbytes(self, info: SpaceInfo) -> int:
        return self.lanes * self.lane_capacity * self.per_transition(info)

    def detail(self, info: SpaceInfo) -> str:
        """``for N transitions of ENV (B bytes each)``."""
        return (f"for {self.lanes * self.lane_capacity:,} transitions of {info.env_id} "
                f"({self.per_transition(info):,} bytes each)")


def replay_buffer(info: SpaceInfo, num_lanes: int, lane_capacity: int, *, circular: bool,
                  what: str, fix: str, frame_stack: int = 1) -> ReplayBuffer:
    """A buffer of ``num_lanes`` x ``lane_capacity`` transitions, refused by name when it
    cannot fit in the memory available (``what`` names the setting, ``fix`` says what to do).
    Observations are stored as :func:`rltrain.observations.storage_dtype` says (images and
    dicts as uint8), a frame stack one frame per transition when ``frame_stack`` > 1."""
    return make_buffer(info, StoragePlan(num_lanes, lane_capacity, circular, what, fix,
                                         frame_stack))


def make_buffer(info: SpaceInfo, plan: StoragePlan) -> ReplayBuffer:
    """The buffer of ``plan``, refused by name when it cannot fit in the memory available
    (the run's footprint has checked it with everything else by then: this is for a buffer
    made alone)."""
    need = plan.nbytes(info)
    available = available_memory()
    if available is not None and need > available:
        raise ConfigError(f"{plan.what} needs {size_text(need)} of memory {plan.detail(info)}, "
                          f"but {size_text(available)} is available; {plan.fix}")
    stack = {} if plan.frame_stack == 1 else {"frame_stack": plan.frame_stack}
    try:
        return ReplayBuffer(plan.lanes, plan.lane_capacity, info.obs_shape, info.action_shape,
                            np.int64 if info.discrete else np.float32,
                            obs_dtype=storage_dtype(info.obs_space), circular=plan.circular,
                            **stack)
    except MemoryError:
        raise ConfigError(f"{plan.what} needs {size_text(need)} of memory, which could not be "
                          "allocated") from None


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
        #: (rltrain.errors.is_env_failure)
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


class OnlineTrainer(Trainer):
    """Shared by the on- and off-policy trainers: collection, test in training."""

    params: OnlineTrainerParams
    train_collector: Collector

    def __init__(self, algorithm: Algorithm, params: OnlineTrainerParams, buffer: ReplayBuffer,
                 test_collector: Collector, *, train_collector: Collector | None = None,
                 **kwargs: Any) -> None:
        if train_collector is None:
            raise ValueError(f"the {self.name} trainer collects: it needs a train collector")
        super().__init__(algorithm, params, buffer, test_collector,
                         train_collector=train_collector, **kwargs)
        self.steps_per_collection = env_steps_per_collection(params, train_collector.num_envs)

    def steps_per_epoch(self) -> int:
        """Env steps per epoch: ceil(s / c) * c when collecting c env steps at a time."""
        c = self.steps_per_collection
        s = self.params.epoch_num_steps
        return s if c is None else math.ceil(s / c) * c

    def epoch_steps(self) -> int:
        """Whole collection steps: an epoch of ``epoch_num_steps=512`` collecting 2,048 env
        steps at a time runs (and says) 2,048. Collecting episodes, ``epoch_num_steps`` is
        the least an epoch runs (the console counts on past it)."""
        return self.steps_per_epoch()

    def epoch_steps_note(self) -> str:
        s, c = self.params.epoch_num_steps, self.steps_per_collection
        if c is None:
            return (f"at least trainer.epoch_num_steps={s:,}: whole collection steps of "
                    f"{self.params.collection_step_num_episodes:,} episodes")
        if self.steps_per_epoch() == s:
            return ""
        k = self.steps_per_epoch() // c
        return (f"trainer.epoch_num_steps={s:,} rounded up to {k:,} whole collection "
                f"step{'' if k == 1 else 's'} of {c:,}")

    def planned_env_steps(self) -> int:
        return self.params.max_epochs * self.steps_per_epoch()

    def collect(self, policy: Policy) -> Episodes:
        episodes = self.train_collector.collect(
            policy,
            n_steps=self.params.collection_step_num_env_steps,
            n_episodes=self.params.collection_step_num_episodes,
        )
        self.env_step += episodes.n_steps
        return episodes

    def training_step(self) -> tuple[int, Episodes | None, list[Any], Timing]:
        t0 = time.perf_counter()
        start = self.progress()
        episodes = self.collect(self.algorithm.policy(start))
        t1 = time.perf_counter()
        if self.params.test_in_training and self._reached_stop(episodes):
            test = self.test_step()
            if self._reached_stop(test):
                self._early_test = test
                return episodes.n_steps, episodes, [], Timing(t1 - t0, 0.0,
                                                              time.perf_counter() - t1)
        t2, away = time.perf_counter(), lanes.elsewhere()
        stats = self.update_step(episodes, start)
        # in a batched sweep, less the other seeds' turns the update waited through
        update = time.perf_counter() - t2 - (lanes.elsewhere() - away)
        return episodes.n_steps, episodes, stats, Timing(t1 - t0, update, t2 - t1)

    def update_step(self, episodes: Episodes, start: Progress) -> list[Any]:
        """Learn from what was just collected; ``start`` is the progress when the
        training step began (schedules use it, so the last update still learns)."""
        raise NotImplementedError


class OnPolicyTrainer(OnlineTrainer):
    """Collects a rollout, learns from all of it, forgets it."""

    name = "onpolicy"
    params_type = OnPolicyTrainerParams
    params: OnPolicyTrainerParams
    algorithm: OnPolicyAlgorithm

    @classmethod
    def check(cls, params: OnPolicyTrainerParams, algo: AlgoConfig, num_train_envs: int,
              buffer_size: int) -> None:
        algo.check_minibatch(params.batch_size)

    @classmethod
    def storage_plan(cls, params: OnPolicyTrainerParams, request: StorageRequest
                     ) -> StoragePlan:
        """Append-only lanes holding one collection step's rollout."""
        m, info = request.num_train_envs, request.info
        per_collection = env_steps_per_collection(params, m)
        if per_collection:
            capacity, what = per_collection // m, "the rollout"
        else:
            # n episodes over m envs, each at most T steps: every env finishes at least
            # floor(V / T) episodes in V vector steps, so V <= T * ceil(n / m)
            n = params.collection_step_num_episodes
            assert n is not None  # exactly one of the two is set (OnlineTrainerParams.check)
            capacity = info.max_episode_steps * math.ceil(n / m)
            what = (f"the rollout of {n} episodes (up to {info.max_episode_steps:,} steps each, "
                    "env.max_episode_steps)")
        return StoragePlan(m, capacity, False, what,
                           "collect fewer transitions per collection step")

    @classmethod
    def storage(cls, params: OnPolicyTrainerParams, request: StorageRequest) -> Storage:
        return Storage(make_buffer(request.info, cls.storage_plan(params, request)))

    def update_step(self, episodes: Episodes, start: Progress) -> list[Any]:
        rollout = self.buffer.rollout()
        if rollout.num_transitions == 0:  # next-step autoreset: only reset steps collected
            return []
        report = self.algorithm.update(
            rollout,
            batch_size=self.params.batch_size,
            repetitions=self.params.update_step_num_repetitions,
            progress=start,
        )
        self.gradient_step += report.gradient_steps
        self.buffer.clear()
        return [report.stats]


class OffPolicyTrainer(OnlineTrainer):
    """Collects into a replay buffer and learns from batches sampled from it."""

    name = "offpolicy"
    params_type = OffPolicyTrainerParams
    keeps_replay_buffer = True
    params: OffPolicyTrainerParams
    algorithm: OffPolicyAlgorithm

    @classmethod
    def check(cls, params: OffPolicyTrainerParams, algo: AlgoConfig, num_train_envs: int,
              buffer_size: int) -> None:
        m = num_train_envs
        capacity = (buffer_size // m) * m
        assert params.batch_size is not None  # OffPolicyTrainerParams.check() refuses None
        if params.batch_size > capacity:
            raise ConfigError(
                f"trainer.batch_size={params.batch_size} is larger than the replay buffer "
                f"(buffer.size={buffer_size}, {capacity} slots over {m} envs): no batch could "
                "ever be sampled, so nothing would be learnt; lower trainer.batch_size or raise "
                "buffer.size")
        per_collection = env_steps_per_collection(params, m)
        steps_per_epoch = (math.ceil(params.epoch_num_steps / per_collection) * per_collection
                           if per_collection else params.epoch_num_steps)
        run_steps = params.max_epochs * steps_per_epoch
        if params.random_warmup_env_steps > run_steps:
            raise ConfigError(
                f"trainer.random_warmup_env_steps={params.random_warmup_env_steps:,} is longer "
                f"than the whole training run ({params.max_epochs} epochs x "
                f"{steps_per_epoch:,} env steps = {run_steps:,}); lower it or train longer")
        u = params.update_step_num_gradient_steps_per_sample
        if per_collection and round(u * per_collection) == 0:
            raise ConfigError(
                f"trainer.update_step_num_gradient_steps_per_sample={u} gives round({u} x "
                f"{per_collection}) = 0 gradient steps per collection step: nothing would be "
                "learnt; raise it or trainer.collection_step_num_env_steps")
        algo.check_plan(u * run_steps)

    @classmethod
    def storage_plan(cls, params: OffPolicyTrainerParams, request: StorageRequest
                     ) -> StoragePlan:
        """Circular lanes of ``buffer.size`` transitions in all."""
        m = request.num_train_envs
        if request.buffer_size < m:
            raise ConfigError(f"buffer.size={request.buffer_size} is smaller than "
                              f"env.num_train_envs={m}")
        return StoragePlan(m, request.buffer_size // m, True, "buffer.size", "lower buffer.size",
                           request.frame_stack)

    @classmethod
    def storage(cls, params: OffPolicyTrainerParams, request: StorageRequest) -> Storage:
        return Storage(make_buffer(request.info, cls.storage_plan(params, request)))

    def __init__(self, *args: Any, seed: int = 0, replay: ReplayBufferConfig | None = None,
                 **kwargs: Any) -> None:
        """:param replay: the ``buffer`` group, which names the sampler (uniform when None)."""
        super().__init__(*args, seed=seed, **kwargs)
        #: sampler -> gather -> the algorithm's transforms: the batches it learns from
        self.reader = ReadPath(make_sampler(replay or ReplayBufferConfig(), seed),
                               self.algorithm.transforms())
        #: the random warm-up's actions: uniform in the env's own (seeded) action space
        self.random_policy = random_policy(self.train_collector.envs, seed)

    def planned_env_steps(self) -> int:
        m = self.train_collector.num_envs
        warmup = math.ceil(self.params.random_warmup_env_steps / m) * m
        return warmup + super().planned_env_steps()

    def __next__(self) -> EpochStats:
        if self.epoch == 0 and self.env_step == 0 and self.params.random_warmup_env_steps:
            # random warm-up before learning: fills the buffer, counts as env steps
            self.collect_warmup()
        return super().__next__()

    def collect_warmup(self) -> None:
        """Uniformly random actions (in the env's bounds); the observations they meet count
        towards the observation statistics, as any training collection's do. Collected in
        about 50 pieces, so the loggers show it as it goes (the pieces continue each other:
        the same steps as one collection). A signal is acted on once it is over, at the first
        training step: the action space's random stream is not in a checkpoint, so a warm-up
        cut short could not be resumed exactly (random steps are fast: seconds)."""
        m = self.train_collector.num_envs
        total = math.ceil(self.params.random_warmup_env_steps / m) * m
        piece = math.ceil(total / m / 50) * m
        for logger in self.loggers:
            logger.start_warmup(total)
        done = 0
        while done < total:
            episodes = self.train_collector.collect(self.random_policy,
                                                    n_steps=min(piece, total - done))
            done += episodes.n_steps
            self.env_step += episodes.n_steps
            for logger in self.loggers:
                logger.advance(episodes.n_steps)

    def update_step(self, episodes: Episodes, start: Progress) -> list[Any]:
        n = round(self.params.update_step_num_gradient_steps_per_sample * episodes.n_transitions)
        batch_size = self.params.batch_size
        assert batch_size is not None  # OffPolicyTrainerParams.check() refuses None
        if len(self.buffer) < batch_size:
            return []
        stats = []
        for _ in range(n):
            report = learn_from_a_batch(self.algorithm, self.buffer, self.reader,
                                        batch_size, self.progress())
            self.gradient_step += report.gradient_steps
            stats.append(report.stats)
        return stats

    def storage_state(self) -> dict[str, Any] | None:
        """The replay buffer (its filled part) unless trainer.checkpoint_buffer=false, and the
        sampler's stream."""
        return {"buffer": self.buffer.state_dict() if self.params.checkpoint_buffer else None,
                "sampler": self.reader.state_dict()}

    def load_storage_state(self, state: dict[str, Any] | None) -> list[str]:
        if state is not None and state.get("sampler") is not None:
            self.reader.load_state_dict(state["sampler"])
        if state is None or state.get("buffer") is None:
            return ["the checkpoint holds no replay buffer (trainer.checkpoint_buffer=false): "
                    "the buffer starts empty"]
        self.buffer.load_state_dict(state["buffer"])
        return []


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


class OfflineTrainer(Trainer):
    """Learns from a dataset (a filled buffer); a training step is one gradient step, and
    schedules advance with gradient steps (no env step is ever taken in training)."""

    name = "offline"
    params_type = OfflineTrainerParams
    params: OfflineTrainerParams
    algorithm: OffPolicyAlgorithm
    step_key = "gradient_step"
    collects = False

    @classmethod
    def check(cls, params: OfflineTrainerParams, algo: AlgoConfig, num_train_envs: int,
              buffer_size: int) -> None:
        if params.batch_size is None:
            raise ConfigError("trainer.batch_size=null: an offline gradient step samples a "
                              "batch from the dataset; give it a size, e.g. "
                              "trainer.batch_size=256")
        algo.check_plan(params.max_epochs * params.epoch_num_steps)

    @classmethod
    def storage(cls, params: OfflineTrainerParams, request: StorageRequest) -> Storage:
        """The dataset, loaded, checked against the env's spaces and the batch size, as a
        one-lane buffer in the algorithm's action space."""
        spec, info = request.dataset, request.info
        assert spec is not None  # the settings' pairing check
        data = load_dataset(spec, consent=request.trust)
        check_spaces(data, info.obs_space, info.action_space, info.env_id, spec)
        assert params.batch_size is not None  # check() refused None; build calls it first
        if params.batch_size > len(data):
            raise ConfigError(
                f"trainer.batch_size={params.batch_size} is larger than the dataset "
                f"({len(data):,} transitions in {spec}): lower trainer.batch_size or collect "
                "more data")
        buffer = to_buffer(data, discrete=info.discrete, action_low=info.action_low,
                           action_high=info.action_high, frame_stack=request.frame_stack)
        returns = np.asarray(data.episode_returns(), dtype=np.float64)
        facts = {**dataset_fingerprint(spec), "transitions": len(data),
                 "episodes": int(returns.size),
                 "return_mean": float(returns.mean()) if returns.size else None,
                 "source": data.meta.get("source"), "policy": data.meta.get("policy")}
        return Storage(buffer, dataset=facts, observations=data.obs)

    def __init__(self, *args: Any, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, seed=seed, **kwargs)
        #: uniform draws from the dataset, then the algorithm's transforms
        self.reader = ReadPath(make_sampler(ReplayBufferConfig(), seed),
                               self.algorithm.transforms())

    def planned_steps(self) -> int:
        return self.params.max_epochs * self.params.epoch_num_steps

    def progress(self) -> Progress:
        planned = self.planned_steps()
        fraction = min(self.gradient_step / planned, 1.0) if planned else 0.0
        return Progress(self.env_step, self.gradient_step, fraction)

    def training_step(self) -> tuple[int, Episodes | None, list[Any], Timing]:
        t0 = time.perf_counter()
        batch_size = self.params.batch_size
        assert batch_size is not None  # check() refused None before the trainer was built
        report = learn_from_a_batch(self.algorithm, self.buffer, self.reader,
                                    batch_size, self.progress())
        self.gradient_step += report.gradient_steps
        return 1, None, [report.stats], Timing(update=time.perf_counter() - t0)

    def storage_state(self) -> dict[str, Any] | None:
        """The sampler's stream; the data are the dataset's (checkpoints reference it by its
        hash)."""
        return {"sampler": self.reader.state_dict()}

    def load_storage_state(self, state: dict[str, Any] | None) -> list[str]:
        if state is not None and state.get("sampler") is not None:
            self.reader.load_state_dict(state["sampler"])
        return []


#: the trainer kinds, by ``trainer=<name>``
TRAINERS: dict[str, type[Trainer]] = {
    kind.name: kind for kind in (OnPolicyTrainer, OffPolicyTrainer, OfflineTrainer)}
