"""Datasets of frame-stacked images hold each frame once
(rltrain.data.datasets.frames.chain_frames): rltrain-collect writes the frames and the indices
of each observation's frames, reading rebuilds every observation byte for byte, observations
that are not chained stacks are written whole, and a file whose indices or frames are wrong is
refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

import dataset_envs
from conftest import command
from rltrain.commands import collect
from rltrain.config.schemas import ConfigError
from rltrain.data.datasets.dataset import make_dataset
from rltrain.data.datasets.files import file_arrays, save_dataset
from rltrain.data.datasets.frames import FRAME_ARRAYS, chain_frames
from rltrain.data.datasets.sources import load_dataset

STACKED = f"dataset_envs:{dataset_envs.STACKED_ID}"


@pytest.fixture(scope="module")
def stacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Random episodes of the frame-stacked env, written by rltrain-collect."""
    where = tmp_path_factory.mktemp("stacked")
    out = where / "stacked.h5"
    res = command(collect.main, "--random", "--env", STACKED, "--episodes", "40", "--out", out)
    assert res.returncode == 0, res.stderr
    return out


def test_collect_writes_each_frame_once_and_reading_rebuilds_every_stack(stacked: Path,
                                                                          tmp_path: Path):
    with h5py.File(stacked) as f:
        assert set(FRAME_ARRAYS) <= set(f) and not {"obs", "next_obs"} & set(f)
        frames, index = f["frames"][()], f["obs_frames"][()]
    ds = load_dataset(str(stacked))
    n, k = len(ds), dataset_envs.STACK
    assert ds.obs.shape == (n, k, 10, 10) and ds.obs.dtype == np.uint8
    # k + L frames an episode of L transitions, not 2 k L
    assert len(frames) == n + k * ds.num_episodes
    np.testing.assert_array_equal(frames[index], ds.obs)
    # the stacks chain: each next observation is the following one within an episode
    inside = ~ds.dones[:-1]
    np.testing.assert_array_equal(ds.next_obs[:-1][inside], ds.obs[1:][inside])
    # the same dataset written as .npz holds the same frames and reads back the same
    again = load_dataset(str(save_dataset(ds, tmp_path / "again.npz")))
    for name in ("obs", "next_obs", "act", "rew", "terminated", "truncated"):
        np.testing.assert_array_equal(getattr(again, name), getattr(ds, name))
    with np.load(tmp_path / "again.npz") as z:
        assert "frames" in z.files and "obs" not in z.files
        # (L + k) frames, not 2 k L: about 4x fewer with these 4-5 step episodes
        assert z["frames"].nbytes * 4 < ds.obs.nbytes + ds.next_obs.nbytes


def test_observations_that_are_not_chained_stacks_are_written_whole(stacked: Path,
                                                                    tmp_path: Path):
    ds = load_dataset(str(stacked))
    changed = ds.next_obs.copy()
    changed[3, 0] ^= 1  # one byte of an older frame of one next observation: no longer a shift
    assert chain_frames(ds.obs, changed, ds.dones) is None
    other = make_dataset(ds.obs, ds.act, ds.rew, changed, ds.terminated, ds.truncated, ds.meta)
    assert {"obs", "next_obs"} <= set(file_arrays(other))
    back = load_dataset(str(save_dataset(other, tmp_path / "whole.h5")))
    np.testing.assert_array_equal(back.next_obs, changed)
    # vectors and single frames are never chained
    assert chain_frames(ds.obs[:, 0], ds.next_obs[:, 0], ds.dones) is None
    assert chain_frames(ds.obs.astype(np.float32), ds.next_obs, ds.dones) is None


def rewrite(src: Path, dst: Path, **arrays: np.ndarray) -> Path:
    with h5py.File(src) as f:
        meta, content = f.attrs["meta"], {name: f[name][()] for name in f}
    content.update(arrays)
    with h5py.File(dst, "w") as f:
        f.attrs["meta"] = meta
        for name, a in content.items():
            f.create_dataset(name, data=a)
    return dst


@pytest.mark.parametrize(("change", "message"), [
    (lambda a: {"obs_frames": a["obs_frames"] + 10**6}, "has obs_frames naming frame"),
    (lambda a: {"next_obs_frames": -a["next_obs_frames"] - 1},
     "has next_obs_frames naming frame -"),
    (lambda a: {"obs_frames": a["obs_frames"].astype(np.float64)}, "integer frame indices"),
    (lambda a: {"obs_frames": a["obs_frames"][:, :2]}, "integer frame indices"),
    (lambda a: {"frames": a["frames"].astype(np.int16)}, "not uint8 images"),
    (lambda a: {"frames": a["frames"][:, 0, 0]}, "not uint8 images"),
])
def test_wrong_frames_or_indices_are_refused_in_one_line(stacked: Path, tmp_path: Path, change,
                                                         message: str):
    with h5py.File(stacked) as f:
        arrays = {name: f[name][()] for name in FRAME_ARRAYS}
    bad = rewrite(stacked, tmp_path / "bad.h5", **change(arrays))
    with pytest.raises(ConfigError) as e:
        load_dataset(str(bad))
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert str(bad) in str(e.value)


def test_frames_that_rebuild_observations_outside_the_space_are_refused(stacked: Path,
                                                                        tmp_path: Path):
    """The rebuilt observations meet every check a file's obs array does (here: a frame of
    another shape than the space's)."""
    with h5py.File(stacked) as f:
        frames = f["frames"][()]
    bad = rewrite(stacked, tmp_path / "shape.h5", frames=frames[:, :5])
    with pytest.raises(ConfigError) as e:
        load_dataset(str(bad))
    assert "has obs of shape (4, 5, 10)" in str(e.value), str(e.value)
    meta = json.loads(h5py.File(stacked).attrs["meta"])
    assert meta["observation_space"]["shape"] == [4, 10, 10]
