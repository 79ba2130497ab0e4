"""The offline trainer: learns from a dataset (a filled buffer), one gradient step a
training step."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from rltrain.algorithms.base import OffPolicyAlgorithm
from rltrain.common.stats import Episodes, Timing
from rltrain.common.types import Progress
from rltrain.config.schemas import AlgoConfig, ConfigError, OfflineTrainerParams, ReplayBufferConfig
from rltrain.data.datasets.replay import to_buffer
from rltrain.data.datasets.sources import dataset_fingerprint, load_dataset
from rltrain.data.datasets.validation import check_fields, check_spaces
from rltrain.data.reading import ReadPath
from rltrain.data.samplers import make_sampler
from rltrain.trainers.base import Trainer, learn_from_a_batch
from rltrain.trainers.storage import Storage, StorageRequest


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
        """The dataset, loaded, checked against the env's spaces, the fields the algorithm
        stores beside each transition and the batch size, as a one-lane buffer in the
        algorithm's action space, holding those fields."""
        spec, info = request.dataset, request.info
        assert spec is not None  # the settings' pairing check
        data = load_dataset(spec, consent=request.trust)
        check_spaces(data, info.obs_space, info.action_space, info.env_id, spec)
        check_fields(data, request.fields, spec)
        assert params.batch_size is not None  # check() refused None; build calls it first
        if params.batch_size > len(data):
            raise ConfigError(
                f"trainer.batch_size={params.batch_size} is larger than the dataset "
                f"({len(data):,} transitions in {spec}): lower trainer.batch_size or collect "
                "more data")
        buffer = to_buffer(data, discrete=info.discrete, action_low=info.action_low,
                           action_high=info.action_high, frame_stack=request.frame_stack,
                           fields=request.fields)
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
