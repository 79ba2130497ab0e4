"""Finding run directories, reading them, and grouping them by config minus the seed.

A run directory holds ``.hydra/config.yaml`` and ``epochs.jsonl`` (a sweep job that failed
before its first epoch holds ``summary.json`` instead of ``epochs.jsonl``, and is listed as
failed). Runs are grouped per task (the env id) by their whole config, less the seed and the
keys that only concern logging and checkpoint bookkeeping; a group is named by the keys that
tell the groups of a task apart.

A run directory may come from anywhere, so what is read is checked before it is used: the
config through :func:`rltrain.rundir.stored_data.read_yaml` (plain data within bounds: a YAML alias
bomb, a set, a key that is not a string are refused by name), and each field the report uses for
its type and range (``seed`` an integer, ``env_step`` a count that grows, ``stopped_early`` a
boolean, ...). A run that fails a check is :class:`DamagedRun`: the report skips it with a
warning naming the run, the file and the field, and reports the others.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeGuard

from rltrain.rundir import directory, stored_data

#: keys that say nothing about what was trained: runs differing only in these are seeds of
#: one group
BOOKKEEPING = ("seed", "logger.", "trainer.checkpoint_every", "trainer.keep_checkpoints",
               "trainer.checkpoint_buffer")
#: config groups chosen by name on the command line (``algo=dqn`` sets ``algo.name``)
CONFIG_GROUPS = ("algo", "env", "trainer", "buffer")
#: an epochs.jsonl record is about 1 KB, summary.json about 2 KB: each is read only up to
#: this (rltrain.rundir.stored_data, as every reader of a run's files)
MAX_EPOCH_LINE_BYTES = stored_data.MAX_RECORD_BYTES
#: env and gradient steps are counted in int64 by numpy and torch
MAX_STEP = 2**63 - 1
#: summary.json's fields that the report reads, with what each must be
SUMMARY_FIELDS = {
    "status": "a string",
    "stopped_early": "true or false",
    "reward_threshold": "a finite number or null",
    "best_score": "a number or null",
    "wall_time": "a number or null",
    "env_step": "a whole number >= 0",
    "epochs": "a whole number >= 0",
}


class DamagedRun(Exception):
    """A run directory that cannot be read: skipped with a warning naming it."""


@dataclasses.dataclass
class Run:
    """One run as the report sees it: its flattened config, summary and test returns."""

    path: Path
    config: dict[str, Any]
    overrides: list[str]
    summary: dict[str, Any] | None
    #: env step (an offline run: gradient step) and test ``return_mean`` of each epoch
    steps: list[float]
    scores: list[float]

    @property
    def offline(self) -> bool:
        """An offline run takes no env step in training: its curve is by gradient step."""
        return self.config.get("trainer.name") == "offline"

    @property
    def status(self) -> str:
        return str(self.summary.get("status", "unknown")) if self.summary else "unknown"

    @property
    def usable(self) -> bool:
        """Counted in the statistics: not failed, and tested at least once."""
        return self.status != "failed" and bool(self.scores)

    @property
    def stopped_early(self) -> bool:
        """Stopped at the reward threshold (``trainer.stop_score``) before ``max_epochs``."""
        return bool(self.summary and self.summary.get("stopped_early"))

    @property
    def seed(self) -> Any:
        return self.config.get("seed")

    @property
    def algo(self) -> str:
        return str(self.config.get("algo.name", "?"))

    @property
    def env_id(self) -> str:
        return str(self.config.get("env.id", "?"))

    @property
    def threshold(self) -> float | None:
        value = (self.summary or {}).get("reward_threshold")
        return float(value) if _is_real(value) and math.isfinite(value) else None

    @property
    def stop_score(self) -> float | None:
        """The score the run would stop at: ``trainer.stop_score``, whose ``auto`` is the
        env's reward threshold; None when it never stops early (or it is not known)."""
        value = self.config.get("trainer.stop_score")
        if value == "auto":
            return self.threshold
        return float(value) if _is_real(value) else None

    @property
    def epochs(self) -> int:
        """Epochs the run went through (summary.json's count, else its tested epochs)."""
        value = (self.summary or {}).get("epochs")
        return value if isinstance(value, int) and not isinstance(value, bool) else len(
            self.scores)

    @property
    def max_epochs(self) -> int | None:
        value = self.config.get("trainer.max_epochs")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def final_score(self, last: int) -> float:
        """The mean of the last ``last`` test returns (fewer if the run has fewer). A run that
        stopped early at its stop score is carried forward, as its curve is: the tests it
        skipped would be taken to score what its last one did, so its final score is that."""
        if self.stopped_early:
            return float(self.scores[-1])
        return float(sum(self.scores[-last:]) / len(self.scores[-last:]))


