"""The off-policy trainer: collects into a replay buffer and learns from batches the read
path (rltrain.data.reading) samples from it, after a random warm-up."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rltrain.algorithms.base import Algorithm, OffPolicyAlgorithm
from rltrain.common.stats import Episodes, EpochStats
from rltrain.common.types import Acted, Policy, Progress
from rltrain.config.schemas import (
    AlgoConfig,
    ConfigError,
    OffPolicyTrainerParams,
    ReplayBufferConfig,
    env_steps_per_collection,
)
from rltrain.data.collector import random_policy
from rltrain.data.reading import ReadPath
from rltrain.data.samplers import make_sampler
from rltrain.trainers.base import learn_from_a_batch
from rltrain.trainers.online import OnlineTrainer
from rltrain.trainers.storage import Storage, StoragePlan, StorageRequest, make_buffer


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
                           request.frame_stack, request.fields)

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
        if self.buffer.declared:  # and the fields the algorithm stores beside them
            self.random_policy = self._with_fields(self.random_policy)

    @classmethod
    def check_algorithm(cls, params: OffPolicyTrainerParams, algorithm: Algorithm,
                        request: StorageRequest) -> None:
        """A random warm-up needs the fields the algorithm stores beside a transition for
        random actions (``random_fields``)."""
        if not (request.fields and params.random_warmup_env_steps):
            return
        if not isinstance(algorithm, OffPolicyAlgorithm) or (
                type(algorithm).random_fields is OffPolicyAlgorithm.random_fields):
            names = ", ".join(f.name for f in request.fields)
            raise ConfigError(
                f"algo={algorithm.cfg.name} stores {names} beside each transition, which the "
                f"random warm-up's steps do not have; set trainer.random_warmup_env_steps=0")

    def _with_fields(self, policy: Policy) -> Policy:
        """``policy`` (the random warm-up's) with the algorithm's declared fields beside its
        actions (``Algorithm.random_fields``; :meth:`check_algorithm` has refused a run whose
        algorithm gives none)."""
        algorithm = self.algorithm

        def acted(obs: np.ndarray) -> Acted:
            actions = policy(obs)
            assert not isinstance(actions, Acted)  # random_policy's are plain
            fields = algorithm.random_fields(obs, actions)
            assert fields is not None  # checked above
            return Acted(actions, fields)
        return acted

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
