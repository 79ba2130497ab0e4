"""What the feed-forward on-policy algorithms share (PPO, A2C, REINFORCE): a stochastic actor
for the env's actions and a state-value critic, on one encoder or two, and the passes over a
rollout that every one of their updates makes. The critic's values of a rollout are what the
GAE transform they declare asks for (:meth:`ActorCritic.rollout_values`, called by the
trainer's read path before the update); the update reads the advantages and returns from the
rollout it is given. Each algorithm keeps its own losses, optimiser and schedule.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from rltrain.algorithms.base import OnPolicyAlgorithm, acting
from rltrain.common.types import Progress, SpaceInfo
from rltrain.config.schemas import ConfigError, DiscountedConfig, check_positive
from rltrain.data.batch import Rollout
from rltrain.nets.actors_critics import (
    MLP,
    CategoricalActor,
    EncodedMLP,
    GaussianActor,
    MultiCategoricalActor,
    categorical_log_prob_entropy,
    categorical_log_prob_entropy_kept,
    gaussian_log_prob_entropy,
    gaussian_log_prob_entropy_kept,
    stacked_mlp,
    stacked_mlp_backward_into,
    stacked_mlp_kept,
    written_over,
)
from rltrain.nets.encoders import Encoder
from rltrain.nets.encoders.flat import FlatEncoder
from rltrain.spaces.masking import ActionMask
from rltrain.spaces.observations import raw_tensors

Actor = CategoricalActor | MultiCategoricalActor | GaussianActor


@dataclass
class ActorCriticConfig(DiscountedConfig):
    """The settings PPO, A2C and REINFORCE share; each sets its own defaults."""

    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    activation: str = "tanh"
    lr: float = 3e-4
    #: anneal the learning rate linearly to 0 over the planned env steps (RL-Zoo3's lin_)
    lr_annealing: bool = False
    #: normalise the advantages of each minibatch to mean 0 and standard deviation 1
    normalize_advantage: bool = False
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    #: clip the global gradient norm (null: no clipping)
    max_grad_norm: float | None = 0.5
    #: initial log standard deviation of the Gaussian policy (continuous actions, in the
    #: normalised action space where the env's bounds are -1 and 1)
    init_log_std: float = 0.0
    #: one encoder for the actor and the critic, trained by both losses (null: auto, shared
    #: for image and Dict observations, as the published Atari agents share their CNN (Mnih
    #: et al. 2016's A3C, Schulman et al. 2017's PPO, CleanRL's ppo_atari); separate for
    #: vectors, whose flat encoder has no parameters to share)
    share_encoder: bool | None = None

    def check(self) -> None:
        super().check()
        check_positive(self, "algo", "lr", "max_grad_norm")
        for name in ("ent_coef", "vf_coef"):
            if getattr(self, name) < 0:
                raise ConfigError(f"algo.{name} must be >= 0, got {getattr(self, name)}")


def policy_actor(info: SpaceInfo, cfg: ActorCriticConfig, encoder: Encoder,
                 mask: ActionMask | None = None) -> Actor:
    """The stochastic policy for the env's actions: a categorical over Discrete actions (with
    the observation's action ``mask``, if any), one per entry of MultiDiscrete and MultiBinary
    ones, a diagonal Gaussian over a Box."""
    if info.nvec is not None:
        return MultiCategoricalActor(encoder, cfg.hidden_sizes, info.nvec, cfg.activation,
                                     info.action_shape)
    if info.discrete:
        return CategoricalActor(encoder, cfg.hidden_sizes, info.action_dim, cfg.activation, mask)
    return GaussianActor(encoder, cfg.hidden_sizes, info.action_dim, cfg.activation,
                         cfg.init_log_std)


#: :meth:`ActorCritic.evaluate_kept`'s backward: d loss / d (logp, entropy or None, value)
HandBackward = Callable[[torch.Tensor, "torch.Tensor | None", torch.Tensor], None]


def computed(algorithm: OnPolicyAlgorithm, rollout: Rollout
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(advantages, returns, values)`` of a rollout, ``(lanes, T)`` each, as the algorithm's
    transforms (GAE) computed them.

    :raises TypeError: the rollout has none (the algorithm declares no transform that
        computes them, or the rollout did not come through the read path)."""
    if rollout.advantages is None or rollout.returns is None or rollout.values is None:
        raise TypeError(f"{type(algorithm).__name__} learns from advantages, and its rollout "
                        "has none: declare a transform that computes them (GAE, "
                        "Algorithm.transforms) and read the rollout through "
                        "rltrain.data.reading.read_rollout")
    return rollout.advantages, rollout.returns, rollout.values