@dataclasses.dataclass
class Group:
    """Runs of one task with the same config but for the seed."""

    task: str
    name: str
    config: dict[str, Any]
    runs: list[Run]

    @property
    def usable(self) -> list[Run]:
        """The runs the statistics count: usable ones, one per seed. A seed run twice with one
        config (a README example repeated, a run copied) repeats the same run, as rltrain's
        runs are deterministic; counting both would shrink the CIs with no new evidence. The
        one kept is the one tested most often (the first by path on a tie)."""
        kept: dict[Any, Run] = {}
        for r in self.runs:
            if r.usable and (r.seed not in kept or len(r.scores) > len(kept[r.seed].scores)):
                kept[r.seed] = r
        chosen = {id(r) for r in kept.values()}
        return [r for r in self.runs if id(r) in chosen]

    @property
    def repeats(self) -> list[Run]:
        """Usable runs left out because another run of the group has their seed."""
        chosen = {id(r) for r in self.usable}
        return [r for r in self.runs if r.usable and id(r) not in chosen]


def find_runs(path: Path) -> list[Path]:
    """The run directories at or under ``path``, in natural order (sweep job 2 before 10)."""
    if _is_run_dir(path):
        return [path]
    found = []
    for root, dirs, _ in os.walk(path):
        here = Path(root)
        if _is_run_dir(here):
            found.append(here)
            dirs.clear()
        else:
            dirs[:] = [d for d in dirs if not d.startswith(".")]
    return sorted(found, key=natural)


def _is_run_dir(path: Path) -> bool:
    return (path / ".hydra" / "config.yaml").is_file() and (
        (path / "epochs.jsonl").is_file() or (path / "summary.json").is_file())


