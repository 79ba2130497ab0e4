"""Recurrent policies (rltrain.nets.recurrent, algo=ppo_lstm): how rollouts become sequences, that a
state is reset where an episode starts (in the collector and in the update's replay alike),
that the update replays exactly the states the collector acted with, the velocity-masked envs,
exact resume with the train envs' states in the checkpoint, and the deployable policy's state
through rltrain-eval and rltrain-export (ONNX against torch over whole episodes)."""

from __future__ import annotations

import dataclasses
import json
import signal
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

import toy_envs  # noqa: F401 - registers the toy envs
from algo_helpers import learnable
from conftest import (
    command,
    learning_records,
    mid_epoch_delay,
    refusal,
    resume_in_process,
    run_in_process,
    signal_when,
)
from rltrain.algorithms.ppo_lstm import PPOLSTM, PPOLSTMConfig
from rltrain.algorithms.registry import ALGORITHMS
from rltrain.commands import collect, evaluate, export
from rltrain.common.types import Progress
from rltrain.config.schemas import ConfigError
from rltrain.data.batch import Rollout
from rltrain.data.collector import Collector
from rltrain.data.fields import Field
from rltrain.data.reading import transformed
from rltrain.data.storage import ReplayBuffer
from rltrain.envs.vector import space_info
from rltrain.envs.wrappers import MaskVelocity
from rltrain.nets.recurrent import (
    RNN_KINDS,
    STATE_FIELD,
    RecurrentCore,
    RecurrentPolicy,
    episode_starts,
    sequence_chunks,
)
from rltrain.rundir.checkpoint import load_checkpoint
from rltrain.trainers import OnPolicyTrainer
from toy_envs import COUNTER_ID, COUNTER_T

MODES = [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP]
CPU = torch.device("cpu")
#: a small, quick ppo_lstm for whole runs
TINY = ["algo=ppo_lstm", "algo.rnn_hidden_size=16", "algo.hidden_sizes=[16]",
        "trainer.collection_step_num_env_steps=128", "trainer.batch_size=64",
        "trainer.update_step_num_repetitions=2", "logger.tensorboard=false",
        "logger.progress_bar=false"]


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as rltrain runs (torch_threads=1): a recurrent unroll is hundreds of
    small ops, which a second thread on a busy machine slows down by orders of magnitude."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_envs(env_id: str, num_envs: int, mode: AutoresetMode) -> gym.vector.VectorEnv:
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": mode})


# --------------------------------------------------------------------------- sequences
def test_episode_starts_are_the_transitions_after_a_done():
    dones = np.array([[0, 1, 0, 0, 1, 0],
                      [1, 0, 0, 0, 0, 1]], dtype=bool)
    np.testing.assert_array_equal(episode_starts(dones), [[0, 0, 1, 0, 0, 1],
                                                          [0, 1, 0, 0, 0, 0]])


def test_sequence_chunks_cut_each_lane_and_mask_what_is_not_stored():
    valid = np.array([[1] * 7, [1] * 5 + [0] * 2, [0] * 7], dtype=bool)  # 3 lanes, T = 7
    index, mask = sequence_chunks(valid, 3)
    # lane 0: [0 1 2] [3 4 5] [6 + padding]; lane 1 (5 stored): [7 8 9] [10 11 (12)], its
    # third chunk holds nothing; lane 2 holds nothing
    np.testing.assert_array_equal(index, [[0, 1, 2], [3, 4, 5], [6, 6, 6], [7, 8, 9],
                                          [10, 11, 12]])
    np.testing.assert_array_equal(mask, [[1, 1, 1], [1, 1, 1], [1, 0, 0], [1, 1, 1],
                                         [1, 1, 0]])
    index, mask = sequence_chunks(valid[:1, :4], 32)  # longer than the lanes: whole lanes
    np.testing.assert_array_equal(index, [[0, 1, 2, 3]])
    assert mask.all()


# --------------------------------------------------------------------------- cores
@pytest.mark.parametrize("kind", RNN_KINDS)
def test_fused_sequences_equal_the_step_by_step_unroll(kind):
    """The gradient passes (one fused call, sequences cut at episode starts and padded) give
    the outputs of the step-by-step replay, resets anywhere, a row's first step included."""
    torch.manual_seed(0)
    core = RecurrentCore(kind, 3, 5)
    x, state = torch.randn(4, 7, 3), torch.randn(4, core.state_size)
    keep = torch.ones(4, 7)
    keep[0, 3] = keep[2, 1] = keep[2, 5] = keep[3, 0] = 0
    for k in (keep, torch.ones(4, 7)):
        out, _ = core.unroll(x, state, k)
        torch.testing.assert_close(core.sequences(x, state, k), out, rtol=0, atol=1e-6)


