"""The state of (vector) envs as plain data, captured honestly.

``rltrain resume=DIR`` must continue a run exactly, so checkpoints hold the full state of the
envs. Checkpoints are loaded with ``torch.load(weights_only=True)`` so that loading one can run
no code; the state may therefore hold only dicts, lists, tuples, str, int, float, bool, None and
tensors. :func:`snapshot` turns live envs into such data and :func:`restore` writes it back.

The state is read off ``vars()`` of the envs, their wrappers and sub-envs, and of the plain
Python objects they hold (e.g. NormalizeObservation's ``RunningMeanStd``), recursively. Objects
offering ``state_dict()``/``load_state_dict()`` are captured through those instead. Constants
(specs, functions, classes, recorded constructor kwargs) are skipped. Values whose state lives
where ``vars()`` cannot see it (ctypes data, C/SWIG/pybind11 objects, ``__slots__``, sub-envs in
other processes) are *reported* in :attr:`Snapshot.not_captured`, never silently dropped, so
the caller can say that a resume is not exact.

A few C-backed types whose library offers an API to read and write their state as numbers
are captured through it: a small table keyed by exact type (:func:`_c_state_types`). Today it
holds MuJoCo's ``MjData`` (see :func:`_mjdata_capture` for what is captured and why) and the
Atari emulator, ale_py's ``ALEInterface`` (:func:`_ale_capture`), with the one thing ALE's
saved state leaves out under sticky actions, the action the emulator repeats, kept beside it
by :class:`AleStickyAction`. MuJoCo's ``MjModel`` is the compiled model, configuration rather
than state (gymnasium's MuJoCo envs never write to it), so it is skipped like a spec; an env of
one's own that changes it while it runs (domain randomisation of masses, say) would resume with
the model as its constructor built it, and that is not detected. Box2D's world has no such
API: it is reported.

Encoding: a packed value is a bool/int/float/str/None as is, or a tuple ``(tag, ...)``. A
mutable object met a second time is packed as ``("alias", first_path)``; that keeps aliasing
and stops reference cycles; the other way round, a live object that the state holds as two
is restored as two. Restoring imports and constructs nothing named by the state: enum
members, object types, bit generators and C-backed types are looked up through the live objects
or fixed tables (:func:`_rebuildable_types`: MiniGrid's world objects, which each episode makes
anew).
"""

from __future__ import annotations

import collections
import enum
import functools
import os
import random
import struct
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.registration import EnvSpec, WrapperSpec
from gymnasium.vector import AsyncVectorEnv

FORMAT = "rltrain.envstate/1"
_PLAIN = (bool, int, float, str, type(None))
#: configuration, not state: skipped without a report
_CONSTANT = (EnvSpec, WrapperSpec, type, types.ModuleType, functools.partial,
             types.FunctionType, types.BuiltinFunctionType, types.MethodType,
             types.MethodWrapperType, types.WrapperDescriptorType, types.MethodDescriptorType,
             staticmethod, classmethod)
#: gymnasium's record of constructor arguments (constant, and may hold anything)
_SKIPPED_ATTRS = frozenset({"_saved_kwargs"})
#: immutable: the same object reached twice needs no alias
_IMMUTABLE = (tuple, frozenset, np.dtype)
#: the only bit generators a restore will build: never looked up by a name from the file
_BIT_GENERATORS = {cls.__name__: cls for cls in (np.random.PCG64, np.random.PCG64DXSM,
                                                  np.random.MT19937, np.random.Philox,
                                                  np.random.SFC64)}
# Instances of a class written in Python without __slots__ have this size. A larger one means
# the class, or a C base of it (ctypes, pybind11, float...), keeps state outside __dict__.
_PLAIN_BASICSIZE = type("_Probe", (), {}).__basicsize__
_SKIP = object()  # pack(): a constant, leave it out
_KEEP = object()  # unpack(): leave the live value as it is
_MISSING = object()  # unpack(): there is no live value
#: the tags whose handlers write into the live value in place (or make a new one without it)
_IN_PLACE = frozenset({"array", "tensor", "generator", "randomstate", "random", "dict", "list",
                       "deque", "set", "object"})


@dataclass(frozen=True)
class Snapshot:
    """What :func:`snapshot` returns: the state, and the honest list of what it lacks."""

    #: plain data only: ``torch.load(weights_only=True)`` loads it
    state: dict[str, Any]
    #: one ``"<path> (<module>.<qualname>)"`` per value holding state that was not captured
    not_captured: list[str]
    #: one ``"<path> (<type>: <what>)"`` per value that was captured and is restored, but whose
    #: library's state is known to leave something out (ALE with sticky actions, where no
    #: :class:`AleStickyAction` keeps the held action): a restore goes on from it, and is not
    #: exact
    caveats: list[str] = field(default_factory=list)


def snapshot(envs: Any) -> Snapshot:
    """The state of ``envs`` (a vector env, an env, a wrapper) and what it lacks."""
    packer = _Packer()
    root = packer.pack(envs, "envs")
    return Snapshot({"format": FORMAT, "root": ("skipped",) if root is _SKIP else root},
                    packer.not_captured, packer.caveats)


