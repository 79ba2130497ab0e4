"""The one place rltrain reaches into Hydra's private code, and why.

Hydra prints the whole traceback of any plain exception a sweeper or launcher plugin raises
outside a job (submitit refusing an unknown parameter, a cluster refusing the submission):
``hydra._internal.utils.run_and_report`` does that for every command. rltrain wraps that
function, for sweeps only, so that such an exception becomes one line (Hydra's
``CompactHydraException``, which it prints as its message alone). Hydra's own errors pass
unchanged, and ``HYDRA_FULL_ERROR=1`` skips this for the whole traceback.

What breaks when Hydra changes: if ``run_and_report`` is renamed or moved (checked against
hydra-core 1.3), :func:`brief_plugin_errors` does nothing and the traceback shows again, with
the same exit status; nothing else depends on it. ``tests/test_sweeps.py`` covers the one-line
message with a real launcher setting that submitit refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def brief_plugin_errors(on_error: Callable[[Exception], str]) -> None:
    """Turn a plain exception raised by a sweeper or launcher into one line: ``on_error``
    is told of it and returns the line (and may record that the sweep could not start)."""
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
            except (HydraException, OmegaConfBaseException):
                raise
            except Exception as e:  # noqa: BLE001 - reported in one line
                # Hydra adds its own line on HYDRA_FULL_ERROR=1 after this one
                raise CompactHydraException(on_error(e)) from None
        return original(call)

    brief.rltrain_brief = True  # type: ignore[attr-defined]
    hydra_utils.run_and_report = brief
