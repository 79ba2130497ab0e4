"""The collector: steps a vector env with a policy, writes transitions to a buffer.

It knows nothing of learning. It is the one place that separates ``terminated``
from ``truncated`` and that reads gymnasium's autoreset semantics:

* next-step mode (e.g. CartPole's native vector env): the step that ends an
  episode returns its true final observation; the env's *next* step ignores the
  action and returns the reset observation. That reset step stores no
  transition (its lane is masked) but counts as an env step, so a collection of
  ``ceil(n / m)`` vector steps is always ``ceil(n / m) * m`` env steps.
* same-step mode (sync/async vector envs built by rltrain): the step that ends
  an episode returns the reset observation and puts the final one in
  ``info["final_obs"]``; that final observation is what a truncated transition
  bootstraps from.

A recurrent policy (:class:`rltrain.nets.recurrent.RecurrentPolicy`: observations and each env's
state in, actions and next states out) is the one kind of policy the collector treats apart,
and it decides that once per collection: it keeps each env's state (its *memory*) between
steps and collections, resets it where an observation starts an episode (after a done in
same-step mode, after the reset step in next-step mode), saves it with the episodes in flight,
and tells an empty rollout lane the state its first transition is acted on with. Every other
policy is called as it always was: the step loop's only addition is one boolean test.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv

from rltrain.common.errors import NonFiniteError, mark_env_failure
from rltrain.common.stats import Episodes
from rltrain.common.types import Acted, Policy
from rltrain.data.storage import ReplayBuffer
from rltrain.envs import state as envstate
from rltrain.envs.vector import autoreset_mode
from rltrain.nets.recurrent import STATE_FIELD, RecurrentPolicy, reset_where
from rltrain.spaces.masking import KEY as MASK_KEY
from rltrain.spaces.masking import is_masked
from rltrain.spaces.observations import Packer, layout

#: sees each batch of observations before the policy acts on it (observation statistics)
ObsObserver = Callable[[np.ndarray], None]
#: sees each vector step's rewards, episode ends, and which lanes hold a real transition
#: (None: all of them) (the reward scaler's statistics)
StepObserver = Callable[[np.ndarray, np.ndarray, np.ndarray | None], None]


class CollectionStopped(Exception):
    """A collection ended early because ``should_stop`` said so."""


def random_policy(envs: VectorEnv, seed: int) -> Policy:
    """Uniformly random actions from the env's own (seeded) action space; with an action
    mask in the observations (rltrain.spaces.masking), uniform over each env's allowed actions."""
    space = envs.action_space
    space.seed(seed)
    packing = layout(envs.single_observation_space)
    if not is_masked(envs.single_observation_space) or packing is None:
        return lambda obs: space.sample()

    def allowed_only(obs: np.ndarray) -> np.ndarray:
        mask = packing.unpack(obs)[MASK_KEY].reshape(len(obs), -1).astype(np.int8)
        mask[~mask.any(-1)] = 1  # a state that allows nothing: any action
        return space.sample(mask=tuple(mask))

    return allowed_only


