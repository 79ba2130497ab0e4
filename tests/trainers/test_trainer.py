"""Step accounting of the real trainers, built as the composition root (rltrain.assembly.build)
builds them."""

from __future__ import annotations

import dataclasses
import math
import signal

import numpy as np
import pytest
import torch

from rltrain.algorithms.dqn import DQNConfig
from rltrain.algorithms.ppo import PPOConfig
from rltrain.algorithms.sac import SACConfig
from rltrain.assembly.build import build_algorithm, seed_everything
from rltrain.assembly.checked_config import Settings
from rltrain.common.errors import NonFiniteError
from rltrain.common.stats import Best, CollectStats, EpochStats, InfoStats, Timing
from rltrain.config.schemas import (
    ConfigError,
    EnvConfig,
    LoggerConfig,
    OfflineTrainerParams,
    OffPolicyTrainerParams,
    OnPolicyTrainerParams,
    ReplayBufferConfig,
    check_env,
)
from rltrain.data.collector import Collector, random_policy
from rltrain.envs.vector import env_seeds, make_vector_env, space_info
from rltrain.loggers import Logger
from rltrain.trainers import (
    PARAMETER_CHECK_INTERVAL,
    TRAINERS,
    Interrupted,
    OfflineTrainer,
    OnPolicyTrainer,
    StorageRequest,
    replay_buffer,
)
from toy_envs import COUNTER_ID, COUNTER_T


