"""Frame chaining: how a file holds a dataset of frame-stacked images, each frame once.

Frame-stacked image observations (Atari's four frames) are written once per frame, with the
frames of each observation by index (:func:`chain_frames`), and rebuilt when read, checking
the indices a hostile file could hold (:func:`unchain_frames`). A file then holds
:data:`FRAME_ARRAYS` in place of obs and next_obs.

Imports: numpy and :mod:`rltrain.config.schemas`; no module of this package.
"""

from __future__ import annotations

import numpy as np

from rltrain.config.schemas import ConfigError

#: what a file holds instead of obs and next_obs when they are frame stacks (see
#: :func:`chain_frames`): each frame once, and the frames of every observation by index
FRAME_ARRAYS = ("frames", "obs_frames", "next_obs_frames")


def chain_frames(obs: np.ndarray, next_obs: np.ndarray, dones: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(frames, obs_frames, next_obs_frames)``: each frame of a dataset of frame stacks once,
    and the indices of the k frames of every observation (``frames[obs_frames] == obs``), or
    None where the observations are not such stacks (not uint8 images of ``(k >= 2, ...)``,
    or not chained).

    Chained means what a frame-stacking wrapper gives: within an episode, each next
    observation is the following observation, and its frames are the observation's shifted
    by one, with one new frame last. An episode of L transitions then takes k + L frames, not
    2 k L; the result is checked to rebuild every observation exactly, or not used.
    """
    if obs.dtype != np.uint8 or obs.ndim < 4 or obs.shape[1] < 2 or len(obs) == 0:
        return None
    n, k = obs.shape[:2]
    starts = np.flatnonzero(np.concatenate(([True], dones[:-1])))
    episode = np.cumsum(np.isin(np.arange(n), starts)) - 1
    lengths = np.diff(np.append(starts, n))
    base = np.concatenate(([0], np.cumsum(lengths + k)[:-1]))
    obs_frames = (base[episode] + np.arange(n) - starts[episode])[:, None] + np.arange(k)
    next_obs_frames = obs_frames + 1
    frames = np.empty((int((lengths + k).sum()), *obs.shape[2:]), np.uint8)
    frames[obs_frames[starts]] = obs[starts]
    frames[next_obs_frames[:, -1]] = next_obs[:, -1]
    chunk = max(1, (64 << 20) // max(1, obs[0].nbytes))  # compare 64 MiB at a time
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        if not (np.array_equal(frames[obs_frames[lo:hi]], obs[lo:hi])
                and np.array_equal(frames[next_obs_frames[lo:hi]], next_obs[lo:hi])):
            return None
    return frames, obs_frames, next_obs_frames


def unchain_frames(arrays: dict[str, np.ndarray], spec: str) -> None:
    """Rebuild obs and next_obs in ``arrays`` from :data:`FRAME_ARRAYS` (in place), checking
    what a hostile file could hold: integer indices of one shape, each naming a frame.

    :raises ConfigError: indices that are not integers, of unequal shapes or outside the
        frames, or frames that are not uint8.
    """
    frames, obs_frames, next_obs_frames = (arrays.pop(name) for name in FRAME_ARRAYS)

    def bad(problem: str) -> ConfigError:
        return ConfigError(f"dataset {spec} {problem}; recollect it with rltrain-collect")

    if frames.dtype != np.uint8 or frames.ndim < 2:
        raise bad(f"has frames of shape {frames.shape} and dtype {frames.dtype}, not uint8 "
                  "images")
    for name, index in (("obs_frames", obs_frames), ("next_obs_frames", next_obs_frames)):
        if index.dtype.kind not in "iu" or index.ndim != 2 or index.shape != obs_frames.shape:
            raise bad(f"has {name} of shape {index.shape} and dtype {index.dtype}; it needs "
                      "the integer frame indices of each observation, one row per transition")
        outside = (index < 0) | (index >= len(frames))
        if outside.any():
            raise bad(f"has {name} naming frame {int(index[outside][0])}, but it holds "
                      f"{len(frames)} frames")
    arrays["obs"], arrays["next_obs"] = frames[obs_frames], frames[next_obs_frames]

