"""Action masks (rltrain.spaces.masking): never sampled, never the argmax, in both conventions
(a Dict observation's ``action_mask`` key, ``info["action_mask"]``), through training, the
random warm-up, the deployable policy and the ONNX graph; and refused where they cannot work."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import mask_envs
from conftest import cheap_smoke, command, refusal, run_in_process
from rltrain.algorithms import ALGORITHMS
from rltrain.commands import evaluate, export
from rltrain.envs.vector import space_info
from rltrain.nets.actors_critics import CategoricalActor
from rltrain.nets.encoders import make_encoder
from rltrain.spaces.masking import (
    KEY,
    ActionMask,
    ActionMaskError,
    InfoActionMask,
    action_mask,
    mask_space_problem,
    random_allowed,
)
from rltrain.spaces.observations import DictLayout

BIN = Path(sys.executable).parent
SPACE = gym.spaces.Dict({"obs": gym.spaces.Box(0.0, 1.0, (3,), np.float32),
                         KEY: gym.spaces.MultiBinary(4)})


def packed(masks: np.ndarray) -> torch.Tensor:
    """Packed Dict rows (as buffers hold them) with these masks and random vectors."""
    layout = DictLayout.of(SPACE)
    obs = {"obs": np.random.default_rng(0).random((len(masks), 3)).astype(np.float32),
           KEY: masks.astype(np.int8)}
    return torch.from_numpy(layout.pack(obs))


MASKS = np.array([[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])


def test_mask_sets_disallowed_outputs_to_the_lowest_float_and_leaves_empty_rows():
    mask = action_mask(SPACE, 4)
    assert isinstance(mask, ActionMask)
    out = torch.arange(16.0).reshape(4, 4)
    got = mask(out, packed(MASKS))
    low = torch.finfo(torch.float32).min
    assert got[0].tolist() == [0.0, low, low, 3.0]
    assert got[1].tolist() == [low, 5.0, low, low]
    assert got[2].tolist() == [8.0, 9.0, 10.0, 11.0]  # allows nothing: left as it was
    assert got[3].tolist() == [12.0, 13.0, 14.0, 15.0]
    # a zero discount times a masked value is 0, not NaN (why the lowest float, not -inf)
    assert float(got[0, 1] * 0.0) == 0.0
    # the deployable policy's form: one tensor per key
    by_key = {"obs": torch.zeros(4, 3), KEY: torch.from_numpy(MASKS)}
    assert torch.equal(mask(out, by_key), got)
    # distributional outputs (batch, actions, atoms): each action's atoms together
    dist = mask(torch.zeros(4, 4, 3), packed(MASKS))
    assert (dist[0, 1] == low).all() and (dist[0, 0] == 0).all()


def test_a_masked_action_is_never_sampled_nor_the_argmax():
    """10,000 draws from a categorical actor whose unmasked logits favour the masked
    actions: none of them is masked, and every allowed action is drawn."""
    info = space_info_of(SPACE)
    actor = CategoricalActor(make_encoder(info, "auto"), [16], 4, "tanh", action_mask(SPACE, 4))
    with torch.no_grad():
        actor.net._last[1][:] = torch.tensor([0.0, 5.0, 5.0, 0.0])  # favour actions 1 and 2
    rows = np.repeat(MASKS[:1], 10_000, axis=0)  # allows 0 and 3
    obs = packed(rows)
    with torch.no_grad():
        drawn = actor.sample(obs).numpy()
        greedy = actor(obs).argmax(-1).numpy()
        logp, _ = actor.log_prob_entropy(obs, torch.ones(10_000, dtype=torch.long))
    assert set(np.unique(drawn)) == {0, 3}
    assert set(np.unique(greedy)) <= {0, 3}
    assert (logp < -1e30).all()  # a masked action's probability is 0


def test_random_allowed_draws_only_allowed_actions_uniformly():
    rng = np.random.default_rng(0)
    allowed = np.repeat(MASKS.astype(bool), 2500, axis=0)
    drawn = random_allowed(rng, allowed)
    assert allowed[np.arange(len(drawn)), drawn][np.repeat([0, 1, 3], 2500)].all()
    counts = np.bincount(drawn[:2500], minlength=4)  # row [1, 0, 0, 1]: half each
    assert counts[1] == counts[2] == 0 and abs(counts[0] - 1250) < 150
    assert len(np.unique(drawn[5000:7500])) == 4  # allows nothing: draws from all


@pytest.mark.parametrize(("space", "n", "message"), [
    (gym.spaces.Dict({KEY: gym.spaces.MultiBinary(3)}), 4, "one entry per action"),
    (gym.spaces.Dict({KEY: gym.spaces.Box(0, 5, (4,), np.float32)}), 4, "MultiBinary"),
    (gym.spaces.Dict({KEY: gym.spaces.MultiBinary(4)}), None, "Discrete actions only"),
])
def test_a_mask_that_cannot_mask_the_actions_is_refused(space, n, message):
    assert message in mask_space_problem(space, n)
    with pytest.raises(ActionMaskError, match=message):
        action_mask(space, n)


def test_info_action_mask_moves_the_mask_into_the_observation():
    env = InfoActionMask(mask_envs.MaskedEnv(in_info=True))
    assert set(env.observation_space.spaces) == {"observation", KEY}
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    np.testing.assert_array_equal(obs[KEY], info[KEY])
    obs, *_ , info = env.step(int(np.argmax(obs[KEY])))
    np.testing.assert_array_equal(obs[KEY], info[KEY])
    with pytest.raises(ActionMaskError, match="info has no 'action_mask'"):
        InfoActionMask(gym.make("CartPole-v1")).reset(seed=0)


def space_info_of(space: gym.spaces.Dict):
    class Envs:  # what space_info reads of a vector env
        single_observation_space = space
        single_action_space = gym.spaces.Discrete(4)
    return space_info(Envs(), "test", reward_threshold=0.0)


# ------------------------------------------------------------------------------- the CLI
MASKED = f"mask_envs:{mask_envs.MASKED_ID}"
INFO_MASKED = f"mask_envs:{mask_envs.INFO_MASKED_ID}"
MASKING = sorted(name for name, spec in ALGORITHMS.items()
                 if spec.masks and "offline" not in spec.trainers)


@pytest.mark.parametrize("algo", MASKING)
def test_masked_env_trains_evaluates_and_exports_without_a_disallowed_action(tmp_path, algo):
    """The env raises on a disallowed action: the training (random warm-up included), test,
    eval and ONNX check all run through it."""
    run = tmp_path / "run"
    # short epochs and few gradient steps: what is checked is every action taken, not learning
    info = run_in_process(run, "experiment=smoke", f"algo={algo}", "env=gym", f"env.id={MASKED}",
                          "trainer.epoch_num_steps=256", *cheap_smoke(algo))
    assert info.status == "completed", info.error  # a disallowed action fails the run
    if algo not in ("ppo", "c51"):  # a policy and a distributional Q head: eval and export
        return
    for main, *args in ((evaluate.main, "--episodes", "3"),
                        (export.main, "--out", str(tmp_path / "policy.onnx"))):
        res = command(main, run, *args)
        assert res.returncode == 0, res.stderr


def test_info_masks_work_through_the_wrapper_and_fail_loudly_without(tmp_path):
    info = run_in_process(tmp_path / "run", "experiment=smoke", "algo=ppo", "env=gym",
                          f"env.id={INFO_MASKED}",
                          "env.wrappers=[rltrain.spaces.masking.InfoActionMask]")
    assert info.status == "completed", info.error


def test_an_algorithm_that_ignores_masks_is_refused_on_a_masked_env(tmp_path):
    ignoring = sorted(name for name, spec in ALGORITHMS.items()
                      if not spec.masks and "offline" not in spec.trainers
                      and "discrete" in spec.actions)
    if not ignoring:
        pytest.skip("every online discrete algorithm applies masks")
    message = refusal(tmp_path / "run", "experiment=smoke", f"algo={ignoring[0]}", "env=gym",
                      f"env.id={MASKED}")
    assert "carry an action mask" in message and "algo=ppo" in message
    assert "Traceback" not in message
