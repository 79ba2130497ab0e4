"""rltrain's watched submitit launchers as a Hydra plugin (``hydra/launcher=submitit_local``,
``submitit_slurm``: :mod:`rltrain.sweeps.submitit_launcher`)."""
