"""Errors that end a run with a message rather than a traceback.

:class:`~rltrain.config.schemas.ConfigError` covers what can be refused before a run starts;
these cover what can only happen once it trains. The trainer records them in
``summary.json`` and the CLI prints them in one line, with where the run stopped.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem with what the user asked a command for (no such run, no such weights file, a
    damaged file): reported in one line, without a traceback."""


class TrainingError(Exception):
    """Training cannot go on; the message says what happened (the trainer adds when)."""


class NonFiniteError(TrainingError):
    """A loss, a parameter, an env reward or an observation became NaN or infinite."""


class SaveError(TrainingError):
    """A file of the run (checkpoint, policy, epoch record) could not be written."""


#: the attribute :func:`mark_env_failure` sets on an exception raised by an env's own code
_IN_ENV = "_rltrain_in_env"


def mark_env_failure(error: BaseException) -> None:
    """Say that ``error`` came out of an env's own code (its ``step``): a failure message may
    then point at what the env was made with; one raised by rltrain's or torch's code must
    not (a policy's bug once read "the env was made with env.kwargs=...")."""
    setattr(error, _IN_ENV, True)


def is_env_failure(error: BaseException) -> bool:
    return bool(getattr(error, _IN_ENV, False))
