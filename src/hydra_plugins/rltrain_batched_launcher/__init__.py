"""rltrain's batched launcher as a Hydra plugin (``hydra/launcher=batched``:
:mod:`rltrain.sweeps.batched`)."""
