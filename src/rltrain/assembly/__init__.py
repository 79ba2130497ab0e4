"""Run assembly and lifecycle: one composition root turns a config into a run, for every door
into one (the ``rltrain`` command, ``resume=``, a sweep's job continued, eval and collect).

- :mod:`.orchestrator`: the one door into a run: a run trained (new or resumed) and how it
  ended, a run continued from its checkpoint, a run opened for eval, export and collect;
- :mod:`.run`: settings, then the parts, then a trainer with its lifecycle, then training;
- :mod:`.lifecycle`: a run's checkpoints, ``best/`` and ``final/``, what a resume restores, and
  the one path that reads a checkpoint back;
- :mod:`.build`: checked settings -> envs, algorithm, storage, collectors, trainer, loggers,
  with every check that needs a built object;
- :mod:`.footprint`: what a run will hold in memory, known before any of it is allocated;
- :mod:`.checked_config`: the run config as typed settings, and every check that needs no
  built object;
- :mod:`.registered_schemas`: every config schema Hydra and the checks know, derived from the
  registries (algorithms, trainer kinds, loggers) and registered in Hydra's ConfigStore; the
  key and value checks that name what would be valid;
- :mod:`.optuna_trial`: a run as one trial of an Optuna study (the job side of
  ``hydra/sweeper=optuna``): its score, per-epoch reports, pruning.

Each imports only those after it in this list (the "assembly" contract in ``.importlinter``;
the last two import neither each other nor the others). The layer sits under the commands and
the sweeps, which ask it for runs, and over the trainers, algorithms, data, envs, nets,
loggers and everything below them, which it may import."""