@pytest.mark.parametrize("kind", RNN_KINDS)
def test_a_step_after_an_episode_start_forgets_everything_before(kind):
    """From a reset on, the outputs are those of a fresh sequence from the initial state:
    what came before the reset (other inputs, another state) changes nothing."""
    torch.manual_seed(1)
    core = RecurrentCore(kind, 2, 4)
    x = torch.randn(1, 6, 2)
    keep = torch.ones(1, 6)
    keep[0, 3] = 0
    a, _ = core.unroll(x, torch.randn(1, core.state_size), keep)
    other = x.clone()
    other[0, :3] = torch.randn(3, 2)
    b, _ = core.unroll(other, torch.randn(1, core.state_size), keep)
    fresh, _ = core.unroll(x[:, 3:], torch.zeros(1, core.state_size), torch.ones(1, 3))
    torch.testing.assert_close(a[:, 3:], fresh, rtol=0, atol=0)
    torch.testing.assert_close(b[:, 3:], fresh, rtol=0, atol=0)
    assert not torch.allclose(a[:, :3], b[:, :3])


def small_ppo_lstm(info, **fields) -> PPOLSTM:
    cfg = PPOLSTMConfig(rnn_hidden_size=8, hidden_sizes=[8], **fields)
    cfg.check()
    return PPOLSTM(cfg, info, CPU, 0)


@pytest.mark.parametrize("kind", RNN_KINDS)
@pytest.mark.parametrize("shared_core", [False, True])
def test_the_update_replays_the_initial_state_after_each_done(kind, shared_core):
    """A hand-built rollout: lane 0's episode ends at step 2 (terminated) and lane 1's at step
    4 (truncated); each lane starts from a state of its episode in flight. In the update's
    replay the state of the transition after each done is the initial state (zeros), the
    first transition's is the lane's start state, and every other state is not zeros."""
    envs = make_envs("CartPole-v1", 1, AutoresetMode.SAME_STEP)
    info = space_info(envs, "CartPole-v1", 500, 475.0)
    envs.close()
    algo = small_ppo_lstm(info, rnn=kind, shared_core=shared_core)
    rng = np.random.default_rng(0)
    lanes, t = 2, 7
    terminated = np.zeros((lanes, t), bool)
    truncated = np.zeros((lanes, t), bool)
    terminated[0, 2] = truncated[1, 4] = True
    start = rng.normal(size=(lanes, algo.state_size)).astype(np.float32)
    rollout = Rollout(obs=rng.normal(size=(lanes, t, 4)).astype(np.float32),
                      act=rng.integers(2, size=(lanes, t)),
                      rew=np.ones((lanes, t), np.float32),
                      next_obs=rng.normal(size=(lanes, t, 4)).astype(np.float32),
                      terminated=terminated, truncated=truncated,
                      valid=np.ones((lanes, t), bool),
                      # the state stored with each transition: the replay starts from the first
                      fields={STATE_FIELD: np.concatenate(
                          [start[:, None], np.full((lanes, t - 1, algo.state_size), 9.0,
                                                   np.float32)], 1)})
    states = algo.replayed_states(rollout)
    without = dataclasses.replace(rollout, fields={})
    with pytest.raises(ValueError, match="replays each lane from the state stored with its "
                                         "first transition"):
        algo.replayed_states(without)  # never from zeros, silently
    np.testing.assert_array_equal(states[0, 3], 0.0)
    np.testing.assert_array_equal(states[1, 5], 0.0)
    np.testing.assert_array_equal(states[:, 0], start)
    zero = (states == 0).all(-1)
    assert zero.sum() == 2, zero
    # and the update learns from it
    report = algo.update(learnable(algo, rollout), batch_size=None, repetitions=2,
                         progress=Progress(0, 0, 0.0))
    assert report.gradient_steps == 2


