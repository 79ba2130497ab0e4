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

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rltrain.algorithms.base import (
    Algorithm,
    OffPolicyAlgorithm,
    OnPolicyAlgorithm,
    Progress,
)
from rltrain.collector import Collector, Policy
from rltrain.config import (
    OfflineTrainerParams,
    OffPolicyTrainerParams,
    OnlineTrainerParams,
    OnPolicyTrainerParams,
    TrainerParams,
    env_steps_per_collection,
)
from rltrain.data.buffers import ReplayBuffer
from rltrain.loggers import Logger
from rltrain.stats import Best, Episodes, EpochStats, InfoStats, Timing, flatten, mean_stats


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
    """Base trainer: an iterator over epochs; :meth:`run` runs them all."""

    def __init__(
        self,
        algorithm: Algorithm,
        params: TrainerParams,
        buffer: ReplayBuffer,
        test_collector: Collector,
        *,
        reward_threshold: float | None,
        loggers: Sequence[Logger] = (),
        callbacks: Callbacks = Callbacks(),
    ) -> None:
        self.algorithm, self.params, self.buffer = algorithm, params, buffer
        self.test_collector = test_collector
        self.reward_threshold = reward_threshold
        self.stop_score: float | None = (
            reward_threshold if params.stop_score == "auto" else params.stop_score
        )
        self.loggers, self.callbacks = list(loggers), callbacks
        self.epoch = self.env_step = self.gradient_step = 0
        self.best = Best(score=None, epoch=None)
        self.stopped_early = self.interrupted = False
        self.totals = Timing()
        self.log_time = 0.0
        self._start = time.perf_counter()
        # set by a training step whose in-training test reached the stop score
        self._early_test: Episodes | None = None

    # ------------------------------------------------------------------ progress
    def planned_env_steps(self) -> int:
        return 0

    def progress(self) -> Progress:
        planned = self.planned_env_steps()
        fraction = min(self.env_step / planned, 1.0) if planned else 0.0
        return Progress(self.env_step, self.gradient_step, fraction)

    # ------------------------------------------------------------------ the loop
    def training_step(self) -> tuple[int, Episodes | None, list[Any], Timing]:
        """Run one training step; return (steps counted towards the epoch, the
        collected episodes or None, the update stats, the time spent)."""
        raise NotImplementedError

    def test_step(self) -> Episodes:
        self.test_collector.reset()
        policy = self.algorithm.policy(self.progress(), deterministic=True)
        return self.test_collector.collect(
            policy, n_episodes=self.params.test_step_num_episodes, quota=True
        )

    def _done(self) -> bool:
        return self.epoch >= self.params.max_epochs or self.stopped_early

    def _reached_stop(self, episodes: Episodes) -> bool:
        return (
            self.stop_score is not None
            and len(episodes.returns) > 0
            and float(np.mean(episodes.returns)) >= self.stop_score
        )

    def __next__(self) -> EpochStats:
        if self._done():
            raise StopIteration
        self.epoch += 1
        for logger in self.loggers:
            logger.start_epoch(self.epoch, self.params.epoch_num_steps)
        steps, training_steps = 0, 0
        collected: list[Episodes] = []
        updates: list[Any] = []
        timing = Timing()
        self._early_test = None
        while steps < self.params.epoch_num_steps and self._early_test is None:
            n, episodes, stats, spent = self.training_step()
            steps += n
            training_steps += 1
            if episodes is not None:
                collected.append(episodes)
            updates += stats
            timing = Timing(*(a + b for a, b in zip(_tuple(timing), _tuple(spent), strict=True)))
            for logger in self.loggers:
                logger.advance(n)

        t0 = time.perf_counter()
        test = self._early_test if self._early_test is not None else self.test_step()
        timing = replace(timing, test=timing.test + time.perf_counter() - t0)
        score = float(np.mean(test.returns)) if len(test.returns) else -math.inf
        is_best = self.best.score is None or score > self.best.score
        if is_best:
            self.best = Best(score=score, epoch=self.epoch)
        self.stopped_early = self._reached_stop(test)
        stats = EpochStats(
            epoch=self.epoch,
            env_step=self.env_step,
            gradient_step=self.gradient_step,
            time=time.perf_counter() - self._start,
            train=Episodes.merge(collected).stats(),
            test=test.stats(),
            update=mean_stats(updates),
            best=self.best,
            timing=timing,
            training_steps=training_steps,
        )
        t0 = time.perf_counter()
        if is_best and self.callbacks.on_best:
            self.callbacks.on_best(stats)
        if self.callbacks.on_epoch_end:
            self.callbacks.on_epoch_end(stats)
        stats = replace(stats, timing=replace(timing, save=time.perf_counter() - t0))
        self.totals = Timing(*(a + b for a, b in zip(_tuple(self.totals), _tuple(stats.timing),
                                                     strict=True)))
        t0 = time.perf_counter()
        record = flatten(stats)
        for logger in self.loggers:
            logger.log_epoch(record)
        self.log_time += time.perf_counter() - t0
        return stats

    def run(self) -> InfoStats:
        """Run every epoch (until max_epochs or the stop score) and return the final info.

        Ctrl-C ends the run after the step in flight; the info then says ``interrupted``.
        """
        try:
            for _ in self:
                pass
        except KeyboardInterrupt:
            self.interrupted = True
        info = self.info()
        if self.callbacks.on_stop:
            self.callbacks.on_stop(info)
        for logger in self.loggers:
            logger.finish(flatten(info))
        return info

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
        )


