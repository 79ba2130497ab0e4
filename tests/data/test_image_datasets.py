"""Offline datasets of image and Dict observations: rltrain-collect writes them (uint8 in the
HDF5 file), their spaces come back exactly from the file's meta, the SHA-256 sees every byte,
a file whose observations do not fit its space is refused by name, and BC and discrete CQL
train on them. The envs are tests/dataset_envs.py's, found as ``dataset_envs:ID`` (tests/ is on
the path)."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np
import pytest
import torch

import dataset_envs
from conftest import command, read_jsonl, run_in_process
from rltrain.commands import collect
from rltrain.common.errors import UserError
from rltrain.config.schemas import ConfigError
from rltrain.data.datasets.dataset import ARRAYS, Dataset, make_dataset
from rltrain.data.datasets.files import save_dataset
from rltrain.data.datasets.replay import from_replay_buffer, to_buffer
from rltrain.data.datasets.sources import dataset_fingerprint, load_dataset
from rltrain.data.datasets.spaces import describe_space, space_from_dict, space_mismatch
from rltrain.data.datasets.validation import check_spaces
from rltrain.spaces.observations import DictLayout

ENVS = {"stripes": dataset_envs.STRIPES_ID, "beacon": dataset_envs.BEACON_ID}
SPACES = {name: gym.make(env_id).observation_space for name, env_id in ENVS.items()}
#: the CLI's name of each env: module:ID imports the module that registers it
CLI_IDS = {name: f"dataset_envs:{env_id}" for name, env_id in ENVS.items()}
#: a two-epoch offline run of a few seconds (as test_offline.py's SMALL, shorter epochs)
SMALL = ["experiment=smoke", "trainer.epoch_num_steps=100", "trainer.batch_size=32",
         "logger.progress_bar=false"]
RUNS = [(algo, env) for algo in ("bc", "cql") for env in ENVS]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A random dataset of each env, written by rltrain-collect (HDF5)."""
    where = tmp_path_factory.mktemp("data")
    out = {name: where / f"{name}.h5" for name in ENVS}
    sizes = {"stripes": ["--episodes", "30"], "beacon": ["--steps", "240"]}
    for name in ENVS:
        res = command(collect.main, "--random", "--env", CLI_IDS[name], *sizes[name],
                      "--out", out[name])
        assert res.returncode == 0, res.stderr
    return out


def with_arrays(ds: Dataset, **arrays: np.ndarray) -> dict[str, np.ndarray]:
    return {**{name: getattr(ds, name) for name in ARRAYS}, **arrays}


def write_h5(path: Path, arrays: dict[str, np.ndarray], meta: dict) -> Path:
    """A dataset file as rltrain writes one, with whatever arrays and meta it is given."""
    with h5py.File(path, "w") as f:
        f.attrs["meta"] = json.dumps(meta)
        for name, a in arrays.items():
            f.create_dataset(name, data=a)
    return path


def one_line(e: pytest.ExceptionInfo, *needles: str) -> None:
    text = str(e.value)
    assert "\n" not in text
    for needle in needles:
        assert needle in text, text


# --------------------------------------------------------------------------- the files
def test_collect_writes_images_and_dict_rows_as_uint8(data: dict[str, Path]) -> None:
    rows = DictLayout.of(SPACES["beacon"]).row_bytes
    shapes = {"stripes": (10, 10, 3), "beacon": (rows,)}
    for name, path in data.items():
        with h5py.File(path, "r") as f:
            for array in ("obs", "next_obs"):
                assert f[array].dtype == np.uint8, (name, array)
                assert f[array].shape[1:] == shapes[name]
            assert f["act"].dtype == np.int64
            meta = json.loads(f.attrs["meta"])
        # the space in the file is the env's, exactly (the Dict's keys in the env's order)
        space = space_from_dict(meta["observation_space"])
        assert space == SPACES[name]
        ds = load_dataset(str(path))
        assert ds.obs.dtype == ds.next_obs.dtype == np.uint8
        assert ds.obs.shape[1:] == shapes[name]
    assert list(space.spaces) == ["image", "pos", "flag"]