# --------------------------------------------------------------------------- collector
def counting_policy(record: list) -> RecurrentPolicy:
    """Each step adds 1 to each env's state: the state an env is acted on with is the number
    of steps since its episode began (if the collector resets it there). Records (step count
    in the observation, state) per step."""
    def step(obs: np.ndarray, state: torch.Tensor) -> tuple[np.ndarray, torch.Tensor]:
        record.append((obs[:, 0].copy(), state[:, 0].numpy().copy()))
        return np.zeros(len(obs), np.int64), state + 1

    return RecurrentPolicy(step, 1)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_the_collector_resets_each_envs_memory_where_its_episode_starts(mode):
    """The Counter env's observation counts the steps of its episode: the state of every step
    equals it, in both autoreset modes (next-step: the reset step acts on the final
    observation, T, with the state T), across collections."""
    envs = make_envs(COUNTER_ID, 3, mode)
    buffer = ReplayBuffer(3, 64, (3,), (), np.int64, circular=False,
                          fields=(Field(STATE_FIELD, (1,), np.dtype(np.float32)),))
    collector = Collector(envs, buffer)
    collector.reset(seed=0)
    seen: list = []
    for n in (7, 11, 4):
        buffer.clear()
        collector.collect(counting_policy(seen), n_steps=3 * n)
        rollout = buffer.rollout()
        # the state each stored transition was acted on with, stored beside it
        stored = rollout.fields[STATE_FIELD][..., 0]
        np.testing.assert_array_equal(stored[rollout.valid], rollout.obs[..., 0][rollout.valid])
    assert len(seen) == 22
    for count, state in seen:
        np.testing.assert_array_equal(state, count)
    assert max(c.max() for c, _ in seen) == (COUNTER_T if mode is AutoresetMode.NEXT_STEP
                                             else COUNTER_T - 1)
    with pytest.raises(TypeError, match="acts with each env's state"):
        counting_policy(seen)(np.zeros((3, 3), np.float32))


def test_the_collectors_memory_is_part_of_its_state():
    """A collector restored from another's state dict continues with its memory: the states
    it acts with are the unbroken collector's."""
    runs = []
    for restart in (False, True):
        envs = make_envs(COUNTER_ID, 2, AutoresetMode.SAME_STEP)
        collector = Collector(envs)
        collector.reset(seed=3)
        seen: list = []
        collector.collect(counting_policy(seen), n_steps=2 * 3)
        if restart:
            state = collector.state_dict()
            assert state["memory"].tolist() == [[3.0], [3.0]]
            collector = Collector(make_envs(COUNTER_ID, 2, AutoresetMode.SAME_STEP))
            collector.reset(seed=99)
            assert collector.load_state_dict(state, seed=99) == []
        collector.collect(counting_policy(seen), n_steps=2 * 6)
        runs.append([s.tolist() for _, s in seen])
    assert runs[0] == runs[1]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_the_update_replays_the_states_the_collector_acted_with(mode):
    """ppo_lstm collecting CartPole (short random episodes, so resets inside rollouts and
    episodes across them): for every stored transition, the state the update's replay gives is
    the one the collector's policy acted on it with."""
    envs = make_envs("CartPole-v1", 3, mode)
    info = space_info(envs, "CartPole-v1", 500, 475.0)
    algo = small_ppo_lstm(info)
    buffer = ReplayBuffer(3, 64, info.obs_shape, (), np.int64, circular=False,
                          fields=ALGORITHMS["ppo_lstm"].stored_fields(algo.cfg, info))
    collector = Collector(envs, buffer)
    collector.reset(seed=1)
    for _ in range(3):
        policy = algo.policy(Progress(0, 0, 0.0))
        assert isinstance(policy, RecurrentPolicy)
        acted: list = []

        def recording(obs, state, policy=policy, acted=acted):
            acted.append((obs.copy(), state.clone()))
            return policy.step(obs, state)

        buffer.clear()
        collector.collect(RecurrentPolicy(recording, policy.state_size), n_steps=3 * 40)
        rollout = buffer.rollout()
        replayed = algo.replayed_states(rollout)
        for lane in range(3):
            steps = [(o[lane], s[lane].numpy()) for o, s in acted]
            k = 0
            for pos in range(int(rollout.valid[lane].sum())):
                while not np.array_equal(steps[k][0], rollout.obs[lane, pos]):
                    k += 1  # a reset step (next-step autoreset): not stored
                np.testing.assert_allclose(replayed[lane, pos], steps[k][1], rtol=0, atol=1e-6)
                k += 1
            if mode is AutoresetMode.SAME_STEP:
                assert k == len(steps) == 40
        algo.update(transformed(rollout, algo.transforms(), buffer), batch_size=64,
                    repetitions=1, progress=Progress(0, 0, 0.0))
    envs.close()


