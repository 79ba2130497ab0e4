"""Datasets carry the fields an algorithm declares beside a transition's (``AlgoSpec.stored``)
as a replay buffer does: arrays beside the fixed ones in .npz and HDF5 files, listed in the
meta, checked on load, covered by the file's hash, filled into a buffer for offline training
and written from a run's replay buffer. A file without them (one written before they
existed) reads exactly as before."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np
import pytest

from conftest import command, random_dataset, refusal, run_in_process
from rltrain.algorithms import ALGORITHMS
from rltrain.commands import collect
from rltrain.config.schemas import ConfigError
from rltrain.data.datasets.dataset import ARRAYS, Dataset, make_dataset, new_meta
from rltrain.data.datasets.files import save_dataset
from rltrain.data.datasets.replay import from_replay_buffer, to_buffer
from rltrain.data.datasets.sources import dataset_fingerprint, load_dataset
from rltrain.data.datasets.spaces import describe_space
from rltrain.data.datasets.validation import check_fields
from rltrain.data.fields import Field
from rltrain.data.reading import read
from rltrain.data.storage import ReplayBuffer

LOGP = Field("logp", (), np.dtype(np.float32))
MEMO = Field("memo", (3,), np.dtype(np.int16))
FILES = Path(__file__).parent / "files"
SUFFIXES = [".npz", ".h5"]


def spaces_meta(obs_space: gym.Space, act_space: gym.Space, **extra) -> dict:
    return new_meta(env_id="Test-v0", env_kwargs={}, observation_space=describe_space(obs_space),
                    action_space=describe_space(act_space), policy={"kind": "random"},
                    source="test", **extra)


def old_dataset() -> Dataset:
    """The dataset of the files in tests/data/files/, which were written by this function
    with rltrain at ab75a91 (before datasets carried declared fields): ``save_dataset`` to
    ``dataset_ab75a91.npz`` and ``.h5``."""
    n = 12
    t = np.arange(n, dtype=np.float32)
    obs = np.stack([t / 3, -t, np.full(n, 0.5, np.float32)], -1)
    terminated, truncated = np.zeros(n, bool), np.zeros(n, bool)
    terminated[4], truncated[-1] = True, True
    meta = spaces_meta(gym.spaces.Box(-np.inf, np.inf, (3,), np.float32), gym.spaces.Discrete(3),
                       created="2026-01-01T00:00:00+00:00")
    return make_dataset(obs, np.arange(n) % 3, (t * 0.25).astype(np.float32),
                        obs + np.float32(1 / 3), terminated, truncated, meta)


def with_fields(n: int = 9) -> Dataset:
    """Two episodes of vectors with Discrete actions, a log-prob and a memo per transition,
    each value naming its transition."""
    t = np.arange(n)
    terminated = t == 3
    truncated = t == n - 1
    obs = np.stack([t, -t], -1).astype(np.float32)
    meta = spaces_meta(gym.spaces.Box(-np.inf, np.inf, (2,), np.float32), gym.spaces.Discrete(3))
    return make_dataset(obs, t % 3, t.astype(np.float32), obs + 1, terminated, truncated, meta,
                        fields={"logp": (-t / 7).astype(np.float32),
                                "memo": np.stack([t, 2 * t, -t], -1).astype(np.int16)})


def same(a: Dataset, b: Dataset) -> None:
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert list(a.fields) == list(b.fields)
    for name in a.fields:
        x, y = a.fields[name], b.fields[name]
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), name


def write_by_hand(path: Path, arrays: dict[str, np.ndarray], meta: dict) -> Path:
    """A file as a user's own tool might write it: the arrays and the meta, nothing checked."""
    if path.suffix == ".npz":
        np.savez(path, **arrays, meta=np.array(json.dumps(meta)))
    else:
        with h5py.File(path, "w") as f:
            f.attrs["meta"] = json.dumps(meta)
            for name, a in arrays.items():
                f.create_dataset(name, data=a)
    return path


def file_parts(ds: Dataset) -> tuple[dict[str, np.ndarray], dict]:
    return {**{n: getattr(ds, n) for n in ARRAYS}, **ds.fields}, json.loads(json.dumps(ds.meta))