class RecordingCollector(Collector):
    """The real collector; it also keeps, for each collect(), the policy, the result and the
    buffer size right after it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.records = []

    def collect(self, policy, **kwargs):
        episodes = super().collect(policy, **kwargs)
        size = len(self.buffer) if self.buffer is not None else 0
        self.records.append((policy, episodes, size))
        return episodes


class Built:
    """What the composition root wires together (without loggers and files)."""

    def __init__(self, algo, params, env_id="CartPole-v1", num_train_envs=4, num_test_envs=2,
                 buffer_size=2000, seed=0):
        torch.set_num_threads(1)
        env = EnvConfig(name="test", id=env_id, num_train_envs=num_train_envs,
                        num_test_envs=num_test_envs)
        self.settings = s = Settings(
            algo=algo, env=env, trainer=params, buffer=ReplayBufferConfig(size=buffer_size),
            logger=LoggerConfig(progress_bar=False), seed=seed,
            device=torch.device("cpu"), torch_threads=1)
        s.algo.check()
        check_env(s.env)
        s.trainer.check()
        seed_everything(seed)
        train_seed, test_seed = env_seeds(seed, num_train_envs)
        self.train_envs = make_vector_env(env, num_train_envs)
        self.test_envs = make_vector_env(env, num_test_envs)
        self.info = space_info(self.train_envs, env_id)
        self.algorithm = build_algorithm(s, self.info)
        kind = TRAINERS[params.name]
        if kind.collects:
            request = StorageRequest(self.info, num_train_envs, buffer_size)
            self.buffer = kind.storage(params, request).buffer
        else:  # offline: a buffer the test fills itself, as a dataset would be
            self.buffer = replay_buffer(self.info, num_train_envs, buffer_size // num_train_envs,
                                        circular=True, what="buffer.size", fix="")
        self.train_collector = RecordingCollector(self.train_envs, self.buffer)
        self.test_collector = Collector(self.test_envs)
        self.train_collector.reset(seed=train_seed)
        self.test_collector.reset(seed=test_seed)
        self.trainer = kind(self.algorithm, params, self.buffer, self.test_collector,
                            train_collector=self.train_collector if kind.collects else None,
                            reward_threshold=self.info.reward_threshold, seed=seed,
                            test_seed=test_seed)
        #: the off-policy trainer's random warm-up policy (None for the others)
        self.random_policy = getattr(self.trainer, "random_policy", None)

    @property
    def optimizer_steps(self):
        """The optimiser steps the algorithm really took."""
        return sum(optim.steps for optim in self.algorithm.optimizers().values())

    def training_records(self):
        """(episodes, buffer size after) of the training collections (not the warm-up)."""
        return [(e, size) for policy, e, size in self.train_collector.records
                if policy is not self.random_policy]

    def close(self):
        self.train_envs.close()
        self.test_envs.close()


def ppo(**kwargs):
    return PPOConfig(hidden_sizes=[16], **kwargs)


def dqn(**kwargs):
    return DQNConfig(hidden_sizes=[16], **kwargs)


def onpolicy(**kwargs):
    base = dict(max_epochs=2, epoch_num_steps=120, batch_size=24, test_step_num_episodes=2,
                stop_score=None, collection_step_num_env_steps=50,
                update_step_num_repetitions=2)
    return OnPolicyTrainerParams(**{**base, **kwargs})


def offpolicy(**kwargs):
    base = dict(max_epochs=3, epoch_num_steps=30, batch_size=32, test_step_num_episodes=2,
                stop_score=None, collection_step_num_env_steps=10,
                update_step_num_gradient_steps_per_sample=0.3, random_warmup_env_steps=0)
    return OffPolicyTrainerParams(**{**base, **kwargs})


# --------------------------------------------------------------------------- on-policy
@pytest.mark.parametrize(
    ("env_id", "n", "s", "batch_size"),
    [
        ("CartPole-v1", 50, 120, 24),  # native next-step env: fewer transitions than steps
        (COUNTER_ID, 50, 120, 24),  # same-step sync env
        (COUNTER_ID, 16, 16, None),  # whole batch per gradient step
        (COUNTER_ID, 9, 40, 100),  # minibatch larger than the rollout
    ],
)
def test_on_policy_step_accounting(env_id, n, s, batch_size):
    """Training steps per epoch = ceil(s / c), c = ceil(n / m) * m; env steps after e epochs
    = e * ceil(s / c) * c; each update is repetitions * ceil(N / batch) gradient steps for
    the N transitions of its rollout, and the optimiser really steps that often."""
    m, reps = 4, 2
    built = Built(ppo(), onpolicy(epoch_num_steps=s, collection_step_num_env_steps=n,
                                  batch_size=batch_size, update_step_num_repetitions=reps),
                  env_id=env_id, num_train_envs=m)
    trainer = built.trainer
    assert isinstance(trainer, OnPolicyTrainer)
    c = math.ceil(n / m) * m
    per_epoch = math.ceil(s / c)
    for e in (1, 2):
        stats = next(trainer)
        assert stats.epoch == e
        assert stats.training_steps == per_epoch
        assert stats.env_step == trainer.env_step == e * per_epoch * c
        assert stats.train.n_steps == per_epoch * c
        assert len(built.buffer) == 0  # the rollout is cleared after each update
    records = built.training_records()
    assert len(records) == 2 * per_epoch
    expected = 0
    for episodes, _ in records:
        size = episodes.n_transitions if batch_size is None else batch_size
        expected += reps * math.ceil(episodes.n_transitions / min(size, episodes.n_transitions))
    assert trainer.gradient_step == expected == built.optimizer_steps
    assert stats.gradient_step == expected
    if env_id == "CartPole-v1":
        assert any(ep.n_transitions < ep.n_steps for ep, _ in records)
    built.close()


def test_on_policy_collection_of_only_reset_steps():
    """On a next-step env, a collection step can consist of reset steps only (here one env,
    one env step per collection: the step right after each episode end). It stores no
    transition, so its update has nothing to learn from: no gradient step, and training
    goes on."""
    built = Built(ppo(), onpolicy(max_epochs=1, epoch_num_steps=60,
                                  collection_step_num_env_steps=1, batch_size=8,
                                  update_step_num_repetitions=2),
                  env_id="CartPole-v1", num_train_envs=1)
    assert built.train_collector.next_step_mode
    stats = next(built.trainer)
    assert stats.training_steps == 60 and stats.env_step == 60
    records = built.training_records()
    empty = [ep for ep, _ in records if ep.n_transitions == 0]
    assert empty  # at least one episode ended, so one collection was a reset step
    expected = sum(2 for ep, _ in records if ep.n_transitions > 0)
    assert stats.gradient_step == expected == built.optimizer_steps
    built.close()


# --------------------------------------------------------------------------- off-policy
@pytest.mark.parametrize("env_id", ["CartPole-v1", COUNTER_ID])
def test_off_policy_step_accounting(env_id):
    """Without warm-up: env steps = e * ceil(s / c) * c, and gradient steps = the sum of
    round(u * n_transitions) over the collection steps after which the buffer holds at
    least batch_size transitions."""
    m, n, s, u, batch = 4, 10, 30, 0.3, 32
    built = Built(dqn(), offpolicy(collection_step_num_env_steps=n, epoch_num_steps=s,
                                   update_step_num_gradient_steps_per_sample=u, batch_size=batch),
                  env_id=env_id, num_train_envs=m)
    trainer = built.trainer
    c = math.ceil(n / m) * m
    per_epoch = math.ceil(s / c)
    all_stats = list(trainer)
    assert [st.epoch for st in all_stats] == [1, 2, 3]
    for e, st in enumerate(all_stats, start=1):
        assert st.training_steps == per_epoch
        assert st.env_step == e * per_epoch * c
    assert trainer.env_step == 3 * per_epoch * c
    records = built.training_records()
    assert len(records) == 3 * per_epoch
    expected = sum(round(u * ep.n_transitions) for ep, size in records if size >= batch)
    skipped = [ep for ep, size in records if size < batch]
    assert skipped and expected > 0  # both cases happen
    assert trainer.gradient_step == expected == built.optimizer_steps
    assert all_stats[-1].gradient_step == expected
    built.close()


@pytest.mark.parametrize("warmup", [24, 22])
def test_random_warmup_adds_exactly_its_env_steps(warmup):
    """Warm-up runs once, before the first epoch, with the random policy: it adds
    ceil(w / m) * m env steps (w itself when m divides it) and fills the buffer."""
    m, n, s = 4, 8, 16
    c = math.ceil(n / m) * m
    per_epoch = math.ceil(s / c) * c
    warm = math.ceil(warmup / m) * m
    built = Built(dqn(), offpolicy(max_epochs=2, collection_step_num_env_steps=n,
                                   epoch_num_steps=s, random_warmup_env_steps=warmup,
                                   batch_size=16),
                  env_id=COUNTER_ID, num_train_envs=m)
    trainer = built.trainer
    stats = next(trainer)
    assert stats.env_step == warm + per_epoch
    # collected in pieces (the console shows it going), all before the first training step
    warmups = [e for p, e, _ in built.train_collector.records if p is built.random_policy]
    assert sum(e.n_steps for e in warmups) == warm
    records = built.train_collector.records
    assert all(p is built.random_policy for p, _, _ in records[:len(warmups)])
    assert records[len(warmups) - 1][2] == warm  # Counter: every step is stored
    # the buffer held >= batch_size from the first collection on: every step updated
    u = trainer.params.update_step_num_gradient_steps_per_sample
    expected = sum(round(u * ep.n_transitions) for ep, _ in built.training_records())
    assert expected > 0
    assert stats.gradient_step == expected == built.optimizer_steps
    stats = next(trainer)
    assert stats.env_step == warm + 2 * per_epoch  # no second warm-up
    assert sum(p is built.random_policy for p, _, _ in built.train_collector.records) == len(
        warmups)
    built.close()


# --------------------------------------------------------------------------- the loop
def test_trainer_is_an_iterator_and_run_returns_info():
    """next() yields EpochStats until max_epochs, then StopIteration; run() returns InfoStats."""
    built = Built(ppo(), onpolicy(max_epochs=2, epoch_num_steps=20,
                                  collection_step_num_env_steps=20),
                  env_id=COUNTER_ID)
    trainer = built.trainer
    assert iter(trainer) is trainer
    first, second = next(trainer), next(trainer)
    assert isinstance(first, EpochStats) and isinstance(second, EpochStats)
    assert (first.epoch, second.epoch) == (1, 2)
    assert second.env_step > first.env_step
    with pytest.raises(StopIteration):
        next(trainer)
    info = trainer.run()  # nothing left to run
    assert isinstance(info, InfoStats)
    assert info.epochs == 2 and info.env_step == second.env_step
    assert info.gradient_step == second.gradient_step
    assert not info.stopped_early and not info.interrupted
    built.close()


def test_run_runs_every_epoch_and_reports():
    """run() on a fresh trainer: max_epochs epochs, the test score of the Counter env is
    exactly T (reward 1 for T steps, whatever the policy), no threshold so not solved."""
    params = onpolicy(max_epochs=3, epoch_num_steps=20, collection_step_num_env_steps=20,
                      test_step_num_episodes=3)
    built = Built(ppo(), params, env_id=COUNTER_ID, num_test_envs=2)
    seen = []
    trainer = built.trainer
    trainer.callbacks = dataclasses.replace(trainer.callbacks, on_epoch_end=seen.append)
    info = trainer.run()
    assert isinstance(info, InfoStats)
    assert info.epochs == 3 and [st.epoch for st in seen] == [1, 2, 3]
    assert info.env_step == 3 * 20 and info.gradient_step == trainer.gradient_step
    assert info.best_score == pytest.approx(COUNTER_T) and info.best_epoch == 1
    assert info.reward_threshold is None and not info.solved and not info.stopped_early
    for st in seen:
        assert st.test.n_episodes == 3
        assert st.test.return_mean == pytest.approx(COUNTER_T)
        assert st.test.length_mean == pytest.approx(COUNTER_T)
        # 20 env steps = 5 vector steps on 4 envs: one episode of T = 5 steps per env
        assert st.train.n_episodes == 4 * (20 // 4 // COUNTER_T)
        assert set(st.update) == {"pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac",
                                  "explained_variance", "lr"}
    built.close()


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_stop_score_reached_ends_early(algo):
    """A stop score below any possible test score ends the run after the first epoch."""
    params = (onpolicy(max_epochs=5, stop_score=-1.0) if algo == "ppo"
              else offpolicy(max_epochs=5, stop_score=-1.0))
    built = Built(ppo() if algo == "ppo" else dqn(), params)
    info = built.trainer.run()
    assert info.stopped_early and info.epochs == 1
    assert info.best_epoch == 1
    c = math.ceil(params.collection_step_num_env_steps / 4) * 4
    assert info.env_step == math.ceil(params.epoch_num_steps / c) * c
    with pytest.raises(StopIteration):
        next(built.trainer)
    built.close()


def test_stop_score_not_reached_runs_every_epoch():
    """On the Counter env the test score is exactly T: a stop score just above it never
    stops the run, one equal to it stops after the first epoch."""
    above = Built(ppo(), onpolicy(max_epochs=2, epoch_num_steps=20,
                                  collection_step_num_env_steps=20,
                                  stop_score=COUNTER_T + 0.5), env_id=COUNTER_ID)
    info = above.trainer.run()
    assert info.epochs == 2 and not info.stopped_early
    equal = Built(ppo(), onpolicy(max_epochs=2, epoch_num_steps=20,
                                  collection_step_num_env_steps=20,
                                  stop_score=float(COUNTER_T)), env_id=COUNTER_ID)
    info = equal.trainer.run()
    assert info.epochs == 1 and info.stopped_early
    above.close()
    equal.close()


def test_test_in_training_stops_within_the_epoch():
    """With test_in_training, a collection whose episodes reach the stop score triggers a
    test; when that test reaches it too, the epoch ends at once, without an update."""
    m = 4
    built = Built(ppo(), onpolicy(max_epochs=3, epoch_num_steps=200,
                                  collection_step_num_env_steps=COUNTER_T * m,
                                  stop_score=float(COUNTER_T), test_in_training=True),
                  env_id=COUNTER_ID, num_train_envs=m)
    stats = next(built.trainer)
    assert stats.training_steps == 1
    assert stats.env_step == COUNTER_T * m
    assert stats.gradient_step == 0 and built.optimizer_steps == 0
    assert stats.test.return_mean == pytest.approx(COUNTER_T)
    assert built.trainer.stopped_early
    with pytest.raises(StopIteration):
        next(built.trainer)
    built.close()


# --------------------------------------------------------------------------- offline
def test_offline_trainer_learns_from_a_prefilled_buffer():
    """OfflineTrainer with DQN: one gradient step per training step, epochs *
    epoch_num_steps in all; it never steps the train env, and leaves the buffer as is."""
    epochs, steps = 2, 15
    params = OfflineTrainerParams(max_epochs=epochs, epoch_num_steps=steps, batch_size=16,
                                  test_step_num_episodes=2, stop_score=None)
    built = Built(dqn(target_update_interval=5), params, buffer_size=400)
    assert isinstance(built.trainer, OfflineTrainer)
    filled = built.train_collector.collect(random_policy(built.train_envs, 0), n_steps=200)
    assert len(built.buffer) == filled.n_transitions > 0
    size_before = len(built.buffer)
    obs_before = built.buffer.codecs["obs"].array.copy()
    weights_before = [p.detach().clone() for p in built.algorithm.q.parameters()]
    all_stats = list(built.trainer)
    assert [st.training_steps for st in all_stats] == [steps] * epochs
    assert [st.gradient_step for st in all_stats] == [steps, 2 * steps]
    assert all(st.env_step == 0 and st.train.n_steps == 0 for st in all_stats)
    info = built.trainer.run()
    assert info.gradient_step == epochs * steps == built.optimizer_steps
    assert info.env_step == 0 and built.trainer.env_step == 0
    assert len(built.train_collector.records) == 1  # only the pre-fill
    assert len(built.buffer) == size_before
    np.testing.assert_array_equal(built.buffer.codecs["obs"].array, obs_before)
    changed = [not torch.equal(a, b)
               for a, b in zip(weights_before, built.algorithm.q.parameters(), strict=True)]
    assert all(changed)
    assert set(all_stats[0].update) == {"loss", "q_mean", "epsilon"}
    built.close()


# --------------------------------------------------------------------------- records
def test_stats_records_are_frozen():
    """EpochStats, InfoStats and their parts cannot be changed after the fact."""
    built = Built(ppo(), onpolicy(max_epochs=1, epoch_num_steps=20,
                                  collection_step_num_env_steps=20), env_id=COUNTER_ID)
    stats = next(built.trainer)
    info = built.trainer.run()
    records = [(stats, "epoch"), (stats, "env_step"), (stats.train, "n_steps"),
               (stats.test, "return_mean"), (stats.best, "score"), (stats.timing, "collect"),
               (info, "best_score"), (info, "epochs"), (info.timing, "update")]
    for record, name in records:
        assert isinstance(record, (EpochStats, InfoStats, CollectStats, Best, Timing))
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, name, getattr(record, name))
    built.close()


# --------------------------------------------------------------------------- non-finite values
def poison(algorithm) -> None:
    """A NaN in the first parameter the optimisers hold (as an exploding update leaves it)."""
    optim = next(iter(algorithm.optimizers().values()))
    with torch.no_grad():
        optim.flat[0] = float("nan")


def test_a_non_finite_parameter_stops_the_epoch_it_appears_in():
    built = Built(dqn(), offpolicy(max_epochs=3))
    trainer = built.trainer
    next(trainer)
    poison(built.algorithm)
    with pytest.raises(NonFiniteError):
        next(trainer)
    built.close()


def test_an_interruption_never_hands_over_non_finite_parameters():
    """A stop signal makes the trainer raise Interrupted so that the run checkpoints; with a
    non-finite parameter it raises NonFiniteError instead, so last.pt stays the last good
    one."""
    built = Built(dqn(), offpolicy(max_epochs=3))
    trainer = built.trainer
    next(trainer)
    trainer.stop_signal = signal.SIGTERM
    with pytest.raises(Interrupted):
        next(trainer)
    poison(built.algorithm)
    with pytest.raises(NonFiniteError, match="is not finite"):
        next(trainer)
    built.close()


@pytest.mark.parametrize("defer", [False, True], ids=["floats", "tensors"])
def test_a_non_finite_loss_is_named_within_the_check_interval(defer):
    """A NaN loss stops the epoch at the next check (every PARAMETER_CHECK_INTERVAL training
    steps and at the epoch's end), named before the parameters it spoils, whether the
    update's stats are Python floats (the CPU) or tensors left on the device (an
    accelerator; here forced on the CPU)."""
    built = Built(dqn(), offpolicy(max_epochs=3))
    built.algorithm.defer_stats = defer
    trainer = built.trainer
    next(trainer)
    poison(built.algorithm)
    with pytest.raises(NonFiniteError, match=r"^the update's loss is nan$"):
        next(trainer)
    built.close()


@pytest.mark.parametrize("algo", ["dqn", "sac"])
def test_stats_left_on_the_device_read_the_same_as_floats(algo):
    """An algorithm on an accelerator reports its stats as tensors (no host sync per
    gradient step); the trainer reads them at its checks in one transfer. The epochs'
    records are the same numbers as when each stat is a float at once (forced on the CPU:
    the same run, seed for seed), and the epoch's unread stats are read at its end."""
    def records(defer):
        config = dqn() if algo == "dqn" else SACConfig(hidden_sizes=[16])
        env_id = "CartPole-v1" if algo == "dqn" else "Pendulum-v1"
        built = Built(config, offpolicy(max_epochs=2, epoch_num_steps=150,
                                        collection_step_num_env_steps=1,
                                        update_step_num_gradient_steps_per_sample=1.0),
                      env_id=env_id, num_train_envs=1)
        built.algorithm.defer_stats = defer
        reports = []
        real = built.algorithm.update

        def update(*args, **kwargs):
            reports.append(real(*args, **kwargs))
            return reports[-1]

        built.algorithm.update = update
        epochs = [dataclasses.asdict(stats) for stats in built.trainer]
        built.close()
        kinds = {type(v) for r in reports for v in vars(r.stats).values() if v is not None}
        return epochs, kinds

    floats, float_kinds = records(False)
    tensors, tensor_kinds = records(True)
    assert torch.Tensor in tensor_kinds and torch.Tensor not in float_kinds
    for a, b in zip(floats, tensors, strict=True):
        assert a["update"] == b["update"] and len(a["update"]) >= 3
        assert a["train"]["return_mean"] == b["train"]["return_mean"]
        assert a["test"]["return_mean"] == b["test"]["return_mean"]