def learnt_slots(rollout: Rollout) -> np.ndarray:
    """The slots of a rollout an update learns from, ``(lanes, T)``: those a transform chose
    (``Rollout.learn``: REINFORCE's finished episodes), else every valid one."""
    return rollout.valid if rollout.learn is None else rollout.learn


def explained_variance(ret: torch.Tensor, old_v: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns): how much of the returns the critic explained
    before the update (NaN when the returns do not vary)."""
    var_ret = float(ret.var()) if len(ret) > 1 else math.nan
    return 1.0 - float((ret - old_v).var()) / var_ret if var_ret > 0 else math.nan


class ActorCritic(OnPolicyAlgorithm):
    """An actor (:func:`policy_actor`) and a critic V(s). With a shared encoder (the default
    for image and Dict observations, as the published Atari agents share their CNN: A3C,
    PPO, CleanRL's ppo_atari; vectors' flat encoder has no parameters to share) one pass of
    the encoder serves both heads and its gradient sums both losses."""

    cfg: ActorCriticConfig

    def __init__(self, cfg: ActorCriticConfig, info: SpaceInfo, device: torch.device,
                 seed: int) -> None:
        super().__init__(cfg, info, device, seed)
        self.discrete = info.discrete
        encoder = self.encoder()
        share = raw_tensors(info.obs_space) if cfg.share_encoder is None else cfg.share_encoder
        self.pi: Actor = policy_actor(info, cfg, encoder, self.action_mask)
        self.critic = EncodedMLP(encoder if share else self.encoder(), cfg.hidden_sizes, 1,
                                 cfg.activation, 1.0)
        #: the actor and the critic read one encoder: a step encodes its observations once
        self.shared = share

    def actor(self) -> nn.Module:
        return self.pi

    def _act(self, obs: np.ndarray, *, deterministic: bool, progress: Progress) -> np.ndarray:
        act = acting(self, "action")(self._obs(obs), deterministic)
        return act.reshape(len(obs), *self.info.action_shape).cpu().numpy()

    def action(self, x: torch.Tensor, deterministic: bool) -> torch.Tensor:
        """The action for observations ``x`` (as the networks take them): the most likely one
        (the mean, or the argmax of the logits), or one drawn from the policy."""
        if deterministic:
            out = self.pi.forward(x)
            return out.argmax(-1) if self.discrete else out
        return self.pi.sample(x)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def rollout_values(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """What GAE (rltrain.data.transforms.gae) asks of the critic: ``values`` and
        ``next_values``, V(s) and V(s') of every slot of a rollout's record, ``(lanes, T)``,
        in one pass; s' is each transition's own next observation, so an episode cut by its
        time limit bootstraps from its true last state. With a shared encoder, ``features``
        too: the encoder's of every slot's s, which the update reuses.

        Most slots' s' is the next slot's s, byte for byte: those take that slot's V(s), and
        the pass runs over the slots' s and only the other s' (each lane's last, and where an
        episode ended), about half the work of V(s) and V(s') of every slot (for Atari's
        convolutions, most of the update outside its minibatch steps)."""
        obs, next_obs = record["obs"], record["next_obs"]
        lanes, t = record["valid"].shape
        fresh = np.ones((lanes, t), dtype=bool)  # slots whose s' is not the next slot's s
        if t > 1:  # compared lane by lane: a bool array the size of one lane's observations
            for lane in range(lanes):
                equal = next_obs[lane, :-1] == obs[lane, 1:]
                fresh[lane, :-1] = ~equal.reshape(t - 1, -1).all(axis=1)
        n = lanes * t
        out: dict[str, Any] = {}
        with torch.no_grad():
            both = self._obs(np.concatenate([obs.reshape(n, *obs.shape[2:]), next_obs[fresh]]))
            if self.shared:
                features = self.pi.encoder(both)
                v_both = self.critic.head(features).squeeze(-1).cpu().numpy()
                out["features"] = features[:n]
            else:
                v_both = self.value(both).cpu().numpy()
        values = v_both[:n].reshape(lanes, t)
        next_values = np.empty_like(values)
        next_values[:, :-1] = values[:, 1:]
        next_values[fresh] = v_both[n:]
        return {**out, "values": values, "next_values": next_values}

    def learning_rewards(self, rew: np.ndarray) -> np.ndarray:
        """The rewards as the losses take them (scaled, with ``env.normalize.reward``): what
        GAE sums."""
        return self._rew(rew)

    def learning_tensors(self, rollout: Rollout, which: np.ndarray
                         ) -> tuple[torch.Tensor, ...]:
        """``(obs, act, adv, old_v, ret)`` of the slots ``which`` selects, as tensors on the
        device: the advantages, the critic's values before the update and the returns the
        algorithm's transforms computed (:func:`computed`)."""
        adv, ret, values = computed(self, rollout)
        obs = self._obs(rollout.obs[which])
        act = self._tensor(rollout.act[which], torch.long if self.discrete else None)
        return (obs, act, self._tensor(adv[which]), self._tensor(values[which]),
                self._tensor(ret[which]))

    def step_lr(self, progress: Progress) -> float:
        """The learning rate of this update (annealed linearly to 0 over the planned env
        steps with ``lr_annealing``), set on the optimiser."""
        cfg = self.cfg
        lr = cfg.lr * (1.0 - progress.fraction) if cfg.lr_annealing else cfg.lr
        for optim in self.optimizers().values():
            optim.lr = lr
        return lr

    def evaluate(self, obs: torch.Tensor, act: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log pi(a|s), entropy, V(s))`` of a minibatch, with gradients; the shared encoder,
        if any, runs once."""
        if self.shared:
            features = self.pi.encoder(obs)
            logp, entropy = self.pi.log_prob_entropy(obs, act, features=features)
            return logp, entropy, self.critic.head(features).squeeze(-1)
        logp, entropy = self.pi.log_prob_entropy(obs, act)
        return logp, entropy, self.value(obs)

    # ------------------------------------------------------------------ stacked copies
    def stackable(self) -> bool:
        """Whether :meth:`stacked_evaluate` can stand for :meth:`evaluate`: MLPs on the flat
        encoder, not shared, a categorical or Gaussian actor with no action mask."""
        return (not self.shared and isinstance(self.pi.encoder, FlatEncoder)
                and type(self.pi) in (CategoricalActor, GaussianActor)
                and self.action_mask is None)

    def evaluate_kept(self, obs: torch.Tensor, act: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, HandBackward]:
        """:meth:`evaluate` without autograd, for a :meth:`stackable` network, and its
        backward written out: given the gradients of a loss with respect to each sample's
        log-probability, entropy (None: no entropy term) and value, it writes every trained
        parameter's gradient over its ``.grad`` (the optimiser's flat views). Used by PPO's
        minibatch step (see :meth:`rltrain.nets.actors_critics.MLP.forward_kept` for why)."""
        pi, critic = self.pi, self.critic
        pi_inputs, out = pi.net.forward_kept(pi.encoder.forward(obs))
        v_inputs, v = critic.forward_kept(critic.encoder.forward(obs))
        log_std: torch.Tensor | None = None
        if isinstance(pi, CategoricalActor):
            logp, entropy, distribution = categorical_log_prob_entropy_kept(out, act)
        else:
            assert isinstance(pi, GaussianActor)
            log_std = pi.log_std
            logp, entropy, distribution = gaussian_log_prob_entropy_kept(
                out, log_std.expand_as(out), act)

        def backward(grad_logp: torch.Tensor, grad_entropy: torch.Tensor | None,
                     grad_v: torch.Tensor) -> None:
            grad_out, grad_log_std = distribution(grad_logp, grad_entropy)
            pi.net.backward_into(pi_inputs, grad_out)
            critic.backward_into(v_inputs, grad_v.unsqueeze(-1))
            if log_std is not None and grad_log_std is not None:
                written_over(log_std).copy_(grad_log_std.sum(0))

        return logp, entropy, v.squeeze(-1), backward

    def stacked_evaluate_kept(self, params: Mapping[str, torch.Tensor],
                              grads: Mapping[str, torch.Tensor], obs: torch.Tensor,
                              act: torch.Tensor
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, HandBackward]:
        """:meth:`stacked_evaluate` without autograd, and its backward, which writes each
        parameter's stacked gradient over ``grads[name]`` (shaped as ``params[name]``)."""
        x = obs.reshape(obs.shape[0], obs.shape[1], -1)
        activation = self.cfg.activation

        def layers(of: Mapping[str, torch.Tensor], prefix: str, net: MLP
                   ) -> list[tuple[torch.Tensor, torch.Tensor]]:
            return [(of[f"{prefix}.layers.{i}.weight"], of[f"{prefix}.layers.{i}.bias"])
                    for i in range(len(net.layers))]

        pi_layers, v_layers = layers(params, "pi.net", self.pi.net), layers(params, "critic",
                                                                           self.critic)
        pi_inputs, out = stacked_mlp_kept(x, pi_layers, activation)
        v_inputs, v = stacked_mlp_kept(x, v_layers, activation)
        if isinstance(self.pi, CategoricalActor):
            logp, entropy, distribution = categorical_log_prob_entropy_kept(out, act)
        else:
            logp, entropy, distribution = gaussian_log_prob_entropy_kept(
                out, params["pi.log_std"].unsqueeze(1).expand_as(out), act)

        def backward(grad_logp: torch.Tensor, grad_entropy: torch.Tensor | None,
                     grad_v: torch.Tensor) -> None:
            grad_out, grad_log_std = distribution(grad_logp, grad_entropy)
            stacked_mlp_backward_into(pi_layers, layers(grads, "pi.net", self.pi.net),
                                      pi_inputs, grad_out, activation)
            stacked_mlp_backward_into(v_layers, layers(grads, "critic", self.critic),
                                      v_inputs, grad_v.unsqueeze(-1), activation)
            if grad_log_std is not None:
                torch.sum(grad_log_std, 1, out=grads["pi.log_std"])

        return logp, entropy, v.squeeze(-1), backward

    def stacked_evaluate(self, params: Mapping[str, torch.Tensor], obs: torch.Tensor,
                         act: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`evaluate` of several copies of this network at once (the seeds of a batched
        sweep): ``params`` maps each parameter's name to the copies' values stacked,
        ``(copies, *shape)``; ``obs`` is ``(copies, batch, *obs_shape)``. For a
        :meth:`stackable` network."""
        x = obs.reshape(obs.shape[0], obs.shape[1], -1)
        activation = self.cfg.activation

        def layers(prefix: str, net: MLP) -> list[tuple[torch.Tensor, torch.Tensor]]:
            return [(params[f"{prefix}.layers.{i}.weight"], params[f"{prefix}.layers.{i}.bias"])
                    for i in range(len(net.layers))]

        out = stacked_mlp(x, layers("pi.net", self.pi.net), activation)
        v = stacked_mlp(x, layers("critic", self.critic), activation).squeeze(-1)
        if isinstance(self.pi, CategoricalActor):
            return (*categorical_log_prob_entropy(out, act), v)
        log_std = params["pi.log_std"].unsqueeze(1).expand_as(out)
        return (*gaussian_log_prob_entropy(out, log_std, act), v)