# ---- files


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_declared_fields_round_trip_beside_the_fixed_arrays(tmp_path: Path, suffix: str):
    ds = with_fields()
    assert ds.declared == (LOGP, MEMO)
    assert ds.meta["fields"] == [{"name": "logp", "shape": [], "dtype": "float32"},
                                 {"name": "memo", "shape": [3], "dtype": "int16"}]
    path = save_dataset(ds, tmp_path / f"data{suffix}")
    if suffix == ".npz":
        with np.load(path) as z:
            assert z.files == [*ARRAYS, "logp", "memo", "meta"]
    else:
        with h5py.File(path) as f:
            assert sorted(f) == sorted([*ARRAYS, "logp", "memo"])
    back = load_dataset(str(path))
    same(ds, back)
    assert back.declared == (LOGP, MEMO)
    assert back.meta == json.loads(json.dumps(ds.meta))
    assert back.summary()["fields"] == ds.meta["fields"]


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_the_hash_covers_the_declared_fields(tmp_path: Path, suffix: str):
    """Written twice, a dataset hashes the same; changed in one value of one declared
    field only, it hashes differently (so a resume refuses it, as for any other array)."""
    ds = with_fields()
    first = dataset_fingerprint(str(save_dataset(ds, tmp_path / f"a{suffix}")))["sha256"]
    again = dataset_fingerprint(str(save_dataset(ds, tmp_path / f"b{suffix}")))["sha256"]
    assert first == again
    logp = ds.fields["logp"].copy()
    logp[5] += np.float32(0.5)
    other = dataclasses.replace(ds, fields={**ds.fields, "logp": logp})
    changed = dataset_fingerprint(str(save_dataset(other, tmp_path / f"c{suffix}")))["sha256"]
    assert changed != first


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_file_without_declared_fields_reads_as_before(suffix: str):
    """A file written by rltrain before datasets carried fields (ab75a91, see
    :func:`old_dataset`): the same arrays, dtypes and meta as it was written with, no
    fields, and the hash it had then."""
    path = FILES / f"dataset_ab75a91{suffix}"
    back = load_dataset(str(path))
    want = old_dataset()
    same(want, back)
    assert back.fields == {} and back.declared == ()
    assert back.meta == json.loads(json.dumps(want.meta)) and "fields" not in back.meta
    assert "fields" not in back.summary()
    hashes = {".npz": "9c86a334e1887ed38bc68f4e67c7d352b147cad40d8ccff14bbe962a4fcf226e",
              ".h5": "140fea8cee8937ddd5ab40c42f0e1b3fc48ad8496af8b41a75764c2d6330775f"}
    assert dataset_fingerprint(str(path))["sha256"] == hashes[suffix]


def test_a_dataset_without_declared_fields_is_written_as_before(tmp_path: Path):
    """Its .npz is byte for byte what the writer wrote before: the fixed arrays and the
    meta, in that order, nothing else."""
    ds = old_dataset()
    path = save_dataset(ds, tmp_path / "new.npz")
    before = tmp_path / "before.npz"
    with open(before, "wb") as f:  # the writer as it was: np.savez of the arrays and the meta
        np.savez(f, **{n: getattr(ds, n) for n in ARRAYS},
                 meta=np.array(json.dumps(ds.meta, allow_nan=False)))
    assert path.read_bytes() == before.read_bytes()


def damaged(ds: Dataset, suffix: str, case: str) -> tuple[dict[str, np.ndarray], dict]:
    arrays, meta = file_parts(ds)
    if case == "missing":
        del arrays["logp"]
    elif case == "misshapen":
        arrays["memo"] = arrays["memo"][:, :2]
    elif case == "short":
        arrays["logp"] = arrays["logp"][:-1]
    elif case == "dtype":
        arrays["logp"] = arrays["logp"].astype(np.float64)
    elif case == "non-finite":
        arrays["logp"] = arrays["logp"].copy()
        arrays["logp"][4] = np.nan
    elif case == "reserved name":
        meta["fields"][0]["name"] = "rew"
    elif case == "not a list":
        meta["fields"] = "logp"
    elif case == "object dtype":
        meta["fields"][0]["dtype"] = "object"
    return arrays, meta