# --------------------------------------------------------------------------- settings
def test_settings_that_cannot_work_are_refused_by_name():
    with pytest.raises(ConfigError, match=r"^algo\.rnn must be lstm or gru, got 'rnn'$"):
        PPOLSTMConfig(rnn="rnn").check()
    with pytest.raises(ConfigError, match=r"algo\.seq_len must be > 0, got 0"):
        PPOLSTMConfig(seq_len=0).check()
    with pytest.raises(ConfigError, match=r"algo\.shared_core=true .* algo\.share_encoder=false"):
        PPOLSTMConfig(shared_core=True, share_encoder=False).check()
    params = OnPolicyTrainer.params_type(batch_size=16)
    with pytest.raises(ConfigError, match=r"^trainer\.batch_size=16 is smaller than "
                                          r"algo\.seq_len=32: .*raise trainer\.batch_size or "
                                          r"lower algo\.seq_len$"):
        OnPolicyTrainer.check(params, PPOLSTMConfig(), 8, 100)
    OnPolicyTrainer.check(params, PPOLSTMConfig(seq_len=16), 8, 100)
    OnPolicyTrainer.check(OnPolicyTrainer.params_type(batch_size=None), PPOLSTMConfig(), 8, 100)


def test_the_command_refuses_a_minibatch_smaller_than_a_sequence(tmp_path):
    message = refusal(tmp_path / "run", "algo=ppo_lstm", "trainer.batch_size=16")
    assert "Traceback" not in message
    assert "trainer.batch_size=16 is smaller than algo.seq_len=32" in message


# --------------------------------------------------------------------------- envs
def test_mask_velocity_drops_cartpoles_velocities():
    env = MaskVelocity(gym.make("CartPole-v1"))
    assert env.observation_space.shape == (2,)
    full = gym.make("CartPole-v1").observation_space
    np.testing.assert_array_equal(env.observation_space.high, full.high[[0, 2]])
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        state = np.array(env.unwrapped.state, dtype=np.float32)
        np.testing.assert_array_equal(obs, state[[0, 2]])  # position, angle
        obs, *_ = env.step(1)
    pendulum = MaskVelocity(gym.make("Pendulum-v1"))
    assert pendulum.observation_space.shape == (2,)  # cos, sin; the angular velocity dropped
    named = MaskVelocity(gym.make("Acrobot-v1"), indices=[4, 5])
    assert named.observation_space.shape == (4,)


@pytest.mark.parametrize(("env_id", "indices", "message"), [
    ("Acrobot-v1", None, "knows the velocities of CartPole, MountainCar"),
    ("CartPole-v1", [4], "must name some, not all, of the observation's 4 entries"),
    ("CartPole-v1", [0, 1, 2, 3], "must name some, not all"),
])
def test_mask_velocity_refuses_what_it_cannot_mask(env_id, indices, message):
    with pytest.raises(gym.error.Error, match=message):
        MaskVelocity(gym.make(env_id), indices=indices)