def episode_quotas(n_episodes: int, num_envs: int) -> np.ndarray:
    """Split n episodes over the envs as evenly as possible (the first envs take the rest)."""
    quotas = np.full(num_envs, n_episodes // num_envs, dtype=np.int64)
    quotas[: n_episodes % num_envs] += 1
    return quotas


class Collector:
    """Steps ``envs`` with a policy; stores real transitions in ``buffer`` (if any).

    Episodes span collection steps: the env is reset only by :meth:`reset`.
    """

    def __init__(self, envs: VectorEnv, buffer: ReplayBuffer | None = None, *,
                 on_obs: ObsObserver | None = None, on_step: StepObserver | None = None
                 ) -> None:
        """:param on_obs: called with every batch of observations before the policy acts on
            it (every collection: the random warm-up's too): the observation statistics.
        :param on_step: called after every vector step with (rewards, episode ends, which
            lanes hold a real transition or None for all): the reward scaler's statistics."""
        self.envs, self.buffer = envs, buffer
        self.on_obs, self.on_step = on_obs, on_step
        self.num_envs = envs.num_envs
        #: Dict observations become packed rows here (rltrain.spaces.observations), once
        self._packer = Packer(envs.single_observation_space)
        self.next_step_mode = autoreset_mode(envs) is AutoresetMode.NEXT_STEP
        self._obs: np.ndarray | None = None
        # next-step mode: envs whose next step is a reset step
        self._resetting = np.zeros(self.num_envs, dtype=bool)
        self._ep_return = np.zeros(self.num_envs, dtype=np.float64)
        self._ep_length = np.zeros(self.num_envs, dtype=np.int64)
        #: a recurrent policy's state of each env (None: no recurrent policy acted yet, or
        #: since the last reset) and which envs' current observation starts an episode
        self._memory: torch.Tensor | None = None
        self._starts = np.ones(self.num_envs, dtype=bool)

    def reset(self, seed: int | None = None) -> None:
        """Start fresh episodes in every env (seeded if ``seed`` is given)."""
        try:
            obs, _ = self.envs.reset(seed=seed)
        except Exception as e:
            mark_env_failure(e)
            raise
        self._obs = self._packer(obs)
        self._resetting[:] = False
        self._memory = None
        self._starts[:] = True
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0

    def state_dict(self) -> dict[str, Any]:
        """Where the running episodes stand, the envs' own state as plain data, and what of
        it could not be captured (``not_captured``: empty when a restore would be exact)."""
        snap = envstate.snapshot(self.envs)
        return {
            "obs": None if self._obs is None else torch.from_numpy(np.array(self._obs)),
            "resetting": torch.from_numpy(self._resetting.copy()),
            "ep_return": torch.from_numpy(self._ep_return.copy()),
            "ep_length": torch.from_numpy(self._ep_length.copy()),
            # a recurrent policy's memory of the episodes in flight (an inference-mode
            # tensor becomes a plain one by the copy)
            "memory": None if self._memory is None else self._memory.detach().cpu().clone(),
            "starts": torch.from_numpy(self._starts.copy()),
            "envs": snap.state,
            "not_captured": list(snap.not_captured),
            "caveats": list(snap.caveats),
        }

    def state_caveats(self) -> list[str]:
        """What the envs' captured state is known to leave out (:attr:`envstate.Snapshot
        .caveats`): a restore goes on from it, and is not exact."""
        return envstate.snapshot(self.envs).caveats

    def load_state_dict(self, state: dict[str, Any], *, seed: int) -> list[str]:
        """Continue the episodes in flight. Returns what prevented an exact restore (empty
        if nothing did); then what could be restored is (wrapper statistics, say) and fresh
        episodes start from a reset seeded with ``seed``."""
        # restore() also names every value the snapshot could not capture
        problems = envstate.restore(self.envs, state["envs"])
        if problems or state["obs"] is None:
            self.reset(seed=seed)
            return problems or ["no episode was in flight"]
        self._obs = state["obs"].numpy().copy()
        self._resetting = state["resetting"].numpy().copy()
        self._ep_return = state["ep_return"].numpy().copy()
        self._ep_length = state["ep_length"].numpy().copy()
        memory = state.get("memory")  # absent from checkpoints written before recurrent
        self._memory = None if memory is None else memory.clone()
        if "starts" in state:
            self._starts = state["starts"].numpy().copy()
        return []

    def _remembering(self, policy: RecurrentPolicy) -> Policy:
        """``policy`` as a plain one that acts with this collector's memory of each env and
        keeps the next states. When the buffer (if any) stores the state each transition was
        acted on with (its algorithm declares :data:`rltrain.nets.recurrent.STATE_FIELD`), the
        policy returns it beside the actions (:class:`~rltrain.common.types.Acted`). Under inference
        mode (collect() enters it)."""
        if self._memory is None:
            self._memory = policy.initial_state(self.num_envs)
        elif self._memory.shape != (self.num_envs, policy.state_size):
            raise ValueError(f"the collector holds states of shape {tuple(self._memory.shape)}"
                             f", but the policy's are {policy.state_size} wide; reset() first")
        stores = self.buffer is not None and any(f.name == STATE_FIELD
                                                 for f in self.buffer.declared)

        def act(obs: np.ndarray) -> np.ndarray | Acted:
            assert self._memory is not None  # made above
            acted_with = reset_where(self._memory, self._starts)
            actions, self._memory = policy.step(obs, acted_with)
            if stores:
                return Acted(actions, {STATE_FIELD: acted_with.cpu().numpy()})
            return actions

        return act

    #: steps are written to the buffer in blocks of this many (one array operation per
    #: field per block instead of per step); the arrays a vector env returns are fresh each
    #: step (gymnasium's copy them by default), so holding them until then is safe
    WRITE_EVERY = 64

    def _write(self, steps: list[tuple]) -> None:
        """Write held steps ``(obs, act, rew, next_obs, terminated, truncated, valid,
        fields)`` to the buffer as one block, and forget them (``fields``: what the policy
        returned beside its actions, :class:`~rltrain.common.types.Acted`, or None)."""
        if not steps:
            return
        assert self.buffer is not None  # collect() holds steps only when there is a buffer
        obs, act, rew, next_obs, terminated, truncated, valids, fields = zip(*steps,
                                                                             strict=True)
        valid = None
        if any(v is not None for v in valids):
            every = np.ones(self.num_envs, dtype=bool)
            valid = np.stack([every if v is None else v for v in valids])
        declared = None
        if fields[0] is not None:
            declared = {name: np.stack([f[name] for f in fields]) for name in fields[0]}
        self.buffer.extend(np.stack(obs), np.stack(act), np.stack(rew), np.stack(next_obs),
                           np.stack(terminated), np.stack(truncated), valid, fields=declared)
        steps.clear()

    def collect(
        self,
        policy: Policy,
        *,
        n_steps: int | None = None,
        n_episodes: int | None = None,
        quota: bool = False,
        should_stop: Callable[[], bool] | None = None,
        max_episode_steps: int | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> Episodes:
        """Collect ``ceil(n_steps / m) * m`` env steps, or until ``n_episodes`` episodes end.

        :param quota: with ``n_episodes``, give each env a fixed quota of episodes
            (see :func:`episode_quotas`) and count only those, so that envs with
            short episodes are not over-represented (used for testing).
        :param should_stop: asked before every vector step; True ends the collection with
            :class:`CollectionStopped` (a test step that a signal interrupts).
        :param max_episode_steps: a test collection's cap (no buffer): an episode that
            reaches it is counted as it stands, *cut* (:attr:`Episodes.n_cut`), and its env
            starts a new one (see :meth:`_cut`), so that a policy that never ends its
            episodes cannot hold the test step for the env's whole time limit.
        :param on_progress: called after every vector step with (env steps, episodes
            counted) so far: the console's progress through a long test step.
        :raises NonFiniteError: an env returned a NaN or infinite reward.
        """
        if (n_steps is None) == (n_episodes is None):
            raise ValueError("pass exactly one of n_steps and n_episodes")
        if max_episode_steps is not None and self.buffer is not None:
            raise ValueError("max_episode_steps cuts test episodes; a collection into a "
                             "buffer would store a cut no env made")
        if self._obs is None:
            raise RuntimeError("call reset() before collect()")
        start = time.perf_counter()
        max_vector_steps = math.ceil(n_steps / self.num_envs) if n_steps is not None else None
        quotas = episode_quotas(n_episodes, self.num_envs) if quota and n_episodes else None
        counted = np.zeros(self.num_envs, dtype=np.int64)
        returns: list[np.ndarray] = []
        lengths: list[np.ndarray] = []
        n_done = vector_steps = transitions = n_cut = 0
        cap = max_episode_steps
        # envs whose cut episode plays on, uncounted, to its end (see _cut)
        playing_on = np.zeros(self.num_envs, dtype=bool)
        pending: list[tuple] = []  # steps not yet written to the buffer
        step, buffer, num_envs = self.envs.step, self.buffer, self.num_envs
        packer = self._packer if self._packer.layout is not None else None
        ep_return, ep_length = self._ep_return, self._ep_length

        def count(ended: np.ndarray) -> int:
            """Record the episodes of the envs ``ended`` that count (within each env's quota,
            with one); returns how many did. Called only when episodes end."""
            if quotas is not None:
                ended = ended[counted[ended] < quotas[ended]]
                counted[ended] += 1
            returns.append(ep_return[ended].copy())
            lengths.append(ep_length[ended].copy())
            return len(ended)

        # next-step mode: how many envs' coming step is a reset step
        n_resetting = int(self._resetting.sum()) if self.next_step_mode else 0
        # policies act under inference mode, entered once here (see Algorithm.policy)
        with torch.inference_mode():
            recurrent = False
            if isinstance(policy, RecurrentPolicy):
                policy, recurrent = self._remembering(policy), True
            while True:
                if max_vector_steps is not None and vector_steps >= max_vector_steps:
                    break
                if n_episodes is not None and (
                    (counted >= quotas).all() if quotas is not None else n_done >= n_episodes
                ):
                    break
                if should_stop is not None and should_stop():
                    self._write(pending)
                    raise CollectionStopped
                obs = self._obs
                if self.on_obs is not None:
                    self.on_obs(obs)
                act = policy(obs)
                acted = None
                if isinstance(act, Acted):  # values of acting time the buffer stores beside
                    acted = act.fields
                    act = act.actions
                try:
                    next_obs, rew, terminated, truncated, info = step(act)
                except Exception as e:
                    mark_env_failure(e)  # the env's own code: its arguments may be to blame
                    raise
                if packer is not None:
                    next_obs = packer(next_obs)
                done = terminated | truncated
                any_done = bool(done.any())
                valid = ~self._resetting if n_resetting else None
                if self.on_step is not None:
                    self.on_step(rew, done, valid)
                final_obs = next_obs
                if any_done and not self.next_step_mode:
                    final_obs = next_obs.copy()
                    final_obs[done] = self._packer.final(info["final_obs"][done])
                if buffer is not None:
                    pending.append((obs, act, rew, final_obs, terminated, truncated, valid,
                                    acted))
                    if len(pending) == self.WRITE_EVERY:
                        self._write(pending)
                if valid is None:
                    ep_return += rew
                    ep_length += 1
                    transitions += num_envs
                else:
                    ep_return += np.where(valid, rew, 0.0)
                    ep_length += valid
                    transitions += num_envs - n_resetting
                    if any_done:
                        done &= valid
                        any_done = bool(done.any())
                if any_done:
                    done_idx = np.flatnonzero(done)
                    ended = done_idx
                    if cap is not None and playing_on.any():  # the rest of a cut episode
                        ended = ended[~playing_on[ended]]
                        playing_on[done_idx] = False
                    n_done += count(ended)
                    ep_return[done_idx] = 0.0
                    ep_length[done_idx] = 0
                cut = None
                if cap is not None and (ep_length >= cap).any():
                    cut = (ep_length >= cap) & ~playing_on
                    if not cut.any():  # only episodes that were cut already, playing on
                        cut = None
                if cut is not None:
                    n = count(np.flatnonzero(cut))
                    n_done += n
                    n_cut += n
                    next_obs = self._cut(cut, next_obs, playing_on)
                if recurrent:  # whose observation now starts an episode: after a done, or
                    # (next-step mode) after the reset step that was just taken
                    self._starts = self._resetting if self.next_step_mode else done
                    if cut is not None:  # reset, or uncounted from here
                        self._starts = self._starts | cut
                if self.next_step_mode:
                    self._resetting = done
                    n_resetting = len(done_idx) if any_done else 0
                self._obs = next_obs
                vector_steps += 1
                if on_progress is not None:
                    on_progress(vector_steps * num_envs, n_done)
        self._write(pending)
        # NaN or inf rewards reach every sum they enter: checking the running and finished
        # returns once per collection catches each of them at no per-step cost
        finished = np.concatenate(returns) if returns else np.zeros(0)
        if not (np.isfinite(ep_return).all() and np.isfinite(finished).all()):
            bad = np.concatenate([finished[~np.isfinite(finished)],
                                  ep_return[~np.isfinite(ep_return)]])
            raise NonFiniteError(f"the env returned a non-finite reward (an episode's return "
                                 f"became {bad[0]})")
        return Episodes(
            n_steps=vector_steps * self.num_envs,
            n_transitions=transitions,
            returns=finished,
            lengths=np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64),
            time=time.perf_counter() - start,
            n_cut=n_cut,
        )

    def _cut(self, cut: np.ndarray, next_obs: np.ndarray, playing_on: np.ndarray) -> np.ndarray:
        """Start over the envs whose episode was just cut (``cut``, a mask); returns the
        observations the policy acts on next. A gymnasium sync or async vector env (every
        vector env rltrain builds but an env's own) resets those envs alone, each going on
        from its own seeded stream; a vector env of an env's own (CartPole's) cannot, so the
        cut episode plays on, uncounted, to its own end (its time limit at the latest) while
        the other envs go on counting."""
        self._ep_return[cut] = 0.0
        self._ep_length[cut] = 0
        if not isinstance(self.envs.unwrapped, (SyncVectorEnv, AsyncVectorEnv)):
            playing_on |= cut
            return next_obs
        obs, _ = self.envs.reset(options={"reset_mask": cut})
        self._resetting[cut] = False
        return self._packer(obs)
