"""``rltrain-report RUN_OR_SWEEP_DIR... [--out DIR]``: compare runs with honest statistics.

Finds run directories under the inputs (``runs``), groups them by config minus the seed,
computes final-score tables, learning curves and probabilities of improvement with rliable's
stratified bootstrap over seeds (``stats``), draws them (``plots``) and writes ``runs.csv``,
``report.md`` and a self-contained ``report.html`` (``render``, ``compose``). ``cli`` holds the
command. Needs the ``report`` extra (rliable, matplotlib); this package imports neither until
it runs.

Of rltrain, the package imports :mod:`rltrain.commands.evaluate` (the command-line helpers
every companion command shares), :mod:`rltrain.rundir` and :mod:`rltrain.process`.
"""

from rltrain.commands.report.cli import main

__all__ = ["main"]
