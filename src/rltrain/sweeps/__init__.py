"""Sweeps that survive a bad job and stop cleanly, whatever Hydra launcher runs them.

* A job that fails (a config error, a crash, a non-finite loss) is recorded in its own
  directory (``summary.json``: ``status``, ``error``) and the sweep goes on; Hydra marks
  the job failed. At the end, :func:`rltrain.sweeps.outcome.report` lists every job with its
  status, directory and message, and the sweep exits non-zero if any failed.
* SIGINT or SIGTERM to the sweep's main process (the one the user started) reaches the
  jobs: it writes a stop file into the sweep directory, so that no job starts after it,
  and sends SIGTERM to every job process that holds a run-directory lock there (joblib
  workers, submitit's local processes), so each finishes its step, checkpoints and says
  how to resume. Workers ignore the terminal's SIGINT: the main process speaks for it.
* The same command run again into the sweep's directory finishes it: finished jobs are
  skipped, unfinished ones resume from their checkpoints.

One module per concern. This file imports nothing, so a module of the package costs only its
own imports (:mod:`rltrain.optuna_sweeper` reaches the stop file without torch). In three
layers, top to bottom; a module imports only modules of the layers below its own, none of its
own layer (the ``sweeps`` contract in ``.importlinter`` keeps it so):

``callback``           Hydra's callback: the checks as a run or a sweep starts, the jobs'
                       names, a warning for repeated jobs; it arms what follows

``outcome``            the sweep's list of jobs at the end, its counts, the next command
``attempts``           a job whose directory holds a run already: skipped or resumed
``workers``            a job in a worker process: its lines prefixed, its life the sweep's
``stopping``           the stop file and the signal passed on to the jobs
``submitit_launcher``  Hydra's submitit launcher, watched (its plugin classes are in
                       ``hydra_plugins.rltrain_submitit_launcher``)

``command``            what this process learns of its Hydra command (:data:`STATE`)
``status``             a job's summary when it did not train; the ledger of refused jobs
``jobs``               a job as its directory shows it (status, what finishing does with it)
``prefixed``           console streams whose every line starts with a prefix
``orphans``            a worker's watch on the sweep's main process

The package sits between the commands (:mod:`rltrain.cli`, :mod:`rltrain.batched`,
:mod:`rltrain.optuna_sweeper` import it) and the run (:mod:`rltrain.run`,
:mod:`rltrain.lifecycle`, which ``attempts`` calls to resume a job), over the ground floor
(run directories, signals, files).
"""
