"""The catalogue: every config schema Hydra and the checks know, derived from the registries.

``rltrain.config.schemas`` holds the schemas of the fixed groups (env, trainer params, buffer, the
console's logger fields, tune) and imports no other rltrain module; what depends on which
algorithms, trainer kinds and loggers are registered lives here, one layer up: the schema of
each ``algo/<name>``, ``trainer/<name>`` and of the ``logger`` group (each registered logger's
section), their registration in Hydra's ConfigStore, typing a stored config again, the
trainer/algorithm pairing, and the key and value checks that name what would be valid ("did
you mean").
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeGuard

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rltrain.algorithms import ALGORITHMS, AlgoSpec
from rltrain.config.schemas import (
    ConfigError,
    EnvConfig,
    ReplayBufferConfig,
    RunConfig,
    TrainerParams,
    TuneConfig,
    store_schemas,
)
from rltrain.loggers import logger_schema
from rltrain.trainers import TRAINERS


def trainer_schemas() -> dict[str, type[TrainerParams]]:
    """The trainer kinds' params schemas, by ``trainer=<name>``."""
    return {name: kind.params_type for name, kind in TRAINERS.items()}


def algorithm_specs() -> dict[str, AlgoSpec]:
    """The registered algorithms, by name."""
    return ALGORITHMS


def schemas() -> dict[str, type]:
    """Every schema by its ConfigStore path: ``algo/<name>`` for each registered algorithm,
    ``trainer/<name>``, ``env``, ``buffer/replay``, ``logger``."""
    out: dict[str, type] = {f"algo/{name}": spec.config
                            for name, spec in algorithm_specs().items()}
    out.update({f"trainer/{name}": schema for name, schema in trainer_schemas().items()})
    out.update({"env": EnvConfig, "buffer/replay": ReplayBufferConfig,
                "logger": logger_schema()})
    return out


def trainer_problem(algo: str, trainer: str) -> str | None:
    """Why ``trainer`` cannot run ``algo`` (each algorithm's YAML picks its trainer), or None."""
    spec = algorithm_specs().get(algo)
    if spec is None or trainer in spec.trainers:
        return None
    return (f"algo={algo} runs with trainer={' or trainer='.join(spec.trainers)}, not "
            f"trainer={trainer}; leave trainer= out (each algorithm picks its own)")


def typed_run_config(raw: DictConfig) -> DictConfig:
    """Give a composed config read back from a run directory (``.hydra/config.yaml``)
    its schemas again, so it is checked and converts to the same dataclasses."""
    specs = algorithm_specs()
    for group in ("algo", "env", "trainer", "buffer", "logger"):
        if group in raw and not isinstance(raw[group], DictConfig):
            raise ConfigError(f"the stored config is damaged: {group} is "
                              f"{type(raw[group]).__name__}, not a group of keys")
    algo = raw.get("algo", {}).get("name")
    if algo not in specs:
        raise ConfigError(f"the stored config names no known algorithm (algo.name={algo!r}; "
                          f"rltrain has {', '.join(specs)})")
    trainer = raw.get("trainer", {}).get("name") or specs[algo].trainers[0]
    if trainer not in trainer_schemas():
        raise ConfigError(f"the stored config names no known trainer (trainer.name={trainer!r})")
    schema = OmegaConf.structured(RunConfig)
    parts = {
        "algo": specs[algo].config,
        "env": EnvConfig,
        "trainer": trainer_schemas()[trainer],
        "buffer": ReplayBufferConfig,
        "logger": logger_schema(),
    }
    for key, node in parts.items():
        schema[key] = OmegaConf.structured(node)
    try:
        merged = OmegaConf.merge(schema, raw)
    except OmegaConfBaseException as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"the stored config does not match rltrain's schema: {first}"
                          ) from None
    assert isinstance(merged, DictConfig)  # merged onto a structured mapping
    return merged


def stored_schemas() -> dict[str, type]:
    """Each schema by the ConfigStore path it is stored under: ``rltrain_schema`` (the run
    config), ``schema/algo/<name>``, ``schema/trainer/<name>``, ``schema/env`` ..."""
    out: dict[str, type] = {"rltrain_schema": RunConfig}
    out.update({f"schema/{path}": node for path, node in schemas().items()})
    return out


def register_configs() -> None:
    """Store every schema under ``schema/...`` so YAML files can extend them."""
    store_schemas(stored_schemas())


def plain_schemas() -> dict[str, Any]:
    """:func:`stored_schemas` as plain values, keys and defaults (``???`` for a required
    one): what tab completion needs of them (rltrain.commands.completion)."""
    return {path: OmegaConf.to_container(OmegaConf.structured(node), resolve=False,
                                         enum_to_str=True)
            for path, node in stored_schemas().items()}