def natural(text: object) -> list[int | str]:
    """A sort key that orders the numbers inside ``text`` by value (job 2 before job 10)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(text))]


def load_run(path: Path, warn: Callable[[str], object] = print) -> Run:
    """Read one run directory; raise :class:`DamagedRun` when it cannot be used at all.

    :param warn: called with a message for what is odd but survivable (a torn last line of
        ``epochs.jsonl``, left by a kill or a full disk, is dropped as a resume would).
    """
    try:
        raw = stored_data.read_yaml(path / ".hydra" / "config.yaml")
    except stored_data.StoredDataError as e:
        raise DamagedRun(f".hydra/config.yaml {e.verdict}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("env"), dict):
        raise DamagedRun(".hydra/config.yaml is not an rltrain config (no env group)")
    config = flatten(raw)
    _check_config(config)
    try:
        identity = directory.read_identity(path)
    except directory.RunDirError as e:
        raise DamagedRun(str(e)) from None
    summary = _read_summary(path, warn)
    if identity is not None:
        _check_own_summary(summary, identity)
    steps: list[float] = []
    scores: list[float] = []
    epochs = path / "epochs.jsonl"
    if epochs.is_file():
        key = "gradient_step" if config.get("trainer.name") == "offline" else "env_step"
        steps, scores = _read_epochs(epochs, warn, key, identity)
    if not scores and (summary or {}).get("status") != "failed":
        raise DamagedRun("epochs.jsonl is missing" if not epochs.is_file() else
                         "epochs.jsonl is empty" if not epochs.stat().st_size else
                         "epochs.jsonl holds no test returns")
    return Run(path, config, _read_overrides(path, warn), summary, steps, scores)


def _check_config(config: dict[str, Any]) -> None:
    """The fields the report reads from a config, each what rltrain writes there."""
    def wrong(key: str, what: str) -> DamagedRun:
        return DamagedRun(f".hydra/config.yaml: {key} is {_short(config.get(key))}, not {what}")

    for key in ("env.id", "algo.name"):
        if not isinstance(config.get(key), str) or not config[key]:
            raise wrong(key, "a name")
    if "trainer.name" in config and not isinstance(config["trainer.name"], str):
        raise wrong("trainer.name", "a name")
    seed = config.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise wrong("seed", "a whole number >= 0")
    stop = config.get("trainer.stop_score", "auto")
    if stop not in ("auto", None) and not _is_real(stop):
        raise wrong("trainer.stop_score", "a number, auto or null")
    top = config.get("trainer.max_epochs", 1)
    if not isinstance(top, int) or isinstance(top, bool) or top < 1:
        raise wrong("trainer.max_epochs", "a whole number >= 1")


def _check_own_summary(summary: dict[str, Any] | None, identity: dict[str, Any]) -> None:
    """A summary.json another run wrote (copied in) is refused naming both runs."""
    other = (summary or {}).get("run")
    if isinstance(other, dict) and not directory.same_run(other, identity):
        raise DamagedRun(f"summary.json is another run's ({directory.describe_identity(other)}); "
                         f"this directory's run is {directory.describe_identity(identity)}")


def _read_epochs(path: Path, warn: Callable[[str], object], key: str = "env_step",
                 identity: dict[str, Any] | None = None) -> tuple[list[float], list[float]]:
    """Each tested epoch's step (``key``) and test return. A record that is not what rltrain
    writes raises DamagedRun naming the line and field, and so does a record of another run
    than the directory's (``identity``: its run.json); a record without a finite test
    return (no test episode finished) is left out, as a torn last line is."""
    steps: list[float] = []
    scores: list[float] = []
    previous: tuple[int, int] | None = None  # the step of the record before, and its line
    try:
        for line in stored_data.json_lines(path, MAX_EPOCH_LINE_BYTES):
            number, record = line.number, line.value
            if line.too_long:
                raise DamagedRun(f"epochs.jsonl line {number} is longer than "
                                 f"{MAX_EPOCH_LINE_BYTES // 2**20} MiB; an epoch record is "
                                 "about 1 KB")
            if not isinstance(record, dict):
                if line.torn:
                    warn(f"{path}: ignoring its torn last line {number} (the run was cut off "
                         "while writing it)")
                    break
                raise DamagedRun(f"epochs.jsonl line {number} is not an epoch record")
            other = record.get("run")
            if identity is not None and other is not None and other != identity["id"]:
                raise DamagedRun(f"epochs.jsonl line {number} is another run's record (run "
                                 f"{_short(other)}); this directory's run is "
                                 f"{directory.describe_identity(identity)}")
            step = _epoch_step(record, key, number)
            if previous is not None and step <= previous[0]:
                raise DamagedRun(f"epochs.jsonl line {number}: {key} {step} does not follow "
                                 f"{previous[0]} (line {previous[1]}); each epoch adds steps")
            previous = step, number
            score = _test_return(record, number)
            if score is not None:
                steps.append(float(step))
                scores.append(score)
    except stored_data.StoredDataError as e:
        raise DamagedRun(f"epochs.jsonl {e.verdict}") from None
    return steps, scores


def _epoch_step(record: dict[str, Any], key: str, number: int) -> int:
    if key not in record:
        raise DamagedRun(f"epochs.jsonl line {number} has no {key}")
    step = record[key]
    if not (isinstance(step, int) and not isinstance(step, bool) and 0 <= step <= MAX_STEP):
        raise DamagedRun(f"epochs.jsonl line {number}: {key} is {_short(step)}, not a count "
                         "of steps (a whole number >= 0)")
    return step


def _test_return(record: dict[str, Any], number: int) -> float | None:
    """The record's ``test.return_mean``, None if it has none (or it is not finite: an epoch
    whose test finished no episode)."""
    test = record.get("test")
    if test is None:
        return None
    if not isinstance(test, dict):
        raise DamagedRun(f"epochs.jsonl line {number}: test is {_short(test)}, not an object")
    score = test.get("return_mean")
    if score is None:
        return None
    if not _is_real(score):
        raise DamagedRun(f"epochs.jsonl line {number}: test.return_mean is {_short(score)}, "
                         "not a number")
    return float(score) if math.isfinite(score) else None


def _read_summary(path: Path, warn: Callable[[str], object]) -> dict[str, Any] | None:
    """summary.json, or None when there is none or it cannot be read (a warning says so: the
    status is then unknown). A field the report reads that is not what rltrain writes there
    raises DamagedRun naming it."""
    file = path / "summary.json"
    if not file.is_file():
        return None
    try:
        summary = stored_data.read_json(file)
    except stored_data.StoredDataError as e:
        warn(f"{file} cannot be read ({e.problem}); its status is taken as unknown")
        return None
    if not isinstance(summary, dict):
        warn(f"{file} is not a JSON object ({_short(summary)}); its status is taken as "
             "unknown")
        return None
    for key, what in SUMMARY_FIELDS.items():
        if key in summary and not _fits(summary[key], what):
            raise DamagedRun(f"summary.json: {key} is {_short(summary[key])}, not {what}")
    return summary


def _fits(value: object, what: str) -> bool:
    """Whether ``value`` is ``what`` (one of SUMMARY_FIELDS' descriptions)."""
    if what == "a string":
        return isinstance(value, str)
    if what == "true or false":
        return isinstance(value, bool)
    if what == "a number or null":
        return value is None or _is_real(value)
    if what == "a finite number or null":
        return value is None or (_is_real(value) and math.isfinite(value))
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_STEP


def _read_overrides(path: Path, warn: Callable[[str], object]) -> list[str]:
    """The run's command-line overrides (they name groups); damaged ones are warned of and
    left out: the run itself can still be reported."""
    file = path / ".hydra" / "overrides.yaml"
    if not file.is_file():
        return []
    try:
        overrides = stored_data.read_yaml(file)
    except stored_data.StoredDataError as e:
        warn(f"{e}; {path} is reported without its overrides")
        return []
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        warn(f"{file} is not a list of overrides; {path} is reported without them")
        return []
    return overrides


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"algo": {"lr": 1e-3}}`` -> ``{"algo.lr": 1e-3}``; lists become tuples (hashable)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = _frozen(value)
    return flat


