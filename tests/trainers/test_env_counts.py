"""Every observation layout works with any number of envs, train and test (issue 45 §2).

A Dict observation is packed into one row of bytes per env and unpacked into tensors by
reinterpreting slices of those bytes (rltrain.spaces.observations). With one env, a slice of the
only row kept the parent's row stride, and reinterpreting it failed at the first step; with
two or more it did not, which is why only one env showed it. So each layout runs here with
1, 2 and 3 envs, on-policy (a rollout) and off-policy (a replay buffer), through the
composition root the CLI calls.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import mask_envs
import pixel_envs
from conftest import read_jsonl, run_in_process
from rltrain.spaces.observations import DictLayout

#: (name, overrides): one env of each observation layout rltrain stores
LAYOUTS = {
    "vector": ["env=cartpole"],
    "image": ["env=gym", f"env.id={pixel_envs.PIXELS_ID}"],
    "dict": ["env=gym", f"env.id={pixel_envs.DICT_ID}"],
    "dict with a mask": ["env=gym", f"env.id={mask_envs.MASKED_ID}"],
    "mask in info": ["env=gym", f"env.id={mask_envs.INFO_MASKED_ID}",
                     "env.wrappers=[rltrain.spaces.masking.InfoActionMask]"],
}
#: one short epoch: a collection step or two, an update, a test step of 3 episodes
SHORT = ["trainer.max_epochs=1", "trainer.epoch_num_steps=96", "trainer.stop_score=null",
         "trainer.test_step_num_episodes=3", "logger.tensorboard=false"]
ALGOS = {
    "ppo": ["algo=ppo", "trainer.collection_step_num_env_steps=48", "trainer.batch_size=24"],
    "dqn": ["algo=dqn", "trainer.random_warmup_env_steps=24", "trainer.batch_size=16",
            "buffer.size=500", "algo.target_update_interval=8"],
}


@pytest.mark.parametrize("envs", [1, 3])
@pytest.mark.parametrize("algo", sorted(ALGOS))
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_layout_trains_and_tests_with_one_or_an_odd_number_of_envs(
        tmp_path: Path, layout: str, algo: str, envs: int) -> None:
    run_dir = tmp_path / "run"
    info = run_in_process(run_dir, *ALGOS[algo], *LAYOUTS[layout], *SHORT,
                          f"env.num_train_envs={envs}", f"env.num_test_envs={envs}")
    assert info.status == "completed", info.error
    (record,) = read_jsonl(run_dir / "epochs.jsonl")
    assert record["test"]["n_episodes"] == 3
    assert record["env_step"] >= 96


def test_one_train_env_and_two_test_envs_and_the_other_way_round(tmp_path: Path) -> None:
    """Train and test envs are counted apart: each side alone with one env."""
    for train, test in ((1, 2), (2, 1)):
        run_dir = tmp_path / f"run{train}{test}"
        info = run_in_process(run_dir, *ALGOS["ppo"], *LAYOUTS["dict with a mask"], *SHORT,
                              f"env.num_train_envs={train}", f"env.num_test_envs={test}")
        assert info.status == "completed", info.error


SPACE = gym.spaces.Dict({
    "image": gym.spaces.Box(0, 255, (3, 3, 1), np.uint8),
    "flag": gym.spaces.Discrete(5),
    "pos": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
    "mask": gym.spaces.MultiBinary(5),
    "many": gym.spaces.MultiDiscrete([2, 7]),
})


@pytest.mark.parametrize("n", [1, 2, 3])
def test_unpacking_gives_back_each_key_for_any_number_of_rows(n: int) -> None:
    """Packed rows unpack to the same values, for a whole batch and for one-row slices of a
    bigger batch (where the slice's stride is the parent's)."""
    layout = DictLayout.of(SPACE)
    SPACE.seed(n)
    obs = {key: np.stack([SPACE[key].sample() for _ in range(n)]) for key in layout.keys}
    rows = torch.from_numpy(layout.pack(obs))
    for batch in (rows, torch.cat([rows, rows])[n - 1: n]):
        got = layout.unpack_torch(batch)
        for key in layout.keys:
            want = obs[key][-len(batch):]
            assert np.array_equal(got[key].numpy().reshape(want.shape), want), key
