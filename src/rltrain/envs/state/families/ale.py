"""The Atari emulator: ale_py's ``ALEInterface`` through ALE's own API (``cloneState``,
``restoreState``), and :class:`AleStickyAction`, the one thing ALE's saved state leaves out
under sticky actions (the action the emulator repeats), kept beside it.

rltrain.envs.wrappers.RecordStickyAction keeps an :class:`AleStickyAction` up to date for the Atari
envs rltrain makes; an emulator that no such record completes says, with sticky actions on,
that its restore is not exact (:meth:`AleState.caveat`).
"""

from __future__ import annotations

import os
import random
import struct
import sys
from typing import Any

import numpy as np

from rltrain.envs.state.adapters import StateAdapter, register


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
    no such record completes (see :meth:`AleStickyActionState.completes`)."""
    if float(ale.getFloat("repeat_action_probability")) > 0:
        return ("sticky actions: the action ALE repeats is held outside its saved state, and "
                "no record of it was kept (rltrain keeps one for the Atari envs it makes with "
                "discrete actions and a fixed frame skip, where it can read ALE's random "
                "generator; env.kwargs.repeat_action_probability=0 resumes exactly)")
    return None


class AleState(StateAdapter):
    """``ale_py.ALEInterface``: :func:`_ale_capture`, :func:`_ale_restore`, :func:`_ale_caveat`."""

    name = "ale_py.ALEInterface"
    module, type_name = "ale_py", "ALEInterface"

    def capture(self, value: Any) -> dict[str, Any]:
        return _ale_capture(value)

    def restore(self, value: Any, saved: dict[str, Any]) -> list[str]:
        return _ale_restore(value, saved)

    def caveat(self, value: Any) -> str | None:
        return _ale_caveat(value)


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
    ``act()``), so it knows the held action; checkpoints keep it
    (:class:`AleStickyActionState`), checked against the emulator's generator when taken, and a
    restore makes the emulator hold it (:func:`_ale_hold`). rltrain.envs.wrappers.RecordStickyAction
    keeps one up to date.
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


class AleStickyActionState(StateAdapter):
    """:class:`AleStickyAction`: :func:`_sticky_capture`, :func:`_sticky_restore`; its caveat
    is :meth:`AleStickyAction.lost`."""

    name = "rltrain.AleStickyAction"
    module, type_name = __name__, "AleStickyAction"

    def capture(self, value: Any) -> dict[str, Any]:
        return _sticky_capture(value)

    def restore(self, value: Any, saved: dict[str, Any]) -> list[str]:
        return _sticky_restore(value, saved)

    def caveat(self, value: Any) -> str | None:
        return value.lost()

    def completes(self, value: Any) -> Any:
        """The emulator whose state the record completes: its own caveat is then not said."""
        return value.ale


register(AleState())
register(AleStickyActionState())