# --------------------------------------------------------------------------- the commands
@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny trained runs: an LSTM on CartPole without velocities (discrete), a GRU on
    Pendulum without velocities (continuous)."""
    root = tmp_path_factory.mktemp("recurrent")
    cases = {"lstm": ["env=cartpole_novel"],
             "gru": ["env=pendulum_novel", "algo.rnn=gru", "env.normalize.obs=true"]}
    out = {}
    for name, args in cases.items():
        run_in_process(root / name, "experiment=smoke", *TINY, *args,
                       "trainer.epoch_num_steps=256", "trainer.max_epochs=1")
        out[name] = root / name
    return out


@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_eval_threads_the_state_through_its_episodes(runs, tmp_path, name):
    res = command(evaluate.main, runs[name], "--episodes", "3")
    assert res.returncode == 0, res.stderr
    report = json.loads((runs[name] / "eval.json").read_text())
    assert report["algo"] == "ppo_lstm" and report["episodes"] == 3
    if name == "lstm":
        assert all(1 <= n <= 500 for n in report["lengths"])
    else:
        assert report["lengths"] == [200, 200, 200]  # Pendulum's time limit


@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_export_takes_and_returns_the_state_and_matches_torch_over_episodes(runs, tmp_path,
                                                                           name):
    """The graph's inputs are the observation and the state, its outputs the action and the
    next state; rltrain-export's own check runs whole episodes; and here an episode of the
    env stepped by the graph alone, its state fed back, acts as the torch policy does."""
    import onnxruntime as ort

    from rltrain.assembly.orchestrator import open_run

    out = tmp_path / "policy.onnx"
    res = command(export.main, runs[name], "--out", out)
    assert res.returncode == 0, res.stderr
    assert "onnxruntime check over whole episodes: ONNX matches torch" in res.stdout
    state_names = ["h", "c"] if name == "lstm" else ["h"]
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs", *state_names]
    assert [o.name for o in session.get_outputs()] == [
        "action", *(f"{n}_next" for n in state_names)]

    loaded = open_run(runs[name], "best")
    policy = loaded.policy
    env = MaskVelocity(gym.make("CartPole-v1" if name == "lstm" else "Pendulum-v1"))
    for episode in range(2):
        obs, _ = env.reset(seed=episode)
        ours = [np.zeros((1, 16), np.float32) for _ in state_names]
        torch_state = policy.initial_state(1)
        steps = 0
        while True:
            x = obs[None].astype(np.float32)
            got, *ours = session.run(None, {"obs": x, **dict(zip(state_names, ours, strict=True))})
            with torch.inference_mode():
                want, *torch_state = policy.step(torch.from_numpy(x), *torch_state)
            if name == "lstm":
                np.testing.assert_array_equal(got, want.numpy())
            else:
                np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)
            for a, b in zip(ours, torch_state, strict=True):
                np.testing.assert_allclose(a, b.numpy(), rtol=1e-4, atol=1e-5)
            obs, _, terminated, truncated, _ = env.step(got[0])
            steps += 1
            if terminated or truncated:
                break
        assert steps > 1


@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_collect_threads_each_envs_state_through_its_episodes(runs, tmp_path, name):
    """rltrain-collect with a policy with memory: replaying the dataset's observations through
    the deployable policy, its state carried within each episode and zeroed at each start,
    gives back every action collected (GRU: Pendulum's actions to float tolerance). The same
    observations acted on from a zero state each step give other actions: the state matters."""
    from rltrain.assembly.orchestrator import open_run
    from rltrain.data.datasets.sources import load_dataset

    out = tmp_path / "data.h5"
    res = command(collect.main, runs[name], "--episodes", "4", "--out", out)
    assert res.returncode == 0, res.stderr
    ds = load_dataset(str(out))
    assert ds.num_episodes == 4
    policy = open_run(runs[name], "best").policy
    replayed, stateless = [], []
    with torch.inference_mode():
        for t in range(len(ds)):
            x = torch.from_numpy(ds.obs[t : t + 1])
            if t == 0 or ds.dones[t - 1]:
                state = policy.initial_state(1)
            action, *state = policy.step(x, *state)
            replayed.append(action.numpy()[0])
            stateless.append(policy.step(x, *policy.initial_state(1))[0].numpy()[0])
    if name == "lstm":
        np.testing.assert_array_equal(np.array(replayed), ds.act)
    else:
        np.testing.assert_allclose(np.array(replayed), ds.act, rtol=1e-5, atol=1e-5)
    assert not np.allclose(np.array(stateless), ds.act)
    noisy = tmp_path / "noisy.h5"
    res = command(collect.main, runs[name], "--episodes", "2", "--noise", "0.3", "--out", noisy)
    assert res.returncode == 0, res.stderr
    assert load_dataset(str(noisy)).meta["policy"]["noise"] == 0.3


def test_sigterm_then_resume_equals_unbroken_run_with_the_states_in_flight(tmp_path):
    """The train envs' states are in the checkpoint: a run stopped mid-epoch and resumed
    writes the records of an unbroken run (with a zeroed memory the resumed episodes would be
    acted on differently)."""
    full, broken = tmp_path / "full", tmp_path / "broken"
    args = [*TINY, "env=cartpole_novel", "trainer.max_epochs=3", "trainer.epoch_num_steps=3072",
            "trainer.stop_score=null", "seed=1", "env.num_test_envs=5",
            "trainer.test_step_num_episodes=5"]
    run_in_process(full, *args)

    delay = mid_epoch_delay(full)

    def into_epoch_two(line: str) -> bool:
        """Epoch 1's line, then part of epoch 2: epoch 2 is under way."""
        if not line.startswith("epoch   1/"):
            return False
        time.sleep(delay)
        return True

    res = signal_when([*args, f"hydra.run.dir={broken}"], tmp_path, into_epoch_two,
                      signal.SIGTERM)
    assert res.returncode == 143, res.stderr
    ckpt = load_checkpoint(broken / "checkpoints" / "last.pt")
    assert ckpt["trainer"]["partial"] is not None, "the signal did not land mid-epoch"
    memory = ckpt["collectors"]["train"]["memory"]
    assert memory.shape == (8, 2 * 2 * 16)  # actor's and critic's h and c, per train env
    assert memory.abs().sum() > 0

    assert resume_in_process(broken) == (0, [])
    assert learning_records(broken) == learning_records(full)
