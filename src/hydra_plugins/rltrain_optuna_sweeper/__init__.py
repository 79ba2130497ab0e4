"""rltrain's Optuna sweeper as a Hydra plugin (``hydra/sweeper=optuna``)."""
