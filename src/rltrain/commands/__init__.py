"""The commands: what each console script runs, and what only a command needs.

- :mod:`.train`: ``rltrain``, the Hydra job (a run, ``--multirun`` sweeps), its exit codes and
  one-line errors; ``rltrain resume=RUN_DIR`` goes on in :mod:`.resume`;
- :mod:`.evaluate` (``rltrain-eval``), :mod:`.export` (``rltrain-export``), :mod:`.collect`
  (``rltrain-collect``), :mod:`.report` (``rltrain-report``);
- :mod:`.command_line`: the command line checked against the schemas before Hydra composes it;
- :mod:`.completion`: tab completion without torch;
- :mod:`.hydra_compat`: the places rltrain reaches into Hydra's private code, and why.

The top layer of ``.importlinter``: a command may import every package below it (sweeps,
assembly, trainers, algorithms, data, envs, nets, loggers, spaces, rundir, process, config,
common); nothing imports a command. Within the package, ``train`` over ``resume``, ``export``,
``collect`` and ``report``, over ``evaluate``, ``completion``, ``command_line`` and
``hydra_compat`` (the "commands" contract). This file imports nothing, so that a command's
``--help`` pays only for its own module."""