def test_the_stored_observations_are_what_the_rewards_were_for(data: dict[str, Path]) -> None:
    """Each env's reward is read off its observation: the stored bytes and the actions line
    up, transition by transition (an image stripe; a Dict row's ``flag`` key)."""
    ds = load_dataset(str(data["stripes"]))
    lit = ds.obs.max(axis=(1, 2)).argmax(axis=1)  # the channel of the lit stripe
    assert np.array_equal(ds.obs[np.arange(len(ds)), 0, 3 * lit, lit], np.full(len(ds), 200))
    assert np.array_equal(ds.rew, (ds.act == lit).astype(np.float32))
    assert ds.terminated.any() and ds.num_episodes == 30

    ds = load_dataset(str(data["beacon"]))
    obs = DictLayout.of(SPACES["beacon"]).unpack(ds.obs)
    assert obs["flag"].dtype == np.int64 and obs["pos"].dtype == np.float32
    assert np.array_equal(ds.rew, (ds.act == obs["flag"]).astype(np.float32))
    cell = np.minimum(((obs["pos"] + 1) * 3).astype(int), 5)
    assert (obs["image"][np.arange(len(ds)), cell[:, 0], cell[:, 1], 0] == 255).all()
    assert obs["image"].sum(axis=(1, 2, 3)).tolist() == [255] * len(ds)
    # within an episode, each next observation is the next transition's observation
    inside = ~ds.dones[:-1]
    assert np.array_equal(ds.next_obs[:-1][inside], ds.obs[1:][inside])


# --------------------------------------------------------------------------- spaces as data
ROUND_TRIP = {
    "dict, unsorted keys": dataset_envs.BeaconEnv().observation_space,
    "image of bools": gym.spaces.Box(0, 1, (10, 10, 4), np.bool_),
    "image, per-channel bounds": gym.spaces.Box(np.zeros((3, 3, 2), np.uint8),
                                                np.array([10, 5], np.uint8) * np.ones((3, 3, 2),
                                                                                      np.uint8)),
    "dict of every key kind": gym.spaces.Dict([
        ("grid", gym.spaces.MultiDiscrete([[2, 3], [4, 5]], start=[[0, 1], [-1, 0]])),
        ("bits", gym.spaces.MultiBinary([2, 3])), ("n", gym.spaces.MultiBinary(4)),
        ("dir", gym.spaces.Discrete(4, start=-1, dtype=np.int32)),
        ("vec", gym.spaces.Box(-np.inf, np.inf, (3,), np.float64)),
        ("ram", gym.spaces.Box(0, 255, (8,), np.uint8))]),
}


@pytest.mark.parametrize("space", ROUND_TRIP.values(), ids=ROUND_TRIP.keys())
def test_a_space_comes_back_exactly_from_its_description(space: gym.Space) -> None:
    d = json.loads(json.dumps(describe_space(space), allow_nan=False))
    back = space_from_dict(d)
    assert back == space and type(back) is type(space)
    if isinstance(space, gym.spaces.Dict):
        assert list(back.spaces) == list(space.spaces)
        for key, sub in space.spaces.items():
            assert back[key].dtype == sub.dtype, key
    else:
        assert back.dtype == space.dtype
    assert space_mismatch(d, describe_space(back)) is None


def test_space_mismatch_names_where_dicts_part() -> None:
    beacon = describe_space(SPACES["beacon"])
    pairs = list(SPACES["beacon"].spaces.items())
    sorted_keys = describe_space(gym.spaces.Dict(dict(pairs)))  # gymnasium sorts a dict
    assert space_mismatch(beacon, sorted_keys) == "key order"
    wider = describe_space(gym.spaces.Dict([*pairs[:1], ("pos", gym.spaces.Box(-2, 2, (2,))),
                                            pairs[2]]))
    assert space_mismatch(beacon, wider) == "key 'pos': bounds"
    fewer = describe_space(gym.spaces.Dict(pairs[:2]))
    assert space_mismatch(beacon, fewer) == "keys"
    # an image against floats of its shape: stored otherwise, so not the same
    image = describe_space(SPACES["stripes"])
    floats = describe_space(gym.spaces.Box(0, 255, (10, 10, 3), np.float32))
    assert space_mismatch(image, floats) == "dtype"
    # bools and bytes are both stored as bytes
    bools = describe_space(gym.spaces.Box(0, 1, (4, 4, 1), np.bool_))
    assert space_mismatch(bools, describe_space(gym.spaces.Box(0, 1, (4, 4, 1), np.uint8))) \
        is None


