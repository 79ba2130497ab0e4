"""Offline-RL datasets: transitions in time order, in a file, with what made them.

A dataset holds the transitions of whole episodes one after another, the env's own actions,
and a meta record (the env, its spaces as plain data, the policy that acted, the episode
returns), and any fields an algorithm stores beside a transition (``Dataset.fields``, the
replay buffer's declared fields, listed in the meta). Observations are held as rltrain's
buffers hold them (:mod:`rltrain.spaces.observations`): images (uint8 Boxes with three axes) as
uint8, Dict observations as uint8 rows packed by their
:class:`~rltrain.spaces.observations.DictLayout`, anything else as float32; in memory and in files
alike. Every problem a user can fix (a missing or damaged file, a wrong space, a
missing package) raises :class:`rltrain.config.schemas.ConfigError` with one line that names the
file or id.

One module per concern, each importing only those below it (checked by .importlinter's
"datasets" contract):

- ``sources``     a dataset named by the user (a file or ``minari:ID``): load it, hash it
- ``files``       rltrain's ``.h5``/``.hdf5`` and ``.npz`` files, written atomically, read
  back; ``minari`` Minari's local datasets, converted (read only, behind the user's
  consent where Minari would run code); ``replay`` a dataset into a replay buffer for
  offline training, and a checkpointed replay buffer back into a dataset
- ``validation``  what was read, checked before training reads it, and the dataset's spaces
  against the env's; ``frames`` frame-stacked images written once per frame
- ``dataset``     the :class:`~rltrain.data.datasets.dataset.Dataset` type: its fields (the
  one list that files, validation, Minari and the buffer conversion follow) and the declared
  fields beside them, its meta record, building and joining datasets
- ``spaces``      spaces as plain data: described, read back, compared, shown in one line

Importers name the module (``from rltrain.data.datasets.sources import load_dataset``); this
file imports nothing. The package may import :mod:`rltrain.config.schemas`,
:mod:`rltrain.rundir.files`, :mod:`rltrain.rundir.trust`, :mod:`rltrain.data.fields` (numpy only),
and (inside functions, as they import torch) :mod:`rltrain.spaces.observations`,
:mod:`rltrain.spaces.actions`, :mod:`rltrain.data.state_format` and :mod:`rltrain.data.storage`;
h5py and minari only where a file of theirs is read or written.
"""
