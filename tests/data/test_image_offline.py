"""The offline algorithms that take only continuous actions (IQL, TD3+BC; listed from the
registry) trained on datasets of image and Dict observations that
rltrain-collect wrote from the continuous pixel envs (BC and CQL run on discrete ones in
test_image_datasets.py)."""

from __future__ import annotations

import pytest

from conftest import command, read_jsonl, run_in_process
from pixel_envs import DICT_ID, PIXELS_ID
from rltrain.algorithms import ALGORITHMS, DISCRETE
from rltrain.commands import collect

ALGOS = sorted(n for n, s in ALGORITHMS.items()
               if "offline" in s.trainers and DISCRETE not in s.actions)


@pytest.mark.parametrize("env_id", [PIXELS_ID, DICT_ID], ids=["image", "dict"])
def test_continuous_offline_algorithms_train_on_image_and_dict_datasets(tmp_path, env_id):
    assert ALGOS  # iql and td3bc today
    data = tmp_path / "data.h5"
    res = command(collect.main, "--random", "--env", f"pixel_envs:{env_id}",
                  "--env-kwargs", '{"continuous": true}', "--steps", "1000", "--out", data)
    assert res.returncode == 0, res.stderr
    for algo in ALGOS:
        run_dir = tmp_path / algo
        run_in_process(run_dir, "experiment=smoke", f"algo={algo}", "env=gym",
                       f"env.id=pixel_envs:{env_id}", "env.kwargs.continuous=true",
                       f"dataset={data}", "trainer.batch_size=32", "trainer.epoch_num_steps=50")
        rows = read_jsonl(run_dir / "epochs.jsonl")
        assert [r["epoch"] for r in rows] == [1, 2]
        assert 0 <= rows[-1]["test"]["return_mean"] <= 20