REFUSALS = {
    "missing": "lists the field 'logp' in its meta but holds no logp array",
    "misshapen": "has memo of shape (2,) and dtype int16, but its meta lists memo (int16 of "
                 "shape (3,))",
    "short": "has arrays of unequal length (obs 9, act 9, rew 9, next_obs 9, terminated 9, "
             "truncated 9, logp 8, memo 9)",
    "dtype": "has logp of shape () and dtype float64, but its meta lists logp (float32)",
    "non-finite": "has a non-finite value in logp (transition 4); remove or recollect it",
    "reserved name": "has a damaged fields list in its meta (the declared field 'rew' takes a "
                     "name storage uses itself",
    "not a list": "has a damaged fields list in its meta (not a list)",
    "object dtype": "has a damaged fields list in its meta (logp: the dtype 'object' is not a "
                    "numpy dtype of bools, integers or floats",
}


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_declared_field_that_does_not_fit_its_listing_is_refused(tmp_path, suffix, case):
    path = write_by_hand(tmp_path / f"bad{suffix}", *damaged(with_fields(), suffix, case))
    with pytest.raises(ConfigError) as refused:
        load_dataset(str(path))
    message = str(refused.value)
    assert message.startswith(f"dataset {path} ") and "\n" not in message
    assert REFUSALS[case] in message, message


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_an_array_the_meta_does_not_list_is_not_read(tmp_path: Path, suffix: str):
    """Files are read by name, as they always were: an array beside rltrain's that the meta
    does not list is not read (so training cannot reach it), and an offline run of an
    algorithm that stores such a field is refused naming it."""
    ds = with_fields()
    arrays, meta = file_parts(ds)
    del meta["fields"]
    path = write_by_hand(tmp_path / f"unlisted{suffix}", arrays, meta)
    back = load_dataset(str(path))
    assert back.fields == {} and "fields" not in back.meta
    with pytest.raises(ConfigError, match=f"dataset {path} holds no logp \\(no fields\\)"):
        check_fields(back, (LOGP,), str(path))


def test_a_declared_field_kept_in_another_file_is_refused(tmp_path: Path):
    """The file's SHA-256 must cover what training reads: a listed field that is an HDF5
    link to another file is refused, as the fixed arrays are."""
    ds = with_fields()
    arrays, meta = file_parts(ds)
    elsewhere = tmp_path / "elsewhere.h5"
    with h5py.File(elsewhere, "w") as f:
        f.create_dataset("logp", data=arrays.pop("logp"))
    path = write_by_hand(tmp_path / "linked.h5", arrays, meta)
    with h5py.File(path, "a") as f:
        f["logp"] = h5py.ExternalLink(str(elsewhere), "logp")
    with pytest.raises(ConfigError, match="its logp array is a link to"):
        load_dataset(str(path))


def test_make_dataset_refuses_fields_that_a_file_could_not_hold():
    ds = with_fields()
    parts = (ds.obs, ds.act, ds.rew, ds.next_obs, ds.terminated, ds.truncated, ds.meta)
    with pytest.raises(ValueError, match=r"declared field 'logp': shape \(8,\), expected one "
                                         r"row per transition \(9\)"):
        make_dataset(*parts, fields={"logp": ds.fields["logp"][:-1]})
    with pytest.raises(ValueError, match="dtype <U1, expected bools or numbers"):
        make_dataset(*parts, fields={"logp": np.array(["a"] * 9)})
    for name in ("next_obs", "obs_frames", "meta"):
        with pytest.raises(ValueError, match=f"the declared field '{name}' takes a name"):
            make_dataset(*parts, fields={name: ds.fields["logp"]})


def test_merged_datasets_keep_their_fields_and_must_hold_the_same(tmp_path: Path):
    """rltrain-collect --merge: the fields one after another, as the transitions; datasets
    that hold other fields are refused in one line naming both."""
    ds = with_fields()
    a = save_dataset(ds, tmp_path / "a.npz")
    b = save_dataset(ds, tmp_path / "b.h5")
    res = command(collect.main, "--merge", a, b, "--out", tmp_path / "ab.h5")
    assert res.returncode == 0, res.stderr
    assert "fields beside each transition: logp (float32), memo (int16 of shape (3,))" \
        in res.stdout
    merged = load_dataset(str(tmp_path / "ab.h5"))
    assert merged.declared == (LOGP, MEMO) and len(merged) == 2 * len(ds)
    for name in ("logp", "memo"):
        assert np.array_equal(merged.fields[name], np.concatenate([ds.fields[name]] * 2))
    plain = save_dataset(dataclasses.replace(ds, fields={}, meta={
        k: v for k, v in ds.meta.items() if k != "fields"}), tmp_path / "plain.npz")
    res = command(collect.main, "--merge", a, plain, "--out", tmp_path / "bad.h5")
    assert res.returncode == 2 and not (tmp_path / "bad.h5").exists()
    assert res.stderr == (
        f"rltrain-collect: error: --merge: {plain} holds no fields beside each transition but "
        f"{a} logp (float32), memo (int16 of shape (3,)); merge datasets that hold the same "
        "fields\n")