def _frozen(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


def show(value: Any) -> str:
    """A config value as one writes it on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return str(value)


def group_runs(runs: Sequence[Run]) -> tuple[list[Group], list[str]]:
    """Group ``runs`` per task by config minus the seed; return the groups and the keys that
    name them (empty when each task has a single group)."""
    by_task: dict[str, dict[tuple, list[Run]]] = {}
    for run in runs:
        key = tuple(sorted((k, v) for k, v in run.config.items() if not _bookkeeping(k)))
        by_task.setdefault(run.env_id, {}).setdefault(key, []).append(run)
    configs = {task: [dict(k) for k in groups] for task, groups in by_task.items()}
    keys = naming_keys(configs, _overridden(runs))
    groups = []
    for task, by_config in by_task.items():
        for key, members in by_config.items():
            config = dict(key)
            groups.append(Group(task, group_name(config, keys, single=len(runs) == len(members)),
                                config, sorted(members, key=lambda r: natural(r.path))))
    return groups, keys


def group_name(config: dict[str, Any], keys: Sequence[str], single: bool = False) -> str:
    if keys:
        return ", ".join(f"{k}={show(config.get(k))}" for k in keys)
    algo = show(config.get("algo.name", "?"))
    return f"{algo} on {show(config.get('env.id', '?'))}" if single else algo


def naming_keys(configs: dict[str, list[dict[str, Any]]], overridden: set[str]) -> list[str]:
    """The keys that tell the groups of each task apart: of the keys that differ within a
    task, ``algo.name`` and those set on a command line; then, while two groups of a task
    still look alike, the differing key that separates most of them."""
    differing = {k for groups in configs.values() for k in _differing(groups)}
    keys = [k for k in sorted(differing) if k == "algo.name" or k in overridden]
    rest = sorted(differing - set(keys))
    while rest and _names_clash(configs, keys):
        best = max(rest, key=lambda k: _distinct(configs, [*keys, k]))
        keys.append(best)
        rest.remove(best)
    return sorted(keys, key=lambda k: (k != "algo.name", k))


def _differing(groups: list[dict[str, Any]]) -> set[str]:
    keys = set().union(*groups) if groups else set()
    return {k for k in keys if len({show(g.get(k, "<unset>")) for g in groups}) > 1}


def _distinct(configs: dict[str, list[dict[str, Any]]], keys: Iterable[str]) -> int:
    keys = list(keys)
    return sum(len({tuple(show(g.get(k)) for k in keys) for g in groups})
               for groups in configs.values())


def _names_clash(configs: dict[str, list[dict[str, Any]]], keys: list[str]) -> bool:
    return _distinct(configs, keys) < sum(len(groups) for groups in configs.values())


def _overridden(runs: Iterable[Run]) -> set[str]:
    """Config keys set on the command line of any run (``algo=dqn`` counts as algo.name)."""
    keys = set()
    for run in runs:
        for override in run.overrides:
            key = override.split("=", 1)[0].lstrip("+~")
            keys.add(f"{key}.name" if key in CONFIG_GROUPS else key)
    return keys


def _bookkeeping(key: str) -> bool:
    return any(key == b or (b.endswith(".") and key.startswith(b)) for b in BOOKKEEPING)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_real(value: object) -> TypeGuard[int | float]:
    """A number a float can hold (JSON's NaN and Infinity included; not an integer of 400
    digits, which float() refuses)."""
    if not _is_number(value):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _short(value: object, limit: int = 60) -> str:
    """A value as JSON or YAML shows it (null, true, "x"), cut to ``limit`` characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
