"""rltrain: a command-line runner for deep reinforcement-learning experiments."""

__version__ = "0.1.0"