def test_parameters_are_checked_every_interval_and_at_every_epochs_end(monkeypatch):
    """The parameter check runs every PARAMETER_CHECK_INTERVAL training steps and once more
    at the end of each epoch, not after every step."""
    built = Built(dqn(), offpolicy(max_epochs=1, epoch_num_steps=200,
                                   collection_step_num_env_steps=1,
                                   update_step_num_gradient_steps_per_sample=1.0),
                  num_train_envs=1)
    calls = []
    real = built.algorithm.nonfinite_parameter
    monkeypatch.setattr(built.algorithm, "nonfinite_parameter",
                        lambda: calls.append(built.trainer.env_step) or real())
    next(built.trainer)
    assert len(calls) == 200 // PARAMETER_CHECK_INTERVAL + 1
    built.close()


# --------------------------------------------------------------------------- test steps
class StepsSeen(Logger):
    """A logger that keeps what the trainer says of its test steps."""

    def __init__(self) -> None:
        self.started: list[tuple[int, int]] = []
        self.progress: list[tuple[int, int]] = []
        self.epochs: list[tuple[int, int]] = []

    def start_epoch(self, epoch: int, num_steps: int, done: int = 0) -> None:
        self.epochs.append((epoch, num_steps))

    def start_test(self, epoch: int, num_episodes: int) -> None:
        self.started.append((epoch, num_episodes))

    def test_progress(self, steps: int, episodes: int) -> None:
        self.progress.append((steps, episodes))


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_a_capped_test_episode_is_cut_counted_and_its_env_starts_anew(vectorization):
    """trainer.test_step_max_episode_steps: an episode that reaches the cap counts as it
    stands, its env alone starts a new one (the Counter env's observation counts its resets),
    and the collection says how many were cut."""
    cfg = EnvConfig(name="test", id=COUNTER_ID, num_train_envs=1, num_test_envs=3,
                    max_episode_steps=100, vectorization=vectorization)
    envs = make_vector_env(cfg, 3)
    try:
        collector = Collector(envs)
        collector.reset(seed=10)
        seen = []

        def policy(obs):
            seen.append(obs.copy())
            return np.zeros(len(obs), dtype=np.int64)

        progress = []
        episodes = collector.collect(policy, n_episodes=7, quota=True, max_episode_steps=7,
                                     on_progress=lambda *p: progress.append(p))
    finally:
        envs.close()
    assert episodes.n_cut == 7 and list(episodes.lengths) == [7] * 7
    np.testing.assert_allclose(episodes.returns, 7.0)  # reward 1 a step, as it stood
    # quotas 3, 2, 2: the first env played 3 episodes of 7 steps, each after its own reset
    assert episodes.n_steps == 3 * 7 * 3
    last = seen[-1]
    np.testing.assert_array_equal(last[:, 0], [6, 6, 6])  # 7 steps into its third episode
    np.testing.assert_array_equal(last[:, 1], [2, 2, 2])  # two resets of its own
    np.testing.assert_array_equal(last[:, 2], [10, 11, 12])  # each env's seeded stream
    assert progress[-1] == (63, 7) and len(progress) == 21  # after every vector step


