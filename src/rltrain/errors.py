"""Errors that end a run with a message rather than a traceback.

:class:`~rltrain.config.ConfigError` covers what can be refused before a run starts;
these cover what can only happen once it trains. The trainer records them in
``summary.json`` and the CLI prints them in one line, with where the run stopped.
"""

from __future__ import annotations


class TrainingError(Exception):
    """Training cannot go on; the message says what happened (the trainer adds when)."""


class NonFiniteError(TrainingError):
    """A loss, a parameter, an env reward or an observation became NaN or infinite."""


class SaveError(TrainingError):
    """A file of the run (checkpoint, policy, epoch record) could not be written."""
