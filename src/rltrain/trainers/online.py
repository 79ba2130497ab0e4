"""What the on- and off-policy trainers share: collection from the train envs, the test
in training, env steps as the epoch's measure."""

from __future__ import annotations

import math
import time
from typing import Any

from rltrain.algorithms.base import Algorithm
from rltrain.common import stacking
from rltrain.common.stats import Episodes, Timing
from rltrain.common.types import Policy, Progress
from rltrain.config.schemas import OnlineTrainerParams, env_steps_per_collection
from rltrain.data.collector import Collector
from rltrain.data.storage import ReplayBuffer
from rltrain.trainers.base import Trainer


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
        t2, away = time.perf_counter(), stacking.time_elsewhere()
        stats = self.update_step(episodes, start)
        # in a batched sweep, less the other members' turns the update waited through
        update = time.perf_counter() - t2 - (stacking.time_elsewhere() - away)
        return episodes.n_steps, episodes, stats, Timing(t1 - t0, update, t2 - t1)

    def update_step(self, episodes: Episodes, start: Progress) -> list[Any]:
        """Learn from what was just collected; ``start`` is the progress when the
        training step began (schedules use it, so the last update still learns)."""
        raise NotImplementedError
