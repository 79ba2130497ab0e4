"""The config schemas: the fixed groups' dataclasses (env, trainer params, buffer, the console's
logger fields, tune, the network and discounting settings algorithms extend) and their checks,
:class:`~rltrain.config.schemas.ConfigError` (whatever can be refused before a run starts),
and plain-data helpers (an env id's module, an ``env.wrappers`` entry) (:mod:`.schemas`).

The schemas of what is registered (each algorithm's, trainer kind's and logger's) live beside
their classes; :mod:`rltrain.assembly.registered_schemas` gathers them all. A layer beside
:mod:`rltrain.process`, over :mod:`rltrain.common`: OmegaConf and the standard library."""
