"""A buffer's state (what a checkpoint holds of it): its format, its checks, the migration of
the previous release's format, and every transition read back from it.

The state holds the filled part only: every stored transition, lanes one after another in
time order (``size`` says how many per lane), one row per transition of each field (``obs``,
``act``, ``rew``, ``terminated``, ``truncated``; with frame stacks ``frames`` and ``back``
stand for ``obs``, and ``history`` holds each lane's k - 1 frames before its oldest
transition's), then ``frame_stack``, ``lane_capacity``, ``ptr`` (so that positions, and so
samples and priorities, are the same after loading), ``size``, ``added``, the rows whose next
observation is kept aside (``aside_rows``), those observations (``asides``) and each lane's
pending next observation (``pending``); a field the buffer declares beside a transition's
(``ReplayBuffer(fields=...)``) is one more row entry under its name. The previous release's
format held full-capacity ``(lanes, capacity, ...)`` arrays with ``next_obs`` stored twice;
it is read through :func:`from_old_format`.

States come from files: every check here names the field that fails. Imports numpy, torch,
:mod:`rltrain.data.fields`, :mod:`rltrain.data.frames` and :mod:`rltrain.data.asides`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rltrain.data.asides import differing
from rltrain.data.fields import TRANSITION_FIELDS, Field
from rltrain.data.frames import stacks_of_state


def _numpy(x: Any) -> np.ndarray:
    return x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def row_fields(frame_stack: int) -> tuple[str, ...]:
    """The per-transition rows of a state: whole observations, or (``frame_stack > 1``)
    each transition's newest frame and its ``back`` count."""
    return (TRANSITION_FIELDS if frame_stack == 1 else
            ("frames", "back", *TRANSITION_FIELDS[1:]))


