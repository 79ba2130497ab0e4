"""MuJoCo: an ``MjData``'s state through MuJoCo's own API (``mj_getState``/``mj_setState``).

MuJoCo's ``MjModel`` is the compiled model, configuration rather than state (gymnasium's MuJoCo
envs never write to it), so it is skipped like a spec; an env of one's own that changes it
while it runs (domain randomisation of masses, say) would resume with the model as its
constructor built it, and that is not detected. A model that lets bodies sleep is reported as
not captured: no MuJoCo state holds what sleeping keeps.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from rltrain.envs.state.adapters import NotCapturable, StateAdapter, register, register_constant

#: mjtNum arrays of mjData beyond the integration state, at sizes fixed by the model (MuJoCo's
#: MJDATA_POINTERS in mjxmacro.h; the arena's contact and constraint arrays are not among them).
#: mj_step computes them from the state *before* its last integration, so mj_forward after a
#: restore would give other numbers; envs read some of them between steps (Ant-v5 and the
#: reacher read body positions, Humanoid-v5 xipos, before stepping), so they are restored as
#: saved. Names this MuJoCo lacks are left out of the capture.
_MJDATA_DERIVED = (
    # position stage
    "xpos", "xquat", "xmat", "xipos", "xiquat", "ximat", "xanchor", "xaxis", "geom_xpos",
    "geom_xquat", "geom_xmat", "site_xpos", "site_xquat", "site_xmat", "cam_xpos", "cam_xmat",
    "light_xpos", "light_xdir", "subtree_com", "cdof", "cinert", "flexvert_xpos",
    "flexelem_aabb", "flexelem_krot", "flexvert_hessian", "flexedge_hessian", "flexedge_J",
    "flexedge_length", "bvh_aabb_dyn", "flexvert_lambda", "ten_J", "ten_length", "wrap_xpos",
    "actuator_length", "actuator_moment", "crb", "M", "qLD", "qLDiagInv",
    # velocity stage
    "flexedge_velocity", "ten_velocity", "actuator_velocity", "cvel", "cdof_dot", "qfrc_bias",
    "qfrc_spring", "qfrc_damper", "qfrc_gravcomp", "qfrc_fluid", "qfrc_adhesion",
    "qfrc_passive", "subtree_linvel", "subtree_angmom", "qH", "qHDiagInv", "qDeriv", "qLU",
    # acceleration stage, sensors, energy
    "actuator_force", "qfrc_actuator", "qfrc_smooth", "qacc_smooth", "qfrc_constraint",
    "qfrc_inverse", "cacc", "cfrc_int", "cfrc_ext", "qacc", "act_dot", "sensordata", "energy",
)


def _mujoco() -> Any:
    """The mujoco module if something imported it (an env holding its objects did), else None:
    envstate never imports it, so that rltrain runs without the mujoco extra."""
    return sys.modules.get("mujoco")


def _mjdata_capture(data: Any) -> dict[str, Any]:
    """The state of an ``MjData``, read with MuJoCo's own API.

    ``mj_getState(..., mjSTATE_INTEGRATION)`` is MuJoCo's full integration state: time, qpos,
    qvel, act, history buffers, plugin and plastic state, the warm start of the solver and
    the user inputs (ctrl, applied forces, equality activations, mocap poses, userdata), all
    that the next ``mj_step`` reads. The derived arrays (``_MJDATA_DERIVED``) come with it, as
    saved. Not restored: the arena's contact and constraint arrays and counters (``ncon``,
    ``efc_*``: rebuilt by the next step before use), solver statistics, timers and warnings.
    """
    mujoco = _mujoco()
    sleep = getattr(mujoco.mjtEnableBit, "mjENBL_SLEEP", 0)
    if int(data.model.opt.enableflags) & int(sleep):
        # asleep bodies keep stale kinematics and sleep counters that no mjtState holds
        raise NotCapturable("the model lets bodies sleep, and no MuJoCo state holds that")
    spec = int(mujoco.mjtState.mjSTATE_INTEGRATION)
    state = np.empty(mujoco.mj_stateSize(data.model, spec), dtype=np.float64)
    mujoco.mj_getState(data.model, data, state, spec)
    derived = {name: np.array(getattr(data, name), copy=True)
               for name in _MJDATA_DERIVED if hasattr(data, name)}
    return {"spec": spec, "state": state, "derived": derived}


def _mjdata_problems(data: Any, saved: dict[str, Any]) -> list[str]:
    """Why ``saved`` cannot be written into the live ``data`` (e.g. another model)."""
    mujoco = _mujoco()
    spec = int(mujoco.mjtState.mjSTATE_INTEGRATION)
    state, derived = saved.get("state"), saved.get("derived")
    if saved.get("spec") != spec or not isinstance(state, np.ndarray) or not isinstance(
            derived, dict):
        return [f"not a MuJoCo integration state of this MuJoCo {mujoco.__version__} "
                f"(state spec {saved.get('spec')!r}, expected {spec})"]
    size = mujoco.mj_stateSize(data.model, spec)
    if state.dtype != np.float64 or state.shape != (size,):
        return [f"the saved state has {state.size} numbers, the live model's has {size}: "
                "a different model"]
    problems = []
    for name in sorted(set(derived) | {n for n in _MJDATA_DERIVED if hasattr(data, n)}):
        live, value = getattr(data, name, None), derived.get(name)
        if name not in _MJDATA_DERIVED or not isinstance(live, np.ndarray):
            problems.append(f"{name}: not a derived array of the live MjData")
        elif not isinstance(value, np.ndarray):
            problems.append(f"{name}: missing from the saved state")
        elif value.shape != live.shape or value.dtype != live.dtype:
            problems.append(f"{name}: saved {value.dtype}{list(value.shape)}, the live model's "
                            f"is {live.dtype}{list(live.shape)}: a different model")
    return problems


def _mjdata_restore(data: Any, saved: dict[str, Any]) -> list[str]:
    """Write a captured state back (all or nothing). No ``mj_forward`` afterwards: it would
    recompute the derived arrays from the restored qpos, which is not what the interrupted env
    held (see ``_MJDATA_DERIVED``); the next ``mj_step`` recomputes them anyway."""
    if problems := _mjdata_problems(data, saved):
        return problems
    mujoco = _mujoco()
    mujoco.mj_setState(data.model, data, saved["state"], saved["spec"])
    for name, value in saved["derived"].items():
        getattr(data, name)[...] = value  # views of the C arrays: written in place
    return []


class MjDataState(StateAdapter):
    """``mujoco.MjData``: :func:`_mjdata_capture`, :func:`_mjdata_restore`."""

    name = "mujoco.MjData"
    module, type_name = "mujoco", "MjData"

    def capture(self, value: Any) -> dict[str, Any]:
        return _mjdata_capture(value)

    def restore(self, value: Any, saved: dict[str, Any]) -> list[str]:
        return _mjdata_restore(value, saved)


register(MjDataState())
register_constant("mujoco", "MjModel")
