"""The algorithm schemas' own checks (rltrain.config.schemas and each algorithm's schema): the
shared ones, NetworkConfig -> DiscountedConfig -> TDConfig, which each schema extends as its
algorithm needs, and each schema's ``check()`` refusing a bad value by the field's name."""

from __future__ import annotations

import pytest

from rltrain.algorithms import ALGORITHMS
from rltrain.algorithms.bc import BCConfig
from rltrain.algorithms.cql import CQLConfig
from rltrain.algorithms.ddpg import DDPGConfig
from rltrain.algorithms.dqn import DQNConfig
from rltrain.algorithms.iql import IQLConfig
from rltrain.algorithms.ppo import PPOConfig
from rltrain.algorithms.sac import SACConfig
from rltrain.algorithms.td3 import TD3Config
from rltrain.algorithms.td3bc import TD3BCConfig
from rltrain.config.schemas import ConfigError, DiscountedConfig, NetworkConfig, TDConfig

#: which shared schema each algorithm's extends: behaviour cloning learns no values, PPO no
#: TD targets
BASES = {"bc": NetworkConfig, "ppo": DiscountedConfig, "ppo_lstm": DiscountedConfig,
         "a2c": DiscountedConfig, "reinforce": DiscountedConfig}


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_each_schema_extends_the_shared_schema_its_algorithm_needs(name):
    schema = ALGORITHMS[name].config
    base = BASES.get(name, TDConfig)
    assert issubclass(schema, base)
    deeper = {NetworkConfig: DiscountedConfig, DiscountedConfig: TDConfig}.get(base)
    assert deeper is None or not issubclass(schema, deeper)


@pytest.mark.parametrize("schema", [NetworkConfig, DiscountedConfig, TDConfig])
def test_shared_schemas_pass_their_defaults(schema):
    cfg = schema()
    cfg.check()
    assert cfg.encoder == "auto"


@pytest.mark.parametrize(("cfg", "field"), [
    (NetworkConfig(hidden_sizes=[64, 0]), "algo.hidden_sizes"),
    (NetworkConfig(hidden_sizes=[-1]), "algo.hidden_sizes"),
    (NetworkConfig(activation="gelu"), "algo.activation"),
    (DiscountedConfig(gamma=1.5), "algo.gamma"),
    (DiscountedConfig(gamma=-0.1), "algo.gamma"),
    (DiscountedConfig(activation="sigmoid"), "algo.activation"),
    (TDConfig(n_step=0), "algo.n_step"),
    (TDConfig(gamma=2.0), "algo.gamma"),
    (TDConfig(hidden_sizes=[0]), "algo.hidden_sizes"),
])
def test_shared_schemas_refuse_bad_values_by_name(cfg, field):
    with pytest.raises(ConfigError, match=field):
        cfg.check()


def test_activation_refusal_names_the_choices():
    with pytest.raises(ConfigError, match="algo.activation must be tanh or relu, got 'gelu'"):
        NetworkConfig(activation="gelu").check()


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_schema_runs_the_shared_checks(name):
    """Each algorithm's check() calls its base's: the network fields, and the discount and
    n-step fields where its schema has them."""
    schema = ALGORITHMS[name].config
    bad = {"hidden_sizes": [0], "activation": "swish"}
    if issubclass(schema, DiscountedConfig):
        bad["gamma"] = 1.01
    if issubclass(schema, TDConfig):
        bad["n_step"] = 0
    for key, value in bad.items():
        with pytest.raises(ConfigError, match=f"algo.{key}"):
            schema(**{key: value}).check()


@pytest.mark.parametrize(("cfg", "field"), [
    (PPOConfig(gae_lambda=1.5), "algo.gae_lambda"),
    (PPOConfig(clip_ratio=0.0), "algo.clip_ratio"),
    (PPOConfig(max_grad_norm=-1.0), "algo.max_grad_norm"),
    (DQNConfig(eps_end=1.5), "algo.eps_end"),
    (DQNConfig(target_update_interval=0), "algo.target_update_interval"),
    (SACConfig(tau=1.5), "algo.tau"),
    (SACConfig(init_alpha=0.0), "algo.init_alpha"),
    (SACConfig(policy_delay=0), "algo.policy_delay"),
    (TD3Config(target_noise_clip=-1.0), "algo.target_noise_clip"),
    (DDPGConfig(exploration_noise=float("nan")), "algo.exploration_noise"),
    (DDPGConfig(hidden_sizes=[0]), "algo.hidden_sizes"),
    (BCConfig(lr=0.0), "algo.lr"),
    (TD3BCConfig(alpha=-1.0), "algo.alpha"),
    (CQLConfig(cql_alpha=-1.0), "algo.cql_alpha"),
    (CQLConfig(num_sampled_actions=0), "algo.num_sampled_actions"),
    (CQLConfig(discrete_target_update_interval=0), "algo.discrete_target_update_interval"),
    (IQLConfig(expectile=1.0), "algo.expectile"),
    (IQLConfig(beta=-0.5), "algo.beta"),
    (IQLConfig(max_weight=0.0), "algo.max_weight"),
])
def test_algorithm_schemas_check_their_own_fields(cfg, field):
    with pytest.raises(ConfigError, match=field):
        cfg.check()


@pytest.mark.parametrize("cfg", [SACConfig(noise_beta=-0.5), DDPGConfig(noise_beta=2.5),
                                 SACConfig(noise_beta=float("nan"))])
def test_noise_beta_out_of_range_is_refused(cfg):
    with pytest.raises(ConfigError, match="algo.noise_beta must be in"):
        cfg.check()


def test_dqn_refuses_a_target_network_that_would_never_be_updated():
    cfg = DQNConfig(target_update_interval=1000)
    cfg.check_plan(1000)
    with pytest.raises(ConfigError, match="algo.target_update_interval=1,000 is more than the "
                                          "run's ~999 gradient steps"):
        cfg.check_plan(999)
