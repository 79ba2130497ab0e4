"""Validation: what a dataset file or a Minari dataset holds, checked before training reads it.

:func:`validated` checks arrays and a meta record as read against rltrain's layout (spaces
that parse, one entry per transition in every array, shapes and dtypes that fit the spaces,
actions inside their space, integer observations inside their bounds, finite values within
float32's range; each declared field the meta lists present, of the shape and dtype it
lists, finite) and raises one :class:`~rltrain.config.schemas.ConfigError` naming the source and the
first problem. :func:`check_spaces` refuses a dataset whose spaces are not the env's,
:func:`check_fields` one that lacks a field an algorithm stores beside each transition.

Imports: gymnasium, numpy, :mod:`rltrain.config.schemas`, :mod:`rltrain.data.fields`, and of this
package :mod:`~rltrain.data.datasets.spaces` and :mod:`~rltrain.data.datasets.dataset`;
:mod:`rltrain.spaces.observations` only for a Dict observation (it imports torch).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from rltrain.config.schemas import ConfigError
from rltrain.data.datasets.dataset import Dataset, fields_of_meta, fields_text, make_dataset
from rltrain.data.datasets.spaces import (
    SPACES_HELD,
    describe_space,
    obs_storage,
    space_from_dict,
    space_line,
    space_mismatch,
    space_text,
)
from rltrain.data.fields import Field

#: a refusal naming the source: ``dataset SPEC PROBLEM``
Refusal = Callable[[str], ConfigError]


def first_line(e: BaseException, limit: int = 160) -> str:
    """An exception's message in one line of at most ``limit`` characters, for a refusal."""
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validated(arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any], spec: str) -> Dataset:
    """Check what was read against rltrain's layout; one ConfigError naming ``spec`` and the
    first problem. The checks run in this order, each assuming the ones before it passed."""
    def bad(problem: str) -> ConfigError:
        return ConfigError(f"dataset {spec} {problem}")

    spaces, texts = _meta_spaces(meta, bad)
    try:
        declared = fields_of_meta(meta)
    except ValueError as e:
        raise bad(f"has a damaged fields list in its meta ({e})") from None
    for f in declared:
        if f.name not in arrays:
            raise bad(f"lists the field {f.name!r} in its meta but holds no {f.name} array; "
                      "recollect it with rltrain-collect")
    lengths = {name: (len(a) if np.ndim(a) else 0) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{name} {count}" for name, count in lengths.items())
        raise bad(f"has arrays of unequal length ({shown}); every array needs one entry per "
                  "transition")
    if lengths["rew"] == 0:
        raise bad("holds no transitions")
    _check_observations(arrays, spaces["observation_space"], texts["observation_space"], bad)
    _check_actions(arrays["act"], spaces["action_space"], texts["action_space"], bad)
    _check_rewards_and_ends(arrays, bad)
    _check_finite(arrays, bad)
    for f in declared:
        _check_field(f, arrays[f.name], bad)
    return make_dataset(arrays["obs"], arrays["act"], arrays["rew"], arrays["next_obs"],
                        arrays["terminated"], arrays["truncated"], meta=dict(meta),
                        fields={f.name: arrays[f.name] for f in declared})


def _meta_spaces(meta: Mapping[str, Any], bad: Refusal
                 ) -> tuple[dict[str, gym.Space], dict[str, str]]:
    """The observation and action spaces the meta record describes, and their lines."""
    spaces, texts = {}, {}
    for key in ("observation_space", "action_space"):
        d = meta.get(key)
        if not isinstance(d, Mapping):
            raise bad(f"records no {key} in its meta; it was not written by rltrain-collect")
        try:
            spaces[key] = space_from_dict(d)
        except ValueError as e:
            raise bad(f"has a damaged {key} in its meta ({e})") from None
        texts[key] = space_text(d)
    return spaces, texts


def _check_observations(arrays: Mapping[str, np.ndarray], obs_space: gym.Space, text: str,
                        bad: Refusal) -> None:
    """obs and next_obs: stored as the space says, Dict keys and integer values inside
    their spaces."""
    try:
        obs_dtype, obs_shape = obs_storage(obs_space)
    except ConfigError as e:
        raise bad(f"has an observation space rltrain cannot store ({e})") from None
    for name in ("obs", "next_obs"):
        a = arrays[name]
        # uint8 storage (images, packed Dict rows) takes bytes (or bools, for an image);
        # anything else takes numbers, converted to float32
        fits = a.dtype.kind in "fiu" if obs_dtype != np.uint8 else a.dtype == np.uint8 or (
            a.dtype == np.bool_ and not isinstance(obs_space, gym.spaces.Dict))
        if a.shape[1:] != obs_shape or not fits:
            stored = "" if obs_shape == obs_space.shape and obs_dtype != np.uint8 else \
                f", stored as {obs_dtype} of shape {obs_shape}"
            raise bad(f"has {name} of shape {a.shape[1:]} and dtype {a.dtype}, but its "
                      f"observation space is {text}{stored}")
        problem = _rows_problem(obs_space, a)
        if problem is None and isinstance(obs_space, gym.spaces.Box):
            problem = _beyond_bounds(obs_space, a)
        if problem is not None:
            raise bad(f"has {name} {problem}")


def _check_actions(act: np.ndarray, act_space: gym.Space, text: str, bad: Refusal) -> None:
    """One integer inside a Discrete space per transition, or numbers of the space's shape."""
    if isinstance(act_space, gym.spaces.Discrete):
        if act.shape[1:] != () or act.dtype.kind not in "iu":
            raise bad(f"has act of shape {act.shape[1:]} and dtype {act.dtype}; its action "
                      f"space {act_space} needs one integer per transition")
        lo, hi = int(act_space.start), int(act_space.start + act_space.n)
        outside = (act < lo) | (act >= hi)
        if outside.any():
            raise bad(f"has action {int(act[outside][0])} outside its action space {act_space}")
    elif act.shape[1:] != act_space.shape or act.dtype.kind not in "fiu":
        raise bad(f"has act of shape {act.shape[1:]} and dtype {act.dtype}, but its action "
                  f"space is {text}")


def _check_rewards_and_ends(arrays: Mapping[str, np.ndarray], bad: Refusal) -> None:
    """One number per transition in rew, one bool in terminated and truncated."""
    if arrays["rew"].ndim != 1 or arrays["rew"].dtype.kind not in "fiu":
        raise bad(f"has rew of shape {arrays['rew'].shape} and dtype {arrays['rew'].dtype}; "
                  "it needs one number per transition")
    for name in ("terminated", "truncated"):
        a = arrays[name]
        if a.ndim != 1 or not (a.dtype == bool or (a.dtype.kind in "iu" and
                                                   np.isin(a, (0, 1)).all())):
            raise bad(f"has {name} of shape {a.shape} and dtype {a.dtype}; it needs one bool "
                      "per transition")


def _check_finite(arrays: Mapping[str, np.ndarray], bad: Refusal) -> None:
    """Floats that are finite and within float32's range, which rltrain trains in."""
    largest = float(np.finfo(np.float32).max)
    for name in ("obs", "next_obs", "act", "rew"):
        a = arrays[name]
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            where = int(np.flatnonzero(~np.isfinite(a.reshape(len(a), -1)).all(axis=1))[0])
            raise bad(f"has a non-finite value in {name} (transition {where}); remove or "
                      "recollect it")
        if a.dtype.kind == "f" and a.dtype.itemsize > 4 and a.size:
            beyond = np.abs(a.reshape(len(a), -1)) > largest
            if beyond.any():
                where = int(np.flatnonzero(beyond.any(axis=1))[0])
                value = float(a.reshape(len(a), -1)[where][beyond[where]][0])
                raise bad(f"has {name} {value:g} (transition {where}), beyond float32's "
                          f"range (±{largest:.3g}) that rltrain trains in; rescale or remove "
                          "it")


def _check_field(f: Field, a: np.ndarray, bad: Refusal) -> None:
    """A declared field's array: the shape and dtype its meta lists, finite if floats."""
    if a.shape[1:] != f.shape or a.dtype != f.dtype:
        raise bad(f"has {f.name} of shape {a.shape[1:]} and dtype {a.dtype}, but its meta "
                  f"lists {fields_text((f,))}; recollect it with rltrain-collect")
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        where = int(np.flatnonzero(~np.isfinite(a.reshape(len(a), -1)).all(axis=1))[0])
        raise bad(f"has a non-finite value in {f.name} (transition {where}); remove or "
                  "recollect it")


#: rows scanned at a time for values beyond an integer space's bounds (a few MB of images)
_SCAN_ROWS = 1024


def _beyond_bounds(space: gym.spaces.Box, values: np.ndarray) -> str | None:
    """What lies outside an integer Box's bounds (an image's, or a uint8 Dict key's), or None.
    A network scales such values by the space's bounds (rltrain.nets.encoders.image): a MinAtar
    frame holding 255 where its space says 1 reaches the network 255 times too bright, a
    silent wrong answer, so it is refused. Floats are not checked: many envs' vectors leave
    their declared bounds by design. Scanned in chunks, and not at all when the bounds are
    the dtype's own (nothing can lie beyond them)."""
    if values.dtype.kind not in "iub" or not len(values):
        return None
    low = np.broadcast_to(space.low, space.shape).reshape(-1)
    high = np.broadcast_to(space.high, space.shape).reshape(-1)
    info = np.iinfo(np.uint8 if values.dtype == np.bool_ else values.dtype)
    if (low <= info.min).all() and (high >= info.max).all():
        return None
    flat = values.reshape(len(values), -1)
    for start in range(0, len(flat), _SCAN_ROWS):
        chunk = flat[start:start + _SCAN_ROWS]
        wrong = (chunk < low) | (chunk > high)
        if wrong.any():
            row = int(np.flatnonzero(wrong.any(axis=1))[0])
            column = int(np.flatnonzero(wrong[row])[0])
            value = chunk[row, column]
            return (f"{int(value)} at transition {start + row}, outside its space's bounds "
                    f"[{low[column]:g}, {high[column]:g}] there: the network scales it by "
                    "those bounds, so it would see it wrongly; recollect the data, or fix the "
                    "space recorded with it")
    return None


def _rows_problem(space: gym.Space, rows: np.ndarray) -> str | None:
    """What is wrong in the packed rows of a Dict observation, which no dtype check sees: a
    Discrete, MultiDiscrete or MultiBinary key outside its space (its one-hot encoding would
    index past its size), or a non-finite number. None if nothing is (or ``space`` is no Dict)."""
    if not isinstance(space, gym.spaces.Dict):
        return None
    from rltrain.spaces.observations import DictLayout  # a Dict: torch is needed to train on it

    packing = DictLayout.of(space)
    records = np.ascontiguousarray(rows).view(packing.dtype).reshape(len(rows))
    for key in packing.keys:
        sub = packing.spaces[key]
        values = records[key].reshape(len(rows), -1)
        if isinstance(sub, gym.spaces.Box):
            if values.dtype.kind != "f":
                beyond = _beyond_bounds(sub, values)
                if beyond is not None:
                    return f"with key {key!r} {beyond}"
                continue
            wrong = ~np.isfinite(values)
        else:
            if isinstance(sub, gym.spaces.Discrete):
                low, high = np.int64(sub.start), np.int64(sub.start + sub.n)
            elif isinstance(sub, gym.spaces.MultiDiscrete):
                low = sub.start.reshape(-1).astype(np.int64)
                high = low + sub.nvec.reshape(-1).astype(np.int64)
            else:  # MultiBinary
                low, high = np.int64(0), np.int64(2)
            wrong = (values < low) | (values >= high)
        if wrong.any():
            where = int(np.flatnonzero(wrong.any(axis=1))[0])
            value = values[where][wrong[where]][0]
            if isinstance(sub, gym.spaces.Box):
                return (f"with a non-finite value in key {key!r} (transition {where}); remove "
                        "or recollect it")
            return (f"with key {key!r} {value} (transition {where}), outside its space "
                    f"{space_line(sub)}; recollect it")
    return None



def check_spaces(ds: Dataset, obs_space: gym.Space, action_space: gym.Space, env_id: str,
                 spec: str) -> None:
    """Refuse a dataset whose observation or action space is not the env's, naming both.

    Only the spaces decide: a dataset collected on another env id with the same spaces (a
    registered copy, a variant) is accepted.
    """
    where = ds.meta.get("env_id")
    origin = f" (collected on {where})" if where and where != env_id else ""
    for what, space, key in (("observation", obs_space, "observation_space"),
                             ("action", action_space, "action_space")):
        mine = ds.meta.get(key)
        try:
            env_d = describe_space(space)
        except ConfigError:
            raise ConfigError(f"{env_id} has a {type(space).__name__} {what} space, which "
                              f"cannot be stored in a dataset; {SPACES_HELD}") from None
        if not isinstance(mine, Mapping):
            raise ConfigError(f"dataset {spec}{origin} records no {what} space but {env_id} "
                              f"has {space_text(env_d)}; collect the dataset on the same env")
        why = space_mismatch(mine, env_d)
        if why is not None:
            theirs = space_text(mine)
            # a Dict's line is long: say where they part
            detail = f" (they differ in {why})" if mine.get("type") == "Dict" and \
                why != "type" else ""
            raise ConfigError(f"dataset {spec}{origin} has {what} space {theirs} but {env_id} has "
                              f"{space_text(env_d)}{detail}; collect the dataset on the same env")
    dtype, shape = obs_storage(obs_space)
    for name in ("obs", "next_obs"):
        a = getattr(ds, name)
        if a.dtype != dtype or a.shape[1:] != shape:
            raise ConfigError(f"dataset {spec}{origin} holds {name} as {a.dtype} "
                              f"{a.shape[1:]}, but {env_id}'s observations "
                              f"({space_line(obs_space)}) are stored as {dtype} {shape}; collect "
                              "the dataset on the same env with rltrain-collect")


def check_fields(ds: Dataset, fields: tuple[Field, ...], spec: str) -> None:
    """Refuse a dataset that lacks a field the algorithm stores beside each transition
    (``AlgoSpec.stored``), or holds it in another shape or in a dtype it cannot take without
    loss, naming the field and what would work. A field the dataset holds that the
    algorithm does not store is left out of training."""
    held = {f.name: f for f in ds.declared}
    for want in fields:
        have = held.get(want.name)
        if have is None:
            raise ConfigError(
                f"dataset {spec} holds no {want.name} ({fields_text(ds.declared)}), which "
                f"this algorithm stores beside each transition as {fields_text((want,))}; "
                "train it on a dataset that holds it (rltrain-collect --buffer RUN_DIR writes "
                "the fields of a run's replay buffer), or online")
        if have.shape != want.shape or not np.can_cast(have.dtype, want.dtype, "safe"):
            raise ConfigError(
                f"dataset {spec} holds {fields_text((have,))}, but this algorithm stores "
                f"{fields_text((want,))} beside each transition; train it on a dataset "
                f"collected from a run of it (rltrain-collect --buffer RUN_DIR)")
