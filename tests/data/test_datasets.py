"""Offline-RL datasets: files (.h5, .hdf5, .npz), Minari's local storage, space checks, the
replay buffers they fill and come from, and `rltrain-collect` (its own function, in this
process, on tiny runs trained here).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from conftest import command, run_cli, run_in_process, run_tool, tmpfs
from rltrain.commands import collect as collect_command
from rltrain.config.schemas import ConfigError
from rltrain.data.datasets.dataset import ARRAYS, Dataset, make_dataset, new_meta
from rltrain.data.datasets.files import save_dataset
from rltrain.data.datasets.replay import from_replay_buffer, to_buffer
from rltrain.data.datasets.sources import dataset_fingerprint, load_dataset
from rltrain.data.datasets.spaces import describe_space
from rltrain.data.datasets.validation import check_spaces
from rltrain.data.reading import read
from rltrain.data.samplers.uniform import UniformSampler
from rltrain.data.storage import ReplayBuffer
from rltrain.data.transforms.nstep import NStepReturns
from rltrain.spaces.actions import to_agent, to_env

PENDULUM_ACTIONS = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
PENDULUM_OBS = gym.spaces.Box(np.array([-1, -1, -8], np.float32),
                              np.array([1, 1, 8], np.float32), (3,), np.float32)


def episodes_dataset(lengths: list[int], *, discrete: bool = False, last_done: bool = True,
                     terminated_every: int = 2) -> Dataset:
    """Episodes whose observations say where they are: obs = (episode, step), next_obs =
    (episode, step + 1), reward episode * 100 + step. Every ``terminated_every``-th episode
    terminates, the others are truncated; with ``last_done=False`` the last one is left
    open."""
    obs, rew, term, trunc = [], [], [], []
    for e, n in enumerate(lengths):
        for t in range(n):
            obs.append((e, t))
            rew.append(e * 100 + t)
            end = t == n - 1 and (last_done or e < len(lengths) - 1)
            term.append(end and e % terminated_every == 0)
            trunc.append(end and e % terminated_every != 0)
    obs = np.array(obs, np.float32)
    next_obs = obs + np.array([0, 1], np.float32)
    n = len(obs)
    rng = np.random.default_rng(0)
    if discrete:
        act = rng.integers(3, size=n)
        act_space = gym.spaces.Discrete(3)
    else:
        act = rng.uniform(-2, 2, size=(n, 1)).astype(np.float32)
        act_space = PENDULUM_ACTIONS
    obs_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    meta = new_meta(env_id="Test-v0", env_kwargs={}, observation_space=describe_space(obs_space),
                    action_space=describe_space(act_space), policy={"kind": "random"},
                    source="test")
    return make_dataset(obs, act, np.array(rew, np.float32), next_obs, np.array(term),
                        np.array(trunc), meta)


def assert_same(a: Dataset, b: Dataset) -> None:
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert np.array_equal(x, y), name


# ---- files


@pytest.mark.parametrize("suffix", [".h5", ".hdf5", ".npz"])
@pytest.mark.parametrize("discrete", [False, True])
def test_round_trip(tmp_path: Path, suffix: str, discrete: bool) -> None:
    ds = episodes_dataset([5, 3, 4000], discrete=discrete)
    ds.obs[0, 0] = np.float32(1 / 3)  # a value that a lossy write would change
    path = save_dataset(ds, tmp_path / f"data{suffix}")
    assert not list(tmp_path.glob(".*tmp"))  # the temporary file was renamed
    back = load_dataset(str(path))
    assert_same(ds, back)
    assert back.meta == json.loads(json.dumps(ds.meta))
    assert back.meta["observation_space"]["low"] == ["-inf", "-inf"]  # strict JSON
    assert back.meta["episode_returns"] == [0 + 1 + 2 + 3 + 4, 100 + 101 + 102,
                                            sum(200 + t for t in range(4000))]
    assert back.meta["episode_returns"] == [float(r) for r in back.episode_returns()]
    assert back.episode_lengths().tolist() == [5, 3, 4000]
    summary = back.summary()
    assert (summary["transitions"], summary["episodes"]) == (4008, 3)


def test_a_file_holds_the_fields_in_their_order(tmp_path: Path) -> None:
    """ARRAYS is read from Dataset's fields, and a file's arrays follow it: a field added to
    the type or moved there would change the format (format_version 1), which this pins."""
    assert ARRAYS == ("obs", "act", "rew", "next_obs", "terminated", "truncated")
    path = save_dataset(episodes_dataset([3, 2]), tmp_path / "data.npz")
    with np.load(path) as z:
        assert z.files == [*ARRAYS, "meta"]
    h5py = pytest.importorskip("h5py")
    path = save_dataset(episodes_dataset([3, 2]), tmp_path / "data.h5")
    with h5py.File(path, "r") as f:
        assert sorted(f) == sorted(ARRAYS) and f.attrs["format"] == "rltrain-dataset"


def test_episode_returns() -> None:
    ds = episodes_dataset([2, 3])
    assert ds.episode_returns().tolist() == [0 + 1, 100 + 101 + 102]
    assert ds.num_episodes == 2


def test_last_transition_closes_an_episode() -> None:
    ds = episodes_dataset([2, 3], last_done=False)
    assert ds.truncated[-1] and not ds.terminated[-1]
    assert ds.episode_lengths().tolist() == [2, 3]


def test_unknown_suffix(tmp_path: Path) -> None:
    ds = episodes_dataset([2])
    with pytest.raises(ConfigError, match=r"'\.csv'.*\.h5, \.hdf5.*\.npz"):
        save_dataset(ds, tmp_path / "data.csv")
    assert not list(tmp_path.iterdir())
    (tmp_path / "data.pkl").write_bytes(b"x")
    with pytest.raises(ConfigError, match=r"data\.pkl.*'\.pkl'"):
        load_dataset(str(tmp_path / "data.pkl"))


def _one_line(e: pytest.ExceptionInfo, *needles: str) -> None:
    text = str(e.value)
    assert "\n" not in text
    for needle in needles:
        assert needle in text, text


def test_load_errors(tmp_path: Path) -> None:
    ds = episodes_dataset([3, 2])
    good = save_dataset(ds, tmp_path / "good.h5")
    arrays = {name: getattr(ds, name) for name in ARRAYS}
    meta = np.array(json.dumps(ds.meta))

    with pytest.raises(ConfigError) as e:
        load_dataset(str(tmp_path / "missing.h5"))
    _one_line(e, "missing.h5", "does not exist")

    (tmp_path / "text.h5").write_text("not a dataset\n")
    with pytest.raises(ConfigError) as e:
        load_dataset(str(tmp_path / "text.h5"))
    _one_line(e, "text.h5", "not a readable HDF5 file")

    data = good.read_bytes()
    (tmp_path / "cut.h5").write_bytes(data[: len(data) // 2])
    with pytest.raises(ConfigError) as e:
        load_dataset(str(tmp_path / "cut.h5"))
    _one_line(e, "cut.h5", "damaged or truncated")

    (tmp_path / "cut.npz").write_bytes(b"PK\x03\x04" + b"\0" * 40)
    with pytest.raises(ConfigError) as e:
        load_dataset(str(tmp_path / "cut.npz"))
    _one_line(e, "cut.npz", "not a readable .npz")

    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(ConfigError) as e:
        load_dataset(str(tmp_path / "other.npz"))
    _one_line(e, "other.npz", "not an rltrain dataset", "rltrain-collect")

    np.savez(tmp_path / "noact.npz", **{k: v for k, v in arrays.items() if k != "act"},
             meta=meta)
    with pytest.raises(ConfigError) as e:
        load_dataset(str(tmp_path / "noact.npz"))
    _one_line(e, "noact.npz", "no act array")

    np.savez(tmp_path / "short.npz", **{**arrays, "rew": arrays["rew"][:-1]}, meta=meta)
    with pytest.raises(ConfigError) as e:
        load_dataset(str(tmp_path / "short.npz"))
    _one_line(e, "short.npz", "unequal length", "rew 4", "obs 5")

    bad_obs = arrays["obs"].copy()
    bad_obs[3, 1] = np.nan
    np.savez(tmp_path / "nan.npz", **{**arrays, "obs": bad_obs}, meta=meta)
    with pytest.raises(ConfigError) as e:
        load_dataset(str(tmp_path / "nan.npz"))
    _one_line(e, "nan.npz", "non-finite", "obs", "transition 3")

    np.savez(tmp_path / "nometa.npz", **arrays)
    with pytest.raises(ConfigError) as e:
        load_dataset(str(tmp_path / "nometa.npz"))
    _one_line(e, "nometa.npz", "no meta")

    np.savez(tmp_path / "badact.npz", **{**arrays, "act": arrays["act"][:, 0]}, meta=meta)
    with pytest.raises(ConfigError) as e:
        load_dataset(str(tmp_path / "badact.npz"))
    _one_line(e, "badact.npz", "act of shape", "Box")


# ---- spaces


def test_what_training_reads_is_in_the_file_the_hash_covers(tmp_path: Path) -> None:
    """An array linked to another file, kept in external storage or as a virtual dataset
    could change while the dataset's SHA-256 stays the same: each is refused by name."""
    h5py = pytest.importorskip("h5py")
    ds = episodes_dataset([3, 2])
    other = save_dataset(ds, tmp_path / "other.h5")
    raw = tmp_path / "rew.bin"
    raw.write_bytes(ds.rew.tobytes())
    cases = {}
    for name in ("external_link", "soft_link", "external_storage", "virtual"):
        path = save_dataset(ds, tmp_path / f"{name}.h5")
        with h5py.File(path, "a") as f:
            del f["rew"]
            if name == "external_link":
                f["rew"] = h5py.ExternalLink(str(other), "rew")
            elif name == "soft_link":
                f["spare"] = ds.rew
                f["rew"] = h5py.SoftLink("/spare")
            elif name == "external_storage":
                f.create_dataset("rew", shape=ds.rew.shape, dtype=ds.rew.dtype,
                                 external=[(str(raw), 0, ds.rew.nbytes)])
            else:
                layout = h5py.VirtualLayout(shape=ds.rew.shape, dtype=ds.rew.dtype)
                layout[:] = h5py.VirtualSource(str(other), "rew", shape=ds.rew.shape)
                f.create_virtual_dataset("rew", layout)
        cases[name] = path
    expected = {"external_link": f"its rew array is a link to {other}:rew",
                "soft_link": "its rew array is a link to /spare",
                "external_storage": "its rew array uses external storage",
                "virtual": "its rew array uses a virtual dataset"}
    for name, path in cases.items():
        with pytest.raises(ConfigError) as e:
            load_dataset(str(path))
        _one_line(e, f"dataset {path}", expected[name], "its SHA-256 must cover")