def _tuple(t: Timing) -> tuple[float, ...]:
    return (t.collect, t.update, t.test, t.save)


class OnlineTrainer(Trainer):
    """Shared by the on- and off-policy trainers: collection, test in training."""

    params: OnlineTrainerParams

    def __init__(self, algorithm: Algorithm, params: OnlineTrainerParams, buffer: ReplayBuffer,
                 train_collector: Collector, test_collector: Collector, **kwargs: Any) -> None:
        super().__init__(algorithm, params, buffer, test_collector, **kwargs)
        self.train_collector = train_collector
        self.steps_per_collection = env_steps_per_collection(params, train_collector.num_envs)

    def steps_per_epoch(self) -> int:
        """Env steps per epoch: ceil(s / c) * c when collecting c env steps at a time."""
        c = self.steps_per_collection
        s = self.params.epoch_num_steps
        return s if c is None else math.ceil(s / c) * c

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
        t2 = time.perf_counter()
        stats = self.update_step(episodes, start)
        return episodes.n_steps, episodes, stats, Timing(t1 - t0, time.perf_counter() - t2,
                                                         t2 - t1)

    def update_step(self, episodes: Episodes, start: Progress) -> list[Any]:
        """Learn from what was just collected; ``start`` is the progress when the
        training step began (schedules use it, so the last update still learns)."""
        raise NotImplementedError


class OnPolicyTrainer(OnlineTrainer):
    params: OnPolicyTrainerParams
    algorithm: OnPolicyAlgorithm

    def update_step(self, episodes: Episodes, start: Progress) -> list[Any]:
        rollout = self.buffer.rollout()
        n = rollout.num_transitions
        stats = self.algorithm.update(
            rollout,
            batch_size=self.params.batch_size,
            repetitions=self.params.update_step_num_repetitions,
            progress=start,
        )
        size = n if self.params.batch_size is None else min(self.params.batch_size, n)
        self.gradient_step += self.params.update_step_num_repetitions * math.ceil(n / size)
        self.buffer.clear()
        return [stats]


class OffPolicyTrainer(OnlineTrainer):
    params: OffPolicyTrainerParams
    algorithm: OffPolicyAlgorithm

    def __init__(self, *args: Any, random_policy: Policy, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.random_policy = random_policy

    def planned_env_steps(self) -> int:
        return self.params.random_warmup_env_steps + super().planned_env_steps()

    def __next__(self) -> EpochStats:
        if self.epoch == 0 and self.env_step == 0 and self.params.random_warmup_env_steps:
            # random warm-up before learning: fills the buffer, counts as env steps
            self.collect_warmup()
        return super().__next__()

    def collect_warmup(self) -> Episodes:
        episodes = self.train_collector.collect(
            self.random_policy, n_steps=self.params.random_warmup_env_steps
        )
        self.env_step += episodes.n_steps
        return episodes

    def update_step(self, episodes: Episodes, start: Progress) -> list[Any]:
        n = round(self.params.update_step_num_gradient_steps_per_sample * episodes.n_transitions)
        if len(self.buffer) < self.params.batch_size:
            return []
        stats = []
        for _ in range(n):
            batch = self.buffer.sample(self.params.batch_size)
            stats.append(self.algorithm.update(batch, progress=self.progress()))
            self.gradient_step += 1
        return stats


class OfflineTrainer(Trainer):
    """Learns from a filled buffer; a training step is one gradient step."""

    params: OfflineTrainerParams
    algorithm: OffPolicyAlgorithm

    def training_step(self) -> tuple[int, Episodes | None, list[Any], Timing]:
        t0 = time.perf_counter()
        batch = self.buffer.sample(self.params.batch_size)
        stats = self.algorithm.update(batch, progress=self.progress())
        self.gradient_step += 1
        return 1, None, [stats], Timing(update=time.perf_counter() - t0)


TRAINERS: dict[type[TrainerParams], type[Trainer]] = {
    OnPolicyTrainerParams: OnPolicyTrainer,
    OffPolicyTrainerParams: OffPolicyTrainer,
    OfflineTrainerParams: OfflineTrainer,
}