def state_of(rows: Mapping[str, np.ndarray], lanes: Mapping[str, np.ndarray], *,
             frame_stack: int, lane_capacity: int, ptr: np.ndarray, size: np.ndarray,
             added: np.ndarray, asides: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """A state from its parts (each a fresh array), in the format's order, as tensors."""
    state = {**rows, **lanes, "frame_stack": np.array(frame_stack),
             "lane_capacity": np.array(lane_capacity), "ptr": ptr.copy(), "size": size.copy(),
             "added": added.copy(), **asides}
    return {k: torch.from_numpy(v) for k, v in state.items()}


def frame_stack_of(state: Mapping[str, Any]) -> int:
    """The ``frame_stack`` of the buffer that a state comes from (1 where the state has no
    such field: the formats before it, whose rows are whole observations)."""
    if "frame_stack" not in state:
        return 1
    k = _numpy(state["frame_stack"])
    if k.shape != () or k.dtype.kind not in "iu" or not 1 <= int(k) <= 255:
        raise ValueError(f"buffer frame_stack: {k!r} is not an integer in 1..255")
    return int(k)


def checked_state(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A state in today's format as numpy arrays, checked for consistency on its own (each
    lane's counters, the row counts); ValueError naming the field otherwise."""
    k = frame_stack_of(state)
    rows_fields = row_fields(k)
    names = ("lane_capacity", "ptr", "size", *rows_fields, "aside_rows", "asides", "pending",
             *(("history",) if k > 1 else ()))
    for name in names:
        if name not in state:
            raise ValueError(f"buffer state has no {name!r}")
    s = {name: _numpy(state[name]) for name in names}
    for name in names[1:]:
        if s[name].ndim < 1:
            raise ValueError(f"buffer {name}: a scalar, expected an array")
    _check_counters(s)
    n = int(s["size"].sum())
    for name in rows_fields:
        if len(s[name]) != n:
            raise ValueError(f"buffer {name}: shape {s[name].shape}, expected {n} rows "
                             "(the sum of size)")
    if k > 1:
        _check_frames(s, k)
    s["frame_stack"] = np.array(k)
    _check_asides(s)
    return s


def _check_counters(s: dict[str, np.ndarray]) -> None:
    """``lane_capacity``, and per lane ``ptr`` and ``size``."""
    stored_cap = s["lane_capacity"]
    if stored_cap.shape != () or stored_cap.dtype.kind not in "iu" or int(stored_cap) <= 0:
        raise ValueError(f"buffer lane_capacity: {stored_cap!r} is not a positive integer")
    cap = int(stored_cap)
    ptr, size = s["ptr"], s["size"]
    for name, a in (("ptr", ptr), ("size", size)):
        if a.ndim != 1 or a.dtype.kind not in "iu" or len(a) != len(s["pending"]):
            raise ValueError(f"buffer {name}: shape {a.shape} and dtype {a.dtype}, expected "
                             f"one integer per lane ({len(s['pending'])} lanes, as pending)")
    if ((size < 0) | (size > cap)).any():
        raise ValueError(f"buffer size: {size.tolist()} outside 0..{cap} (lane_capacity)")
    if ((ptr < 0) | (ptr > cap) | ((size < cap) & (ptr != size))).any():
        raise ValueError(f"buffer ptr: {ptr.tolist()} does not fit size {size.tolist()} "
                         f"(a lane that is not full has ptr == size)")


def _check_frames(s: dict[str, np.ndarray], k: int) -> None:
    """A frame-stack state's ``back`` counts and ``history``."""
    back, history, size = s["back"], s["history"], s["size"]
    if back.ndim != 1 or back.dtype.kind not in "iu" or (
            int(size.sum()) and (back.min() < 0 or back.max() > k - 1)):
        raise ValueError(f"buffer back: expected one integer in 0..{k - 1} per row "
                         f"(frame_stack={k})")
    if history.shape[:2] != (len(size), k - 1) or history.shape[2:] != s["frames"].shape[1:]:
        raise ValueError(f"buffer history: shape {history.shape}, expected "
                         f"{(len(size), k - 1, *s['frames'].shape[1:])} (lanes, "
                         "frame_stack - 1, a frame)")


def _check_asides(s: dict[str, np.ndarray]) -> None:
    """``aside_rows`` (none a lane's newest) and one aside per entry."""
    rows, n = s["aside_rows"], int(s["size"].sum())
    ends = np.cumsum(s["size"]) - 1
    if rows.ndim != 1 or (len(rows) and (rows.dtype.kind not in "iu" or rows.min() < 0
                                         or rows.max() >= n or (np.diff(rows) <= 0).any()
                                         or np.isin(rows, ends).any())):
        raise ValueError("buffer aside_rows: expected increasing rows below the sum of size, "
                         "none a lane's newest (its next observation is pending)")
    if len(s["asides"]) != len(rows):
        raise ValueError(f"buffer asides: shape {s['asides'].shape}, expected {len(rows)} rows "
                         "(one per aside_rows entry)")


def from_old_format(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The previous release's state (full-capacity ``(lanes, capacity, ...)`` arrays with
    ``next_obs`` stored twice) in today's layout: each next observation that is not its
    successor's observation (compared bit for bit) becomes an aside, each lane's newest
    one its pending next observation."""
    names = ("obs", "next_obs", "act", "rew", "terminated", "truncated", "ptr", "size")
    for name in names:
        if name not in state:
            raise ValueError(f"buffer state has no {name!r}")
    old = {name: _numpy(state[name]) for name in names}
    if old["rew"].ndim != 2:
        raise ValueError(f"buffer rew: shape {old['rew'].shape}, expected (lanes, capacity)")
    num_lanes, cap = old["rew"].shape
    for name in ("obs", "next_obs", "act", "terminated", "truncated"):
        if old[name].shape[:2] != (num_lanes, cap):
            raise ValueError(f"buffer {name}: shape {old[name].shape}, expected "
                             f"({num_lanes}, {cap}, ...) as rew")
    if old["next_obs"].shape != old["obs"].shape:
        raise ValueError(f"buffer next_obs: shape {old['next_obs'].shape}, expected "
                         f"{old['obs'].shape} as obs")
    ptr, size = old["ptr"].astype(np.int64), old["size"].astype(np.int64)
    for name, a in (("ptr", ptr), ("size", size)):
        if a.shape != (num_lanes,):
            raise ValueError(f"buffer {name}: shape {a.shape}, expected ({num_lanes},)")
    if ((size < 0) | (size > cap)).any() or ((ptr < 0) | (ptr > cap)).any():
        raise ValueError(f"buffer size or ptr outside 0..{cap}: size {size.tolist()}, "
                         f"ptr {ptr.tolist()}")
    lanes = np.repeat(np.arange(num_lanes), size)
    k = np.arange(len(lanes)) - np.repeat(np.cumsum(size) - size, size)
    oldest = np.where(size == cap, ptr % cap, 0)
    rows = lanes * cap + (oldest[lanes] + k) % cap
    flat = {name: old[name].reshape(num_lanes * cap, *old[name].shape[2:])[rows]
            for name in ("obs", "next_obs", "act", "rew", "terminated", "truncated")}
    nxt = flat["next_obs"]
    ends = np.cumsum(size)[size > 0] - 1
    aside = np.zeros(len(rows), dtype=bool)
    aside[differing(nxt[:-1], flat["obs"][1:], int(np.prod(old["obs"].shape[2:])))] = True
    aside[ends] = False  # a lane's newest: pending, not an aside
    pending = np.zeros((num_lanes, *old["obs"].shape[2:]), dtype=old["obs"].dtype)
    pending[size > 0] = nxt[ends]
    aside_rows = np.flatnonzero(aside)
    return {"frame_stack": np.array(1), "lane_capacity": np.array(cap), "ptr": ptr, "size": size,
            **{name: flat[name] for name in TRANSITION_FIELDS},
            "aside_rows": aside_rows, "asides": nxt[aside_rows], "pending": pending}


def fitted_state(state: Mapping[str, Any], *, num_lanes: int, lane_capacity: int,
                 frame_stack: int, obs_shape: tuple[int, ...], frame_shape: tuple[int, ...],
                 act_shape: tuple[int, ...], declared: tuple[Field, ...] = ()
                 ) -> dict[str, np.ndarray]:
    """A state (today's format or the previous release's), checked to fit a buffer of this
    layout, in today's format with ``added`` (states written before the counter existed:
    what is stored is what was written).

    :raises ValueError: a field that is missing or does not fit, named (a state of a buffer
        with another ``frame_stack``: that field).
    """
    k, stored_k = frame_stack, frame_stack_of(state)
    if stored_k != k:
        held = (f"{stored_k}-frame stacks frame by frame" if stored_k > 1 else
                "whole observations")
        raise ValueError(f"buffer frame_stack: the state holds {held} (frame_stack="
                         f"{stored_k}), this buffer has frame_stack={k}; load it into a "
                         f"buffer with frame_stack={stored_k}")
    if "next_obs" in state:
        _check_old_shapes(state, (num_lanes, lane_capacity), obs_shape, act_shape)
        s = from_old_format(state)
    else:
        s = checked_state(state)
    for name, want in (("lane_capacity", lane_capacity), ("size", num_lanes)):
        got = int(s[name]) if name == "lane_capacity" else len(s[name])
        if got != want:
            what = "lane_capacity" if name == "lane_capacity" else "lanes"
            raise ValueError(f"buffer {name}: stored {got} {what}, expected {want}")
    for name, tail in (("obs" if k == 1 else "frames", frame_shape), ("act", act_shape),
                       ("asides", obs_shape), ("pending", obs_shape)):
        if s[name].shape[1:] != tail:
            raise ValueError(f"buffer {name}: stored shape {s[name].shape}, expected "
                             f"(n, {', '.join(map(str, tail))})")
    if k > 1 and s["history"].shape[2:] != frame_shape:
        raise ValueError(f"buffer history: stored shape {s['history'].shape}, expected "
                         f"{(num_lanes, k - 1, *frame_shape)}")
    added = _numpy(state["added"]) if "added" in state else s["size"]
    if added.shape != (num_lanes,) or (added < s["size"]).any():
        raise ValueError(f"buffer added: {added.tolist()} does not fit size "
                         f"{s['size'].tolist()} (one count per lane, at least its size)")
    s["added"] = added
    s.update(_declared_rows(state, declared, int(s["size"].sum())))
    return s


def _declared_rows(state: Mapping[str, Any], declared: tuple[Field, ...], n: int
                   ) -> dict[str, np.ndarray]:
    """The rows of each declared field in a state of ``n`` transitions, checked."""
    out = {}
    for f in declared:
        if f.name not in state:
            raise ValueError(f"buffer state has no {f.name!r}, a field this buffer stores "
                             "beside each transition: the state comes from a run whose "
                             "algorithm did not declare it")
        rows = _numpy(state[f.name])
        if rows.shape != (n, *f.shape) or not np.can_cast(rows.dtype, f.dtype, "same_kind"):
            raise ValueError(f"buffer {f.name}: stored shape {rows.shape} and dtype "
                             f"{rows.dtype}, expected {(n, *f.shape)} of {f.dtype}")
        out[f.name] = rows
    return out


def _check_old_shapes(state: Mapping[str, Any], slots: tuple[int, int],
                      obs_shape: tuple[int, ...], act_shape: tuple[int, ...]) -> None:
    """The previous release's full-capacity arrays have this buffer's ``slots`` shape."""
    obs_shape, act_shape = tuple(map(int, obs_shape)), tuple(map(int, act_shape))
    expected = {"obs": (*slots, *obs_shape), "next_obs": (*slots, *obs_shape),
                "act": (*slots, *act_shape), "rew": slots, "terminated": slots,
                "truncated": slots, "ptr": slots[:1], "size": slots[:1]}
    for name, shape in expected.items():
        if name not in state:
            raise ValueError(f"buffer state has no {name!r}")
        if tuple(state[name].shape) != shape:
            raise ValueError(f"buffer {name}: stored shape {tuple(state[name].shape)}, "
                             f"expected {shape}")


def stored_transitions(state: Mapping[str, Any], declared: tuple[Field, ...] = ()
                       ) -> dict[str, np.ndarray]:
    """Every transition of a buffer's state (today's format, frame stacks included, or the
    previous release's), lanes one after another, each in time order, with its next
    observation: ``obs``, ``act``, ``rew``, ``next_obs``, ``terminated``, ``truncated`` (one
    row per transition; frame stacks rebuilt), the ``declared`` fields the buffer kept beside
    them (in their dtypes), and ``size`` (how many rows each lane has).

    :raises ValueError: a damaged state, or one without a declared field, naming the field.
    """
    s = from_old_format(state) if "next_obs" in state else checked_state(state)
    obs = s["obs"] if int(s["frame_stack"]) == 1 else stacks_of_state(s)
    size = s["size"]
    next_obs = np.empty_like(obs)
    next_obs[:-1] = obs[1:]
    filled = size > 0
    next_obs[np.cumsum(size)[filled] - 1] = s["pending"][filled]
    next_obs[s["aside_rows"]] = s["asides"]
    kept = _declared_rows(state, declared, int(size.sum()))
    rows = {f.name: kept[f.name].astype(f.dtype, copy=False) for f in declared}
    return {"obs": obs, "act": s["act"], "rew": s["rew"], "next_obs": next_obs,
            "terminated": s["terminated"], "truncated": s["truncated"], **rows, "size": size}
