"""Image and Dict observations on their way to a network: the CNN encoders and their choice,
uint8 scaling and channel order inside the network, Dict packing (numpy and torch), the dict
encoder, PPO's shared encoder, and the deployable policy taking the env's own observation."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rltrain.algorithms.base import policy_inputs
from rltrain.algorithms.dqn import DQN, DQNConfig
from rltrain.algorithms.ppo import PPO, PPOConfig
from rltrain.common.types import SpaceInfo
from rltrain.config.schemas import ConfigError
from rltrain.nets.encoders import ENCODERS, make_encoder
from rltrain.nets.encoders.dict import DictEncoder
from rltrain.nets.encoders.image import ConvEncoder, ImageInput, channels_last
from rltrain.nets.encoders.registry import choose
from rltrain.spaces.observations import DictLayout, ObservationSpaceError, Packer, stored_shape

CPU = torch.device("cpu")
ATARI = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
MINATAR = gym.spaces.Box(0, 1, (10, 10, 4), np.uint8)
CARRACING = gym.spaces.Box(0, 255, (96, 96, 3), np.uint8)
GRID = gym.spaces.Dict({
    "image": gym.spaces.Box(0, np.array([10, 5, 2], np.uint8) * np.ones((7, 7, 1), np.uint8),
                            (7, 7, 3), np.uint8),
    "direction": gym.spaces.Discrete(4),
    "pos": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
    "bits": gym.spaces.MultiBinary(5),
    "many": gym.spaces.MultiDiscrete([3, 2]),
})


def info_of(space: gym.Space, discrete: bool = True) -> SpaceInfo:
    if discrete:
        return SpaceInfo(stored_shape(space), 4, (), None, None, None, "test", obs_space=space)
    return SpaceInfo(stored_shape(space), None, (2,), -np.ones(2, np.float32),
                     np.ones(2, np.float32), None, "test", obs_space=space)


def batch(space: gym.Space, n: int, seed: int = 0) -> np.ndarray:
    """``n`` observations as the collector stores them (Dict ones packed)."""
    space.seed(seed)
    if isinstance(space, gym.spaces.Dict):
        samples = [space.sample() for _ in range(n)]
        return Packer(space)({k: np.stack([s[k] for s in samples]) for k in space.spaces})
    return np.stack([space.sample() for _ in range(n)])


# --------------------------------------------------------------------------- the choice
@pytest.mark.parametrize(("space", "name"), [
    (ATARI, "nature"), (CARRACING, "nature"), (MINATAR, "minatar"),
    (gym.spaces.Box(0, 255, (7, 7, 3), np.uint8), "minatar"), (GRID, "dict"),
    (gym.spaces.Box(-1.0, 1.0, (4, 84, 84), np.float32), "flat"),
])
def test_auto_chooses_by_the_observation_space(space, name):
    assert choose(info_of(space)).name == name


def test_impala_by_name_and_flat_refuses_images_by_name():
    encoder = make_encoder(info_of(ATARI), "impala")
    assert encoder(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape == (2, 256)
    with pytest.raises(ConfigError, match=r"algo.encoder=flat cannot encode test's observations"
                                          r".*use algo.encoder=auto \(it takes nature here\), "
                                          r"or minatar or impala$"):
        choose(info_of(ATARI), "flat")
    with pytest.raises(ConfigError, match="algo.encoder=nature cannot encode"):
        choose(info_of(MINATAR), "nature")  # 10x10 is below its 36x36


def test_an_unsupported_dict_key_is_refused_naming_it():
    text = gym.spaces.Dict({"image": MINATAR, "mission": gym.spaces.Text(10)})
    with pytest.raises(ObservationSpaceError, match=r"observation key 'mission' is a Text.*"
                                                    r"FilterObservation.*env=minigrid"):
        DictLayout.of(text)
    with pytest.raises(ConfigError, match=r"no observation encoder takes.*key 'mission'"):
        choose(SpaceInfo((1,), 4, (), None, None, None, "test", obs_space=text))


# --------------------------------------------------------------------------- scaling, layout
def test_image_input_scales_by_the_space_bounds_and_puts_channels_first():
    x = torch.from_numpy(batch(GRID["image"], 5))
    out = ImageInput(GRID["image"])(x)
    want = x.permute(0, 3, 1, 2).float() / torch.tensor([10.0, 5.0, 2.0]).reshape(1, 3, 1, 1)
    assert out.shape == (5, 3, 7, 7) and torch.allclose(out, want)
    atari = torch.from_numpy(batch(ATARI, 2))
    assert torch.allclose(ImageInput(ATARI)(atari), atari.float() / 255)  # CHW: as it is
    assert channels_last((10, 10, 10)) and channels_last((96, 96, 3))
    assert not channels_last((4, 84, 84))
    # either way the convolutions get NHWC memory (the faster layout for oneDNN's kernels)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert ImageInput(ATARI)(atari).is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("space", [ATARI, CARRACING], ids=["chw", "hwc"])
def test_a_cnn_on_nhwc_memory_computes_what_it_computes_on_nchw(space):
    encoder = make_encoder(info_of(space))
    assert isinstance(encoder, ConvEncoder)
    raw = torch.from_numpy(batch(space, 4))
    nchw = encoder.torso(encoder.input(raw).contiguous())
    assert torch.allclose(encoder(raw), nchw, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("space", [ATARI, MINATAR, CARRACING], ids=["nature", "minatar", "wide"])
def test_a_cnn_takes_uint8_and_gives_the_same_features_as_floats(space):
    encoder = make_encoder(info_of(space))
    assert isinstance(encoder, ConvEncoder)
    raw = torch.from_numpy(batch(space, 3))
    out = encoder(raw)
    assert out.shape == (3, encoder.out_dim)
    assert torch.equal(out, encoder(raw.float()))  # uint8 or its float values: one answer
    out.sum().backward()
    assert all(p.grad is not None for p in encoder.parameters())


def test_dict_packing_round_trips_in_numpy_and_torch():
    layout = DictLayout.of(GRID)
    rows = batch(GRID, 6)
    assert rows.dtype == np.uint8 and rows.shape == (6, layout.row_bytes)
    # 147 image bytes + 8 (direction) + 12 (pos) + 5 (bits) + 16 (many)
    assert layout.row_bytes == 147 + 8 + 12 + 5 + 16
    back = layout.unpack(rows)
    tensors = layout.unpack_torch(torch.from_numpy(rows))
    GRID.seed(0)
    for i in range(6):
        sample = GRID.sample()
        for key in GRID.spaces:
            assert np.array_equal(back[key][i], sample[key]), key
            assert np.array_equal(tensors[key][i].numpy(), sample[key]), key
    assert tensors["image"].dtype == torch.uint8 and tensors["direction"].dtype == torch.int64


def test_the_dict_encoder_takes_packed_rows_or_one_tensor_per_key():
    encoder = make_encoder(info_of(GRID))
    assert isinstance(encoder, DictEncoder)
    # minatar CNN on the 7x7 image (16 x 5 x 5), one-hots 4 + 2x(3+2)... bits as floats
    assert encoder.out_dim == 16 * 5 * 5 + 4 + 3 + 5 + 5
    rows = batch(GRID, 4)
    per_key = {k: torch.from_numpy(v) for k, v in DictLayout.of(GRID).unpack(rows).items()}
    assert torch.equal(encoder(torch.from_numpy(rows)), encoder(per_key))
    onehot = encoder.encoders["direction"](torch.tensor([0, 3]))
    assert torch.equal(onehot, torch.tensor([[1.0, 0, 0, 0], [0, 0, 0, 1.0]]))
    many = encoder.encoders["many"](torch.tensor([[2, 1]]))
    assert torch.equal(many, torch.tensor([[0.0, 0, 1, 0, 1]]))
    shifted = DictEncoder(gym.spaces.Dict({"d": gym.spaces.Discrete(3, start=-1),
                                           "m": gym.spaces.MultiDiscrete([2, 2], start=[5, 1])}))
    out = shifted({"d": torch.tensor([-1, 1]), "m": torch.tensor([[6, 1], [5, 2]])})
    assert torch.equal(out, torch.tensor([[1.0, 0, 0, 0, 1, 1, 0], [0, 0, 1, 1, 0, 0, 1]]))


# --------------------------------------------------------------------------- algorithms
def test_ppo_shares_its_encoder_on_images_and_not_on_vectors():
    ppo = PPO(PPOConfig(hidden_sizes=[32]), info_of(MINATAR), CPU, 0)
    assert ppo.pi.encoder is ppo.critic.encoder
    names = [n for n, _ in ppo.named_parameters()]
    assert len(names) == len(set(id(p) for p in ppo.parameters()))  # each once, optimised once
    apart = PPO(PPOConfig(hidden_sizes=[32], share_encoder=False), info_of(MINATAR), CPU, 0)
    assert apart.pi.encoder is not apart.critic.encoder
    vector = PPO(PPOConfig(), info_of(gym.spaces.Box(-1, 1, (3,), np.float32)), CPU, 0)
    assert vector.pi.encoder is not vector.critic.encoder


@pytest.mark.parametrize("space", [MINATAR, GRID], ids=["image", "dict"])
def test_the_deployable_policy_takes_the_envs_own_observations(space):
    dqn = DQN(DQNConfig(hidden_sizes=[16]), info_of(space), CPU, 0)
    obs = batch(space, 8)
    greedy = dqn.act(obs, deterministic=True, progress=None)  # type: ignore[arg-type]
    policy = dqn.deployable()
    inputs = policy_inputs(dqn.info, obs)
    assert len(inputs) == (len(GRID.spaces) if space is GRID else 1)
    assert inputs[0].dtype in (torch.uint8, torch.int64)  # raw: no float conversion outside
    with torch.inference_mode():
        assert np.array_equal(policy(*inputs).numpy(), greedy)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["nature", "minatar", "impala", "dict"])
def test_every_encoder_runs_on_cuda(name):
    space = GRID if name == "dict" else (MINATAR if name == "minatar" else ATARI)
    encoder = ENCODERS[name].build(space).to("cuda")
    out = encoder(torch.from_numpy(batch(space, 4)).to("cuda"))
    assert out.is_cuda and torch.isfinite(out).all()


@pytest.mark.parametrize("space", [ATARI, CARRACING], ids=["chw", "hwc"])
def test_image_input_never_scales_the_callers_tensor_in_place(space):
    """A float input already laid out as the convolutions take it is not copied, so the
    in-place scaling must not touch it."""
    x = torch.from_numpy(batch(space, 2)).float()
    if not channels_last(space.shape):
        x = x.contiguous(memory_format=torch.channels_last)
    before = x.clone()
    out = ImageInput(space)(x)
    assert torch.equal(x, before)
    want = before.permute(0, 3, 1, 2) if channels_last(space.shape) else before
    assert torch.allclose(out, want / 255)
