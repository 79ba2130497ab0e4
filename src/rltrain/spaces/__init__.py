"""What an env's spaces become for the networks and the storage.

- :mod:`.observations`: how observations are stored and become tensors (images as uint8, Dict
  observations as uint8 rows of a :class:`~rltrain.spaces.observations.DictLayout`, the rest
  as float32);
- :mod:`.masking`: action masks, in the observation or moved there from the info
  (``InfoActionMask``), applied to logits;
- :mod:`.actions`: the action-scaling convention (the algorithm acts in [-1, 1], the env in
  its bounds) and the shift of integer actions that do not start at 0.

A layer under the envs, the nets and the data path, which read the spaces through it; it
imports numpy, torch and gymnasium only (``masking`` imports ``observations``)."""