def restore(envs: Any, state: dict[str, Any]) -> list[str]:
    """Write ``state`` back into ``envs`` in place; the problems met ([] means exactly).

    Never raises on a bad or mismatched state: each problem names its path and the restore goes
    on, so the live envs may end up partly restored when the list is not empty.
    """
    if not isinstance(state, dict) or state.get("format") != FORMAT or "root" not in state:
        return [f"envs: not an env state of format {FORMAT!r}"]
    restorer = _Restorer()
    restorer.unpack(state["root"], envs, "envs")
    return restorer.problems


def _type_name(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def _found(live: Any) -> str:
    """What restore found where the state expected something (for problem messages)."""
    return "missing" if live is _MISSING else _type_name(live)


def _is_constant(value: Any) -> bool:
    """Configuration, e.g. SyncVectorEnv.env_fns (a list of functions), MuJoCo's MjModel."""
    constant = _CONSTANT + _c_constant_types()
    if isinstance(value, list) and value:
        return all(isinstance(v, constant) for v in value)
    return isinstance(value, constant)


def _has_protocol(value: Any) -> bool:
    # looked up on the type: gym.Wrapper-like __getattr__ forwarding must not answer for it
    cls = type(value)
    return callable(getattr(cls, "state_dict", None)) and callable(
        getattr(cls, "load_state_dict", None))


def _subspaces(space: gym.spaces.Space) -> dict[str, gym.spaces.Space]:
    """The spaces inside a composite space (Dict, Tuple, Sequence...): each has its own RNG."""
    out: dict[str, gym.spaces.Space] = {}
    for attr, value in vars(space).items():
        if isinstance(value, gym.spaces.Space):
            out[attr] = value
        elif isinstance(value, (tuple, list)):
            out.update({f"{attr}[{i}]": s for i, s in enumerate(value)
                        if isinstance(s, gym.spaces.Space)})
        elif isinstance(value, dict):
            out.update({f"{attr}[{k!r}]": s for k, s in value.items()
                        if isinstance(s, gym.spaces.Space)})
    return out


def _pack_array(a: np.ndarray) -> tuple:
    """A typed tensor where torch has the dtype (readable), else the raw bytes: exact for all."""
    spec = a.dtype.str if a.dtype.fields is None else a.dtype.descr
    data = np.array(a, copy=True, order="C")
    if a.dtype.isnative and a.dtype.fields is None:
        try:
            tensor = torch.from_numpy(data)
        except TypeError:  # a dtype torch lacks (strings, datetimes, long double...)
            tensor = None
        if tensor is not None and tensor.numpy().dtype == a.dtype:
            return ("array", spec, list(a.shape), tensor, False)
    raw = torch.from_numpy(np.frombuffer(data.tobytes(), dtype=np.uint8).copy())
    return ("array", spec, list(a.shape), raw, True)


def _dtype(spec: Any) -> np.dtype:
    if not isinstance(spec, (str, list)):
        raise TypeError(f"bad dtype {spec!r}")
    dtype = np.dtype(spec)
    if dtype.hasobject:  # object arrays could only hold pickled objects: never built
        raise ValueError(f"object dtype {spec!r} refused")
    return dtype


def _unpack_array(spec: Any, shape: Any, data: Any, raw: Any) -> np.ndarray:
    dtype = _dtype(spec)
    if not (isinstance(data, torch.Tensor) and isinstance(shape, list)
            and all(type(n) is int and n >= 0 for n in shape)):
        raise TypeError("bad array data")
    array = data.detach().cpu().numpy()
    if raw:
        if array.dtype != np.uint8 or array.size != dtype.itemsize * int(np.prod(shape)):
            raise ValueError("raw array data of the wrong size")
        return np.frombuffer(array.tobytes(), dtype=dtype).reshape(shape).copy()
    if array.dtype != dtype or list(array.shape) != shape:
        raise ValueError("array data of the wrong dtype or shape")
    return array.copy()


def _bit_generator(state: Any) -> type:
    """The bit generator class a generator state names, from a fixed table only."""
    name = state.get("bit_generator") if isinstance(state, dict) else None
    if not isinstance(name, str) or name not in _BIT_GENERATORS:
        raise ValueError(f"bit generator {name!r} refused")
    return _BIT_GENERATORS[name]


# ------------------------------------------------------------------- C-backed state (MuJoCo)
class _NotCapturable(Exception):
    """A C-backed value of a known type whose state cannot be captured in this configuration."""


@dataclass(frozen=True)
class _CState:
    """A C-backed type whose library reads and writes its state as plain numbers, or a record
    kept beside one of what that library's state leaves out (:class:`AleStickyAction`)."""

    #: the name in the file; restore finds the entry by it and checks the live type
    name: str
    #: value -> plain data (dicts, arrays); raises _NotCapturable with the reason
    capture: Callable[[Any], dict[str, Any]]
    #: (live value, unpacked data) -> problems; writes nothing when there are any
    restore: Callable[[Any, dict[str, Any]], list[str]]
    #: live value -> what the captured state is known to leave out, or None: reported in
    #: :attr:`Snapshot.caveats` (the state is still kept and restored)
    caveat: Callable[[Any], str | None] | None = None
    #: live value -> the C-backed value whose state it completes: that value's caveat is then
    #: not reported (this value's own says whether it could complete it)
    completes: Callable[[Any], Any] | None = None


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
        raise _NotCapturable("the model lets bodies sleep, and no MuJoCo state holds that")
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


_MJDATA = _CState("mujoco.MjData", _mjdata_capture, _mjdata_restore)


# ------------------------------------------------------------ C-backed state (the Atari emulator)
def _ale_py() -> Any:
    """The ale_py module if something imported it (an Atari env did), else None."""
    return sys.modules.get("ale_py")


def _ale_rom(ale: Any) -> str:
    """The game an ALEInterface runs: its ROM's file name (``breakout.bin``)."""
    return os.path.basename(str(ale.getString("rom_file")))


def _ale_capture(ale: Any) -> dict[str, Any]:
    """The state of an ``ALEInterface``, through ALE's own API.

    ``cloneState(include_rng=True)`` is the emulator (CPU, RAM, TIA, cartridge bank, frame
    counters) plus the random generator behind sticky actions; ``serialize()`` turns it into
    bytes, kept here as a uint8 array. With sticky actions on it is not the whole story: the
    action the emulator repeats is kept by :class:`AleStickyAction` (:func:`_ale_caveat`).
    The settings (``repeat_action_probability``, ``max_num_frames_per_episode``, mode,
    difficulty) are configuration: the env's constructor sets them alike in a fresh env.
    The ROM's name comes along, so that a state is never loaded into another game.
    """
    state = ale.cloneState(include_rng=True).serialize()
    return {"rom": _ale_rom(ale), "state": np.frombuffer(state, dtype=np.uint8).copy()}


def _ale_restore(ale: Any, saved: dict[str, Any]) -> list[str]:
    """Write a captured state back, all or nothing: ALE checks the bytes as it reads them and
    raises on a malformed state, after which the state it had is put back."""
    rom, data = saved.get("rom"), saved.get("state")
    if not (isinstance(rom, str) and isinstance(data, np.ndarray) and data.dtype == np.uint8
            and data.ndim == 1):
        return ["not an ALE state (rom name and serialized bytes)"]
    if rom != _ale_rom(ale):
        return [f"a state of {rom}, but the live emulator runs {_ale_rom(ale)}: another game"]
    ale_py = _ale_py()
    before = ale.cloneState(include_rng=True)
    try:
        ale.restoreState(ale_py.ALEState(data.tobytes()))
    except Exception as e:  # noqa: BLE001 - ALE raises SystemError or ValueError on bad bytes
        ale.restoreState(before)
        return [f"ALE refused the saved state ({type(e).__name__}: {e})"]
    return []


def _ale_caveat(ale: Any) -> str | None:
    """With sticky actions (``repeat_action_probability`` > 0) ALE's saved state leaves one thing
    out: the action each frame repeats when its draw says "stick" (StellaEnvironment's
    ``m_player_a_action``, which ALE keeps beside the emulator, not in ``cloneState``). A fresh
    emulator holds its own, so a restore without it parts from the unbroken run at the first
    frame that sticks. :class:`AleStickyAction` keeps it; this is said only of an emulator that
    no such record completes (see :func:`_sticky_completes`)."""
    if float(ale.getFloat("repeat_action_probability")) > 0:
        return ("sticky actions: the action ALE repeats is held outside its saved state, and "
                "no record of it was kept (rltrain keeps one for the Atari envs it makes with "
                "discrete actions and a fixed frame skip, where it can read ALE's random "
                "generator; env.kwargs.repeat_action_probability=0 resumes exactly)")
    return None


_ALE = _CState("ale_py.ALEInterface", _ale_capture, _ale_restore, _ale_caveat)


# ------------------------------------------------------- the action ALE's sticky actions repeat
_WORD = 0xFFFFFFFF
#: how ALE's serializer writes ``true`` (stella's Serializer.hxx, TruePattern)
_ALE_TRUE = 0xFAB1FAB2
#: ALE's action code of NOOP, which every reset holds (StellaEnvironment::softReset)
_ALE_NOOP = 0
#: act() calls made to set the held action on restore before giving up: each sticks with
#: probability ``repeat_action_probability``, so 0.25 fails them all with odds of 1e-602
_HOLD_TRIES = 1000


def _ale_rng(serialized: bytes) -> random.Random | None:
    """ALE's sticky-action generator, read off a serialized ``cloneState(include_rng=True)``, as
    a Python ``random.Random`` at the same place in the same stream; None when the bytes are
    not laid out as read here (then nothing is claimed from them).

    Both generators are MT19937, and Python's ``getrandbits(32)`` is C++'s ``std::mt19937()``.
    The layout (ALE 0.9 to 0.12: ALEState::serialize, stella's Serializer, ints as 4 bytes
    little-endian and strings length first): 6 ints, the emulator's state as a string, 2 ints.
    That state ends with ``true`` and the generator as text, which libstdc++ writes as the 624
    words and the position (other C++ libraries write other texts: read as None)."""
    if len(serialized) < 36:
        return None
    (size,) = struct.unpack_from("<i", serialized, 24)
    if size < 8 or 28 + size + 8 != len(serialized):
        return None
    inner = serialized[28:28 + size]
    start = len(inner)
    while start > 0 and inner[start - 1] in b"0123456789 ":
        start -= 1
    # the length before the text may end in bytes that read as digits or a space
    for begin in range(start, min(start + 4, len(inner)) + 1):
        if begin >= 8 and struct.unpack_from("<Ii", inner, begin - 8) == (
                _ALE_TRUE, len(inner) - begin):
            numbers = inner[begin:].split()
            if len(numbers) != 625:
                return None
            values = tuple(int(n) for n in numbers)
            if max(values[:624]) > _WORD or values[624] > 624:
                return None
            rng = random.Random()
            rng.setstate((3, values, None))
            return rng
    return None


class AleStickyAction:
    """The part of an Atari emulator's state that ALE's own leaves out, kept beside it.

    With sticky actions, ALE's ``act()`` (StellaEnvironment::act) draws twice from its
    generator on every frame, for player A then player B; where A's draw is at least
    ``repeat_action_probability`` the commanded action becomes the *held* one, and the frame
    plays the held action. A reset holds NOOP. ``cloneState(include_rng=True)`` saves the
    emulator and the generator but not the held action, so a fresh emulator restored from it
    plays its own held action at the first frame that sticks, and the run parts there.

    This record follows the same draws on a copy of the generator (:meth:`acted`, after each
    ``act()``), so it knows the held action; checkpoints keep it (:data:`_STICKY`), checked
    against the emulator's generator when taken, and a restore makes the emulator hold it
    (:func:`_ale_hold`). rltrain.wrappers.RecordStickyAction keeps one up to date.
    """

    def __init__(self, ale: Any, codes: list[int]) -> None:
        #: the emulator whose held action this is
        self.ale = ale
        #: ALE's action code of each action index the env takes
        self.codes = list(codes)
        repeat = float(np.float32(ale.getFloat("repeat_action_probability")))
        #: A's draw as a 32-bit integer sticks below this (ALE compares draw / 2**32 with
        #: the probability, a C float: both sides exact in a double)
        self.threshold = repeat * 2.0 ** 32
        #: frames (draw pairs) per act(): ALE's own frame_skip setting, 1 unless set
        self.frames = max(1, int(ale.getInt("frame_skip")))
        #: the held action's ALE code
        self.held = _ALE_NOOP
        #: the copy of the emulator's generator; None once it cannot be followed
        self.rng: random.Random | None = None
        self.reset()

    def reset(self) -> None:
        """The emulator was reset (a seeded reset loads the game anew and reseeds its
        generator): it holds NOOP, and the copy is taken again."""
        self.held = _ALE_NOOP
        self.rng = _ale_rng(self.ale.cloneState(include_rng=True).serialize())

    def acted(self, action: int, calls: int) -> None:
        """The env made ``calls`` ``act()`` calls with the action of index ``action``."""
        rng = self.rng
        if rng is None:
            return
        for _ in range(calls * self.frames):
            if (rng.getrandbits(64) & _WORD) >= self.threshold:  # A's draw: the low word
                self.held = self.codes[action]

    def lost(self) -> str | None:
        """Why the record may not be the emulator's held action, or None: its copy of the
        generator must stand where the emulator's does (a draw it did not follow, by an
        ``act()`` it was not told of, would show there)."""
        if self.rng is None:
            return "ALE's random generator could not be read, so the held action is unknown"
        live = _ale_rng(self.ale.cloneState(include_rng=True).serialize())
        if live is None or live.getstate() != self.rng.getstate():
            return ("the emulator drew for frames the record was not told of, so the held "
                    "action may be another")
        return None


def _ale_hold(ale: Any, action: int, threshold: float, frames: int) -> str | None:
    """Make the emulator hold ``action`` and leave everything else as it was; None, or why
    not. ``act(action)`` holds it at the first frame that does not stick (the generator's copy
    tells which in advance); the emulator, its generator included, is then put back as it was
    found. The held action is all that stays: ``restoreState`` never writes it."""
    here = ale.cloneState(include_rng=True)
    rng = _ale_rng(here.serialize())
    if rng is None:
        return "ALE's random generator could not be read"
    if threshold > _WORD:  # every frame sticks: only a reset's NOOP is ever held
        return None if action == _ALE_NOOP else f"action {action} held, but every frame sticks"
    try:
        for _ in range(_HOLD_TRIES):
            held = False
            for _ in range(frames):
                held |= (rng.getrandbits(64) & _WORD) >= threshold
            ale.act(action, 1.0)
            if held:
                return None
        return f"no draw in {_HOLD_TRIES} frames let the emulator take action {action}"
    finally:
        ale.restoreState(here)


def _sticky_capture(record: AleStickyAction) -> dict[str, Any]:
    """The held action's code and the generator's copy (624 words and the position; None when
    the copy was lost, which the record's caveat says)."""
    rng = None if record.rng is None else np.array(record.rng.getstate()[1], dtype=np.int64)
    return {"held": record.held, "rng": rng}


def _sticky_restore(record: AleStickyAction, saved: dict[str, Any]) -> list[str]:
    """Make the live emulator hold the saved action and the record follow the saved copy of
    the generator. The emulator's own state is restored apart, before or after (restoreState
    never writes the held action), so the order of the walk does not matter."""
    held, words = saved.get("held"), saved.get("rng")
    if type(held) is not int or (held != _ALE_NOOP and held not in record.codes):
        return [f"not a held action of this game ({held!r})"]
    state = None
    if words is not None:
        if not (isinstance(words, np.ndarray) and words.shape == (625,)
                and 0 <= words.min() and words[:624].max() <= _WORD and words[624] <= 624):
            return ["malformed random generator state"]
        state = (3, tuple(int(w) for w in words), None)
    if (why := _ale_hold(record.ale, held, record.threshold, record.frames)) is not None:
        return [why]
    record.held = held
    if state is None:
        record.rng = None
    else:
        record.rng = random.Random()
        record.rng.setstate(state)
    return []


def _sticky_completes(record: AleStickyAction) -> Any:
    """The emulator whose state the record completes: its own caveat is then not said."""
    return record.ale


_STICKY = _CState("rltrain.AleStickyAction", _sticky_capture, _sticky_restore,
                  AleStickyAction.lost, _sticky_completes)


def _c_state_types() -> dict[type, _CState]:
    """The fixed table of C-backed types captured through their library, by exact type."""
    table = {getattr(_mujoco(), "MjData", None): _MJDATA,
             getattr(_ale_py(), "ALEInterface", None): _ALE, AleStickyAction: _STICKY}
    return {kind: entry for kind, entry in table.items() if isinstance(kind, type)}


def _c_constant_types() -> tuple[type, ...]:
    """C-backed configuration, skipped like a spec: MuJoCo's compiled model."""
    model_type = getattr(_mujoco(), "MjModel", None)
    return (model_type,) if isinstance(model_type, type) else ()


def _rebuildable_types() -> dict[str, type]:
    """Plain Python classes whose instances a restore may make where the live envs hold none
    (or another type), by qualified name, from a fixed table of modules already imported:
    value objects an env creates anew each episode, whose attributes are all their state.
    MiniGrid's world objects: an episode's grid holds its own Key, Door, Wall... instances,
    so the grid of the episode a checkpoint was taken in holds objects at cells where a fresh
    env holds others, or none."""
    out: dict[str, type] = {}
    world = sys.modules.get("minigrid.core.world_object")
    base = getattr(world, "WorldObj", None)
    if isinstance(base, type):
        for value in vars(world).values():
            if (isinstance(value, type) and issubclass(value, base)
                    and value.__basicsize__ == _PLAIN_BASICSIZE):
                out[f"{value.__module__}.{value.__qualname__}"] = value
    return out


class _Packer:
    """One walk over live envs: packs values, remembers first paths, collects the gaps."""

    def __init__(self) -> None:
        # id -> (first path, the object itself: kept alive so that no id is reused meanwhile)
        self.seen: dict[int, tuple[str, Any]] = {}
        self.not_captured: list[str] = []
        #: (id of the value, what its state leaves out), until the walk knows which values
        #: a record completes
        self.open_caveats: list[tuple[int, str]] = []
        #: ids of the values whose state a record beside them completes
        self.completed: set[int] = set()

    @property
    def caveats(self) -> list[str]:
        return [text for key, text in self.open_caveats if key not in self.completed]

    def uncaptured(self, path: str, value: Any, why: str = "") -> tuple:
        name = _type_name(value) + (f": {why}" if why else "")
        self.not_captured.append(f"{path} ({name})")
        return ("uncaptured", name)

    def pack(self, value: Any, path: str) -> Any:
        """The packed form of ``value`` found at ``path``, or _SKIP for a constant."""
        if type(value) in _PLAIN:
            return value
        if isinstance(value, enum.Enum):  # by name: restored through the live value's type
            return ("enum", value.name) if value.name else self.uncaptured(path, value)
        if isinstance(value, np.generic):  # keeps its dtype: np.float32 arithmetic differs
            return ("npscalar", _pack_array(np.asarray(value)))
        if _is_constant(value):
            return _SKIP
        if not isinstance(value, _IMMUTABLE):
            first = self.seen.get(id(value))
            if first is not None:
                return ("alias", first[0])
            self.seen[id(value)] = (path, value)
        return self._pack_new(value, path)

    def _pack_new(self, value: Any, path: str) -> Any:
        if (c_state := _c_state_types().get(type(value))) is not None:
            return self._pack_c_state(c_state, value, path)
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                return self.uncaptured(path, value, "object array")
            return _pack_array(value)
        if isinstance(value, torch.Tensor):
            return ("tensor", value.detach().cpu().clone())
        if isinstance(value, (np.random.Generator, np.random.RandomState)):
            if isinstance(value, np.random.Generator):
                tag, state, where = "generator", value.bit_generator.state, "bit_generator.state"
            else:
                tag, state, where = "randomstate", value.get_state(legacy=False), "state"
            if state["bit_generator"] not in _BIT_GENERATORS:
                return self.uncaptured(path, value, "a bit generator restore would not build")
            return (tag, self.pack(state, f"{path}.{where}"))
        if isinstance(value, random.Random):
            try:
                return ("random", value.getstate())  # (int, tuple of ints, float | None)
            except NotImplementedError:  # SystemRandom has no state to save
                return self.uncaptured(path, value)
        if isinstance(value, gym.spaces.Space):
            return self._pack_space(value, path)
        if isinstance(value, AsyncVectorEnv):
            return self.uncaptured(path, value, "sub-envs run in other processes")
        if _has_protocol(value):
            state = self.pack(value.state_dict(), f"{path}.state_dict()")
            return ("protocol", _type_name(value), ("skipped",) if state is _SKIP else state)
        if isinstance(value, dict):
            return ("dict", [[self.pack(k, f"{path}.keys()"), self._item(v, f"{path}[{k!r}]")]
                             for k, v in value.items() if not _is_constant(k)])
        if isinstance(value, (list, tuple, collections.deque)):
            items = [self._item(v, f"{path}[{i}]") for i, v in enumerate(value)]
            if isinstance(value, collections.deque):
                return ("deque", items, value.maxlen)
            return ("list" if isinstance(value, list) else "tuple", items)
        if isinstance(value, (set, frozenset)):
            items = [self.pack(v, f"{path}[{i}]") for i, v in enumerate(value)]
            return ("set", [v for v in items if v is not _SKIP], isinstance(value, frozenset))
        if isinstance(value, np.dtype):
            return ("dtype", value.str if value.fields is None else value.descr)
        return self._pack_object(value, path)

    def _item(self, value: Any, path: str) -> Any:
        packed = self.pack(value, path)
        return ("skipped",) if packed is _SKIP else packed  # keeps the positions of the others

    def _pack_c_state(self, c_state: _CState, value: Any, path: str) -> tuple:
        try:
            data = c_state.capture(value)
        except _NotCapturable as e:
            return self.uncaptured(path, value, str(e))
        caveat = None if c_state.caveat is None else c_state.caveat(value)
        if caveat is not None:
            self.open_caveats.append((id(value), f"{path} ({_type_name(value)}: {caveat})"))
        if c_state.completes is not None:
            # its id stays that object's: the value, kept alive in self.seen, holds it
            self.completed.add(id(c_state.completes(value)))
        return ("cstate", c_state.name, self.pack(data, f"{path}.<{c_state.name} state>"))

    def _pack_space(self, space: gym.spaces.Space, path: str) -> tuple:
        """A space is configuration, except for its RNG (which sample() draws from)."""
        rng = space._np_random  # the np_random property would create one
        children = {key: self.pack(sub, f"{path}.{key}") for key, sub in _subspaces(space).items()}
        return ("space", _type_name(space),
                None if rng is None else self.pack(rng, f"{path}.np_random"), children)

    def _pack_object(self, value: Any, path: str) -> tuple:
        attrs = getattr(value, "__dict__", None)
        if (not isinstance(attrs, dict) or type(value).__basicsize__ > _PLAIN_BASICSIZE
                or type(attrs.get("this")).__name__ == "SwigPyObject"):
            # the state lives in C (or in slots): vars() would look empty or partial
            return self.uncaptured(path, value)
        packed = {}
        for attr, v in attrs.items():
            if attr not in _SKIPPED_ATTRS and (p := self.pack(v, f"{path}.{attr}")) is not _SKIP:
                packed[attr] = p
        return ("object", _type_name(value), packed)


class _Restorer:
    """One walk over a packed state and the live envs side by side, collecting problems.

    The handlers are a fixed table keyed by tag: nothing in the state chooses code to run.
    """

    def __init__(self) -> None:
        self.problems: list[str] = []
        #: path -> the live object restored there, for the aliases that refer to it
        self.restored: dict[str, Any] = {}
        #: id -> each live object already written into in place (kept alive meanwhile)
        self.claimed: dict[int, Any] = {}
        self.handlers: dict[str, Callable[..., Any]] = {
            "alias": self._alias, "uncaptured": self._uncaptured, "skipped": self._skipped,
            "enum": self._enum, "npscalar": self._npscalar, "array": self._array,
            "tensor": self._tensor, "generator": self._generator,
            "randomstate": self._randomstate, "random": self._random, "space": self._space,
            "protocol": self._protocol, "dict": self._dict, "list": self._list,
            "tuple": self._tuple, "deque": self._deque, "set": self._set,
            "dtype": self._dtype_value, "object": self._object, "cstate": self._c_state,
        }

    def problem(self, path: str, message: str) -> object:
        self.problems.append(f"{path}: {message}")
        return _KEEP

    def unpack(self, packed: Any, live: Any, path: str) -> Any:
        """The value to hold at ``path``: ``live`` itself restored in place where it allows,
        a new value, or _KEEP (leave the live value; any problem is recorded)."""
        if not isinstance(packed, tuple):
            if type(packed) in _PLAIN:
                return packed
            return self.problem(path, f"malformed state ({type(packed).__name__})")
        handler = self.handlers.get(packed[0]) if packed and isinstance(packed[0], str) else None
        if handler is None:
            return self.problem(path, f"malformed state (tag {packed[:1]!r})")
        if packed[0] in _IN_PLACE:
            live = self._claim(live)
        try:
            return handler(path, live, *packed[1:])
        except Exception as exc:  # a bad state is a problem to report, never a crash
            return self.problem(path, f"malformed state ({type(exc).__name__}: {exc})")

    def _claim(self, live: Any) -> Any:
        """``live`` to be written into in place, or _MISSING when an earlier path was already
        written into it. The snapshot holds distinct objects there, and the live envs one: a
        frame stack's queue just after a reset holds one array four times, and writing the
        four saved frames into it in turn would leave the last frame in all four places."""
        if live is _MISSING or type(live) in _PLAIN or isinstance(live, _IMMUTABLE):
            return live
        if id(live) in self.claimed:
            return _MISSING
        self.claimed[id(live)] = live
        return live

    def _alias(self, path: str, live: Any, first: str) -> Any:
        if first not in self.restored:
            return self.problem(path, f"refers to {first}, which was not restored")
        return self.restored[first]

    def _uncaptured(self, path: str, live: Any, name: str) -> Any:
        if live is not _MISSING:
            self.restored[path] = live
        return self.problem(path, f"not captured in the snapshot ({name}); left as it is")

    def _skipped(self, path: str, live: Any) -> Any:
        return self.problem(path, "a constant, and no live value") if live is _MISSING else _KEEP

    def _enum(self, path: str, live: Any, name: str) -> Any:
        if isinstance(live, enum.Enum) and name in type(live).__members__:
            return type(live).__members__[name]
        return self.problem(path, f"enum member {name!r} not found through the live value "
                                  f"({_found(live)})")

    def _npscalar(self, path: str, live: Any, array: tuple) -> Any:
        if not (isinstance(array, tuple) and array[:1] == ("array",)):
            raise TypeError("bad scalar")
        return _unpack_array(*array[1:])[()]

    def _array(self, path: str, live: Any, *data: Any) -> Any:
        array = _unpack_array(*data)
        if (isinstance(live, np.ndarray) and live.shape == array.shape
                and live.dtype == array.dtype and live.flags.writeable):
            live[...] = array  # in place: views and other references see the restored data
            array = live
        self.restored[path] = array
        return array

    def _tensor(self, path: str, live: Any, data: Any) -> Any:
        if not isinstance(data, torch.Tensor):
            raise TypeError("bad tensor")
        if isinstance(live, torch.Tensor) and live.shape == data.shape and live.dtype == data.dtype:
            with torch.no_grad():
                live.copy_(data)
            data = live
        else:
            data = data.clone()  # never share memory with the state
        self.restored[path] = data
        return data

    def _generator(self, path: str, live: Any, packed: Any) -> Any:
        state = self.unpack(packed, _MISSING, f"{path}.bit_generator.state")
        if state is _KEEP:
            return _KEEP
        cls = _bit_generator(state)
        if not (isinstance(live, np.random.Generator) and type(live.bit_generator) is cls):
            live = np.random.Generator(cls())
        live.bit_generator.state = state
        self.restored[path] = live
        return live

    def _randomstate(self, path: str, live: Any, packed: Any) -> Any:
        state = self.unpack(packed, _MISSING, f"{path}.state")
        if state is _KEEP:
            return _KEEP
        cls = _bit_generator(state)
        if not (isinstance(live, np.random.RandomState)
                and live.get_state(legacy=False)["bit_generator"] == cls.__name__):
            live = np.random.RandomState(cls())
        live.set_state(state)
        self.restored[path] = live
        return live

    def _random(self, path: str, live: Any, state: Any) -> Any:
        if not isinstance(live, random.Random):
            live = random.Random()
        live.setstate(state)  # validates the state: raises on anything malformed
        self.restored[path] = live
        return live

    def _space(self, path: str, live: Any, name: str, rng: Any, children: dict) -> Any:
        if not isinstance(live, gym.spaces.Space) or _type_name(live) != name:
            return self.problem(path, f"expected a {name}, the live value is {_found(live)}")
        self.restored[path] = live
        if rng is not None:
            generator = self.unpack(rng, live.np_random, f"{path}.np_random")
            if generator is not _KEEP and generator is not live.np_random:
                live._np_random = generator  # a Space has no public way to replace its RNG
        live_children = _subspaces(live)
        for key, packed in children.items():
            if key not in live_children:
                self.problem(f"{path}.{key}", "the live space has no such sub-space")
            else:
                self.unpack(packed, live_children[key], f"{path}.{key}")
        return live

    def _c_state(self, path: str, live: Any, name: str, packed: Any) -> Any:
        c_state = _c_state_types().get(type(live))
        if c_state is None or c_state.name != name:
            return self.problem(path, f"expected a {name}, the live value is {_found(live)}")
        self.restored[path] = live
        data = self.unpack(packed, _MISSING, f"{path}.<{name} state>")
        if data is _KEEP:  # the problem is recorded
            return _KEEP
        if not isinstance(data, dict):
            return self.problem(path, f"malformed {name} state")
        for problem in c_state.restore(live, data):
            self.problem(path, f"{problem}; left as it is")
        return live

    def _protocol(self, path: str, live: Any, name: str, packed: Any) -> Any:
        if live is _MISSING or _type_name(live) != name or not _has_protocol(live):
            return self.problem(path, f"expected a {name} with load_state_dict(), the live "
                                      f"value is {_found(live)}")
        self.restored[path] = live
        # the live state_dict() is the live counterpart: it gives enum members their type
        state = self.unpack(packed, live.state_dict(), f"{path}.state_dict()")
        if state is not _KEEP:
            live.load_state_dict(state)
        return live

    def _key(self, packed: Any, candidates: Any, path: str) -> Any:
        """A dict key or set element; an enum member is found among the live ones."""
        if isinstance(packed, tuple) and packed[:1] == ("enum",) and len(packed) == 2:
            for candidate in candidates:
                if isinstance(candidate, enum.Enum) and packed[1] in type(candidate).__members__:
                    return type(candidate).__members__[packed[1]]
            return self.problem(path, f"enum member {packed[1]!r}: no live enum of it")
        return self.unpack(packed, _MISSING, path)

    def _dict(self, path: str, live: Any, items: list) -> Any:
        target = live if isinstance(live, dict) else {}
        self.restored[path] = target
        new = {}
        for packed_key, packed_value in items:
            key = self._key(packed_key, list(target), f"{path}.keys()")
            if key is _KEEP:
                return _KEEP
            old = target.get(key, _MISSING)
            value = self.unpack(packed_value, old, f"{path}[{key!r}]")
            if (value := old if value is _KEEP else value) is _MISSING:
                return _KEEP
            new[key] = value
        kept = [(k, v) for k, v in target.items() if _is_constant(k)]
        target.clear()
        target.update(new)
        target.update(kept)
        return target

    def _items(self, path: str, live_items: list, items: list) -> list | None:
        """The restored items of a sequence, paired by position with the live ones where their
        numbers agree; None when one can be neither restored nor kept."""
        if len(live_items) != len(items):
            live_items = [_MISSING] * len(items)
        new = [self.unpack(p, old, f"{path}[{i}]")
               for i, (p, old) in enumerate(zip(items, live_items, strict=True))]
        new = [old if v is _KEEP else v for v, old in zip(new, live_items, strict=True)]
        return None if any(v is _MISSING for v in new) else new

    def _list(self, path: str, live: Any, items: list) -> Any:
        target = live if isinstance(live, list) else []
        self.restored[path] = target
        if (new := self._items(path, list(target), items)) is None:
            return _KEEP
        target[:] = new
        return target

    def _deque(self, path: str, live: Any, items: list, maxlen: int | None) -> Any:
        ok = isinstance(live, collections.deque) and live.maxlen == maxlen
        target = live if ok else collections.deque(maxlen=maxlen)
        self.restored[path] = target
        if (new := self._items(path, list(target), items)) is None:
            return _KEEP
        target.clear()
        target.extend(new)
        return target

    def _tuple(self, path: str, live: Any, items: list) -> Any:
        old = list(live) if isinstance(live, tuple) else []
        if (new := self._items(path, old, items)) is None:
            return _KEEP
        if isinstance(live, tuple) and len(new) == len(old):
            if all(a is b for a, b in zip(new, old, strict=True)):
                return live  # unchanged: keep the very tuple
            if hasattr(type(live), "_fields") and hasattr(live, "_make"):  # a namedtuple
                return live._make(new)  # stays one, of the live type (not a name from the file)
        return tuple(new)

    def _set(self, path: str, live: Any, items: list, frozen: bool) -> Any:
        candidates = list(live) if isinstance(live, (set, frozenset)) else []
        new = [self._key(p, candidates, f"{path}[{i}]") for i, p in enumerate(items)]
        if any(v is _KEEP for v in new):
            return _KEEP
        new += [v for v in candidates if _is_constant(v)]
        if frozen:
            return live if isinstance(live, frozenset) and live == set(new) else frozenset(new)
        target = live if isinstance(live, set) else set()
        target.clear()
        target.update(new)
        self.restored[path] = target
        return target

    def _dtype_value(self, path: str, live: Any, spec: Any) -> Any:
        return _dtype(spec)

    def _object(self, path: str, live: Any, name: str, attrs: dict) -> Any:
        if live is _MISSING or _type_name(live) != name or not isinstance(
                getattr(live, "__dict__", None), dict):
            rebuildable = _rebuildable_types().get(name)
            if rebuildable is None:
                return self.problem(path, f"expected a {name}, the live value is {_found(live)}")
            # a plain value object the envs make as they go (a MiniGrid key in another
            # episode's grid): made bare, every attribute comes from the state below
            live = object.__new__(rebuildable)
            self.claimed[id(live)] = live
        self.restored[path] = live
        live_attrs = vars(live)
        for attr, packed in attrs.items():
            old = live_attrs.get(attr, _MISSING)
            value = self.unpack(packed, old, f"{path}.{attr}")
            if value is not _KEEP and value is not old:
                live_attrs[attr] = value
        return live
