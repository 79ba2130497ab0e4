"""Recurrent policies' shared parts: the cores (an LSTM, Hochreiter & Schmidhuber 1997, or a
GRU, Cho et al. 2014) that sit between an observation encoder and an MLP head, the policy type a
collector steps envs with, and how a rollout's lanes become the sequences an update replays.

One convention holds everywhere: a policy's memory of one env is one float32 row (an LSTM's
``h`` and ``c`` side by side, a GRU's ``h``), and it is **zeros at an episode's first step**.
The collector zeroes the rows of envs whose observation starts an episode before the policy
acts on it (:func:`reset_where`); an update does the same inside the sequences it replays
(the ``keep`` masks of :meth:`RecurrentCore.unroll`, from :func:`episode_starts`), so acting
and learning see one state.

- :class:`RecurrentCore`: one cell, stepped (acting) or unrolled over a sequence with resets
  at episode starts (learning, by truncated backpropagation through time).
- :class:`MemoryNet`: encoder, core, head; an actor's or a critic's network with memory.
- :class:`RecurrentPolicy`: what a recurrent algorithm hands a collector instead of a plain
  observations-to-actions function.
- :func:`episode_starts` and :func:`sequence_chunks`: the sequences of a rollout.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from rltrain.nets.encoders import Encoder

#: the cores ``algo.rnn`` may name
RNN_KINDS = ("lstm", "gru")

#: the field a recurrent algorithm declares (``AlgoSpec.stored``) for the state its policy
#: acted on each transition with: the collector stores it beside the transition, and an
#: update replays each lane's sequence from the state of its first transition
STATE_FIELD = "policy_state"


def core_state_size(kind: str, hidden_size: int) -> int:
    """The width of a :class:`RecurrentCore`'s state: ``h`` and ``c`` (LSTM) or ``h`` (GRU),
    each ``hidden_size`` wide."""
    return hidden_size * (2 if kind == "lstm" else 1)

#: one step of a recurrent policy: (observations, states) -> (actions, next states)
StepFn = Callable[[np.ndarray, torch.Tensor], tuple[np.ndarray, torch.Tensor]]


class RecurrentCore(nn.Module):
    """One LSTM or GRU layer over encoder features ``(batch, in_dim)``; its state is
    ``(batch, state_size)``: ``h`` then ``c`` (LSTM) or ``h`` (GRU), each ``hidden_size`` wide,
    and its output is ``h``.

    Three ways to run it, one set of weights (``torch.nn.LSTM``'s or ``GRU``'s): a step (the
    cell's maths on the layer's weights: at an env step's batch a third of the layer's cost
    per call), :meth:`unroll` (step by step, every state kept: an update's replay, without
    gradients) and :meth:`sequences` (the layer's fused kernel over whole sequences: the
    gradient passes of an update). Weights start orthogonal (gain 1) and biases at zero, as
    CleanRL's recurrent PPO (``ppo_atari_lstm.py``) starts its LSTM: the recurrence neither
    shrinks nor blows up the state at first."""

    def __init__(self, kind: str, in_dim: int, hidden_size: int) -> None:
        super().__init__()
        if kind not in RNN_KINDS:
            raise ValueError(f"a recurrent core is one of {', '.join(RNN_KINDS)}, not {kind!r}")
        self.kind, self.hidden_size = kind, hidden_size
        self.lstm = kind == "lstm"
        self.rnn: nn.LSTM | nn.GRU = (nn.LSTM if self.lstm else nn.GRU)(
            in_dim, hidden_size, batch_first=True)
        for name, p in self.rnn.named_parameters():
            if name.startswith("bias"):
                nn.init.zeros_(p)
            else:
                nn.init.orthogonal_(p, 1.0)
        #: the parts of the state, in order (the ONNX graph's state inputs are named after them)
        self.state_names: tuple[str, ...] = ("h", "c") if self.lstm else ("h",)
        self.state_size = core_state_size(kind, hidden_size)

    def forward(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: (output, next state)."""
        n = self.hidden_size
        w_ih, w_hh, b_ih, b_hh = self.rnn.all_weights[0]
        if self.lstm:
            h, c = torch.lstm_cell(x, (state[:, :n], state[:, n:]), w_ih, w_hh, b_ih, b_hh)
            return h, torch.cat((h, c), -1)
        h = torch.gru_cell(x, state, w_ih, w_hh, b_ih, b_hh)
        return h, h

    def unroll(self, x: torch.Tensor, state: torch.Tensor, keep: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sequences of features ``x`` ``(batch, L, in_dim)`` from ``state`` ``(batch,
        state_size)``, step by step; before step k the state is multiplied by ``keep[:, k]``
        ``(batch, L)``, 0 where step k starts an episode (the state then becomes the initial
        one, zeros) and 1 elsewhere. Returns the outputs ``(batch, L, hidden_size)`` and the
        state after each step ``(batch, L, state_size)``."""
        outs, states = [], []
        for k in range(x.shape[1]):
            state = state * keep[:, k, None]
            out, state = self(x[:, k], state)
            outs.append(out)
            states.append(state)
        return torch.stack(outs, 1), torch.stack(states, 1)

    def sequences(self, x: torch.Tensor, state: torch.Tensor, keep: torch.Tensor
                  ) -> torch.Tensor:
        """:meth:`unroll`'s outputs alone, by the layer's fused kernel. Sequences with
        episode starts inside are cut there (as SB3-Contrib's RecurrentPPO cuts them), the
        pieces padded to the longest and run as one batch, each from its own state: its row's
        (times ``keep``) for a row's first piece, zeros for a piece that starts an episode."""
        b, n = keep.shape
        cuts = keep[:, 1:] == 0
        if not bool(cuts.any()):
            out, _ = self.rnn(x, self._hidden(state * keep[:, :1]))
            return out
        first = torch.ones(b, n, dtype=torch.bool, device=keep.device)
        first[:, 1:] = cuts
        first = first.reshape(-1)
        piece = first.cumsum(0) - 1  # the piece of each step, flat
        starts = first.nonzero().squeeze(1)  # each piece's first step, flat
        offset = torch.arange(b * n, device=keep.device) - starts[piece]
        padded = x.new_zeros(len(starts), int(offset.max()) + 1, x.shape[-1]).index_put(
            (piece, offset), x.reshape(b * n, -1))
        initial = state[starts // n] * keep.reshape(-1)[starts, None]
        out, _ = self.rnn(padded, self._hidden(initial))
        return out[piece, offset].reshape(b, n, -1)

    def _hidden(self, state: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """A state ``(batch, state_size)`` as the layer takes it: ``(1, batch, hidden)``
        tensors."""
        if self.lstm:
            n = self.hidden_size
            return state[None, :, :n].contiguous(), state[None, :, n:].contiguous()
        return state[None].contiguous()


class MemoryNet(nn.Module):
    """An observation encoder, a :class:`RecurrentCore` on its features and a head on the
    core's output (one of :mod:`rltrain.nets.actors_critics`' actors or value networks, built on a
    :func:`core_features` encoder): a network with memory.

    :meth:`step` is what acting needs (the core's output, for the head to sample from);
    :meth:`forward` is the deterministic step the deployable policy takes; :meth:`unroll`
    replays sequences for an update."""

    def __init__(self, encoder: Encoder, core: RecurrentCore, head: nn.Module) -> None:
        super().__init__()
        self.encoder, self.core, self.head = encoder, core, head

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """The encoder's features of observations ``(batch, L, *obs_shape)`` (sequences) as
        ``(batch, L, features)``: one encoder call for every step of every sequence."""
        b, n = obs.shape[:2]
        return self.encoder.forward(obs.reshape(b * n, *obs.shape[2:])).reshape(b, n, -1)

    def step(self, obs: torch.Tensor, state: torch.Tensor, *,
             features: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """One step on observations ``(batch, *obs_shape)`` (or their ``features``, already
        computed by a shared encoder): (the core's output, next state)."""
        x = self.encoder.forward(obs) if features is None else features
        return self.core(x, state)

    def forward(self, obs: torch.Tensor, state: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: (the head's output, next state)."""
        out, state = self.step(obs, state)
        return self.head(out), state

    def unroll(self, obs: torch.Tensor, state: torch.Tensor, keep: torch.Tensor, *,
               features: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`RecurrentCore.unroll` on sequences of observations ``(batch, L, ...)`` (or
        their ``features``): the core's outputs and the state after each step."""
        return self.core.unroll(self.features(obs) if features is None else features, state,
                                keep)

    def sequences(self, obs: torch.Tensor, state: torch.Tensor, keep: torch.Tensor, *,
                  features: torch.Tensor | None = None) -> torch.Tensor:
        """:meth:`RecurrentCore.sequences` on sequences of observations (or their
        ``features``): the core's outputs."""
        return self.core.sequences(self.features(obs) if features is None else features,
                                   state, keep)


class CoreFeatures(Encoder):
    """The encoder of a head that sits on a recurrent core: the core's output passes as it is
    (rltrain.nets.actors_critics' actors and value networks start with an encoder; this one is the
    identity)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.out_dim = hidden_size

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs


def reset_where(state: torch.Tensor, starts: np.ndarray) -> torch.Tensor:
    """``state`` ``(num_envs, state_size)`` with the rows of the envs that start an episode
    (``starts``, bool ``(num_envs,)``) set to the initial state, zeros; ``state`` itself when
    none does."""
    if not starts.any():
        return state
    keep = torch.from_numpy(~starts).to(state.device, state.dtype)
    return state * keep[:, None]


@dataclass(frozen=True)
class RecurrentPolicy:
    """A policy with memory, as a collector steps envs with it.

    A plain policy (:data:`rltrain.common.types.Policy`) maps observations to actions; this one maps
    observations and each env's state to actions and next states, through :attr:`step`. The
    collector (:class:`rltrain.data.collector.Collector`) keeps the states between its steps and
    its collections, resets the rows of envs that start an episode (:func:`reset_where`),
    saves them with its episodes in flight (exact resume) and tells the rollout buffer the
    state each lane's first transition was acted on with; every other algorithm's policy
    passes through the collector as before. Called as a plain policy it refuses: without each
    env's state it could not act right."""

    #: (observations, states) -> (actions, next states); the states arrive on any device
    step: StepFn
    #: the width of one env's state
    state_size: int
    #: where :meth:`initial_state` makes the states
    device: torch.device = torch.device("cpu")

    def initial_state(self, num_envs: int) -> torch.Tensor:
        """Every env at an episode's start: zeros ``(num_envs, state_size)``."""
        return torch.zeros(num_envs, self.state_size, device=self.device)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        raise TypeError("a recurrent policy acts with each env's state: step envs with it "
                        "through rltrain.data.collector.Collector, which keeps the states")


# --------------------------------------------------------------------------- sequences
def episode_starts(dones: np.ndarray) -> np.ndarray:
    """Which transitions of a rollout's lanes ``(num_lanes, T)`` start an episode after the
    lane's first transition: those that follow a done (terminated or truncated). Position 0 is
    never one: its state is the one stored with it (:data:`STATE_FIELD`), the state the policy
    acted on that transition with, already reset if an episode began there. Under
    next-step autoreset the reset step between a done and the next episode's first transition
    is not stored, so that transition still follows the done in its lane."""
    starts = np.zeros(dones.shape, dtype=bool)
    starts[:, 1:] = dones[:, :-1]
    return starts


def sequence_chunks(valid: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """The sequences an update replays: each lane of a rollout (``valid``, ``(num_lanes, T)``,
    True on the slots that hold a transition: a prefix of each lane) cut into consecutive
    chunks of ``L = min(seq_len, T)`` steps, starting at positions 0, L, 2L, ...; the chunks
    that hold at least one transition.

    Returns ``index`` ``(chunks, L)``, each entry's flat slot ``lane * T + position`` (past
    the lane's end: its last slot, so any gather stays in bounds), and ``mask`` ``(chunks,
    L)``, True where the entry is a stored transition (the losses average over those)."""
    lanes, t = valid.shape
    if t == 0:
        return np.zeros((0, 0), dtype=np.int64), np.zeros((0, 0), dtype=bool)
    length = min(seq_len, t)
    pos = np.arange(math.ceil(t / length))[:, None] * length + np.arange(length)
    inside = pos < t
    pos = np.minimum(pos, t - 1)
    index = (np.arange(lanes)[:, None, None] * t + pos).reshape(-1, length)
    mask = (valid[:, pos] & inside).reshape(-1, length)
    used = mask.any(1)
    return index[used], mask[used]
