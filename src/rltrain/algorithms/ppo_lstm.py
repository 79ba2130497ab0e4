"""Recurrent PPO: PPO (Schulman et al. 2017, "Proximal Policy Optimization Algorithms",
arXiv:1707.06347) with an LSTM (Hochreiter & Schmidhuber 1997) or GRU (Cho et al. 2014) core
between the observation encoder and the MLP heads, learnt by truncated backpropagation through
time over sequences of the rollout, as in Stable-Baselines3-Contrib's ``RecurrentPPO`` (what
RL-Zoo3's ``ppo_lstm`` trains) and CleanRL's ``ppo_atari_lstm.py``. For partially observable
envs: CartPole without its velocities (``env=cartpole_novel``) cannot be balanced from one
observation, and is solved from a few.

- **Cores.** For vector observations the actor and the critic each have their own core
  (SB3-Contrib's default, ``enable_critic_lstm=True, shared_lstm=False``, which RL-Zoo3's
  ppo_lstm settings keep): the value loss, on another scale than the policy's, never moves the
  policy's memory. For images and Dict observations they share one (and the encoder), trained
  by both losses, as CleanRL's ``ppo_atari_lstm.py`` shares its CNN and LSTM (and as PPO
  shares its encoder there): half the recurrent work per step, where the work is dearest.
  ``algo.shared_core`` chooses either way.
- **Acting.** The collector keeps each env's state (rltrain.nets.recurrent.RecurrentPolicy): the
  actor's and, while training, the critic's, so the critic's state at a rollout's start is
  its state of the episodes in flight. Test and eval episodes carry the actor's alone.
- **Learning.** The rollout buffer stores the state each transition was acted on with, a
  field this algorithm declares (``AlgoSpec.stored``: rltrain.nets.recurrent.STATE_FIELD); a
  lane's start state is its first transition's. GAE (the read path's
  transform, which asks :meth:`PPOLSTM.rollout_values`) first replays every lane from it
  with the parameters that collected the rollout (no gradient): the values, V(s') from the
  state after each step (a truncated episode bootstraps from its true final observation and
  state), and the state before each step; the update reuses that replay (the core's outputs
  give the old log-probabilities). Then each lane is cut into chunks of ``algo.seq_len``
  steps (rltrain.nets.recurrent.sequence_chunks), each starting from its replayed state, with the
  state zeroed where an episode starts inside a chunk; minibatches are
  ``trainer.batch_size // seq_len`` chunks, shuffled each pass; the losses average over the
  stored transitions (a lane's padding is masked out) and are PPO's own
  (``PPO._clipped_step``).
- **Deploying.** The saved policy carries its state (:class:`RecurrentDeployedPolicy`):
  rltrain-eval threads it through episodes, zeros at each start; rltrain-export's graph takes
  the observation and ``h`` (and ``c``) and returns the action and the next state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from rltrain.algorithms.actor_critic import computed
from rltrain.algorithms.base import OnPolicyAlgorithm, RecurrentDeployedPolicy, UpdateReport
from rltrain.algorithms.ppo import PPO, PPOConfig, PPOStats
from rltrain.algorithms.registry import CONTINUOUS, DISCRETE, AlgoSpec, register
from rltrain.common.types import Policy, Progress, SpaceInfo
from rltrain.config.schemas import ConfigError, check_positive
from rltrain.data.batch import Rollout
from rltrain.data.fields import Field
from rltrain.nets.actors_critics import CategoricalActor, EncodedMLP, GaussianActor
from rltrain.nets.optim import Adam
from rltrain.nets.recurrent import (
    RNN_KINDS,
    STATE_FIELD,
    CoreFeatures,
    MemoryNet,
    RecurrentCore,
    RecurrentPolicy,
    core_state_size,
    episode_starts,
    sequence_chunks,
)
from rltrain.spaces.observations import raw_tensors


@dataclass
class PPOLSTMConfig(PPOConfig):
    """Recurrent PPO: PPO with an LSTM or GRU core after the encoder, on-policy."""

    name: str = "ppo_lstm"
    #: the core: lstm or gru
    rnn: str = "lstm"
    #: the width of the core's state (an LSTM's h and c are each this wide); CleanRL's Atari
    #: LSTM's 128 (SB3-Contrib's default, 256, costs about twice as much per step on a CPU)
    rnn_hidden_size: int = 128
    #: truncated backpropagation through time: each rollout lane is learnt from in chunks of
    #: this many steps (a minibatch holds trainer.batch_size // seq_len of them)
    seq_len: int = 32
    #: one core (and encoder) for the actor and the critic, trained by both losses; false:
    #: one each (the value loss never moves the policy's memory); null: auto, shared for
    #: image and Dict observations (CleanRL's Atari LSTM; unless algo.share_encoder=false),
    #: one each for vectors (SB3-Contrib's)
    shared_core: bool | None = None

    def check(self) -> None:
        super().check()
        if self.rnn not in RNN_KINDS:
            raise ConfigError(f"algo.rnn must be {' or '.join(RNN_KINDS)}, got {self.rnn!r}")
        check_positive(self, "algo", "rnn_hidden_size", "seq_len")
        if self.shared_core and self.share_encoder is False:
            raise ConfigError("algo.shared_core=true feeds the actor's and the critic's heads "
                              "from one core, which reads one encoder: algo.share_encoder=false "
                              "contradicts it; drop one of them")

    def check_minibatch(self, batch_size: int | None) -> None:
        if batch_size is not None and batch_size < self.seq_len:
            raise ConfigError(
                f"trainer.batch_size={batch_size} is smaller than algo.seq_len={self.seq_len}: "
                "a ppo_lstm minibatch holds whole sequences (trainer.batch_size // "
                "algo.seq_len of them); raise trainer.batch_size or lower algo.seq_len")


class Replay(NamedTuple):
    """A rollout replayed (:meth:`PPOLSTM._replay_rollout`), each tensor ``(lanes, T, ...)``."""

    #: the observations as the networks take them
    obs: torch.Tensor
    #: 0 where a transition starts an episode after its lane's first, else 1
    keep: torch.Tensor
    #: the actor's core outputs
    pi_out: torch.Tensor
    #: V(s)
    values: torch.Tensor
    #: the state after each step (before any reset)
    after: torch.Tensor
    #: the state each step was acted on with
    before: torch.Tensor


class PPOLSTM(PPO):
    """PPO's losses and schedule (inherited), its networks with a recurrent core, and an
    update that replays sequences (see the module docstring)."""

    cfg: PPOLSTMConfig

    def __init__(self, cfg: PPOLSTMConfig, info: SpaceInfo, device: torch.device, seed: int
                 ) -> None:
        # PPO's feed-forward networks are not built: the recurrent ones below replace them
        OnPolicyAlgorithm.__init__(self, cfg, info, device, seed)
        self.discrete = info.discrete
        encoder = self.encoder()
        raw = raw_tensors(info.obs_space)
        shared_core = _shared_core(cfg, info)
        #: one encoder for both networks: a minibatch encodes its observations once
        self.shared = shared_core or (raw if cfg.share_encoder is None else cfg.share_encoder)
        hidden = cfg.rnn_hidden_size
        head: CategoricalActor | GaussianActor
        if info.discrete:
            head = CategoricalActor(CoreFeatures(hidden), cfg.hidden_sizes, info.action_dim,
                                    cfg.activation)
        else:
            head = GaussianActor(CoreFeatures(hidden), cfg.hidden_sizes, info.action_dim,
                                 cfg.activation, cfg.init_log_std)
        self.pi_net = MemoryNet(encoder, RecurrentCore(cfg.rnn, encoder.out_dim, hidden), head)
        v_head = EncodedMLP(CoreFeatures(hidden), cfg.hidden_sizes, 1, cfg.activation, 1.0)
        #: the critic's own network with memory, or (shared core) its head alone
        self.v_net: MemoryNet | None = None
        self.v_head: EncodedMLP | None = v_head if shared_core else None
        if not shared_core:
            v_encoder = encoder if self.shared else self.encoder()
            self.v_net = MemoryNet(v_encoder, RecurrentCore(cfg.rnn, v_encoder.out_dim, hidden),
                                   v_head)
        #: the actor's part of a state row (the critic's, when it has a core, follows)
        self.pi_state = self.pi_net.core.state_size
        self.state_size = self.pi_state + (0 if self.v_net is None else
                                           self.v_net.core.state_size)
        assert (self.state_size,) == _stored(cfg, info)[0].shape  # what storage was made for
        self.to(device)
        self.optim = Adam(self.parameters(), lr=cfg.lr, eps=1e-5)

    # ------------------------------------------------------------------ acting
    @property
    def pi_head(self) -> CategoricalActor | GaussianActor:
        """The actor's head, on the core's output."""
        head = self.pi_net.head
        assert isinstance(head, (CategoricalActor, GaussianActor))
        return head

    def actor(self) -> nn.Module:
        return self.pi_net

    def deployable(self) -> RecurrentDeployedPolicy:
        core = self.pi_net.core
        return RecurrentDeployedPolicy(self.obs_norm, self.pi_net, self.info, core.state_names,
                                       core.hidden_size)

    def policy(self, progress: Progress, *, deterministic: bool = False) -> Policy:
        """Training steps carry the actor's and the critic's state (the update replays the
        critic's from the rollout's start); test and eval steps the actor's alone."""
        size = self.pi_state if deterministic else self.state_size
        return RecurrentPolicy(partial(self._step, deterministic=deterministic), size,
                               self.device)

    def _act(self, obs: np.ndarray, *, deterministic: bool, progress: Progress) -> np.ndarray:
        """Actions for observations that each start an episode (the initial state)."""
        state = torch.zeros(len(obs), self.pi_state if deterministic else self.state_size,
                            device=self.device)
        return self._step(obs, state, deterministic=deterministic)[0]

    def _step(self, obs: np.ndarray, state: torch.Tensor, *, deterministic: bool
              ) -> tuple[np.ndarray, torch.Tensor]:
        """One step of every env: the actions and the next states."""
        x = self._obs(obs)
        state = state.to(self.device)
        features = self.pi_net.encoder.forward(x)
        out, next_state = self.pi_net.step(x, state[:, : self.pi_state], features=features)
        if deterministic:
            logits_or_mean = self.pi_head.forward(out)
            act = logits_or_mean.argmax(-1) if self.discrete else logits_or_mean
        else:
            act = self.pi_head.sample(out)
            if self.v_net is not None:  # the critic's memory, for the update's replay
                v_features = features if self.shared else None
                _, v_state = self.v_net.step(x, state[:, self.pi_state:], features=v_features)
                next_state = torch.cat((next_state, v_state), -1)
        if not self.discrete:
            act = act.reshape(len(obs), *self.info.action_shape)
        return act.cpu().numpy(), next_state

    # ------------------------------------------------------------------ learning
    def _value_head(self) -> nn.Module:
        head = self.v_head if self.v_net is None else self.v_net.head
        assert head is not None  # one of the two is set (__init__)
        return head

    def _replay(self, obs: torch.Tensor, state: torch.Tensor, keep: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sequences of observations ``(batch, L, ...)`` from states ``(batch, state_size)``,
        reset where ``keep`` is 0, step by step (the update's replay, without gradients): the
        actor's core outputs ``(batch, L, hidden)``, the values ``(batch, L)`` and the state
        after each step ``(batch, L, state_size)``."""
        features = self.pi_net.features(obs)
        pi_out, after = self.pi_net.unroll(obs, state[:, : self.pi_state], keep,
                                           features=features)
        v_out = pi_out
        if self.v_net is not None:
            v_out, v_after = self.v_net.unroll(obs, state[:, self.pi_state:], keep,
                                               features=features if self.shared else None)
            after = torch.cat((after, v_after), -1)
        return pi_out, self._value_head()(v_out).squeeze(-1), after

    def _sequences_forward(self, obs: torch.Tensor, state: torch.Tensor, keep: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_replay`'s core outputs and values by the cores' fused kernels (the
        gradient passes): no states kept."""
        features = self.pi_net.features(obs)
        pi_out = self.pi_net.sequences(obs, state[:, : self.pi_state], keep, features=features)
        v_out = pi_out
        if self.v_net is not None:
            v_out = self.v_net.sequences(obs, state[:, self.pi_state:], keep,
                                         features=features if self.shared else None)
        return pi_out, self._value_head()(v_out).squeeze(-1)

    def _next_values(self, next_obs: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        """V(s') of transitions ``(n, ...)`` from the states after their steps ``(n,
        state_size)``: one more step of the critic's core, on the next observation."""
        if self.v_net is None:
            out, _ = self.pi_net.step(next_obs, after[:, : self.pi_state])
        else:
            out, _ = self.v_net.step(next_obs, after[:, self.pi_state:])
        return self._value_head()(out).squeeze(-1)

    def _replay_rollout(self, obs: np.ndarray, valid: np.ndarray,
                        start_state: np.ndarray | None, dones: np.ndarray) -> Replay:
        """Every lane of a rollout (its observations ``(lanes, T, ...)``, which slots hold a
        transition, each lane's start state: the state stored with its first transition, and
        where episodes ended) replayed from its start state, step by step, by the parameters
        that collected it (no gradient): the states it was acted on with, so that chunks can
        start anywhere, and what the losses compare with."""
        lanes, t = valid.shape
        x = self._obs(obs.reshape(lanes * t, *obs.shape[2:]))
        x = x.reshape(lanes, t, *x.shape[1:])
        # no start state: every lane begins an episode (the initial state)
        start = (torch.zeros(lanes, self.state_size, device=self.device)
                 if start_state is None else self._tensor(start_state))
        keep = self._tensor((~episode_starts(dones)).astype(np.float32))
        with torch.no_grad():
            pi_out, values, after = self._replay(x, start, keep)
            before = torch.cat((start[:, None], after[:, :-1]), 1) * keep[..., None]
        return Replay(x, keep, pi_out, values, after, before)

    def replayed_states(self, rollout: Rollout) -> np.ndarray:
        """The state each transition of a rollout ``(lanes, T, state_size)`` was acted on with,
        as an update replays it (zeros where an episode starts)."""
        replay = self._replay_rollout(rollout.obs, rollout.valid,
                                      _start_state(rollout.fields), rollout.dones)
        return replay.before.cpu().numpy()

    def rollout_values(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """What GAE asks of the critic (``values``, ``next_values``: V(s) and V(s') of every
        slot, ``(lanes, T)``), from a replay of the rollout's lanes (:meth:`_replay_rollout`),
        which the update reuses (``replay``): V(s') is one more step of the critic's core
        from the state after each step, on the transition's own next observation."""
        lanes, t = record["valid"].shape
        replay = self._replay_rollout(record["obs"], record["valid"], _start_state(record),
                                      record["terminated"] | record["truncated"])
        next_obs = record["next_obs"]
        with torch.no_grad():
            next_values = self._next_values(
                self._obs(next_obs.reshape(lanes * t, *next_obs.shape[2:])),
                replay.after.reshape(lanes * t, -1))
        return {"values": replay.values.cpu().numpy(),
                "next_values": next_values.cpu().numpy().reshape(lanes, t), "replay": replay}

    def update(
        self, rollout: Rollout, *, batch_size: int | None, repetitions: int, progress: Progress
    ) -> UpdateReport:
        cfg = self.cfg
        adv, returns, _ = computed(self, rollout)
        lanes, t = rollout.valid.shape
        flat = lanes * t
        act_dtype = torch.long if self.discrete else torch.get_default_dtype()
        act = self._tensor(rollout.act.reshape(flat, *rollout.act.shape[2:]), act_dtype)
        replay: Replay = rollout.fields["replay"]  # rollout_values's, with the advantages
        obs, keep, pi_out, values, _, before = replay
        with torch.no_grad():
            old_logp, _ = self.pi_head.log_prob_entropy(pi_out.reshape(flat, -1), act)
        adv_t = self._tensor(adv.reshape(flat))
        old_v = values.reshape(flat)
        ret = self._tensor(returns.reshape(flat))

        index, mask = sequence_chunks(rollout.valid, cfg.seq_len)
        index_t = torch.from_numpy(index).to(self.device)
        mask_t = torch.from_numpy(mask).to(self.device)
        chunk_keep = keep.reshape(flat)[index_t]
        chunk_keep[:, 0] = 1.0  # a chunk's first state is the replayed one, already reset
        chunk_state = before.reshape(flat, -1)[index_t[:, 0]]
        obs_flat = obs.reshape(flat, *obs.shape[2:])

        lr = self.step_lr(progress)
        n, length = index.shape
        size = n if batch_size is None else min(max(batch_size // length, 1), n)
        sums = torch.zeros(5, device=self.device)
        steps = 0
        for _ in range(repetitions):
            perm = torch.randperm(n, device=self.device)
            for first in range(0, n, size):
                chunks = perm[first : first + size]
                idx, m = index_t[chunks], mask_t[chunks]
                sums += self._sequences(obs_flat[idx], act[idx][m], adv_t[idx][m], ret[idx][m],
                                        old_v[idx][m], old_logp[idx][m], m,
                                        chunk_state[chunks], chunk_keep[chunks])
                steps += 1
        pg_loss, v_loss, entropy, approx_kl, clipfrac = (sums / max(steps, 1)).tolist()
        valid = torch.from_numpy(rollout.valid.reshape(flat)).to(self.device)
        ret_valid, v_valid = ret[valid], old_v[valid]
        var_ret = float(ret_valid.var()) if len(ret_valid) > 1 else math.nan
        explained = (1.0 - float((ret_valid - v_valid).var()) / var_ret if var_ret > 0
                     else math.nan)
        return UpdateReport(PPOStats(pg_loss, v_loss, entropy, approx_kl, clipfrac, explained, lr),
                            gradient_steps=steps)

    def _sequences(self, obs: torch.Tensor, act: torch.Tensor, adv: torch.Tensor,
                   ret: torch.Tensor, old_v: torch.Tensor, old_logp: torch.Tensor,
                   mask: torch.Tensor, state: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """One minibatch of sequences (observations ``(chunks, L, ...)``, states at their
        starts, resets, ``mask`` of the stored transitions); the other arguments hold the
        stored transitions alone, in the mask's order."""
        pi_out, v = self._sequences_forward(obs, state, keep)
        logp, entropy_all = self.pi_head.log_prob_entropy(pi_out[mask], act)
        return self._clipped_step(logp, entropy_all, v[mask], adv, ret, old_v, old_logp)


def _shared_core(cfg: PPOLSTMConfig, info: SpaceInfo) -> bool:
    """One core for the actor and the critic (``algo.shared_core``; null: for image and Dict
    observations unless ``algo.share_encoder=false``)."""
    if cfg.shared_core is not None:
        return cfg.shared_core
    return raw_tensors(info.obs_space) and cfg.share_encoder is not False


def _stored(cfg: PPOLSTMConfig, info: SpaceInfo) -> tuple[Field, ...]:
    """What storage keeps beside each transition: the state the policy acted on it with
    (the actor's core's, then the critic's when it has its own), from which an update
    replays each lane's sequence."""
    one = core_state_size(cfg.rnn, cfg.rnn_hidden_size)
    size = one if _shared_core(cfg, info) else 2 * one
    return (Field(STATE_FIELD, (size,), np.dtype(np.float32)),)


def _start_state(fields: Mapping[str, Any]) -> np.ndarray | None:
    """Each lane's start state: the state stored with its first transition (None for a
    rollout of no steps).

    :raises ValueError: the rollout's storage did not keep the states (it was not built with
        this algorithm's declared fields): replaying from zeros instead would be wrong.
    """
    state = fields.get(STATE_FIELD)
    if state is None:
        raise ValueError(f"ppo_lstm replays each lane from the state stored with its first "
                         f"transition ({STATE_FIELD!r}), and this rollout has none: build its "
                         "storage with the algorithm's declared fields (AlgoSpec.stored)")
    return None if state.shape[1] == 0 else state[:, 0]


register(AlgoSpec(
    name="ppo_lstm", config=PPOLSTMConfig, build=PPOLSTM, trainers=("onpolicy",),
    stored=_stored,
    actions=(DISCRETE, CONTINUOUS),
    console=(("pg_loss", "pg"), ("v_loss", "vf"), ("entropy", "ent"), ("approx_kl", "kl")),
    paper="Schulman et al. 2017, arXiv:1707.06347; Hochreiter & Schmidhuber 1997 (LSTM)",
))