# --------------------------------------------------------------------------- known keys
# Hydra's ``+key=value`` adds a key even where the schema has none, and converting the
# config to dataclasses then drops it without a word: ``+trainer.max_epoch=1`` would train
# all epochs. Every key is therefore checked against the schemas, by name, both before
# Hydra composes (the command line) and after (whatever the YAML files and overrides made).

#: the top-level keys of a run config, besides the groups (``hydra`` is Hydra's own)
_TOP = {f.name: f for f in dataclasses.fields(RunConfig)}


@functools.cache
def _field_types(schema: type) -> Mapping[str, Any]:
    """A schema's fields and their types, read once per schema (``get_type_hints`` evaluates
    every annotation: about 13 ms a job in a sweep of PPO CartPole before this was kept)."""
    return types.MappingProxyType(typing.get_type_hints(schema))


def _is_schema(tp: Any) -> TypeGuard[type]:
    """Whether a field's type is a nested schema (a dataclass), whose keys are checked."""
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _is_free_form(tp: Any) -> bool:
    """Mappings and lists whose contents the schema leaves open (env.kwargs, env.wrappers)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_is_free_form(a) for a in typing.get_args(tp) if a is not type(None))
    return origin in (dict, list) or tp in (dict, list)


def group_schemas(group: str, algos: list[str]) -> list[type]:
    """The schemas a top-level group may have, for the given algorithm names."""
    specs = algorithm_specs()
    if group == "algo":
        return [specs[a].config for a in algos]
    if group == "trainer":
        return list(dict.fromkeys(trainer_schemas()[t] for a in algos for t in specs[a].trainers))
    fixed: dict[str, list[type]] = {"env": [EnvConfig], "buffer": [ReplayBufferConfig],
                                     "logger": [logger_schema()], "tune": [TuneConfig]}
    return fixed.get(group, [])


def key_problem(key: str, algos: list[str] | None = None) -> str | None:
    """None if ``key`` (dotted) is a key of the run config's schemas for one of ``algos``
    (default: any algorithm), else a message that names it and what would be valid."""
    specs = algorithm_specs()
    algos = [a for a in (algos or specs) if a in specs] or list(specs)
    parts = key.split(".")
    head = parts[0]
    if head not in _TOP:
        return _unknown(head, "", sorted(_TOP))
    schemas = group_schemas(head, algos)
    if not schemas:  # seed, device, torch_threads: values
        return None if len(parts) == 1 else f"{head} is a value, not a group of keys ({key})"
    prefix = head
    for part in parts[1:]:
        fields: dict[str, Any] = {}
        for schema in schemas:
            fields.update(_field_types(schema))
        if part not in fields:
            return _unknown(part, prefix, sorted(fields))
        tp = fields[part]
        prefix = f"{prefix}.{part}"
        if _is_free_form(tp):
            return None
        nested = [tp] if _is_schema(tp) else []
        if not nested:
            rest = parts[len(prefix.split(".")):]
            return None if not rest else f"{prefix} is a value, not a group of keys ({key})"
        schemas = nested
    return None


def _describe(tp: Any) -> str:
    """What a value of type ``tp`` looks like on the command line."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        parts = [_describe(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    if origin is list:
        inner = _describe(args[0]) if args else "values"
        return f"a list of {inner.removeprefix('an ').removeprefix('a ')}s, like [64,64]"
    return {int: "an integer", float: "a number", bool: "true or false",
            str: "a string"}.get(tp, getattr(tp, "__name__", str(tp)))


def value_problem(key: str, value: Any, algos: list[str] | None = None) -> str | None:
    """None if ``value`` (as Hydra parsed it) fits the schema field ``key`` names, for one of
    ``algos``; else a one-line message naming the key, the value and what would fit. Checked
    before Hydra, whose own message for a value of the wrong type spans five lines."""
    if isinstance(value, str) and "${" in value:
        return None  # an interpolation: resolved later, and checked then
    specs = algorithm_specs()
    algos = [a for a in (algos or specs) if a in specs] or list(specs)
    parts = key.split(".")
    if len(parts) == 1 and parts[0] in _TOP:
        schemas: list[type] = [RunConfig]  # seed, device, torch_threads
    else:
        schemas = group_schemas(parts[0], algos)
        if len(parts) < 2 or not schemas:
            return None
    for part in parts[1:-1]:
        nested: list[type] = []
        for schema in schemas:
            tp = _field_types(schema).get(part)
            if _is_schema(tp):
                nested.append(tp)
            elif tp is not None:
                return None  # a free-form mapping, or not a key (key_problem says so)
        schemas = nested
    leaf = parts[-1]
    types_seen = []
    for schema in schemas:
        tp = _field_types(schema).get(leaf)
        if tp is None or _is_free_form(tp) and typing.get_origin(tp) is not list:
            continue
        types_seen.append(tp)
        if _fits(schema, leaf, value):
            return None
    if not types_seen:
        return None
    shown = value if not isinstance(value, str) else repr(value)
    return f"{key}={shown} is not valid: {key} takes {_describe(types_seen[0])}"


