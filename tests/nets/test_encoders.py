"""Observation encoders (rltrain.nets.encoders): the choice ``algo.encoder`` makes (auto: by
priority among those that accept the space), its refusals by name, a registered encoder used by
every network of every algorithm, and the flat encoder keeping the numbers of the plain MLPs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from algo_helpers import (
    ALGORITHM_SPACE_IDS,
    ALGORITHM_SPACES,
    CPU,
    SMALL,
    build,
    learnable,
    progress,
    random_batch,
    random_rollout,
)
from conftest import TESTS
from rltrain.algorithms import ALGORITHMS
from rltrain.algorithms.ppo import PPO, PPOConfig
from rltrain.assembly.checked_config import settings
from rltrain.assembly.registered_schemas import register_configs
from rltrain.common.types import SpaceInfo
from rltrain.config.schemas import ConfigError
from rltrain.nets.actors_critics import (
    CategoricalActor,
    DeterministicActor,
    EncodedMLP,
    GaussianActor,
    QCritics,
    SquashedGaussianActor,
    TanhMeanGaussianActor,
    mlp,
)
from rltrain.nets.encoders import ENCODERS, Encoder, EncoderSpec, make_encoder, register
from rltrain.nets.encoders.flat import FlatEncoder
from rltrain.nets.encoders.registry import choose


def info_of(space: gym.Space | None, shape: tuple[int, ...] = (3,), discrete: bool = False
            ) -> SpaceInfo:
    """A SpaceInfo whose observation space is ``space`` (None: left to the default)."""
    if space is not None and space.shape is not None:
        shape = space.shape
    if discrete:
        return SpaceInfo(shape, 3, (), None, None, None, "test", obs_space=space)
    return SpaceInfo(shape, None, (2,), -np.ones(2, np.float32), np.ones(2, np.float32), None,
                     "test", obs_space=space)


# --------------------------------------------------------------------------- a test encoder
class DoublingEncoder(Encoder):
    """A test encoder of matrix observations: their entries, doubled."""

    def __init__(self, space: gym.Space) -> None:
        super().__init__()
        self.out_dim = int(np.prod(space.shape))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return 2.0 * obs.reshape(obs.shape[0], -1)


DUMMY = "test-doubling"
MATRIX = gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32)
VECTOR = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)


def accepts_matrices(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 2


@contextlib.contextmanager
def registered(priority: int) -> Iterator[EncoderSpec]:
    """The test encoder in the registry for the duration, at ``priority``."""
    spec = register(EncoderSpec(name=DUMMY, accepts=accepts_matrices, build=DoublingEncoder,
                                priority=priority, description="doubled matrices (a test)"))
    try:
        yield spec
    finally:
        ENCODERS.pop(DUMMY, None)


@pytest.fixture
def dummy_encoder() -> Iterator[EncoderSpec]:
    """The test encoder, ahead of the flat one for the spaces it accepts."""
    with registered(priority=10) as spec:
        yield spec


# --------------------------------------------------------------------------- the choice
@pytest.mark.parametrize("space", [
    None,
    gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
    gym.spaces.Box(-np.inf, np.inf, (17,), np.float64),
    gym.spaces.Box(0, 255, (84, 3), np.uint8),
    gym.spaces.Box(-1.0, 1.0, (4, 2), np.float32),
    gym.spaces.Box(-1.0, 1.0, (), np.float32),
], ids=["default", "vector", "float64", "uint8-matrix", "matrix", "scalar"])
def test_auto_chooses_flat_for_any_box_but_an_image(space):
    info = info_of(space)
    assert choose(info, "auto") is ENCODERS["flat"] and choose(info) is ENCODERS["flat"]
    encoder = make_encoder(info)
    assert type(encoder) is FlatEncoder and encoder.out_dim == info.obs_dim
    obs = torch.randn(5, *info.obs_shape)
    assert torch.equal(encoder(obs), obs.reshape(5, info.obs_dim))


def test_an_unknown_name_is_refused_naming_the_options(dummy_encoder):
    with pytest.raises(ConfigError, match=rf"algo.encoder=cnn is not an encoder; use auto or one "
                                          rf"of dict, flat, impala, minatar, nature, {DUMMY}$"):
        choose(info_of(VECTOR), "cnn")


def test_a_name_that_cannot_take_the_space_is_refused_naming_what_can(dummy_encoder):
    with pytest.raises(ConfigError, match=rf"algo.encoder={DUMMY} cannot encode test's "
                                          r"observations \(Box.*\); use algo.encoder=auto "
                                          r"\(it takes flat here\)$"):
        choose(info_of(VECTOR), DUMMY)
    discrete = gym.spaces.Discrete(5)
    with pytest.raises(ConfigError, match=r"algo.encoder=flat cannot encode test's observations "
                                          r"\(Discrete\(5\)\); no registered encoder takes "
                                          r"them$"):
        choose(info_of(discrete, shape=()), "flat")
    with pytest.raises(ConfigError, match=rf"no observation encoder takes test's observations "
                                          rf"\(Discrete\(5\)\): algo.encoder=auto found none "
                                          rf"among dict, flat, impala, minatar, nature, {DUMMY}$"):
        choose(info_of(discrete, shape=()), "auto")


def test_images_go_to_a_cnn_and_the_flat_encoder_refuses_them_by_name():
    """(More in test_image_encoders.py.)"""
    image = gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)
    assert choose(info_of(image), "auto") is ENCODERS["nature"]
    with pytest.raises(ConfigError, match=r"algo.encoder=flat cannot encode"):
        choose(info_of(image), "flat")


def test_a_registered_encoder_is_chosen_by_name_and_by_auto_where_it_leads(dummy_encoder):
    assert choose(info_of(MATRIX), DUMMY) is dummy_encoder
    assert choose(info_of(MATRIX), "auto") is dummy_encoder  # priority 10 over flat's 0
    assert choose(info_of(VECTOR), "auto") is ENCODERS["flat"]  # it does not accept vectors
    assert choose(info_of(MATRIX), "flat") is ENCODERS["flat"]  # named: flat all the same
    assert type(make_encoder(info_of(MATRIX))) is DoublingEncoder


def test_auto_prefers_a_higher_priority_only():
    with registered(priority=-1) as spec:
        assert choose(info_of(MATRIX), "auto") is ENCODERS["flat"]
        assert choose(info_of(MATRIX), DUMMY) is spec
    assert DUMMY not in ENCODERS


def test_register_refuses_auto_and_a_second_encoder_of_a_name():
    with pytest.raises(ValueError, match="'auto' is algo.encoder's automatic choice"):
        register(EncoderSpec(name="auto", accepts=accepts_matrices, build=DoublingEncoder))
    with pytest.raises(ValueError, match="two encoders are registered as 'flat'"):
        register(EncoderSpec(name="flat", accepts=accepts_matrices, build=DoublingEncoder))
    assert ENCODERS["flat"].build is not DoublingEncoder and "auto" not in ENCODERS


def test_settings_refuse_an_unknown_encoder_by_name():
    register_configs()
    with initialize_config_dir(config_dir=str(TESTS.parent / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["algo=sac", "env=pendulum", "algo.encoder=cnn"])
    with pytest.raises(ConfigError, match="algo.encoder=cnn is not an encoder; use auto or one "
                                          "of dict, flat, impala, minatar, nature"):
        settings(cfg)


# --------------------------------------------------------------------------- in every network
def networks(algorithm: torch.nn.Module) -> list[torch.nn.Module]:
    """The networks that start with an encoder: actors, critics, value and Q-networks (the
    target copies included)."""
    nets = [m for m in algorithm.modules()
            if not isinstance(m, Encoder) and isinstance(getattr(m, "encoder", None), Encoder)]
    # the outermost only: a recurrent network's head reads the core's features through an
    # encoder of its own, which is part of that network, not another one
    return [n for n in nets
            if not any(n is not o and any(n is m for m in o.modules()) for o in nets)]


@pytest.mark.parametrize(("name", "info"), ALGORITHM_SPACES, ids=ALGORITHM_SPACE_IDS)
def test_an_algorithm_built_with_a_named_encoder_uses_it_in_every_network(dummy_encoder, name,
                                                                         info):
    """algo.encoder=<name>: every network has its own encoder of that kind, and none is flat;
    the algorithm acts on and learns from (2, 3) observations."""
    info = info_of(MATRIX, discrete=info.discrete)
    algorithm = build(name, info, encoder=DUMMY)
    nets = networks(algorithm)
    # the actor, and a critic or a target network besides, but for behaviour cloning
    in_actor = [net for net in nets if any(net is m for m in algorithm.actor().modules())]
    assert len(in_actor) == 1 and len(nets) >= 1 + (name != "bc")
    assert all(type(net.encoder) is DoublingEncoder for net in nets), nets
    # one each, none shared between nets, and no other observation encoder anywhere (a
    # recurrent head's encoder of the core's features is not one)
    encoders = [m for m in algorithm.modules() if isinstance(m, DoublingEncoder)]
    assert len({id(e) for e in encoders}) == len(nets)
    assert not any(isinstance(m, FlatEncoder) for m in algorithm.modules())
    obs = np.zeros((4, 2, 3), np.float32)
    act = algorithm.act(obs, deterministic=True, progress=progress(0))
    assert act.shape == (4, *info.action_shape)
    if "onpolicy" in ALGORITHMS[name].trainers:
        algorithm.update(learnable(algorithm, random_rollout(info)), batch_size=8,
                         repetitions=1, progress=progress(0))
    else:
        algorithm.update(random_batch(info), progress=progress(0))


def test_the_encoder_is_in_the_networks_forward_pass(dummy_encoder):
    """The doubling encoder's features are what the layers see: an actor on it equals one on
    the flat encoder whose first layer's weights are doubled."""
    torch.manual_seed(0)
    doubled = CategoricalActor(DoublingEncoder(MATRIX), [8], 3, "tanh")
    plain = CategoricalActor(FlatEncoder((2, 3)), [8], 3, "tanh")
    plain.load_state_dict(doubled.state_dict())
    with torch.no_grad():
        plain.net.layers[0].weight.mul_(2.0)
    obs = torch.randn(5, 2, 3)
    torch.testing.assert_close(doubled(obs), plain(obs))


