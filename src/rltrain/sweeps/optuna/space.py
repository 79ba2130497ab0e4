"""The search space: the command line's sweeps (``algo.lr=interval(1e-4, 1e-2)``,
``seed=0,1``) and the sweeper's ``params`` (Hydra's sweep syntax or an Optuna distribution)
as Optuna distributions; values back as override text (:func:`encode`); the grid a grid
search enqueues; the sampler that draws from the space.

Imports :mod:`.conf` of this package; Optuna (the ``tune`` extra) and
``rltrain.assembly.registered_schemas`` (torch) only inside the functions that need them (see the
package's text)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep
from hydra.errors import HydraException

from rltrain.sweeps.optuna.conf import SamplerConf, SweepError

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution


def search_space(arguments: list[str], params: dict[str, Any]
                 ) -> tuple[list[str], dict[str, BaseDistribution]]:
    """The fixed overrides and the search space (key -> Optuna distribution) from the
    command line's overrides and the sweeper's ``params``; a command-line sweep
    (``algo.lr=interval(...)``, ``seed=0,1``) joins the space and replaces a param."""
    parser = OverridesParser.create()
    space: dict[str, BaseDistribution] = {}
    for key, value in params.items():
        if isinstance(value, dict) or hasattr(value, "keys"):
            space[key] = _optuna_distribution(key, dict(value))
            continue
        text = value if isinstance(value, str) else encode(value)
        try:
            override = parser.parse_override(f"{key}={text}")
        except HydraException as e:
            raise SweepError(f"hydra.sweeper.params.{key}={text} is not a search space: "
                             f"{str(e).splitlines()[0]}") from None
        space[key] = _checked(override) if override.is_sweep_override() else _fixed_value(
            override)
    fixed: list[str] = []
    for override in parser.parse_overrides(arguments):
        if override.is_sweep_override():
            space[override.get_key_element()] = _checked(override)
        else:
            space.pop(override.get_key_element(), None)
            space.pop(override.key_or_group, None)
            assert override.input_line is not None  # the parser keeps the text it parsed
            fixed.append(override.input_line)
    return fixed, space


def _checked(override: Override) -> BaseDistribution:
    """:func:`distribution`, with Optuna's refusal (``low > high``, a log range from 0) as
    one line naming the key."""
    try:
        return distribution(override)
    except ValueError as e:
        raise SweepError(f"the search space {override.input_line}: {e}") from None


def _fixed_value(override: Override) -> BaseDistribution:
    from optuna.distributions import CategoricalDistribution  # the tune extra

    return CategoricalDistribution([_choice(override.value())])


def distribution(override: Override) -> BaseDistribution:
    """An Optuna distribution from a Hydra sweep override."""
    from optuna.distributions import (  # the tune extra: see the package's text
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    key = override.get_key_element()
    value = override.value()
    tags = set(getattr(value, "tags", ()) or ())
    if isinstance(value, IntervalSweep):
        low, high = value.start, value.end
        if low is None or high is None:  # Hydra's grammar gives an interval both ends
            raise SweepError(f"{key}: an interval needs both ends ({override.input_line})")
        if "int" in tags:
            return IntDistribution(int(low), int(high), log="log" in tags)
        return FloatDistribution(float(low), float(high), log="log" in tags)
    if isinstance(value, RangeSweep):
        start, stop, step = value.start, value.stop, value.step
        if (isinstance(start, int) and isinstance(stop, int) and isinstance(step, int)
                and step > 0):
            high = start + step * ((stop - 1 - start) // step)
            return IntDistribution(start, high, step=step)
        return CategoricalDistribution([_choice(v) for v in override.sweep_iterator()])
    if isinstance(value, ChoiceSweep) or override.is_sweep_override():
        return CategoricalDistribution([_choice(v) for v in override.sweep_iterator()])
    raise SweepError(f"{key}: not a search space ({override.input_line})")


def _choice(value: Any) -> None | bool | int | float | str:
    """A categorical choice as Optuna stores it: a list or dict as its override text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return encode(value)