# ---- buffers


def replay_with_fields(lanes: int = 2, capacity: int = 6, steps: int = 9,
                       frame_stack: int = 1) -> ReplayBuffer:
    """A replay buffer declaring LOGP and MEMO, wrapped around where ``steps`` >
    ``capacity``; each value names its step and lane (frame stacks: consecutive frames of
    one episode per lane, the first padded by repeating its frame)."""
    k = frame_stack
    shape = (k, 2, 2) if k > 1 else (2,)
    buf = ReplayBuffer(lanes, capacity, shape, (), np.int64,
                       obs_dtype=np.uint8 if k > 1 else np.float32, frame_stack=k,
                       fields=(LOGP, MEMO))
    t = np.arange(steps)[:, None] + np.zeros((1, lanes), np.int64)
    lane = np.arange(lanes)[None, :] + np.zeros((steps, 1), np.int64)

    def observation(s: np.ndarray) -> np.ndarray:
        if k == 1:
            return np.stack([s, lane], -1).astype(np.float32)
        frames = np.maximum(s[..., None] - np.arange(k - 1, -1, -1), 0) + 20 * lane[..., None]
        return np.broadcast_to(frames[..., None, None], (*frames.shape, 2, 2)).astype(np.uint8)

    buf.extend(observation(t), t % 3, t.astype(np.float32), observation(t + 1),
               np.zeros_like(t, bool), np.zeros_like(t, bool),
               fields={"logp": (t - 0.5 * lane).astype(np.float32),
                       "memo": np.stack([t, lane, t + lane], -1).astype(np.int16)})
    return buf


def buffer_fields(buf: ReplayBuffer) -> dict[str, np.ndarray]:
    """The buffer's declared fields of every stored transition, lane after lane, oldest
    first."""
    lanes = np.repeat(np.arange(buf.num_lanes), buf.size)
    positions = np.concatenate([(buf.oldest()[i] + np.arange(n)) % buf.lane_capacity
                                for i, n in enumerate(buf.size)])
    return buf.declared_at(lanes, positions)


@pytest.mark.parametrize("frame_stack", [1, 3])
@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_replay_buffer_becomes_a_dataset_and_back_with_its_fields(tmp_path, suffix,
                                                                     frame_stack):
    """rltrain-collect --buffer's path and the offline trainer's: each transition keeps its
    declared values through the buffer's state, the file and the buffer the offline trainer
    fills, whose batches hand them out by name."""
    # frame stacks: a buffer rebuilds a lane's stacks from its first, padded one (a wrapped
    # lane's oldest is not), so the offline trainer's buffer would store them whole
    steps = 9 if frame_stack == 1 else 6
    buf = replay_with_fields(steps=steps, frame_stack=frame_stack)
    obs_space = (gym.spaces.Box(0, 255, (frame_stack, 2, 2), np.uint8) if frame_stack > 1
                 else gym.spaces.Box(-np.inf, np.inf, (2,), np.float32))
    meta = spaces_meta(obs_space, gym.spaces.Discrete(3))
    ds = from_replay_buffer(buf.state_dict(), discrete=True, action_low=None, action_high=None,
                            meta=meta, fields=(LOGP, MEMO))
    kept = buffer_fields(buf)
    assert ds.declared == (LOGP, MEMO) and len(ds) == 12
    for name in ("logp", "memo"):
        assert np.array_equal(ds.fields[name], kept[name]), name
    # the oldest of lane 0 is step steps - capacity: its values name it
    oldest = steps - 6
    assert ds.fields["memo"][0].tolist() == [oldest, 0, oldest] and ds.rew[0] == oldest
    back = load_dataset(str(save_dataset(ds, tmp_path / f"replay{suffix}")))
    same(ds, back)
    again = to_buffer(back, discrete=True, action_low=None, action_high=None,
                      frame_stack=frame_stack, fields=(LOGP, MEMO))
    assert again.frame_stack == frame_stack and again.declared == (LOGP, MEMO)
    stored = buffer_fields(again)
    for name in ("logp", "memo"):
        assert np.array_equal(stored[name], ds.fields[name]), name
    positions = np.array([0, 5, 6, 11])
    batch = read(again, np.zeros(4, np.int64), positions, [])
    assert np.array_equal(batch.fields["logp"], ds.fields["logp"][positions])
    assert np.array_equal(batch.rew, ds.rew[positions])


