"""rltrain: a command-line runner for deep reinforcement-learning experiments.

The packages, top to bottom; a package may import those below it, never one above (checked
by ``.importlinter``): ``commands`` (what the console scripts run), ``sweeps`` (many runs:
Hydra's callback, the launchers, the Optuna sweeper), ``assembly`` (one composition root: a
run assembled, trained, checkpointed, resumed), ``trainers``, ``algorithms``, ``data`` (the
collector, storage, the read path, datasets), then ``envs``, ``nets`` and ``loggers`` (beside
each other), ``spaces`` and ``rundir``, ``process`` and ``config``, and ``common`` (the ground
floor). Each package's ``__init__`` says what it holds and what it may import."""

__version__ = "0.1.0"
