"""What every layer shares; the ground floor, importing nothing of rltrain above it.

- :mod:`.types`: what the networks need from the env (:class:`~rltrain.common.types.SpaceInfo`),
  what a collector calls (``Policy``, ``Acted``), where training stands (``Progress``);
- :mod:`.errors`: the failures a run reports once it trains (non-finite values, files it
  cannot write);
- :mod:`.registries`: registries whose members register themselves (importing a package
  imports each module in it);
- :mod:`.stats`: stats records (frozen dataclasses) and their flattening for the loggers;
- :mod:`.stacking`: the work a run hands over to be stacked with other runs' (a batched
  sweep's members), run alone outside a batch;
- :mod:`.moved`: where modules were before they moved into packages, for the names files
  keep.

The standard library and numpy only."""