def test_a_vector_env_that_cannot_reset_one_env_plays_the_cut_episode_on_uncounted():
    """CartPole's own vector env resets all or nothing: a cut episode plays on to its own end,
    uncounted, and the collection still counts exactly its quotas."""
    envs = make_vector_env(EnvConfig(name="test", id="CartPole-v1", num_train_envs=1,
                                     num_test_envs=3), 3)
    try:
        collector = Collector(envs)
        assert collector.next_step_mode
        collector.reset(seed=0)
        # a policy that balances the pole for the whole time limit (500 steps)
        episodes = collector.collect(
            lambda obs: (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64), n_episodes=4,
            quota=True, max_episode_steps=30)
    finally:
        envs.close()
    assert episodes.n_cut == 4 and list(episodes.lengths) == [30] * 4
    assert episodes.n_steps > 500 * 3  # the first env's cut episode played on to its end


def test_the_cap_and_the_test_steps_progress_reach_the_record_and_the_loggers():
    params = onpolicy(max_epochs=1, epoch_num_steps=20, collection_step_num_env_steps=20,
                      test_step_num_episodes=3, test_step_max_episode_steps=3)
    built = Built(ppo(), params, env_id=COUNTER_ID, num_test_envs=2)
    seen = StepsSeen()
    built.trainer.loggers.append(seen)
    try:
        stats = next(built.trainer)
    finally:
        built.close()
    assert stats.test.n_cut == 3 and stats.test.length_mean == 3
    assert stats.test.return_mean == pytest.approx(3.0)  # cut at 3 of the Counter's 5 steps
    assert stats.train.n_cut == 0  # the cap is the test step's alone
    assert seen.started == [(1, 3)] and seen.progress[-1] == (12, 3)


