"""An Atari replay buffer is sized, and refused when too large, by what one transition really
costs: one (84, 84) frame of a frame-stacked (4, 84, 84) uint8 observation, not the whole
stack (scripts/bench_memory.py --atari measures the resident memory behind these figures)."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from conftest import refusal
from rltrain.data.storage import ReplayBuffer
from rltrain.process.system import available_memory, size_text

ATARI_OBS = (4, 84, 84)
#: far more than any machine holds: refused at build time, before an env step
HUGE = 10**9


def per_transition(frame_stack: int) -> int:
    """What rltrain counts per Atari transition: uint8 stacks, Discrete actions as int64."""
    return ReplayBuffer.bytes_per_transition(ATARI_OBS, np.uint8, (), np.int64,
                                             frame_stack=frame_stack)


def test_a_frame_stacked_transition_costs_about_a_quarter_of_a_whole_one():
    stacked, whole = per_transition(4), per_transition(1)
    assert stacked == pytest.approx(whole / 4, rel=0.01)
    assert 7_000 < stacked < 7_100  # one 7,056-byte frame and the transition's small fields


@pytest.mark.parametrize("frame_stack", [4, 1])
def test_bytes_per_transition_is_what_the_buffer_allocates(frame_stack):
    """The figure the refusal multiplies is the arrays' own size (np.zeros: nothing mapped)."""
    capacity = 1000
    buf = ReplayBuffer(1, capacity, ATARI_OBS, (), np.int64, obs_dtype=np.uint8,
                       frame_stack=frame_stack)
    obs = buf.codecs["obs"]
    rows = ([obs.frames, obs.index] if frame_stack > 1 else [obs.array]) + [
        buf.codecs[name].array for name in ("act", "rew", "terminated", "truncated")] + [
        buf.asides.ref]
    ring = (frame_stack - 1) * 84 * 84  # a lane's frames before its oldest transition's
    assert sum(a.nbytes for a in rows) == capacity * per_transition(frame_stack) + ring
    assert buf.nominal_bytes() == capacity * per_transition(frame_stack) + ring


@pytest.mark.skipif(available_memory() is None, reason="the memory available is not known here")
@pytest.mark.parametrize(("overrides", "frame_stack"), [([], 4),
                                                        (["buffer.frame_stack=1"], 1)])
def test_an_atari_buffer_larger_than_memory_is_refused_by_its_real_size(tmp_path, overrides,
                                                                        frame_stack):
    pytest.importorskip("ale_py", reason="needs the atari extra: pip install -e '.[atari]'")
    run_dir = tmp_path / "run"
    message = refusal(run_dir, "algo=dqn", "env=atari", f"buffer.size={HUGE}", *overrides)
    assert "\n" not in message and "Traceback" not in message, message[-2000:]
    per = per_transition(frame_stack)
    assert message.startswith(f"buffer.size needs {size_text(HUGE * per)} of memory for "
                              f"{HUGE:,} transitions of ALE/Pong-v5 ({per:,} bytes each), "
                              "but "), message
    available = re.fullmatch(r".*, but (\d+\.\d) ([GM])B is available; lower buffer\.size",
                             message)
    assert available, message
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")  # what is available
    assert 0 < float(available[1]) * (1e9 if available[2] == "G" else 1e6) <= total * 1.01
    assert not any(run_dir.iterdir())  # refused before anything of the run was written
