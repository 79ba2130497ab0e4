"""The places rltrain reaches into Hydra's private code, and why.

1. Hydra prints the whole traceback of any plain exception a sweeper or launcher plugin raises
   outside a job (submitit refusing an unknown parameter, a cluster refusing the submission):
   ``hydra._internal.utils.run_and_report`` does that for every command. rltrain wraps that
   function, for sweeps only, so that such an exception becomes one line (Hydra's
   ``CompactHydraException``, which it prints as its message alone). Hydra's own errors pass
   unchanged, and ``HYDRA_FULL_ERROR=1`` skips this for the whole traceback.
2. Before every run, Hydra composes the whole config once only to read ``hydra.mode`` (its
   ``Hydra.get_mode``), then composes it again for the run: 0.23-0.27 s of a 3.5 s smoke run
   on this machine. rltrain decides run or sweep from the command line (``--multirun``, or a
   ``hydra.mode=`` override, which still goes to Hydra's probe), so for a plain run
   :func:`skip_mode_probe` answers "no mode set" without composing. The one thing this gives
   up: a config *file* that sets ``hydra.mode: MULTIRUN`` no longer turns a plain command into
   a sweep; rltrain's own configs set no mode, and its usage says sweeps take ``--multirun``.
3. Before it launches a batch of jobs, Hydra's sweeper composes every job's config once only to
   check that it composes (``Sweeper.validate_batch_is_legal``); the launcher then composes
   each again to run it: 0.3 s per job here, a tenth of a short sweep. rltrain's batched
   launcher (``hydra/launcher=batched``) composes every job before it runs any, so an
   override that does not compose still stops the sweep before its first job;
   :func:`skip_batch_validation` skips the sweeper's check for that launcher only.

What breaks when Hydra changes (all checked against hydra-core 1.3): if ``run_and_report``,
``Hydra.get_mode`` or ``Sweeper.validate_batch_is_legal`` is renamed or moved, the matching
function here does nothing and Hydra's own behaviour returns (the traceback shows again; the
config is composed twice), with the same exit status and the same run; nothing else depends
on them. ``tests/test_sweeps.py`` covers
the one-line message with a real launcher setting that submitit refuses, and
``tests/test_cli.py`` that a plain run composes its config once.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def brief_plugin_errors(on_error: Callable[[Exception], str],
                        said: tuple[type[Exception], ...] = ()) -> None:
    """Turn a plain exception raised by a sweeper or launcher into one line: ``on_error``
    is told of it and returns the line (and may record that the sweep could not start).
    An exception of a type in ``said`` (a failed job, whose line rltrain wrote) is printed as
    its message alone, without Hydra's "Set the environment variable HYDRA_FULL_ERROR=1"
    line, which it adds even to its own one-line errors, and the sweep exits 1 as Hydra
    would."""
    try:
        from hydra._internal import utils as hydra_utils
    except ImportError:  # a Hydra without it: its own report stays
        return
    from hydra.errors import CompactHydraException, HydraException
    from omegaconf.errors import OmegaConfBaseException

    original = getattr(hydra_utils, "run_and_report", None)
    if original is None or getattr(original, "rltrain_brief", False):
        return

    def brief(func: Callable[[], Any]) -> Any:
        def call() -> Any:
            try:
                return func()
            except said as e:
                sys.stderr.write(f"{e}\n")
                sys.stderr.flush()
                raise SystemExit(1) from None
            except (HydraException, OmegaConfBaseException):
                raise
            except Exception as e:  # noqa: BLE001 - reported in one line
                # Hydra adds its own line on HYDRA_FULL_ERROR=1 after this one
                raise CompactHydraException(on_error(e)) from None
        return original(call)

    brief.rltrain_brief = True  # type: ignore[attr-defined]
    hydra_utils.run_and_report = brief


def skip_mode_probe(overrides: list[str]) -> None:
    """For a plain run (no ``--multirun``): let Hydra's ``get_mode`` answer "no mode set"
    without composing the config, unless an override sets ``hydra.mode`` (see the module's
    docstring)."""
    if any(o.lstrip("+~").startswith("hydra.mode") for o in overrides):
        return
    try:
        from hydra._internal.hydra import Hydra
    except ImportError:  # a Hydra without it: its own probe stays
        return
    if not callable(getattr(Hydra, "get_mode", None)):
        return

    def get_mode(self: Any, config_name: str | None, overrides: list[str]) -> None:
        return None

    Hydra.get_mode = get_mode  # type: ignore[method-assign]


def skip_batch_validation() -> None:
    """Let Hydra's sweepers skip their compose-only check of a batch of jobs when the
    launcher composes every job before running any (see the module's docstring)."""
    try:
        from hydra.plugins.sweeper import Sweeper
    except ImportError:  # a Hydra without it: its own check stays
        return
    original = getattr(Sweeper, "validate_batch_is_legal", None)
    if not callable(original) or getattr(original, "rltrain_skip", False):
        return

    def validate_batch_is_legal(self: Any, batch: Any) -> None:
        if getattr(getattr(self, "launcher", None), "composes_every_job_first", False):
            return
        original(self, batch)

    validate_batch_is_legal.rltrain_skip = True  # type: ignore[attr-defined]
    Sweeper.validate_batch_is_legal = validate_batch_is_legal  # type: ignore[method-assign]
