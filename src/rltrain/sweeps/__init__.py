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
own imports (:mod:`rltrain.sweeps.optuna` reaches the stop file without torch). In three
layers, top to bottom; a module imports only modules of the layers below its own, none of its
own layer (the ``sweeps`` contract in ``.importlinter`` keeps it so):

``callback``           Hydra's callback: the checks as a run or a sweep starts, the jobs'
                       names, a warning for repeated jobs; it arms what follows
``batched``            ``hydra/launcher=batched``: a sweep's seeds as the members of a
                       batch in each worker, grouped, each with its own RNGs and console
``optuna``             the Optuna sweeper (``hydra/sweeper=optuna``), a package with an
                       order of its own

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
``batch_scheduler``    the members of a batch in threads taking turns, the work they hand
                       over run as one (it knows no algorithm, trainer or run: its own
                       contract)

The package sits under the commands (:mod:`rltrain.commands.train` imports it) and over the
run assembly (:mod:`rltrain.assembly`: ``attempts`` resumes a job through it), the trainers
and everything below them, which it may import.
"""