def _optuna_distribution(key: str, spec: dict[str, Any]) -> BaseDistribution:
    from optuna.distributions import (  # the tune extra: see the package's text
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    kind = spec.get("type")
    try:
        if kind == "float":
            return FloatDistribution(float(spec["low"]), float(spec["high"]),
                                     log=bool(spec.get("log", False)), step=spec.get("step"))
        if kind == "int":
            return IntDistribution(int(spec["low"]), int(spec["high"]),
                                   log=bool(spec.get("log", False)),
                                   step=int(spec.get("step", 1)))
        if kind == "categorical":
            return CategoricalDistribution([_choice(v) for v in spec["choices"]])
    except (KeyError, TypeError, ValueError) as e:
        raise SweepError(f"hydra.sweeper.params.{key}: {type(e).__name__}: {e} (a float or "
                         "int takes low and high, a categorical takes choices)") from None
    raise SweepError(f"hydra.sweeper.params.{key}: type must be float, int or categorical, "
                     f"got {kind!r}")


def encode(value: Any) -> str:
    """A value as an override's text (Hydra's grammar)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        simple = value and all(ch.isalnum() or ch in "_-./:@+" for ch in value) and \
            not value[0].isdigit() and value not in ("null", "true", "false")
        if simple or (value.startswith("[") and value.endswith("]")):
            return value
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list | tuple):
        return "[" + ",".join(encode(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{encode(v)}" for k, v in value.items()) + "}"
    return str(value)


def check_keys(space: dict[str, BaseDistribution], algo: str) -> None:
    """Every searched key is one the run config knows (for ``algo``), none is ``tune.*``
    (the sweeper's own), and the space is not empty."""
    # 1.1 s (torch): see the package's text
    from rltrain.assembly.registered_schemas import key_problem

    for key in space:
        problem = key_problem(key.removeprefix("++").removeprefix("+"), [algo])
        if problem is not None:
            raise SweepError(f"the search space: {problem}")
        if key.startswith("tune."):
            raise SweepError(f"the search space cannot set {key}: the sweeper sets tune.*")
    if not space:
        raise SweepError("the search space is empty: give hydra.sweeper.params (an "
                         "hparams_search=... file) or a sweep such as algo.lr=interval(1e-4,1e-2)")


def make_sampler(conf: SamplerConf, seed: int | None, space: dict[str, BaseDistribution]
                 ) -> optuna.samplers.BaseSampler:
    """The sampler ``hydra.sweeper.sampler`` names, seeded with ``seed``."""
    import optuna  # the tune extra, 0.18 s: see the package's text

    if conf.name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if conf.name == "cmaes":
        try:
            import cmaes  # noqa: F401 - whether it is installed (optional: the tune extra)
        except ImportError:
            raise SweepError("hydra.sweeper.sampler.name=cmaes needs the cmaes package: "
                             "pip install -e \".[tune]\"") from None
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if conf.name == "grid":
        # the grid's points are enqueued (SharedStudy.enqueue_grid): Optuna's GridSampler
        # ends a study with Study.stop, which only works inside Study.optimize, not with ask
        # and tell
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=conf.n_startup_trials)


def grid_of(space: dict[str, BaseDistribution]) -> dict[str, list[Any]]:
    """Every value of each key, for ``sampler.name=grid`` (an interval has no such list)."""
    from optuna.distributions import CategoricalDistribution, IntDistribution  # the tune extra

    grid: dict[str, list[Any]] = {}
    for key, dist in space.items():
        if isinstance(dist, CategoricalDistribution):
            grid[key] = list(dist.choices)
        elif isinstance(dist, IntDistribution) and not dist.log:
            grid[key] = list(range(dist.low, dist.high + 1, dist.step))
        else:
            raise SweepError(f"hydra.sweeper.sampler.name=grid needs a finite set of values: "
                             f"{key} is an interval (use choice(...) or range(...))")
    return grid