def test_an_epoch_runs_whole_collection_steps_and_says_so():
    """Issue 45: an epoch of 512 env steps on a collection step of 2,048 promised 512 and ran
    2,048. The trainer tells the loggers and the header what runs."""
    params = onpolicy(max_epochs=1, epoch_num_steps=10, collection_step_num_env_steps=48)
    built = Built(ppo(), params)
    seen = StepsSeen()
    built.trainer.loggers.append(seen)
    try:
        assert built.trainer.epoch_steps() == 48
        assert built.trainer.epoch_steps_note() == (
            "trainer.epoch_num_steps=10 rounded up to 1 whole collection step of 48")
        stats = next(built.trainer)
    finally:
        built.close()
    assert seen.epochs == [(1, 48)] and stats.env_step == 48
    exact = Built(ppo(), onpolicy(epoch_num_steps=96, collection_step_num_env_steps=48))
    assert exact.trainer.epoch_steps_note() == "" and exact.trainer.epoch_steps() == 96
    exact.close()
    episodes = Built(ppo(), onpolicy(epoch_num_steps=96, collection_step_num_env_steps=None,
                                     collection_step_num_episodes=2))
    assert episodes.trainer.epoch_steps_note() == (
        "at least trainer.epoch_num_steps=96: whole collection steps of 2 episodes")
    episodes.close()


def test_the_test_step_cap_is_checked():
    with pytest.raises(ConfigError, match=r"trainer\.test_step_max_episode_steps must be > 0"):
        onpolicy(test_step_max_episode_steps=0).check()
