"""Optuna as a Hydra sweeper: ``rltrain --multirun hydra/sweeper=optuna hparams_search=X``.

Hydra's own Optuna sweeper (1.3) pins ``optuna<3``; this one is written for current Optuna
(4 and 5) and for rltrain's runs: each trial is a run that reports its score after every
epoch (the job side is :mod:`rltrain.assembly.optuna_trial`), so the study's pruner can stop it (the
run then ends ``pruned``, its directory complete), and a trial that is invalid or crashes is
recorded as failed while the study goes on. Several sweeps, on one machine or many, may fill one
study (:mod:`.shared`). At the end the sweep directory holds ``trials.csv``, the best trial's
settings as a tuned file and as an experiment to train with at once, and Optuna's plots
(:mod:`.outputs`).

The modules, each importing only those below it (checked by ``.importlinter``):

* :mod:`.sweeper`: the loop Hydra's plugin class runs (``OptunaSweeperImpl``): ask, launch,
  tell, until the study holds ``n_trials`` finished trials; then the outputs.
* :mod:`.outputs`: what a sweep leaves: ``trials.csv``, the tuned and experiment files with
  the budget they carry, the plots, and the lines that name them.
* :mod:`.trials`: a trial as a job (its overrides) and a job's outcome told to the study.
* :mod:`.shared`: the shared-study protocol: opening the study, its tally, asking with a
  heartbeat, taking over the trials of a sweep that died, the grid's queue.
* :mod:`.space`: the search space: Hydra's sweep syntax and ``params`` as Optuna
  distributions, values as override text, the grid and the sampler.
* :mod:`.conf`: the settings (``hydra.sweeper.*``), their checks and the sweep's one error.

Of rltrain, the package imports the ground floor (``rltrain.config.schemas``,
``rltrain.assembly.optuna_trial``, ``rltrain.rundir.stored_data``, ``rltrain.process.signals``) at
the top, and, where a sweep runs, ``rltrain.sweeps`` and ``rltrain.assembly.registered_schemas``.
The class Hydra instantiates is
``hydra_plugins.rltrain_optuna_sweeper.optuna_sweeper.OptunaSweeper`` (Hydra takes plugin classes
only from the ``hydra_plugins`` package); it delegates to :mod:`.sweeper`.

Hydra imports the plugin, and so these modules, whenever it looks for plugins: at every start
of rltrain, and of any other Hydra app installed beside it. So what only a sweep needs is
imported when a sweep starts: Optuna (0.18 s, and the ``tune`` extra, which an app without it
must not need) and rltrain's run modules (``rltrain.assembly.registered_schemas`` imports torch: 1.1
s) and ``rltrain.sweeps``.
"""
