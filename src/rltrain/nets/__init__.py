"""Networks, and the parts algorithms build them from.

- :mod:`.actors_critics`: MLPs (with their hand-written passes and stacked forms), the actors
  (categorical, Gaussian, squashed, deterministic, multi-categorical) and Q(s, a) critics, each
  on an observation encoder;
- :mod:`.q_networks`: the value-based family's Q-networks (DQN, dueling, noisy layers, the
  distributional heads of C51 and QR-DQN);
- :mod:`.recurrent`: the recurrent policies' cores and what their rollouts need;
- :mod:`.encoders`: the observation encoder registry (flat, image, dict);
- :mod:`.normalize` (observation normalisation, reward scaling), :mod:`.noise` (exploration
  noise), :mod:`.optim` (flat-buffer Adam, Polyak updates, stacked Adams), :mod:`.nograd`
  (``no_grad`` that checks first).

Each module imports only those of the lower groups (the "nets" contract in
``.importlinter``: q_networks over actors_critics and recurrent, over encoders, optim,
normalize and noise, over nograd). The package sits beside the envs and the loggers, under
the data path and the algorithms; it may import :mod:`rltrain.spaces`,
:mod:`rltrain.process` (a value echoed short in a message), :mod:`rltrain.config` and
:mod:`rltrain.common`."""