def _fits(schema: type, leaf: str, value: Any) -> bool:
    """Whether OmegaConf takes ``value`` for the field ``leaf`` of ``schema``."""
    try:
        OmegaConf.structured(schema)[leaf] = value
        return True
    except OmegaConfBaseException:
        return False


def _public_keys(schema: type) -> list[str]:
    return sorted(k for k in _field_types(schema) if not k.startswith("_"))


def schema_problem(schema: type, prefix: str, path: str, value: Any) -> str | None:
    """:func:`key_problem` and :func:`value_problem` for the key ``prefix.path`` of one
    schema outside the run config (``hydra.sweeper`` and the Optuna sweeper's schema): None
    if the key is known and the value fits, else one line."""
    key = f"{prefix}.{path}"
    *parents, leaf = path.split(".")
    for part in parents:
        tp = _field_types(schema).get(part)
        if tp is None:
            return _unknown(part, prefix, _public_keys(schema))
        if not _is_schema(tp):
            return None  # a free-form mapping (the search space)
        schema, prefix = tp, f"{prefix}.{part}"
    tp = _field_types(schema).get(leaf)
    if tp is None:
        return _unknown(leaf, prefix, _public_keys(schema))
    if _is_schema(tp) or _is_free_form(tp) or isinstance(value, str) and "${" in value \
            or _fits(schema, leaf, value):
        return None
    shown = value if not isinstance(value, str) else repr(value)
    return f"{key}={shown} is not valid: {key} takes {_describe(tp)}"


def _unknown(name: str, prefix: str, valid: list[str]) -> str:
    full = f"{prefix}.{name}" if prefix else name
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    if not close:  # algo.lr for SAC: actor_lr, critic_lr, alpha_lr
        close = [v for v in valid if v.startswith(f"{name}_") or v.endswith(f"_{name}")][:3]
    where = f"{prefix} has" if prefix else "top-level keys are"
    dot = f"{prefix}." if prefix else ""
    names = [f"{dot}{c}" for c in close]
    options = " or ".join(filter(None, (", ".join(names[:-1]), names[-1]))) if names else ""
    hint = f"; did you mean {options}?" if names else ""
    return f"unknown key {full}{hint} ({where}: {', '.join(valid)})"


def check_known_keys(cfg: DictConfig) -> None:
    """Refuse, by name, any key of a composed run config that no schema knows."""
    algo = OmegaConf.select(cfg, "algo.name", default=None)
    algos = [algo] if algo in algorithm_specs() else None

    def walk(node: Any, prefix: str) -> None:
        for key in node.keys() if isinstance(node, DictConfig) else []:
            if not prefix and key == "hydra":
                continue
            full = f"{prefix}.{key!s}" if prefix else str(key)
            problem = key_problem(full, algos)
            if problem is not None:
                raise ConfigError(problem)
            child = node._get_node(key)
            if isinstance(child, DictConfig) and not _is_free_form_key(full, algos):
                walk(child, full)

    walk(cfg, "")


def _is_free_form_key(key: str, algos: list[str] | None) -> bool:
    head, _, rest = key.partition(".")
    if not rest:
        return False
    for schema in group_schemas(head, algos or list(algorithm_specs())):
        tp = _field_types(schema).get(rest.split(".")[0])
        if tp is not None and _is_free_form(tp):
            return True
    return False


def free_form_prefixes() -> list[str]:
    """Dotted keys under which any key may be added (``env.kwargs.``): Hydra would refuse
    ``env.kwargs.g=9.81`` without a ``+``, so the CLI adds one there."""
    out = []
    for group in ("algo", "trainer", "env", "buffer", "logger"):
        for schema in group_schemas(group, list(algorithm_specs())):
            for name, tp in _field_types(schema).items():
                origin = typing.get_origin(tp)
                if origin is dict or tp is dict:
                    out.append(f"{group}.{name}.")
    return sorted(set(out))