MALFORMED = {
    "a type that is no space": {"type": "os.system", "n": 1},
    "an object dtype": {"type": "Box", "shape": [1], "low": [0], "high": [1], "dtype": "O"},
    "a dtype that is code": {"type": "Discrete", "n": 2, "dtype": "__import__('os')"},
    "a Dict in a Dict": {"type": "Dict", "spaces": [["a", {"type": "Dict", "spaces": [
        ["b", {"type": "Discrete", "n": 2}]]}]]},
    "a key twice": {"type": "Dict", "spaces": [["a", {"type": "Discrete", "n": 2}],
                                               ["a", {"type": "Discrete", "n": 3}]]},
    "a key that is not a string": {"type": "Dict", "spaces": [[1, {"type": "Discrete",
                                                                   "n": 2}]]},
    "no keys": {"type": "Dict", "spaces": []},
    "Discrete(0)": {"type": "Discrete", "n": 0},
    "nvec of floats": {"type": "MultiDiscrete", "nvec": [2.5, 3]},
    "nvec of zero": {"type": "MultiDiscrete", "nvec": [0, 3]},
    "ragged nvec": {"type": "MultiDiscrete", "nvec": [[2, 3], [4]]},
    "bounds of another size": {"type": "Box", "shape": [2, 2], "low": [0], "high": [1],
                               "dtype": "uint8"},
}


