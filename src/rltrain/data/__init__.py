"""The data path: how experience is stored, chosen and turned into batches, and datasets.

Storage, bottom up (each module imports only the ones above it in this list):

- ``fields``: the fields a transition is made of (``obs, act, rew, terminated, truncated``
  today), the codec protocol every field's storage follows, and ``WholeArrays``, the codec
  that keeps a value whole per slot;
- ``frames``: ``FrameStacks``, the codec that keeps stacked uint8 frames one frame per
  transition;
- ``asides``: the next observations that are not their successor's, kept aside (and each
  lane's pending one);
- ``device_copy``: ``DeviceMirror``, the one-step transitions again on an accelerator;
- ``batch``: what storage hands out: ``Batch``, ``Rollout``, ``Window``;
- ``state_format``: a buffer's state in a checkpoint, its checks, the previous release's
  format, every transition read back from a state;
- ``storage``: ``ReplayBuffer``, one lane (a ring of transitions in time order) per env, each
  declared field kept by its codec; replay and on-policy rollouts alike;
- ``episodes``: ``EpisodeIndex``, where each stored transition's episode begins and ends,
  kept beside storage from what was written since it last looked (derived, never saved).

Reading, one way through, called by the trainer (``reading``): a sampler of the ``samplers``
registry chooses indices (uniform, prioritised, episode-uniform), ``reading.gather`` reads
their fields as far as the algorithm's transforms reach, and the ``transforms`` registry's
transforms compute what the loss needs (n-step returns); the result is the ``Batch`` the update
receives. On-policy, ``reading.read_rollout`` reads the whole rollout and the same registry's
transforms compute GAE (by the algorithm's critic at the update) and which slots to learn
from; the result is the ``Rollout`` the update receives. ``datasets``: offline datasets
(files, validation, Minari) and their conversion from and to storage.

The collector (``collector``: steps envs with a policy, writes what they give into storage,
returns typed collection stats) is the top of the package: no other module of it imports the
collector (the "collector" contract of ``.importlinter``). The package is the data layer: it
may import :mod:`rltrain.envs` (the collector steps them), :mod:`rltrain.nets` (a recurrent
policy's state), :mod:`rltrain.spaces`, :mod:`rltrain.rundir` (files, trust),
:mod:`rltrain.process`, :mod:`rltrain.config` and :mod:`rltrain.common`; never the algorithms,
the trainers or anything above them.
"""
