"""The envs: the one env factory, rltrain's own wrappers, and the envs' state for exact resume.

- :mod:`.vector`: vector envs for training, testing, eval and video, made from the env config
  (imports, id, kwargs, time limit, wrappers in order), their seeds, and the space info the
  networks are built from;
- :mod:`.wrappers`: rltrain's wrappers (Atari's FIRE reset, episodic life and reward sign,
  the sticky action kept for resume; MinAtar's ids and frames; MiniGrid's observations;
  velocities masked), named by dotted path in ``conf/env``;
- :mod:`.state`: the state of (vector) envs as plain data, captured honestly, with one adapter
  module per env family whose state lives in C;
- :mod:`.bitflip`: rltrain's own goal-conditioned env, bit flipping (``env=bitflip``), the
  standard test of hindsight relabelling; it imports gymnasium and numpy only.

Each imports only those after it in this list (the "envs" contract in ``.importlinter``). The
package sits beside the nets and the loggers (none of the three imports another), under the
data path; it may import :mod:`rltrain.spaces`, :mod:`rltrain.config` and
:mod:`rltrain.common`. A run made before these modules moved names ``rltrain.wrappers.X`` in
its config and its env state; :mod:`rltrain.common.moved` reads those names as these."""
