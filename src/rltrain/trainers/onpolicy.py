"""The on-policy trainer: collects a rollout, learns from all of it, forgets it. The rollout
reaches the update through the read path (rltrain.data.reading.read_rollout), with what the
algorithm's transforms compute from it (GAE)."""

from __future__ import annotations

import math
from typing import Any

from rltrain.algorithms.base import OnPolicyAlgorithm
from rltrain.common.stats import Episodes
from rltrain.common.types import Progress
from rltrain.config.schemas import AlgoConfig, OnPolicyTrainerParams, env_steps_per_collection
from rltrain.data.reading import read_rollout
from rltrain.data.transforms import check_reads
from rltrain.trainers.online import OnlineTrainer
from rltrain.trainers.storage import Storage, StoragePlan, StorageRequest, make_buffer


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
                           "collect fewer transitions per collection step",
                           fields=request.fields)

    @classmethod
    def storage(cls, params: OnPolicyTrainerParams, request: StorageRequest) -> Storage:
        return Storage(make_buffer(request.info, cls.storage_plan(params, request)))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: what the algorithm learns from is computed with (GAE), applied to each rollout
        self.transforms = self.algorithm.transforms()
        check_reads(self.transforms, "rollout", "an on-policy rollout")

    def update_step(self, episodes: Episodes, start: Progress) -> list[Any]:
        rollout = read_rollout(self.buffer, self.transforms)
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
