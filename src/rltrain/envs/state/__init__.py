"""The state of (vector) envs as plain data, captured honestly.

``rltrain resume=DIR`` must continue a run exactly, so checkpoints hold the full state of the
envs. Checkpoints are loaded with ``torch.load(weights_only=True)`` so that loading one can run
no code; the state may therefore hold only dicts, lists, tuples, str, int, float, bool, None and
tensors. :func:`snapshot` turns live envs into such data and :func:`restore` writes it back.

The state is read off ``vars()`` of the envs, their wrappers and sub-envs, and of the plain
Python objects they hold (e.g. NormalizeObservation's ``RunningMeanStd``), recursively. Objects
offering ``state_dict()``/``load_state_dict()`` are captured through those instead. Constants
(specs, functions, classes, recorded constructor kwargs) are skipped. Values whose state lives
where ``vars()`` cannot see it (ctypes data, C/SWIG/pybind11 objects, ``__slots__``, sub-envs in
other processes) are *reported* in :attr:`Snapshot.not_captured`, never silently dropped, so
the caller can say that a resume is not exact; unless a registered adapter reads and writes
that state through its library's API (MuJoCo's ``MjData``, the Atari emulator). Box2D's world
has no such API: it is reported.

The package, top to bottom:

- :mod:`.api`: :func:`snapshot`, :func:`restore`, :class:`Snapshot`, :data:`FORMAT` (the
  public functions, re-exported here);
- :mod:`.packer` and :mod:`.restorer`: the generic walker, one module each way;
- :mod:`.encoding`: the packed form both walks share;
- :mod:`.adapters`: the protocol for state the walker cannot see (capture, restore, caveat)
  and its registry;
- :mod:`.families`: one module per env family with such state (``mujoco``, ``ale``,
  ``minigrid``), each registering itself when this package is imported. A new family is one
  new module there.

Of the envs layer (:mod:`rltrain.envs`), the lowest: imports numpy, torch, gymnasium and
:mod:`rltrain.common` (registries, the modules' former paths), and never an env family's own package
(mujoco, ale_py, minigrid): adapters find their types in ``sys.modules``.
"""

from rltrain.envs.state import families  # noqa: F401 - each family registers its adapters
from rltrain.envs.state.api import FORMAT, Snapshot, restore, snapshot

__all__ = ["FORMAT", "Snapshot", "restore", "snapshot"]