def test_a_buffer_holds_only_the_fields_its_algorithm_declares():
    ds = with_fields()
    only = to_buffer(ds, discrete=True, action_low=None, action_high=None, fields=(LOGP,))
    assert only.declared == (LOGP,)
    assert np.array_equal(buffer_fields(only)["logp"], ds.fields["logp"])
    plain = to_buffer(ds, discrete=True, action_low=None, action_high=None)
    assert plain.declared == ()


def test_a_buffer_state_without_a_declared_field_is_refused_by_name():
    buf = replay_with_fields()
    state = buf.state_dict()
    del state["memo"]
    meta = spaces_meta(gym.spaces.Box(-np.inf, np.inf, (2,), np.float32), gym.spaces.Discrete(3))
    with pytest.raises(ValueError, match="buffer state has no 'memo'"):
        from_replay_buffer(state, discrete=True, action_low=None, action_high=None, meta=meta,
                           fields=(LOGP, MEMO))
    plain = from_replay_buffer(state, discrete=True, action_low=None, action_high=None,
                               meta=meta)
    assert plain.fields == {} and "fields" not in plain.meta


def test_check_fields_takes_a_lossless_dtype_and_refuses_the_rest():
    ds = with_fields()
    check_fields(ds, (), "d.h5")
    check_fields(ds, (LOGP, Field("memo", (3,), np.dtype(np.int32))), "d.h5")  # int16 fits
    with pytest.raises(ConfigError, match=r"dataset d.h5 holds logp \(float32\), but this "
                                          r"algorithm stores logp \(float16\)"):
        check_fields(ds, (Field("logp", (), np.dtype(np.float16)),), "d.h5")
    with pytest.raises(ConfigError, match=r"holds memo \(int16 of shape \(3,\)\), but this "
                                          r"algorithm stores memo \(int16 of shape \(2,\)\)"):
        check_fields(ds, (Field("memo", (2,), np.dtype(np.int16)),), "d.h5")


# ---- offline training


@pytest.fixture
def bc_storing_logp(monkeypatch: pytest.MonkeyPatch) -> None:
    """BC, as if its spec declared a log-prob stored beside each transition."""
    spec = ALGORITHMS["bc"]
    monkeypatch.setitem(ALGORITHMS, "bc", dataclasses.replace(
        spec, stored=lambda cfg, info: (LOGP,)))


OFFLINE = ["experiment=smoke", "algo=bc", "env=cartpole", "trainer.max_epochs=1",
           "trainer.epoch_num_steps=20", "trainer.batch_size=16", "env.num_test_envs=1",
           "trainer.test_step_num_episodes=1", "logger.tensorboard=false"]


def test_offline_training_of_an_algorithm_storing_fields_needs_a_dataset_holding_them(
        tmp_path: Path, bc_storing_logp: None):
    """Refused in one line naming the field and what would work where the dataset lacks it;
    trained where it holds it."""
    plain = random_dataset(tmp_path / "plain.npz", episodes=3)
    message = refusal(tmp_path / "refused", *OFFLINE, f"dataset={plain}")
    assert message == (
        f"dataset {plain} holds no logp (no fields), which this algorithm stores beside each "
        "transition as logp (float32); train it on a dataset that holds it (rltrain-collect "
        "--buffer RUN_DIR writes the fields of a run's replay buffer), or online")
    ds = load_dataset(str(plain))
    held = make_dataset(ds.obs, ds.act, ds.rew, ds.next_obs, ds.terminated, ds.truncated,
                        ds.meta, fields={"logp": np.linspace(-1, 0, len(ds), dtype=np.float32)})
    path = save_dataset(held, tmp_path / "held.h5")
    info = run_in_process(tmp_path / "run", *OFFLINE, f"dataset={path}")
    assert info.status == "completed"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["dataset"]["sha256"] == dataset_fingerprint(str(path))["sha256"]
