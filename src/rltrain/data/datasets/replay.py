"""Datasets and replay buffers: a dataset put into a buffer for offline training, and an
off-policy run's checkpointed replay buffer turned back into a dataset.

:func:`to_buffer` puts a dataset into a one-lane :class:`~rltrain.data.storage.ReplayBuffer`
(actions in the algorithm's normalised space); :func:`from_replay_buffer` turns a buffer's
``state_dict()`` back into a dataset (the env's actions). Both follow the fields of
:data:`~rltrain.data.datasets.dataset.ARRAYS`, the buffer's through its own API
(``extend``, ``stored_transitions``), and carry the fields an algorithm declares beside a
transition's (``AlgoSpec.stored``) under the same names, shapes and dtypes: a buffer's
``fields=`` and a dataset's ``fields`` are one thing, in memory and on disk.

Imports: numpy, :mod:`rltrain.config.schemas`, :mod:`rltrain.data.fields` (numpy only), and of this
package
:mod:`~rltrain.data.datasets.spaces` and :mod:`~rltrain.data.datasets.dataset`;
:mod:`rltrain.data.storage` and :mod:`rltrain.spaces.actions` only inside the two functions (they
import torch, which reading, writing and merging datasets of vectors do without).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from rltrain.config.schemas import ConfigError
from rltrain.data.datasets.dataset import INTEGER_ACTIONS, Dataset, make_dataset
from rltrain.data.datasets.spaces import obs_storage, space_from_dict
from rltrain.data.fields import Field

if TYPE_CHECKING:
    from rltrain.data.storage import ReplayBuffer


def to_buffer(ds: Dataset, *, discrete: bool, action_low: np.ndarray | None,
              action_high: np.ndarray | None, frame_stack: int = 1,
              fields: tuple[Field, ...] = ()) -> ReplayBuffer:
    """A one-lane replay buffer holding ``ds`` in order, for offline training, with the
    declared ``fields`` (the algorithm's, ``AlgoSpec.stored``) filled from the dataset's
    (:func:`~rltrain.data.datasets.validation.check_fields` has checked that it holds them;
    a field it holds that is not among them is left out).

    With ``frame_stack`` > 1 (a frame-stacked image env), the buffer stores a frame per
    transition when the rows are consecutive frame stacks, as the buffer checks on writing;
    rows that are not (a dataset merged from pieces cut mid-episode) are stored whole.

    Continuous actions are mapped into the algorithm's normalised space with
    :func:`rltrain.spaces.actions.to_agent`; integer ones (Discrete, MultiDiscrete, MultiBinary) are
    stored as int64 indices from 0 (the space's ``start`` taken off, where it has one). Each
    observation is stored once: the next observation of a transition is the next row's,
    except where the dataset says otherwise (an episode's end; rows that are not
    consecutive), which the buffer keeps aside, so batches see exactly ``ds.next_obs``. The
    n-step windows of :class:`rltrain.data.transforms.nstep.NStepReturns` stop at ``terminated |
    truncated``, which :func:`make_dataset` guarantees at the end of every episode, the
    dataset's last included.
    """
    from rltrain.data.storage import ReplayBuffer
    from rltrain.spaces.actions import integer_start, to_agent

    is_discrete = ds.meta.get("action_space", {}).get("type") in INTEGER_ACTIONS
    if is_discrete != discrete:
        kind = "discrete" if is_discrete else "continuous"
        raise ConfigError(f"dataset has {kind} actions, but the algorithm was built for "
                          f"{'discrete' if discrete else 'continuous'} ones")
    if discrete:
        act = ds.act.astype(np.int64)
        start = integer_start(space_from_dict(ds.meta["action_space"]))
        if start is not None:
            act = act - start
    elif action_low is None or action_high is None:
        raise ValueError("continuous actions need action_low and action_high")
    else:
        act = to_agent(ds.act, action_low, action_high)
    if not len(ds):
        raise ConfigError("the dataset holds no transitions")
    # the buffer stores observations as the dataset does (make_dataset: images and Dict rows
    # uint8), as an online run's buffer stores the env's
    obs_dtype, obs_shape = obs_storage(space_from_dict(ds.meta["observation_space"]))
    if ds.obs.dtype != obs_dtype or ds.obs.shape[1:] != obs_shape:
        raise ValueError(f"dataset obs are {ds.obs.dtype} {ds.obs.shape[1:]}, but its "
                         f"observation space is stored as {obs_dtype} {obs_shape}")
    missing = [f.name for f in fields if f.name not in ds.fields]
    if missing:
        raise ConfigError(f"the dataset holds no {', '.join(missing)}, which the algorithm "
                          "stores beside each transition")
    truncated = ds.truncated.copy()
    truncated[-1] |= not ds.terminated[-1]  # the data ends: so does its last episode
    for stack in dict.fromkeys((frame_stack, 1)):
        buffer = ReplayBuffer(1, len(ds), obs_shape, ds.act.shape[1:],
                              np.int64 if discrete else np.float32, obs_dtype=obs_dtype,
                              circular=True, frame_stack=stack, fields=fields)
        try:
            buffer.extend(*(a[:, None] for a in (ds.obs, act, ds.rew, ds.next_obs,
                                                 ds.terminated, truncated)),
                          fields={f.name: ds.fields[f.name][:, None] for f in fields})
        except ValueError:  # not consecutive frame stacks: store the observations whole
            if stack == 1:
                raise
            continue
        return buffer
    raise AssertionError("unreachable: frame_stack=1 stores any observation")


def from_replay_buffer(state: Mapping[str, Any], *, discrete: bool,
                       action_low: np.ndarray | None, action_high: np.ndarray | None,
                       meta: dict[str, Any], fields: tuple[Field, ...] = ()) -> Dataset:
    """A dataset from a replay buffer's ``state_dict()`` (the buffer in an off-policy
    run's checkpoint; today's format or the previous release's full-capacity one): lanes
    one after another, each in time order (oldest first), its last transition marked
    truncated when the episode was still running. Continuous actions go back to the env's
    space with :func:`rltrain.spaces.actions.to_env` (the buffer holds the algorithm's normalised
    actions), integer ones get the action space's ``start`` back (``meta["action_space"]``).
    The declared ``fields`` (the run's algorithm's, ``AlgoSpec.stored``) come with them, as
    the buffer kept them.

    The first episode of a lane that has wrapped around is a tail: its start was
    overwritten.

    :raises ConfigError: the buffer is empty. ValueError: its state is damaged or lacks a
        declared field (the field named; the caller names the checkpoint).
    """
    from rltrain.data.state_format import stored_transitions
    from rltrain.spaces.actions import integer_start, to_env

    out = stored_transitions(state, fields)
    size = out.pop("size")
    if not size.sum():
        raise ConfigError("the replay buffer is empty")
    # each lane's last transition: cut there if its episode was still running (copies: the
    # checkpoint's state is left as it was)
    ends = np.cumsum(size)[size > 0] - 1
    truncated = out["truncated"].astype(bool)
    truncated[ends] |= ~out["terminated"][ends].astype(bool)
    out["truncated"] = truncated
    if not discrete:
        if action_low is None or action_high is None:
            raise ValueError("continuous actions need action_low and action_high")
        out["act"] = to_env(out["act"], action_low, action_high)
    else:
        start = integer_start(space_from_dict(meta["action_space"]))
        if start is not None:
            out["act"] = out["act"] + start
    return make_dataset(out["obs"], out["act"], out["rew"], out["next_obs"], out["terminated"],
                        out["truncated"], meta=meta,
                        fields={f.name: out[f.name] for f in fields})