# --------------------------------------------------------------------------- the same numbers
FLAT3 = SpaceInfo((3,), None, (2,), -np.ones(2, np.float32), np.ones(2, np.float32), None, "t")

ACTORS = [  # (build on an encoder, output size of its MLP, activation, deterministic head)
    (lambda enc: CategoricalActor(enc, [16, 16], 4, "tanh"), 4, "tanh", lambda out: out),
    (lambda enc: GaussianActor(enc, [16, 16], 2, "tanh", -0.5), 2, "tanh", lambda out: out),
    (lambda enc: TanhMeanGaussianActor(enc, [16, 16], 2, "relu"), 2, "relu", torch.tanh),
    (lambda enc: SquashedGaussianActor(enc, [16, 16], 2, "relu"), 4, "relu",
     lambda out: torch.tanh(out[:, :2])),
    (lambda enc: DeterministicActor(enc, [16, 16], 2, "relu"), 2, "relu", torch.tanh),
]


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize(("make", "out_dim", "activation", "head"), ACTORS,
                         ids=["categorical", "gaussian", "tanh-mean", "squashed", "deterministic"])
def test_an_actor_on_the_flat_encoder_is_the_plain_mlp(make, out_dim, activation, head, seed):
    """Built after torch.manual_seed(s), an actor on the flat encoder has exactly the
    parameters (values and names, under ``net.``) of rltrain.nets.actors_critics.mlp built after the
    same seed, with the policy head's gain 0.01 (how actors were built on observation vectors
    before encoders), and computes exactly its outputs."""
    torch.manual_seed(seed)
    actor = make(make_encoder(FLAT3))
    torch.manual_seed(seed)
    ref = mlp(3, [16, 16], out_dim, activation, 0.01)
    ours = {k.removeprefix("net."): v for k, v in actor.state_dict().items()
            if k.startswith("net.")}
    assert list(ours) == list(ref.state_dict())
    assert all(torch.equal(v, ref.state_dict()[k]) for k, v in ours.items())
    assert set(actor.state_dict()) - {f"net.{k}" for k in ours} <= {"log_std"}
    obs = torch.randn(9, 3)
    with torch.no_grad():
        assert torch.equal(actor.outputs(obs), ref(obs))
        assert torch.equal(actor(obs), head(ref(obs)))


