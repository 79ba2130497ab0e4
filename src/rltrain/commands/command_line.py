"""The command line, checked before Hydra composes it.

Hydra refuses a misspelt key with a hint to add it with ``+``, and a ``+``-added key is
then dropped without a word when the config becomes dataclasses. Here every key an
override names is checked against rltrain's schemas first
(:func:`rltrain.assembly.registered_schemas.key_problem`), so the user reads one short message that
names the key and the valid ones near it. Keys under free-form mappings (``env.kwargs.g=9.81``) are
turned into Hydra's ``++`` (add or replace), since Hydra would refuse a new key there. YAML files in
a user's ``--config-dir`` are parsed first, so a TAB or a syntax error is reported by file and line.
"""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path
from typing import TYPE_CHECKING

from rltrain.assembly.registered_schemas import (
    free_form_prefixes,
    key_problem,
    schema_problem,
    trainer_problem,
    value_problem,
)
from rltrain.config.schemas import ConfigError

if TYPE_CHECKING:  # Hydra's parser is imported where it parses (prepare), for import time
    from hydra.core.override_parser.types import Override

#: the options of ``hydra.main``'s command line that take a value
_VALUED = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
           "--config-dir", "-cd", "--experimental-rerun"}


#: ``--info`` takes an optional value, one of these
_INFO = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}