@pytest.mark.parametrize("d", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_space_is_a_value_error(d: dict) -> None:
    with pytest.raises(ValueError, match="malformed space description"):
        space_from_dict(d)


def test_a_file_with_a_malformed_space_is_one_line(data: dict[str, Path],
                                                   tmp_path: Path) -> None:
    ds = load_dataset(str(data["beacon"]))
    meta = dict(ds.meta, observation_space=MALFORMED["a Dict in a Dict"])
    path = write_h5(tmp_path / "bad.h5", with_arrays(ds), meta)
    with pytest.raises(ConfigError) as e:
        load_dataset(str(path))
    one_line(e, f"dataset {path} has a damaged observation_space in its meta",
             "a Dict inside a Dict")


# --------------------------------------------------------------------------- checks
def test_observations_that_do_not_fit_the_space_are_refused_naming_both(
        data: dict[str, Path], tmp_path: Path) -> None:
    ds = load_dataset(str(data["stripes"]))
    path = write_h5(tmp_path / "floats.h5", with_arrays(ds, obs=ds.obs.astype(np.float32)),
                    ds.meta)
    with pytest.raises(ConfigError) as e:
        load_dataset(str(path))
    one_line(e, f"dataset {path} has obs of shape (10, 10, 3) and dtype float32, but its "
                "observation space is Box(0, 255, (10, 10, 3), uint8), stored as uint8")

    beacon = load_dataset(str(data["beacon"]))
    rows = beacon.obs.shape[1]
    path = write_h5(tmp_path / "short.h5",
                    with_arrays(beacon, next_obs=beacon.next_obs[:, :-1]), beacon.meta)
    with pytest.raises(ConfigError) as e:
        load_dataset(str(path))
    one_line(e, f"has next_obs of shape ({rows - 1},) and dtype uint8, but its observation "
                "space is Dict(image: Box(0, 255, (6, 6, 1), uint8), pos: Box(-1.0, 1.0, (2,), "
                f"float32), flag: Discrete(3)), stored as uint8 of shape ({rows},)")
    path = write_h5(tmp_path / "wide.h5", with_arrays(beacon, obs=beacon.obs.astype(np.int16)),
                    beacon.meta)
    with pytest.raises(ConfigError, match="has obs of shape .* and dtype int16"):
        load_dataset(str(path))


def test_dict_rows_outside_their_keys_spaces_are_refused(data: dict[str, Path],
                                                         tmp_path: Path) -> None:
    """A Discrete key past its n would index past a one-hot table in training; a NaN would
    spread through every update. Both are found in the bytes and named by key."""
    ds = load_dataset(str(data["beacon"]))
    layout = DictLayout.of(SPACES["beacon"])
    for key, value, needle in (("flag", 7, "with key 'flag' 7 (transition 5), outside its "
                                           "space Discrete(3)"),
                               ("pos", np.nan, "with a non-finite value in key 'pos' "
                                               "(transition 5)")):
        obs = layout.unpack(ds.obs)
        obs[key][5] = value
        path = write_h5(tmp_path / f"{key}.h5", with_arrays(ds, obs=layout.pack(obs)), ds.meta)
        with pytest.raises(ConfigError) as e:
            load_dataset(str(path))
        one_line(e, f"dataset {path} has obs {needle}")


def test_image_values_beyond_their_spaces_bounds_are_refused(data: dict[str, Path],
                                                              tmp_path: Path) -> None:
    """An image is scaled by its space's bounds inside the network: a frame holding 255 where
    the space says 1 (MinAtar's 0/1 channels) would reach it 255 times too bright. Refused
    by value and place, for a whole image and for an image key of a Dict; data within the
    bounds load."""
    ds = load_dataset(str(data["stripes"]))
    bright = int(ds.obs.max())
    assert bright > 1
    narrow = {**ds.meta, "observation_space": describe_space(
        gym.spaces.Box(0, 1, (10, 10, 3), np.uint8))}
    path = write_h5(tmp_path / "bright.h5", with_arrays(ds), narrow)
    with pytest.raises(ConfigError) as e:
        load_dataset(str(path))
    first = int(np.flatnonzero((ds.obs > 1).reshape(len(ds.obs), -1).any(axis=1))[0])
    one_line(e, f"dataset {path} has obs {bright} at transition {first}, outside its "
                "space's bounds [0, 1] there")
    dim = with_arrays(ds, obs=(ds.obs > 0).astype(np.uint8),
                      next_obs=(ds.next_obs > 0).astype(np.uint8))
    assert len(load_dataset(str(write_h5(tmp_path / "dim.h5", dim, narrow)))) == len(ds)

    beacon = load_dataset(str(data["beacon"]))
    space = SPACES["beacon"]
    assert isinstance(space, gym.spaces.Dict)
    narrow_dict = gym.spaces.Dict([  # in the env's order of keys, as the rows are packed
        (key, gym.spaces.Box(0, 1, (6, 6, 1), np.uint8) if key == "image" else sub)
        for key, sub in space.spaces.items()])
    path = write_h5(tmp_path / "beacon.h5", with_arrays(beacon),
                    {**beacon.meta, "observation_space": describe_space(narrow_dict)})
    with pytest.raises(ConfigError) as e:
        load_dataset(str(path))
    one_line(e, "has obs with key 'image' 255 at transition", "outside its space's bounds")


def test_check_spaces_refuses_another_envs_dataset(data: dict[str, Path]) -> None:
    stripes, beacon = (load_dataset(str(data[name])) for name in ENVS)
    actions = gym.spaces.Discrete(3)
    for name, ds in (("stripes", stripes), ("beacon", beacon)):
        check_spaces(ds, SPACES[name], actions, ENVS[name], "d.h5")  # its own env
    with pytest.raises(ConfigError) as e:
        check_spaces(stripes, gym.spaces.Box(0, 255, (10, 10, 3), np.float32), actions,
                     "Floats-v0", "s.h5")
    one_line(e, "dataset s.h5 (collected on dataset_envs:rltrain-test/Stripes-v0) has "
                "observation space Box(0, 255, (10, 10, 3), uint8) but Floats-v0 has "
                "Box(0.0, 255.0, (10, 10, 3), float32); collect the dataset on the same env")
    pairs = list(SPACES["beacon"].spaces.items())
    moved = gym.spaces.Dict([*pairs[:1], ("pos", gym.spaces.Box(-2, 2, (2,), np.float32)),
                             pairs[2]])
    with pytest.raises(ConfigError) as e:
        check_spaces(beacon, moved, actions, "Moved-v0", "b.h5")
    one_line(e, "but Moved-v0 has Dict(image: Box(0, 255, (6, 6, 1), uint8), pos: Box(-2.0, "
                "2.0, (2,), float32), flag: Discrete(3)) (they differ in key 'pos': bounds); "
                "collect the dataset on the same env")


def test_make_dataset_keeps_bytes_and_refuses_what_is_not_one(data: dict[str, Path]) -> None:
    ds = load_dataset(str(data["stripes"]))
    # an older buffer's float32 copy of the bytes comes back as the bytes
    again = make_dataset(ds.obs.astype(np.float32), ds.act, ds.rew, ds.next_obs,
                         ds.terminated, ds.truncated, ds.meta)
    assert again.obs.dtype == np.uint8 and np.array_equal(again.obs, ds.obs)
    with pytest.raises(ValueError, match="not bytes"):
        make_dataset(ds.obs + np.float32(0.5), ds.act, ds.rew, ds.next_obs, ds.terminated,
                     ds.truncated, ds.meta)


# --------------------------------------------------------------------------- the hash
def test_the_hash_covers_every_observation_byte(data: dict[str, Path], tmp_path: Path) -> None:
    for name in ENVS:
        ds = load_dataset(str(data[name]))
        a, b = (save_dataset(ds, tmp_path / f"{name}-{copy}.h5") for copy in "ab")
        same = dataset_fingerprint(str(a))["sha256"]
        assert dataset_fingerprint(str(b))["sha256"] == same  # the same bytes, the same hash
        for array in ("obs", "next_obs"):
            changed = getattr(ds, array).copy()
            changed.reshape(-1)[-1] ^= 1  # one bit of one byte
            other = save_dataset(Dataset(**with_arrays(ds, **{array: changed}), meta=ds.meta),
                                 tmp_path / f"{name}-{array}.h5")
            assert dataset_fingerprint(str(other))["sha256"] != same, (name, array)


# --------------------------------------------------------------------------- buffers
@pytest.mark.parametrize("name", list(ENVS))
def test_a_buffer_of_the_dataset_holds_its_bytes(data: dict[str, Path], name: str) -> None:
    ds = load_dataset(str(data[name]))
    buffer = to_buffer(ds, discrete=True, action_low=None, action_high=None)
    assert buffer.obs_dtype == np.uint8 and buffer.codecs["obs"].array.dtype == np.uint8
    lanes, positions = np.zeros(len(ds), np.int64), np.arange(len(ds))
    assert np.array_equal(buffer.obs_at(lanes, positions), ds.obs)
    assert np.array_equal(buffer.next_obs_at(lanes, positions), ds.next_obs)
    # and back: a replay buffer's state becomes the same dataset
    back = from_replay_buffer(buffer.state_dict(), discrete=True, action_low=None,
                              action_high=None, meta=ds.meta)
    for array in ARRAYS:
        assert getattr(back, array).dtype == getattr(ds, array).dtype, array
        assert np.array_equal(getattr(back, array), getattr(ds, array)), array


def test_merge_keeps_bytes_and_refuses_other_spaces(data: dict[str, Path],
                                                    tmp_path: Path) -> None:
    """rltrain-collect --merge, in this process (its code behind the command)."""
    out = tmp_path / "two.npz"
    collect.run(collect.parser().parse_args(
        ["--merge", str(data["beacon"]), str(data["beacon"]), "--out", str(out)]))
    one, two = load_dataset(str(data["beacon"])), load_dataset(str(out))
    assert two.obs.dtype == np.uint8 and len(two) == 2 * len(one)
    assert np.array_equal(two.next_obs, np.concatenate([one.next_obs, one.next_obs]))
    with pytest.raises(UserError, match=r"has observation space Dict\(image: .* but .*"
                                        r"Box\(0, 255, \(10, 10, 3\), uint8\)"):
        collect.run(collect.parser().parse_args(
            ["--merge", str(data["stripes"]), str(data["beacon"]), "--out",
             str(tmp_path / "bad.h5")]))


# --------------------------------------------------------------------------- training
def test_bc_and_cql_train_on_each_dataset_and_their_policies_collect(
        data: dict[str, Path], tmp_path: Path) -> None:
    """BC and discrete CQL, offline on the image and the Dict dataset; then rltrain-collect
    RUN_DIR, whose trained policy takes the observations as the collector stores them (image
    bytes; Dict rows, unpacked per key) and writes uint8 again. One test: the runs are most of
    this file's time, and a module fixture would run them again in each pytest-xdist
    worker."""
    runs = {}
    for algo, env in RUNS:
        run_dir = tmp_path / f"{algo}-{env}"
        info = run_in_process(run_dir, *SMALL, f"algo={algo}", "env=gym",
                              f"env.id={CLI_IDS[env]}", f"dataset={data[env]}")
        assert info.status == "completed", (algo, env, info.error)
        runs[algo, env] = run_dir
    for (algo, env), run_dir in runs.items():
        rows = read_jsonl(run_dir / "epochs.jsonl")
        assert [r["gradient_step"] for r in rows] == [100, 200], (algo, env)
        assert all(r["env_step"] == 0 and r["test"]["n_episodes"] == 2 for r in rows)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "completed"
        assert summary["dataset"]["sha256"] == dataset_fingerprint(str(data[env]))["sha256"]
        ckpt = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
        assert set(ckpt["trainer"]["storage"]) == {"sampler"}  # the data referenced by hash

    cases = [("bc", "beacon", []), ("cql", "stripes", ["--noise", "0.3"])]
    for algo, env, extra in cases:
        res = command(collect.main, runs[algo, env], "--episodes", "4", *extra,
                      "--out", tmp_path / f"{algo}-{env}.h5")
        assert res.returncode == 0, res.stderr
        ds = load_dataset(str(tmp_path / f"{algo}-{env}.h5"))
        assert ds.obs.dtype == np.uint8 and ds.num_episodes == 4
        assert ds.meta["policy"]["kind"] == "policy" and ds.meta["policy"]["algo"] == algo
        assert space_from_dict(ds.meta["observation_space"]) == SPACES[env]


# --------------------------------------------------------------------------- Minari
def test_a_minari_dataset_of_dict_observations_is_packed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Minari keeps a Dict observation as one array per key; rltrain packs them into rows.
    Minari's file keeps the keys sorted, so such a dataset fits an env whose keys are."""
    minari = pytest.importorskip("minari", reason="minari is not installed (extra: minari)")
    from minari.data_collector.episode_buffer import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    env = gym.make(dataset_envs.BEACON_ID)
    env.action_space.seed(0)
    buffers, recorded = [], []
    for i in range(3):
        o, _ = env.reset(seed=i)
        obs, steps = [o], {"actions": [], "rewards": [], "terminations": [], "truncations": []}
        done = False
        while not done:
            a = env.action_space.sample()
            o, r, term, trunc, _ = env.step(a)
            obs.append(o)
            for key, value in zip(steps, (a, r, term, trunc), strict=True):
                steps[key].append(value)
            done = term or trunc
        stacked = {k: np.stack([x[k] for x in obs]) for k in obs[0]}
        recorded.append(stacked)
        buffers.append(EpisodeBuffer(id=i, infos={}, observations=stacked, **steps))
    with pytest.warns(UserWarning):  # Minari's notes on the missing env spec
        minari.create_dataset_from_buffers(
            "rltrain/beacon-v0", buffers, observation_space=env.observation_space,
            action_space=env.action_space, algorithm_name="random",
            code_permalink="https://example.org/rltrain", author="rltrain tests",
            author_email="tests@example.org", description="rltrain's Dict test dataset")
    ds = load_dataset("minari:rltrain/beacon-v0")
    space = space_from_dict(ds.meta["observation_space"])
    assert list(space.spaces) == ["flag", "image", "pos"]
    layout = DictLayout.of(space)
    assert ds.obs.dtype == np.uint8 and ds.obs.shape[1:] == (layout.row_bytes,)
    got = layout.unpack(ds.obs)
    for key in space.spaces:
        assert np.array_equal(got[key], np.concatenate([ep[key][:-1] for ep in recorded])), key
    check_spaces(ds, gym.spaces.Dict(dict(SPACES["beacon"].spaces)), env.action_space,
                 "Sorted-v0", "m")
    with pytest.raises(ConfigError, match=r"\(they differ in key order\)"):
        check_spaces(ds, SPACES["beacon"], env.action_space, dataset_envs.BEACON_ID, "m")