def test_values_beyond_float32_are_refused_by_field(tmp_path: Path) -> None:
    ds = episodes_dataset([3, 2])
    for name in ("rew", "obs"):
        arrays = {n: getattr(ds, n).astype(np.float64) if n in ("obs", "next_obs", "act", "rew")
                  else getattr(ds, n) for n in ARRAYS}
        arrays[name].reshape(len(arrays[name]), -1)[2, 0] = 1e300
        path = tmp_path / f"{name}.npz"
        np.savez(path, **arrays, meta=np.array(json.dumps(ds.meta)))
        with pytest.raises(ConfigError) as e:
            load_dataset(str(path))
        _one_line(e, f"dataset {path} has {name} 1e+300 (transition 2), beyond float32's range")


def test_what_is_not_a_regular_file_is_refused_at_once(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "x.npz"
    os.mkfifo(fifo)  # reading it would block forever
    for spec, what in ((fifo, "is a FIFO"), ("/dev/null", "is a device"),
                       (tmp_path, "is a directory")):
        with pytest.raises(ConfigError) as e:
            load_dataset(str(spec))
        _one_line(e, f"dataset {spec} {what}; pass an .h5, .hdf5 or .npz file")


def test_meta_nested_too_deep_is_refused(tmp_path: Path) -> None:
    ds = episodes_dataset([3, 2])
    path = tmp_path / "deep.npz"
    np.savez(path, **{n: getattr(ds, n) for n in ARRAYS},
             meta=np.array("[" * 100_000 + "]" * 100_000))
    with pytest.raises(ConfigError) as e:
        load_dataset(str(path))
    _one_line(e, f"dataset {path} has a damaged meta record (JSON nested too deep")


def test_a_space_size_beyond_any_integer_is_refused(tmp_path: Path) -> None:
    """``n: 1e30`` in the meta's action space was 'could not start: OverflowError', exit 1."""
    ds = episodes_dataset([3, 2], discrete=True)
    path = tmp_path / "n.npz"
    meta = dict(ds.meta, action_space=dict(ds.meta["action_space"], n=1e30))
    np.savez(path, **{n: getattr(ds, n) for n in ARRAYS}, meta=np.array(json.dumps(meta)))
    with pytest.raises(ConfigError) as e:
        load_dataset(str(path))
    _one_line(e, f"dataset {path} has a damaged action_space in its meta")


def test_check_spaces() -> None:
    ds = episodes_dataset([3], discrete=True)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    check_spaces(ds, obs_space, gym.spaces.Discrete(3), "Test-v0", "data.h5")  # the same
    with pytest.raises(ConfigError) as e:
        check_spaces(ds, obs_space, PENDULUM_ACTIONS, "Pendulum-v1", "data.h5")
    _one_line(e, "dataset data.h5 (collected on Test-v0) has action space Discrete(3) but "
                 "Pendulum-v1 has "
                 "Box(-2.0, 2.0, (1,), float32); collect the dataset on the same env")
    with pytest.raises(ConfigError) as e:
        check_spaces(ds, obs_space, gym.spaces.Discrete(3, start=1), "X-v0", "data.h5")
    _one_line(e, "Discrete(3)", "Discrete(3, start=1)")
    with pytest.raises(ConfigError) as e:
        check_spaces(ds, PENDULUM_OBS, gym.spaces.Discrete(3), "Pendulum-v1", "d.npz")
    _one_line(e, "d.npz (collected on Test-v0) has observation space Box(-inf, inf, (2,), "
                 "float32) but Pendulum-v1 "
                 "has Box([-1, -1, -8], [1, 1, 8], (3,), float32)")

    box = episodes_dataset([3])
    check_spaces(box, obs_space, gym.spaces.Box(-2 + 1e-7, 2.0, (1,), np.float32), "E", "d")
    with pytest.raises(ConfigError, match="action space"):
        check_spaces(box, obs_space, gym.spaces.Box(-2.001, 2.0, (1,), np.float32), "E", "d")
    with pytest.raises(ConfigError, match="observation space"):
        check_spaces(box, gym.spaces.Box(-1e9, np.inf, (2,), np.float32), PENDULUM_ACTIONS,
                     "E", "d")


# ---- replay buffers


def test_to_buffer_continuous() -> None:
    lengths = [4, 1, 6, 3]
    ds = episodes_dataset(lengths, last_done=False)
    buffer = to_buffer(ds, discrete=False, action_low=PENDULUM_ACTIONS.low,
                       action_high=PENDULUM_ACTIONS.high)
    n = len(ds)
    assert (buffer.num_lanes, buffer.lane_capacity, len(buffer)) == (1, n, n)
    held = {name: codec.array for name, codec in buffer.codecs.items()}  # fields held whole
    assert np.array_equal(held["act"][0], to_agent(ds.act, PENDULUM_ACTIONS.low,
                                                   PENDULUM_ACTIONS.high))
    assert np.abs(held["act"]).max() <= 1.0 and np.abs(ds.act).max() > 1.0
    assert np.array_equal(held["obs"][0], ds.obs) and np.array_equal(held["rew"][0], ds.rew)
    dones = held["terminated"][0] | held["truncated"][0]
    assert np.flatnonzero(dones).tolist() == (np.cumsum(lengths) - 1).tolist()

    batch = read(buffer, *UniformSampler(0).sample(buffer, 4096), [NStepReturns(3, 1.0)])
    episode, step = batch.obs[:, 0].astype(int), batch.obs[:, 1].astype(int)
    assert np.array_equal(batch.next_obs[:, 0], batch.obs[:, 0])  # never the next episode
    last = np.array(lengths)[episode] - 1
    used = np.minimum(step + 2, last)  # the window stops at the episode's last transition
    expected = [sum(e * 100 + t for t in range(s, u + 1)) for e, s, u in
                zip(episode, step, used, strict=True)]
    assert np.array_equal(batch.rew, np.array(expected, np.float32))
    assert np.array_equal(batch.next_obs[:, 1], used + 1)
    terminated_end = (used == last) & (episode % 2 == 0)
    assert np.array_equal(batch.discount == 0, terminated_end)
    assert len(set(episode.tolist())) == len(lengths)  # every episode was sampled


def test_to_buffer_discrete() -> None:
    ds = episodes_dataset([3, 2], discrete=True)
    buffer = to_buffer(ds, discrete=True, action_low=None, action_high=None)
    act = buffer.codecs["act"].array
    assert act.dtype == np.int64 and np.array_equal(act[0], ds.act)
    with pytest.raises(ConfigError, match="discrete actions"):
        to_buffer(ds, discrete=False, action_low=PENDULUM_ACTIONS.low,
                  action_high=PENDULUM_ACTIONS.high)


def test_from_replay_buffer_wraps_in_time_order() -> None:
    """Lane 0 wrapped round (9 steps into 5 slots): its oldest entry is at ptr; lane 1 holds
    3 steps; every transition's obs is (lane, global step)."""
    low, high = np.array([-2.0], np.float32), np.array([2.0], np.float32)
    buffer = ReplayBuffer(2, 5, (2,), (1,), np.float32, circular=True)
    for t in range(9):
        valid = np.array([True, t < 3])
        obs = np.array([[0, t], [1, t]], np.float32)
        act = np.array([[t / 10 - 0.5], [0.99]], np.float32)
        terminated = np.array([t == 6, False])
        buffer.add(obs, act, np.array([t, 10 + t], np.float32), obs + [0, 1], terminated,
                   np.zeros(2, bool), valid)
    state = buffer.state_dict()
    before = {k: v.clone() for k, v in state.items() if k != "rng"}
    meta = new_meta(env_id="Test-v0", env_kwargs={},
                    observation_space=describe_space(gym.spaces.Box(-9, 9, (2,), np.float32)),
                    action_space=describe_space(PENDULUM_ACTIONS), policy={}, source="test")
    ds = from_replay_buffer(state, discrete=False, action_low=low, action_high=high, meta=meta)
    assert ds.obs.tolist() == [[0, t] for t in range(4, 9)] + [[1, t] for t in range(3)]
    assert ds.rew.tolist() == [4, 5, 6, 7, 8, 10, 11, 12]
    act = buffer.codecs["act"].array
    assert np.array_equal(ds.act, to_env(act[0][[4, 0, 1, 2, 3]].tolist()
                                         + act[1][:3].tolist(), low, high))
    assert ds.act[5:, 0].tolist() == pytest.approx([1.98] * 3)  # the env's own scale
    assert ds.terminated.tolist() == [0, 0, 1, 0, 0, 0, 0, 0]
    # each lane's last episode was still running: cut, so marked truncated
    assert ds.truncated.tolist() == [0, 0, 0, 0, 1, 0, 0, 1]
    assert ds.meta["episode_returns"] == [4 + 5 + 6, 7 + 8, 10 + 11 + 12]
    for key, value in before.items():  # the checkpoint's state is left as it was
        assert (state[key] == value).all(), key


# ---- Minari


@pytest.fixture
def minari_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A Minari dataset written by Minari itself into a temporary local storage, and what
    the env gave while it was recorded."""
    minari = pytest.importorskip("minari", reason="minari is not installed (extra: minari)")
    from minari.data_collector.episode_buffer import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    env = gym.make("CartPole-v1", max_episode_steps=15)
    env.action_space.seed(3)
    episodes = []
    for i in range(4):
        o, _ = env.reset(seed=i)
        ep = {"observations": [o], "actions": [], "rewards": [], "terminations": [],
              "truncations": []}
        while True:
            a = env.action_space.sample()
            o, r, term, trunc, _ = env.step(a)
            for key, value in (("observations", o), ("actions", a), ("rewards", r),
                               ("terminations", term), ("truncations", trunc)):
                ep[key].append(value)
            # the last episode is recorded in part: it neither terminates nor truncates
            if term or trunc or (i == 3 and len(ep["rewards"]) == 4):
                break
        episodes.append(ep)
    buffers = [EpisodeBuffer(id=i, infos={}, **ep) for i, ep in enumerate(episodes)]
    minari.create_dataset_from_buffers(
        "rltrain/cartpole-random-v0", buffers, env="CartPole-v1", algorithm_name="random",
        code_permalink="https://example.org/rltrain", author="rltrain tests",
        author_email="tests@example.org", description="rltrain's test dataset")
    return episodes


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_minari_dataset(minari_store: list[dict], tmp_path: Path) -> None:
    ds = load_dataset("minari:rltrain/cartpole-random-v0")
    obs = np.concatenate([np.array(ep["observations"][:-1]) for ep in minari_store])
    next_obs = np.concatenate([np.array(ep["observations"][1:]) for ep in minari_store])
    assert np.array_equal(ds.obs, obs) and np.array_equal(ds.next_obs, next_obs)
    assert ds.act.tolist() == [int(a) for ep in minari_store for a in ep["actions"]]
    assert ds.episode_lengths().tolist() == [len(ep["rewards"]) for ep in minari_store]
    assert ds.meta["episode_returns"] == [sum(ep["rewards"]) for ep in minari_store]
    assert ds.terminated.tolist() == [t for ep in minari_store for t in ep["terminations"]]
    truncated = [t for ep in minari_store for t in ep["truncations"]]
    truncated[-1] = True  # the partly recorded episode ends the dataset
    assert ds.truncated.tolist() == truncated
    assert any(ep["truncations"][-1] for ep in minari_store[:3])  # the time limit cut one
    assert ds.meta["env_id"] == "CartPole-v1" and ds.meta["source"] == \
        "minari:rltrain/cartpole-random-v0"
    check_spaces(ds, gym.make("CartPole-v1").observation_space, gym.spaces.Discrete(2),
                 "CartPole-v1", "minari:rltrain/cartpole-random-v0")

    fp = dataset_fingerprint("minari:rltrain/cartpole-random-v0")
    assert Path(fp["path"]) == tmp_path / "minari" / "rltrain" / "cartpole-random-v0"
    assert fp == dataset_fingerprint("minari:rltrain/cartpole-random-v0")
    with open(Path(fp["path"]) / "data" / "metadata.json", "a") as f:
        f.write(" ")
    assert dataset_fingerprint("minari:rltrain/cartpole-random-v0")["sha256"] != fp["sha256"]

    with pytest.raises(ConfigError) as e:
        load_dataset("minari:rltrain/cartpole-expert-v0")
    _one_line(e, "cartpole-expert-v0", "local datasets: rltrain/cartpole-random-v0")


def test_minari_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "minari", None)  # import minari raises ImportError
    with pytest.raises(ConfigError) as e:
        load_dataset("minari:D4RL/door/human-v2")
    _one_line(e, "minari:D4RL/door/human-v2", 'pip install -e ".[minari]"')


def test_fingerprint(tmp_path: Path) -> None:
    import hashlib

    path = save_dataset(episodes_dataset([3]), tmp_path / "d.npz")
    fp = dataset_fingerprint(str(path))
    assert fp == {"spec": str(path), "path": str(path.resolve()),
                  "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


# ---- rltrain-collect


def test_noise() -> None:
    """Gaussian noise of std X x half the range, clipped; epsilon-greedy with epsilon X;
    seeded."""
    from rltrain.commands.collect.sources import noisy

    obs = np.zeros((20_000, 3), np.float32)
    box = noisy(lambda o: np.full((len(o), 1), 1.9, np.float32), PENDULUM_ACTIONS, 0.05, 1)
    a = box(obs)[:, 0]
    assert a.dtype == np.float32 and a.max() == np.float32(2.0) and a.min() >= -2
    inside = a[a < 2]  # unclipped draws: 1.9 + N(0, 0.1), cut at 2
    assert np.mean(a == 2) == pytest.approx(0.159, abs=0.01)  # P(N(0, 0.1) > 0.1)
    assert inside.mean() == pytest.approx(1.9 - 0.1 * 0.2876, abs=0.003)
    assert np.array_equal(a, noisy(lambda o: np.full((len(o), 1), 1.9, np.float32),
                                   PENDULUM_ACTIONS, 0.05, 1)(obs)[:, 0])

    greedy = noisy(lambda o: np.ones(len(o), np.int64), gym.spaces.Discrete(4), 0.4, 2)
    b = greedy(obs)
    assert set(np.unique(b).tolist()) == {0, 1, 2, 3}
    assert np.mean(b != 1) == pytest.approx(0.4 * 3 / 4, abs=0.01)


def collect(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    """rltrain-collect ARGS in ``cwd`` (its own function, in this process)."""
    return command(collect_command.main, *args, cwd=cwd)


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny off-policy run (DQN, CartPole: checkpoints with the replay buffer) and a tiny
    on-policy one (PPO)."""
    root = tmp_path_factory.mktemp("runs")
    overrides = {
        "dqn": ("algo=dqn", "env=cartpole", "trainer.random_warmup_env_steps=256"),
        "ppo": ("algo=ppo", "env=cartpole", "trainer.epoch_num_steps=64"),
    }
    for name, args in overrides.items():
        run_in_process(root / name, "experiment=smoke", *args, "trainer.max_epochs=1",
                       "logger.tensorboard=false")
    return {name: root / name for name in overrides}


def assert_continuous_in_episodes(ds: Dataset) -> None:
    inside = ~ds.dones[:-1]
    assert inside.sum() > 0
    assert np.array_equal(ds.next_obs[:-1][inside], ds.obs[1:][inside])


def test_collect_episodes(runs: dict[str, Path], tmp_path: Path) -> None:
    out = ok(collect(runs["dqn"], "--episodes", "5", "--out", "five.h5", cwd=tmp_path))
    ds = load_dataset(str(tmp_path / "five.h5"))
    assert ds.num_episodes == 5 and ds.terminated.sum() + ds.truncated.sum() == 5
    assert ds.meta["episode_returns"] == pytest.approx(ds.episode_returns().tolist())
    assert ds.episode_lengths().sum() == len(ds)
    assert ds.episode_returns().tolist() == ds.episode_lengths().tolist()  # CartPole: 1 a step
    assert_continuous_in_episodes(ds)
    # CartPole's native vector env resets on the next step: a terminal next_obs is the true
    # final state (pole fallen or cart out), never the reset observation
    final = ds.next_obs[ds.terminated]
    assert ((np.abs(final[:, 0]) > 2.4) | (np.abs(final[:, 2]) > 0.2094)).all()
    meta = ds.meta
    assert meta["env_id"] == "CartPole-v1" and meta["source"] == "rltrain-collect"
    assert meta["policy"]["kind"] == "policy" and meta["policy"]["weights"] == "best"
    assert meta["policy"]["run_dir"] == str(runs["dqn"].resolve())
    assert meta["action_space"] == {"type": "Discrete", "n": 2, "start": 0}
    assert meta["seed"] == 20_000 and meta["num_envs"] == 5
    assert f"{len(ds):,} transitions, 5 episodes" in out and "return " in out
    assert "five.h5" in out

    # the same command and seed give the same transitions; noise and --weights last work
    ok(collect(runs["dqn"], "--episodes", "5", "--out", "again.npz", cwd=tmp_path))
    assert_same(ds, load_dataset(str(tmp_path / "again.npz")))
    ok(collect(runs["dqn"], "--episodes", "4", "--noise", "1", "--weights", "last", "--seed",
               "7", "--out", "noisy.h5", cwd=tmp_path))
    noisy = load_dataset(str(tmp_path / "noisy.h5"))
    assert noisy.num_episodes == 4 and noisy.meta["policy"]["noise"] == 1.0
    assert noisy.meta["policy"]["weights"] == "last" and noisy.meta["seed"] == 7
    assert_continuous_in_episodes(noisy)


def pendulum_step(obs: np.ndarray, action: np.ndarray) -> np.ndarray:
    """Pendulum's next observation from an observation (cos, sin, theta dot) and action."""
    env = gym.make("Pendulum-v1", g=9.81).unwrapped  # the collection's --env-kwargs
    env.reset(seed=0)
    env.state = np.array([np.arctan2(obs[1], obs[0]), obs[2]], np.float64)
    return env.step(action)[0]


def test_collect_random_steps(tmp_path: Path) -> None:
    out = ok(collect("--random", "--env", "Pendulum-v1", "--env-kwargs", '{"g": 9.81}',
                     "--steps", "1000", "--num-envs", "3", "--out", "random.h5", cwd=tmp_path))
    ds = load_dataset(str(tmp_path / "random.h5"))
    assert len(ds) == 1000 and "1,000 transitions" in out
    # 334 + 333 + 333 steps: two whole time-limited episodes and a cut one per env
    assert ds.episode_lengths().tolist() == [200, 134, 200, 133, 200, 133]
    assert not ds.terminated.any() and ds.truncated.sum() == 6
    assert ds.meta["policy"] == {"kind": "random"} and ds.meta["env_kwargs"] == {"g": 9.81}
    assert (np.abs(ds.act) <= 2).all() and ds.act.std() > 0.5
    assert_continuous_in_episodes(ds)
    # at a time limit, next_obs is where the step led (same-step autoreset's final obs),
    # not the next episode's reset observation
    for i in np.flatnonzero(ds.truncated)[[0, 2, 4]]:
        assert ds.next_obs[i] == pytest.approx(pendulum_step(ds.obs[i], ds.act[i]), abs=1e-4)
        assert not np.allclose(ds.next_obs[i], ds.obs[i + 1], atol=1e-3)
    check_spaces(ds, PENDULUM_OBS, PENDULUM_ACTIONS, "Pendulum-v1", "random.h5")


def test_collect_buffer_and_merge(runs: dict[str, Path], tmp_path: Path) -> None:
    from rltrain.rundir.checkpoint import load_latest

    ok(collect(runs["dqn"], "--buffer", "--out", "replay.h5", cwd=tmp_path))
    replay = load_dataset(str(tmp_path / "replay.h5"))
    ckpt, _, _ = load_latest(runs["dqn"] / "checkpoints")
    stored = ckpt["trainer"]["storage"]["buffer"]  # the filled part, lanes in time order
    sizes = stored["size"].numpy()
    assert len(replay) == sizes.sum() > 0
    lane_ends = np.cumsum(sizes) - 1
    assert replay.dones[lane_ends].all()  # every lane ends an episode
    first = stored["obs"].numpy()[: sizes[0]]
    assert np.array_equal(replay.obs[: sizes[0]], first)  # lane 0 first, in time order
    assert_continuous_in_episodes(replay)
    assert replay.meta["policy"]["kind"] == "replay buffer"
    assert replay.meta["source"] == f"replay buffer of {runs['dqn']}"

    ok(collect(runs["dqn"], "--episodes", "2", "--out", "two.npz", cwd=tmp_path))
    out = ok(collect("--merge", "two.npz", "replay.h5", "--out", "mixed.hdf5", cwd=tmp_path))
    two, mixed = load_dataset(str(tmp_path / "two.npz")), load_dataset(
        str(tmp_path / "mixed.hdf5"))
    assert len(mixed) == len(two) + len(replay) and "2 datasets merged" in out
    assert mixed.num_episodes == two.num_episodes + replay.num_episodes
    for name in ARRAYS:
        assert np.array_equal(getattr(mixed, name),
                              np.concatenate([getattr(two, name), getattr(replay, name)]))
    parts = mixed.meta["policy"]["parts"]
    assert [p["spec"] for p in parts] == ["two.npz", "replay.h5"]
    assert [p["transitions"] for p in parts] == [len(two), len(replay)]

    ok(collect("--random", "--env", "Pendulum-v1", "--episodes", "1", "--out", "pend.h5",
               cwd=tmp_path))
    result = collect("--merge", "two.npz", "pend.h5", "--out", "bad.h5", cwd=tmp_path)
    assert_one_line_error(result, "pend.h5 has observation space Box([-1, -1, -8], [1, 1, 8], "
                                  "(3,), float32) but two.npz has Box(", "same spaces")
    assert not (tmp_path / "bad.h5").exists()


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    err = result.stderr.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("rltrain-collect: error: "), err
    for needle in needles:
        assert needle in err, err


#: arguments (capitals stand for the runs of ``damaged_runs``) -> what the error names
BAD_INPUTS = {
    "no run": (["nothere", "--episodes", "2", "--out", "x.h5"], ["nothere", "run directory"]),
    "no weights": (["NOFINAL", "--episodes", "2", "--weights", "final", "--out", "x.h5"],
                   ["final/policy.pt does not exist", "--weights best, last"]),
    "on-policy buffer": (["PPO", "--buffer", "--out", "x.h5"], ["on-policy run", "algo=ppo"]),
    "no checkpoint buffer": (["NOBUF", "--buffer", "--out", "x.h5"],
                             ["checkpoint_buffer=false"]),
    "zero episodes": (["RUN", "--episodes", "0", "--out", "x.h5"],
                      ["--episodes", "positive integer", "'0'"]),
    "negative episodes": (["RUN", "--episodes", "-3", "--out", "x.h5"], ["'-3'"]),
    "float episodes": (["RUN", "--episodes", "2.5", "--out", "x.h5"], ["'2.5'"]),
    "both sizes": (["RUN", "--episodes", "2", "--steps", "9", "--out", "x.h5"],
                   ["exactly one of --episodes N and --steps N"]),
    "no size": (["RUN", "--out", "x.h5"], ["exactly one of --episodes N and --steps N"]),
    "bad suffix": (["RUN", "--episodes", "2", "--out", "x.csv"], ["'.csv'", ".h5, .hdf5", ".npz"]),
    "existing out": (["RUN", "--episodes", "2", "--out", "exists.h5"],
                     ["exists.h5 exists", "--force"]),
    "unknown env": (["--random", "--env", "NoSuchEnv-v0", "--episodes", "2", "--out", "x.h5"],
                    ["--env NoSuchEnv-v0 is not a registered gymnasium env"]),
    # ids whose registering module is not imported: the refusal names what works
    "ALE id": (["--random", "--env", "ALE/Pong-v5", "--episodes", "2", "--out", "x.h5"],
               ["not registered yet: ALE/ ids are registered by importing ale_py",
                "pass --env ale_py:ALE/Pong-v5"]),
    "MiniGrid id": (["--random", "--env", "MiniGrid-Empty-5x5-v0", "--episodes", "2", "--out",
                     "x.h5"], ["env=minigrid's wrappers",
                               "rltrain env=minigrid env.id=MiniGrid-Empty-5x5-v0",
                               "rltrain-collect RUN_DIR --random"]),
    "env without random": (["--env", "Pendulum-v1", "--episodes", "2", "--out", "x.h5"],
                           ["--random"]),
    "bad env kwargs": (["--random", "--env", "Pendulum-v1", "--env-kwargs", "{g: 1}",
                        "--episodes", "2", "--out", "x.h5"], ["--env-kwargs", "not JSON"]),
    "epsilon above 1": (["RUN", "--episodes", "2", "--noise", "1.5", "--out", "x.h5"],
                        ["epsilon", "0 to 1"]),
    "merge missing": (["--merge", "nothere.h5", "--out", "x.h5"],
                      ["nothere.h5 does not exist"]),
    "merge not a dataset": (["--merge", "exists.h5", "--out", "x.h5"],
                            ["exists.h5 is not a readable HDF5 file"]),
}


@pytest.fixture(scope="module")
def damaged_runs(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
                 ) -> dict[str, Path]:
    """Copies of the DQN run: without final/ (NOFINAL), and with a checkpoint that holds no
    replay buffer, as trainer.checkpoint_buffer=false leaves it (NOBUF)."""
    import shutil

    from rltrain.rundir.checkpoint import load_checkpoint, save_checkpoint

    root = tmp_path_factory.mktemp("damaged")
    nofinal, nobuf = root / "nofinal", root / "nobuf"
    shutil.copytree(runs["dqn"], nofinal)
    shutil.rmtree(nofinal / "final")
    shutil.copytree(runs["dqn"], nobuf)
    state = load_checkpoint(nobuf / "checkpoints" / "last.pt")
    state["trainer"]["storage"]["buffer"] = None
    for p in (nobuf / "checkpoints").glob("*.pt"):
        p.unlink()
    save_checkpoint(nobuf / "checkpoints", state, "ckpt_0000000001_00001.pt", 1)
    return {"RUN": runs["dqn"], "PPO": runs["ppo"], "NOFINAL": nofinal, "NOBUF": nobuf}


#: cases that need a process where no env family's module is imported yet: in this one, an
#: earlier test may have imported ale_py or minigrid and so registered their ids
FRESH_PROCESS = {"ALE id", "MiniGrid id"}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input(damaged_runs: dict[str, Path], tmp_path: Path, case: str) -> None:
    args, needles = BAD_INPUTS[case]
    (tmp_path / "exists.h5").write_text("an earlier file\n")
    run = (lambda *a, cwd: run_tool("rltrain-collect", *a, cwd=cwd)) \
        if case in FRESH_PROCESS else collect
    result = run(*(damaged_runs.get(a, a) for a in args), cwd=tmp_path)
    assert_one_line_error(result, *needles)
    assert not (tmp_path / "x.h5").exists()
    assert (tmp_path / "exists.h5").read_text() == "an earlier file\n"


def test_the_way_out_for_an_unregistered_family_works(tmp_path: Path) -> None:
    """What the refusals above name: --env MODULE:ID for collect, the preset for rltrain."""
    ok(collect("--random", "--env", "ale_py:ALE/Pong-v5", "--steps", "8", "--num-envs", "1",
               "--out", "pong.npz", cwd=tmp_path))
    # a fresh process, where minigrid is not imported yet (in this one a test may have)
    result = run_cli("experiment=smoke", "env=gym", "env.id=MiniGrid-Empty-5x5-v0",
                     f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    message = result.stderr.strip().removeprefix("rltrain: error: ")
    assert "\n" not in message and "Traceback" not in message, message
    assert ("env.id='MiniGrid-Empty-5x5-v0' is not registered yet: MiniGrid- ids are "
            "registered by importing minigrid, which env=minigrid does; use env=minigrid "
            "env.id=MiniGrid-Empty-5x5-v0") in message
    info = run_in_process(tmp_path / "grid", "experiment=smoke", "env=minigrid",
                          "env.id=MiniGrid-Empty-5x5-v0", "trainer.max_epochs=1")
    assert info.status == "completed", info.error


CARTPOLE = ["--random", "--env", "CartPole-v1"]


@pytest.mark.parametrize(("size", "suffix", "said"), [
    (["--steps", "1000000"], ".npz",
     "it needs at least 46.0 MB (1,000,000 transitions x 46 bytes), and "),
    (["--steps", "1000000"], ".h5", "it needs about "),
    (["--episodes", "1000000"], ".h5", "before all 1,000,000 episodes ended, already take "),
], ids=["npz-steps", "h5-steps", "h5-episodes"])
def test_a_collection_that_cannot_fit_is_refused_early(tmp_path: Path, size: list[str],
                                                       suffix: str, said: str) -> None:
    """A real 1 MB disk: refused before the collection is done (a million steps took 41 s
    to collect before the refusal; a million episodes many minutes), naming the sizes, the
    free space and what to change; nothing written."""
    with tmpfs(tmp_path / "fs", "1m") as fs:
        result = collect(*CARTPOLE, *size, "--out", fs / f"c{suffix}", cwd=tmp_path)
        assert_one_line_error(result, f"--out {fs / f'c{suffix}'}: the dataset will not fit: ",
                              said, f"is free in {fs}", "or write it where there is room")
        if suffix == ".h5" and size[0] == "--steps":
            collected = int(result.stderr.split(" collected in")[0].split(" as ")[-1]
                            .replace(",", ""))
            assert collected < 100_000, result.stderr  # refused from a first part
            assert "--steps " in result.stderr.split("collect fewer")[1]
        assert list(fs.iterdir()) == []


def test_an_estimate_that_overstates_does_not_refuse_what_fits(tmp_path: Path) -> None:
    """The first 2,000 transitions of CartPole compress to 35 bytes each, the whole to 27:
    30,000 transitions (about 0.84 MB) are written onto a 1 MB disk, not refused."""
    with tmpfs(tmp_path / "fs", "1m") as fs:
        result = collect(*CARTPOLE, "--steps", "30000", "--out", fs / "c.h5", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert len(load_dataset(str(fs / "c.h5"))) == 30_000