def options_first(argv: list[str]) -> list[str]:
    """Hydra's parser refuses an option after an override (``rltrain algo=ppo --multirun
    seed=0,1``); users type them in any order, so options go first."""
    options, overrides = [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-"):
            options.append(arg)
            takes = arg in _VALUED or (arg in ("--info", "-i") and i + 1 < len(argv)
                                       and argv[i + 1] in _INFO)
            if takes and "=" not in arg and i + 1 < len(argv):
                options.append(argv[i + 1])
                i += 1
        else:
            overrides.append(arg)
        i += 1
    return options + overrides


def _hydra_args(argv: list[str]) -> argparse.Namespace:
    from hydra._internal.utils import get_args_parser

    return get_args_parser().parse_args(argv)


def config_groups(*roots: Path) -> set[str]:
    """Names of the config groups (directories) under the config roots."""
    return {p.name for root in roots if root.is_dir() for p in root.iterdir() if p.is_dir()}


def group_options(group: str, *roots: Path) -> list[str]:
    """The options of a top-level config group: its YAML files' names under the roots."""
    return sorted({p.stem for root in roots for p in (root / group).glob("*.y*ml")
                   if p.suffix in (".yaml", ".yml")})


def _check_option(override: Override, roots: list[Path]) -> None:
    """``algo=ppp``: refused in one line naming the options (Hydra's own message lists the
    search path too, over a dozen lines)."""
    group = override.key_or_group
    if group in ("tuned", "schema") or override.is_delete():
        return
    options = group_options(group, *roots)
    try:
        values = ([str(v) for v in override.sweep_string_iterator()]
                  if override.is_sweep_override() else [override.value()])
    except Exception:  # noqa: BLE001 - a range or glob sweep: Hydra checks it
        return
    for value in values:
        if not isinstance(value, str) or value not in options:
            shown = "null" if value is None else value
            close = difflib.get_close_matches(str(value), options, n=1, cutoff=0.6)
            hint = f"; did you mean {group}={close[0]}?" if close else ""
            none = f"; to choose none, leave {group} out" if value is None else ""
            raise ConfigError(f"{group}={shown} is not an option of {group}{hint}{none} "
                              f"(options: {', '.join(options)})")


def check_yaml_files(config_dir: Path) -> None:
    """Parse every YAML file under a user's ``--config-dir``; raise ConfigError naming the
    first broken one by file, line and column (Hydra reports it after a long traceback)."""
    import yaml

    if not config_dir.is_dir():
        raise ConfigError(f"--config-dir {config_dir}: no such directory")
    for path in sorted([*config_dir.rglob("*.yaml"), *config_dir.rglob("*.yml")]):
        try:
            text = path.read_text(encoding="utf-8")
            yaml.safe_load(text)
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: not a UTF-8 text file") from None
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark
            where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(
                path)
            problem = (e.problem or str(e)).strip()
            line = text.splitlines()[mark.line] if mark and mark.line < len(
                text.splitlines()) else ""
            hint = "; YAML indents with spaces, not TABs" if "\t" in line or "'\\t'" in problem \
                else ""
            raise ConfigError(f"{where}: {problem}{hint}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: {str(e).splitlines()[0]}") from None


def prepare(argv: list[str], conf_root: Path) -> list[str]:
    """Check the overrides in ``argv``; return ``argv`` with free-form keys made ``++``.

    :raises ConfigError: an unknown key, or a broken YAML file in ``--config-dir``.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    argv = options_first(argv)
    args = _hydra_args(argv)
    if args.shell_completion:
        # ``-sc install=bash``, ``-sc query=bash``: words for Hydra's completion plugin, not
        # overrides (a shell's completion function passes the line it completes in COMP_LINE;
        # cli.completion_command checked them)
        return argv
    roots = [conf_root]
    if args.config_dir is not None:
        config_dir = Path(args.config_dir).expanduser()
        check_yaml_files(config_dir)
        roots.append(config_dir)
    groups = config_groups(*roots)
    parser = OverridesParser.create()
    try:
        parsed = parser.parse_overrides(args.overrides)
    except HydraException:
        for arg in args.overrides:  # which one, in one line (Hydra's lexer error is five)
            try:
                parser.parse_overrides([arg])
            except HydraException as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ConfigError(
                    f"{arg!r} is not a valid override ({first}); write KEY=VALUE, and quote a "
                    "value with spaces or non-ASCII characters for Hydra inside the shell's "
                    f"quotes: \"{arg.partition('=')[0]}='{arg.partition('=')[2]}'\"") from None
        return argv
    algos = _selected_algos(parsed, roots, args.config_name)
    _check_trainer(parsed, algos)
    free = free_form_prefixes()
    # rltrain's Optuna sweeper, chosen on the command line or by a search space's preset
    optuna = any(o.key_or_group in ("hydra/sweeper", "hparams_search") and not o.is_delete()
                 and (o.key_or_group == "hparams_search" or o.value() == "optuna")
                 for o in parsed)
    rewritten: dict[str, str] = {}
    for override in parsed:
        key = override.key_or_group
        if key in groups and "." not in key:
            _check_option(override, roots)
            continue
        if key.startswith("hydra.sweeper.") and optuna and not override.is_delete() \
                and not override.is_sweep_override():
            problem = _sweeper_problem(key, override.value())
            if problem is not None:
                raise ConfigError(problem)
        if key.startswith("hydra") or "/" in key:
            continue  # Hydra's own settings, or a nested group option (hydra/launcher=...)
        problem = key_problem(key, algos)
        if problem is None and not override.is_delete() and not override.is_sweep_override():
            problem = value_problem(key, override.value(), algos)
        if problem is not None:
            raise ConfigError(problem)
        change = not (override.is_add() or override.is_force_add() or override.is_delete())
        if change and any(key.startswith(prefix) for prefix in free):
            line = override.input_line
            assert line is not None  # parse_overrides sets it on every override it returns
            rewritten[line] = "++" + line
    out = []
    for i, arg in enumerate(argv):
        is_value = i > 0 and argv[i - 1] in _VALUED
        positional = not arg.startswith("-") and not is_value
        out.append(rewritten.get(arg, arg) if positional else arg)
    return out


def _sweeper_problem(key: str, value: object) -> str | None:
    """An unknown key of the Optuna sweeper's settings, or a value of the wrong type, in one
    line (Hydra's own messages span three to five lines and exit 1)."""
    from rltrain.sweeps.optuna.conf import OptunaSweeperConf  # only when that sweeper is chosen

    return schema_problem(OptunaSweeperConf, "hydra.sweeper",
                          key.removeprefix("hydra.sweeper."), value)


def _check_trainer(parsed: list[Override], algos: list[str] | None) -> None:
    """``trainer=X`` must be a trainer of the algorithm it runs with, checked here because
    another trainer's keys fail in Hydra's composition first, with a long message about the
    tuned file (``settings.check_pairing`` says the same after composition)."""
    if algos is None:
        return  # a glob sweep, or a primary config of the user's: not known here
    for override in parsed:
        if override.key_or_group == "trainer" and not override.is_delete():
            for algo in algos:
                for trainer in _choices(override) or []:
                    problem = trainer_problem(algo, trainer)
                    if problem is not None:
                        raise ConfigError(problem)


def _selected_algos(parsed: list[Override], roots: list[Path],
                    config_name: str | None) -> list[str] | None:
    """The algorithms the command will run, so that a key is checked against their schemas
    (``rltrain algo.tau=0.01`` names PPO's keys, not every algorithm's): ``algo=...``, else
    the ``override /algo`` of a chosen preset (experiment, hparams_search), else the primary
    config's default. None where that is not known here (a glob sweep over algorithms,
    ``--config-name``, a ``--config-dir`` with its own primary config): keys are then
    checked against every algorithm, and the composed config against its own."""
    for override in parsed:
        if override.key_or_group == "algo" and not override.is_delete():
            return _choices(override)
    for override in parsed:
        if override.key_or_group in ("experiment", "hparams_search"):
            if override.is_delete() or override.is_sweep_override():
                return None
            value = override.value()
            if value is None:
                continue
            chosen = _default_choice(roots, f"{override.key_or_group}/{value}", "/algo")
            if chosen == "":
                return None  # an unreadable preset: Hydra reports it
            if chosen is not None:
                return [chosen]
    if config_name is not None or any((root / "config.yaml").is_file() for root in roots[1:]):
        return None
    chosen = _default_choice(roots[:1], "config", "algo")
    return [chosen] if chosen else None


def _default_choice(roots: list[Path], name: str, group: str) -> str | None:
    """The option a YAML file's defaults list picks for ``group`` (``- algo: ppo``, ``-
    override /algo: sac``): None if it picks none, "" if the file cannot be read."""
    import yaml

    for root in roots:
        path = root / f"{name}.yaml"
        if not path.is_file():
            continue
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return ""
        defaults = data.get("defaults") if isinstance(data, dict) else None
        for entry in defaults if isinstance(defaults, list) else []:
            if isinstance(entry, dict):
                for key, value in entry.items():
                    if str(key).removeprefix("override ") == group and isinstance(value, str):
                        return value
        return None
    return None


def _choices(override: Override) -> list[str] | None:
    """The algorithm names an ``algo=...`` override selects (a sweep selects several)."""
    try:
        if override.is_sweep_override():
            return [str(v) for v in override.sweep_string_iterator()]
        return [str(override.value())]
    except Exception:  # a range or glob sweep: check keys against every algorithm
        return None
