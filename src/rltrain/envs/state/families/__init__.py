"""The env families whose state the walker cannot see on its own: one module each, each
registering its adapters (:mod:`rltrain.envs.state.adapters`) when imported, so importing this
package registers them all. A new family is one new module here, and nothing else changes.

A family module may import numpy, the standard library and :mod:`rltrain.envs.state.adapters`
and :mod:`rltrain.envs.state.encoding`; never its library (mujoco, ale_py, minigrid): the
registry finds the library's types in ``sys.modules`` once an env has imported it, so that
rltrain runs without the extras."""

from rltrain.common.registries import import_members

import_members(__name__, __path__)