def test_value_networks_and_critics_on_the_flat_encoder_keep_their_numbers():
    """EncodedMLP is rltrain.nets.actors_critics.mlp, parameter for parameter; QCritics initialises
    each member as before encoders (orthogonal per member, in order), on cat(obs, act)."""
    torch.manual_seed(3)
    value = EncodedMLP(make_encoder(FLAT3), [16], 1, "tanh", 1.0)
    torch.manual_seed(3)
    ref = mlp(3, [16], 1, "tanh", 1.0)
    assert value.state_dict().keys() == ref.state_dict().keys()
    assert all(torch.equal(v, ref.state_dict()[k]) for k, v in value.state_dict().items())
    obs = torch.randn(6, 3)
    with torch.no_grad():
        assert torch.equal(value(obs), ref(obs))

    torch.manual_seed(4)
    critics = QCritics(make_encoder(FLAT3), 2, [16, 8], "relu", n=2)
    torch.manual_seed(4)
    sizes = [5, 16, 8, 1]
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        w = torch.empty(2, a, b)
        for k in range(2):
            torch.nn.init.orthogonal_(w[k].T, 1.0 if i == 2 else np.sqrt(2))
        assert torch.equal(critics.weights[i], w), i
        assert torch.equal(critics.biases[i], torch.zeros(2, 1, b))
    assert [k for k in critics.state_dict()] == [
        f"{kind}.{i}" for kind in ("weights", "biases") for i in range(3)]


def test_an_algorithm_on_the_flat_encoder_builds_the_same_networks_as_before():
    """PPO built after torch.manual_seed(s) has the actor and critic of the plain MLPs built in
    the same order after the same seed: runs seeded before encoders start the same."""
    torch.manual_seed(11)
    ppo = PPO(PPOConfig(**SMALL), info_of(None, discrete=True), CPU, 0)
    torch.manual_seed(11)
    pi, critic = mlp(3, [32, 32], 3, "tanh", 0.01), mlp(3, [32, 32], 1, "tanh", 1.0)
    expected = {**{f"pi.net.{k}": v for k, v in pi.state_dict().items()},
                **{f"critic.{k}": v for k, v in critic.state_dict().items()}}
    assert ppo.state_dict().keys() == expected.keys()
    assert all(torch.equal(v, expected[k]) for k, v in ppo.state_dict().items())
