"""Minari datasets from local storage (``minari:ID``), read only, converted to rltrain's.

:func:`load_minari` turns each episode's T+1 observations and T actions, rewards,
terminations and truncations into T transitions (Dict observations packed into rows as the
collector packs an env's), checked as a file is
(:func:`~rltrain.data.datasets.validation.validated`). A Minari dataset whose env Minari
would build from its recorded spec, with code other than gymnasium's
(:func:`minari_surface`), is refused unless the user consents (:mod:`rltrain.rundir.trust`).

Imports: gymnasium, numpy, :mod:`rltrain.config.schemas`, :mod:`rltrain.rundir.trust`, and of this
package :mod:`~rltrain.data.datasets.spaces`, :mod:`~rltrain.data.datasets.dataset` and
:mod:`~rltrain.data.datasets.validation`; minari (an extra) only where a ``minari:ID`` is
read, and :mod:`rltrain.spaces.observations` (torch) only for a Dict observation.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rltrain.config.schemas import ConfigError
from rltrain.data.datasets.dataset import ARRAYS, Dataset, json_safe, new_meta
from rltrain.data.datasets.spaces import describe_space
from rltrain.data.datasets.validation import first_line, validated
from rltrain.rundir import trust

#: what names a Minari dataset where a dataset is given: ``minari:ID``
MINARI_PREFIX = "minari:"
MINARI_INSTALL = 'pip install -e ".[minari]"'


def _minari(spec: str) -> Any:
    try:
        import minari
    except ImportError:
        raise ConfigError(f"{spec} needs the minari package, which is not installed: "
                          f"{MINARI_INSTALL} (in the rltrain repository)") from None
    return minari


def minari_dir(dataset_id: str, spec: str) -> Path:
    """The local folder of a Minari dataset; ConfigError listing the local ids if none."""
    minari = _minari(spec)
    from minari.dataset.minari_dataset import parse_dataset_id
    from minari.storage.datasets_root_dir import get_dataset_path

    try:
        parse_dataset_id(dataset_id)
    except ValueError:
        raise ConfigError(f"{spec}: {dataset_id!r} is not a Minari dataset id (they read "
                          "[namespace/]name-vN, e.g. minari:D4RL/door/human-v2)") from None
    path = get_dataset_path(dataset_id)
    if not (path / "data").is_dir():
        with warnings.catch_warnings():  # a misconfigured neighbour is not this error
            warnings.simplefilter("ignore")
            local = sorted(minari.list_local_datasets())
        root = get_dataset_path()
        have = (f"local datasets: {', '.join(local[:10])}{', ...' if len(local) > 10 else ''}"
                if local else "there are no local datasets")
        raise ConfigError(f"{spec}: no Minari dataset {dataset_id!r} in {root} ({have}); "
                          "download it with `minari download ID`, or set MINARI_DATASETS_PATH")
    return path


def minari_surface(path: Path) -> list[str]:
    """What loading a Minari dataset would run beyond gymnasium: Minari builds the env from
    the recorded ``env_spec`` (its entry point and wrappers) when the metadata holds no
    spaces. Read from the JSON alone, nothing imported."""
    try:
        metadata = json.loads((path / "data" / "metadata.json").read_text())
    except (OSError, ValueError, RecursionError):
        return []  # Minari reports a damaged or missing file itself, building nothing
    if not isinstance(metadata, dict):
        return []
    if "observation_space" in metadata and "action_space" in metadata:
        return []
    items = []
    for key in ("env_spec", "eval_env_spec"):
        raw = metadata.get(key)
        try:
            spec = json.loads(raw) if isinstance(raw, str) else None
        except (ValueError, RecursionError):
            spec = None
        if not isinstance(spec, dict):
            continue
        points = [spec.get("entry_point")] + [
            w.get("entry_point") for w in spec.get("additional_wrappers") or []
            if isinstance(w, dict)]
        for point in points:
            if isinstance(point, str) and not point.startswith("gymnasium."):
                items.append(f"call {point} (the dataset's {key}, to build its env)")
    return items


def load_minari(dataset_id: str, spec: str, consent: bool = False) -> Dataset:
    """Convert a local Minari dataset: each episode's T+1 observations and T actions,
    rewards, terminations and truncations become T transitions."""
    path = minari_dir(dataset_id, spec)
    trust.check(minari_surface(path), f"dataset={spec} ({path})", consent=consent,
                allow="add trust=true to the command")
    minari = _minari(spec)
    try:
        data = minari.load_dataset(dataset_id)
    except Exception as e:  # noqa: BLE001 - minari's own errors are plain ValueError etc.
        raise ConfigError(f"{spec}: Minari could not load {path}: {first_line(e)}") from None
    spaces = _described_spaces(data, spec)
    arrays = _episodes_as_transitions(data, spec, path)
    env_spec = data.env_spec
    meta = new_meta(
        env_id=None if env_spec is None else env_spec.id,
        env_kwargs={} if env_spec is None else json_safe(dict(env_spec.kwargs or {})),
        **spaces,
        policy={"kind": "minari", "algorithm": json_safe(
            data.storage.metadata.get("algorithm_name"))},
        source=spec,
        minari_version=str(data.minari_version),
    )
    return validated(arrays, meta, spec)


def _described_spaces(data: Any, spec: str) -> dict[str, dict[str, Any]]:
    """The Minari dataset's observation and action spaces, described as rltrain records
    them; ConfigError for a kind rltrain does not read."""
    spaces = {}
    for key, what in (("observation_space", "observation"), ("action_space", "action")):
        space = getattr(data, key)
        allowed = (gym.spaces.Box, gym.spaces.Dict) if key == "observation_space" else (
            gym.spaces.Box, gym.spaces.Discrete)
        if not isinstance(space, allowed):
            kinds = "Box and Dict" if key == "observation_space" else "Box and Discrete"
            raise ConfigError(f"{spec} has a {type(space).__name__} {what} space; rltrain "
                              f"reads {kinds} {what}s")
        try:
            spaces[key] = describe_space(space)
        except ConfigError as e:
            raise ConfigError(f"{spec} has a {what} space rltrain cannot read: {e}") from None
    return spaces


def _episodes_as_transitions(data: Any, spec: str, path: Path) -> dict[str, np.ndarray]:
    """The arrays of :data:`~rltrain.data.datasets.dataset.ARRAYS` from the Minari
    dataset's episodes, one after another; an episode the recording stopped in ends
    truncated."""
    # a Dict observation: Minari gives each episode's as a dict of arrays; packed into rows
    # here as the collector packs an env's (rltrain.spaces.observations)
    packing = None
    if isinstance(data.observation_space, gym.spaces.Dict):
        from rltrain.spaces.observations import DictLayout, ObservationSpaceError

        try:
            packing = DictLayout.of(data.observation_space)
        except ObservationSpaceError as e:
            raise ConfigError(f"{spec}: {e}") from None
    fields: dict[str, list[np.ndarray]] = {name: [] for name in ARRAYS}
    try:
        for ep in data.iterate_episodes():
            o = (np.asarray(ep.observations) if packing is None
                 else packing.pack(ep.observations))
            t = len(ep.rewards)
            if t == 0:
                continue
            if len(o) != t + 1 or len(ep.actions) != t:
                raise ConfigError(f"{spec}: episode {ep.id} has {len(o)} observations and "
                                  f"{len(ep.actions)} actions for {t} rewards (expected "
                                  f"{t + 1} and {t})")
            term = np.asarray(ep.terminations, dtype=bool)
            trunc = np.asarray(ep.truncations, dtype=bool).copy()
            if not (term[-1] or trunc[-1]):  # the recording stopped mid-episode
                trunc[-1] = True
            for name, value in (("obs", o[:-1]), ("next_obs", o[1:]),
                                ("act", np.asarray(ep.actions)),
                                ("rew", np.asarray(ep.rewards)), ("terminated", term),
                                ("truncated", trunc)):
                fields[name].append(value)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - a damaged storage file
        raise ConfigError(f"{spec}: reading {path} failed: {first_line(e)}") from None
    if not fields["rew"]:
        raise ConfigError(f"{spec} holds no transitions")
    return {name: np.concatenate(parts) for name, parts in fields.items()}
