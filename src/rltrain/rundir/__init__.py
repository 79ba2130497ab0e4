"""The run directory and the files rltrain reads and writes.

- :mod:`.directory`: one run per directory (its lock), what a directory holds, the ``.hydra/``
  snapshot, the run's identity, the command that resumes it;
- :mod:`.checkpoint`: atomic saves, rotation, loading that never runs code, older versions
  upgraded;
- :mod:`.files`: files written afresh or appended, never through a link;
- :mod:`.stored_data`: what a run stored (its configs, ``summary.json``, ``epochs.jsonl``),
  read back as plain data within bounds;
- :mod:`.trust`: the code a config from a file would run, and the user's consent to it.

``directory`` and ``checkpoint`` import the other three, which import none of this package
(the "rundir" contract in ``.importlinter``). The package sits under the data path and the
loggers, which write through it, beside :mod:`rltrain.spaces`; it may import
:mod:`rltrain.process`, :mod:`rltrain.config` and :mod:`rltrain.common`."""
