"""ReplayBuffer(frame_stack=4) stores one frame per transition and rebuilds each stack: every
read gives back, bit for bit, what a buffer of whole observations (frame_stack=1, the
reference) gives for the same writes. The writes come from rltrain's collector stepping
gymnasium's FrameStackObservation over an env of random frames (episodes that end
terminated or truncated), in both autoreset modes, or are built step by step with masked
steps; checkpoint states hold frames, not stacks; observations that are not such frame
stacks are refused."""

from __future__ import annotations

import io

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import FrameStackObservation

from rltrain.data.collector import Collector, random_policy
from rltrain.data.reading import read
from rltrain.data.samplers.uniform import UniformSampler
from rltrain.data.state_format import stored_transitions
from rltrain.data.storage import ReplayBuffer
from rltrain.data.transforms.nstep import NStepReturns

K, FRAME = 4, (8, 8)
FIELDS = ("obs", "act", "rew", "next_obs", "terminated", "truncated")


class RandomFrames(gym.Env):
    """Random uint8 frames (8, 8 unless ``shape``); episodes of 1 to ``max_len`` steps,
    ending terminated or truncated at random. ``pool``: frames drawn from that many fixed
    ones, so that equal frames (a still screen) are common."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, max_len: int = 12, pool: int | None = None,
                 shape: tuple[int, ...] = FRAME) -> None:
        self.max_len, self.pool, self._left = max_len, pool, 0
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._left = int(self.np_random.integers(1, self.max_len + 1))
        return self._frame(), {}

    def step(self, action):
        self._left -= 1
        end = self._left <= 0
        terminated = end and bool(self.np_random.integers(2))
        return self._frame(), 1.0, terminated, end and not terminated, {}

    def _frame(self) -> np.ndarray:
        shape = self.observation_space.shape
        if self.pool is None:
            return self.np_random.integers(0, 256, shape, dtype=np.uint8)
        return np.full(shape, self.np_random.integers(self.pool), dtype=np.uint8)


def stacked(padding: str = "reset", **kwargs) -> gym.Env:
    return FrameStackObservation(RandomFrames(**kwargs), K, padding_type=padding)


class Both:
    """What the collector writes to, passed on to every buffer."""

    def __init__(self, *buffers: ReplayBuffer) -> None:
        self.buffers = buffers

    def extend(self, *values, **declared) -> None:
        for buffer in self.buffers:
            buffer.extend(*values, **declared)


def pair(lanes: int, capacity: int, circular: bool = True, frame: tuple[int, ...] = FRAME
         ) -> tuple[ReplayBuffer, ReplayBuffer]:
    """The reference and the frame-stack buffer."""
    return tuple(ReplayBuffer(lanes, capacity, (K, *frame), (), np.int64, obs_dtype=np.uint8,
                              circular=circular, frame_stack=k) for k in (1, K))


def collector(both: Both, lanes: int, mode: AutoresetMode, seed: int, **env) -> Collector:
    envs = gym.vector.SyncVectorEnv([lambda: stacked(**env)] * lanes, autoreset_mode=mode)
    c = Collector(envs, both)  # duck-typed: the collector only calls extend()
    c.reset(seed=seed)
    return c


def same(a: np.ndarray, b: np.ndarray, what: str) -> None:
    """Equal bit for bit."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, what
    assert np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)), what


def assert_same(ref: ReplayBuffer, buf: ReplayBuffer) -> None:
    """Every read of ``buf`` equals the reference's, bit for bit."""
    same(ref.ptr, buf.ptr, "ptr")
    same(ref.size, buf.size, "size")
    lanes = np.repeat(np.arange(ref.num_lanes), ref.size)
    age = np.arange(len(lanes)) - np.repeat(np.cumsum(ref.size) - ref.size, ref.size)
    positions = (ref.oldest()[lanes] + age) % ref.lane_capacity
    for name in ("obs_at", "next_obs_at"):
        same(getattr(ref, name)(lanes, positions), getattr(buf, name)(lanes, positions), name)
    for i, (x, y) in enumerate(zip(ref.transitions(lanes, positions),
                                   buf.transitions(lanes, positions), strict=True)):
        same(x, y, f"transitions()[{i}]")
    if len(ref):
        for n in (1, 3):  # n = 3: window, obs_at_flat, next_obs_at_flat
            draw = UniformSampler(n).sample(ref, 64)
            nstep = [NStepReturns(n, 0.9)]
            x, y = read(ref, *draw, nstep), read(buf, *draw, nstep)
            assert x.weights is None and y.weights is None  # uniform draws carry none
            assert x.fields == y.fields == {}  # nothing declared beside a transition's
            for name in x.__dataclass_fields__:
                if name not in ("weights", "fields"):
                    same(getattr(x, name), getattr(y, name), f"{n}-step batch {name}")
    x, y = stored_transitions(ref.state_dict()), stored_transitions(buf.state_dict())
    for name in (*FIELDS, "size"):
        same(x[name], y[name], f"stored_transitions {name}")
    if not ref.circular:
        x, y = ref.rollout(), buf.rollout()
        same(x.valid, y.valid, "rollout valid")
        for name in FIELDS:
            same(getattr(x, name)[x.valid], getattr(y, name)[y.valid], f"rollout {name}")


def reloaded(buf: ReplayBuffer) -> ReplayBuffer:
    """A new buffer loaded from ``buf``'s state, through a weights-only checkpoint."""
    data = io.BytesIO()
    torch.save(buf.state_dict(), data)
    data.seek(0)
    other = ReplayBuffer(buf.num_lanes, buf.lane_capacity, buf.obs_shape, (), np.int64,
                         obs_dtype=np.uint8, circular=buf.circular, frame_stack=K)
    other.load_state_dict(torch.load(data, weights_only=True))
    return other


# --------------------------------------------------------------------------- collected
@pytest.mark.parametrize("pool", [None, 2], ids=["random", "still"])
@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP],
                         ids=["same-step", "next-step"])
@pytest.mark.parametrize(("lanes", "capacity"), [(3, 40), (2, 2), (1, 5)])
def test_collected_stacks_read_back_exactly(lanes, capacity, mode, pool):
    """Across wrap-around (capacity 2 and 5: smaller than an episode, 2 smaller than a
    stack), the next-step mode's masked reset steps, blocks of 64 steps and shorter ones,
    and a state round trip after which both buffers go on taking the same writes."""
    ref, buf = pair(lanes, capacity)
    both = Both(ref, buf)
    c = collector(both, lanes, mode, seed=capacity, pool=pool)
    policy = random_policy(c.envs, 0)
    for n in (5, 64 * lanes, 150, 1, 70 * lanes):
        c.collect(policy, n_steps=n)
        assert_same(ref, buf)
    assert len(ref) == lanes * capacity
    both.buffers = (ref, reloaded(buf))
    assert_same(ref, both.buffers[1])
    c.collect(policy, n_steps=100)
    assert_same(ref, both.buffers[1])


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP],
                         ids=["same-step", "next-step"])
def test_rollouts_across_clears(mode):
    """Append-only buffers cleared between rollouts while episodes go on: the first
    observation of a rollout continues frames written before the clear."""
    ref, buf = pair(3, 60, circular=False)
    c = collector(Both(ref, buf), 3, mode, seed=1, max_len=30)
    policy = random_policy(c.envs, 1)
    for _ in range(4):
        c.collect(policy, n_steps=3 * 50)
        assert_same(ref, buf)
        assert_same(ref, reloaded(buf))
        ref.clear()
        buf.clear()


# --------------------------------------------------------------------------- by hand
def lane_stream(seed: int, steps: int, **env) -> list[tuple]:
    """One env's transitions as the collector writes them in same-step mode: (obs, act,
    rew, next_obs, terminated, truncated), next_obs the final observation at an end."""
    e = stacked(**env)
    obs, _ = e.reset(seed=seed)
    out = []
    for t in range(steps):
        nxt, rew, term, trunc, _ = e.step(t % 2)
        out.append((obs, t % 2, rew, nxt, term, trunc))
        obs = e.reset()[0] if term or trunc else nxt
    return out


def masked_blocks(rng: np.random.Generator, lanes: int, steps: int, p_valid: float,
                  length: int | None = None, shape: tuple[int, ...] = FRAME, **env):
    """Blocks of steps (``length`` each, or 1 to 19 at random) where each lane's valid steps
    take its stream's transitions in order and its masked steps hold garbage (no frame
    stack at all)."""
    streams = [iter(lane_stream(lane, steps, shape=shape, **env)) for lane in range(lanes)]
    t = 0
    while t < steps:
        n = length or int(rng.integers(1, 20))
        valid = rng.random((n, lanes)) < p_valid
        obs = rng.integers(0, 256, (n, lanes, K, *shape), dtype=np.uint8)
        nxt = rng.integers(0, 256, (n, lanes, K, *shape), dtype=np.uint8)
        act = np.zeros((n, lanes), np.int64)
        rew = np.zeros((n, lanes), np.float32)
        term = rng.random((n, lanes)) < 0.5
        trunc = rng.random((n, lanes)) < 0.5
        for s, lane in zip(*np.nonzero(valid), strict=True):
            obs[s, lane], act[s, lane], rew[s, lane], nxt[s, lane], term[s, lane], \
                trunc[s, lane] = next(streams[lane])
        yield obs, act, rew, nxt, term, trunc, valid
        t += n


@pytest.mark.parametrize("capacity", [3, 16, 400])
def test_masked_steps_and_single_adds(capacity):
    """Masked steps (holding garbage) leave a lane as it was; blocks leave the buffer as
    single-step adds do."""
    rng = np.random.default_rng(capacity)
    ref, buf = pair(3, capacity)
    _, one = pair(3, capacity)
    for block in masked_blocks(rng, 3, 150, 0.6):
        ref.extend(*block)
        buf.extend(*block)
        for step in zip(*block, strict=True):
            one.add(*step)
        assert_same(ref, buf)
    for key, value in buf.state_dict().items():
        assert torch.equal(value, one.state_dict()[key]), key
    assert_same(ref, reloaded(buf))


def test_atari_sized_blocks_written_in_parts():
    """(4, 84, 84) stacks in blocks too large to compare in one piece, and larger than the
    parts extend() writes at once, with and without masked steps."""
    frame = (84, 84)
    streams = [lane_stream(lane, 300, shape=frame, max_len=60) for lane in range(2)]
    steps = [[np.stack(f) for f in zip(*(s[t] for s in streams), strict=True)]
             for t in range(300)]
    block = [np.stack(f) for f in zip(*steps, strict=True)]
    ref, buf = pair(2, 200, frame=frame)
    for part in (slice(0, 190), slice(190, 300)):
        for b in (ref, buf):
            b.extend(*(f[part] for f in block))
        assert_same(ref, buf)
    ref, buf = pair(2, 200, frame=frame)
    rng = np.random.default_rng(0)
    for block in masked_blocks(rng, 2, 300, 0.7, length=300, shape=frame, max_len=60):
        for b in (ref, buf):
            b.extend(*block)
    assert_same(ref, buf)


# --------------------------------------------------------------------------- state, size
def test_state_holds_frames_and_refuses_another_frame_stack():
    """A checkpoint of a frame-stack buffer costs about a quarter of the reference's (the
    stacks kept aside at episode ends are whole in both); loading it into a buffer with
    another frame_stack, or the reverse, is refused naming the field."""
    ref, buf = pair(2, 30)
    c = collector(Both(ref, buf), 2, AutoresetMode.SAME_STEP, seed=3, max_len=100)
    c.collect(random_policy(c.envs, 3), n_steps=2 * 40)
    state, ref_state = buf.state_dict(), ref.state_dict()
    assert "obs" not in state and state["frames"].shape == (len(buf), *FRAME)
    assert state["history"].shape == (2, K - 1, *FRAME)
    assert int(state["frame_stack"]) == K and int(ref_state["frame_stack"]) == 1
    same(state["asides"].numpy(), ref_state["asides"].numpy(), "asides")

    def nbytes(s):
        return sum(v.numel() * v.element_size() for v in s.values())

    assert nbytes(state) < 0.35 * nbytes(ref_state)
    for loader, given in ((ref, state), (buf, ref_state)):
        with pytest.raises(ValueError, match="buffer frame_stack"):
            loader.load_state_dict(given)
    old = {name: torch.zeros((2, 30, K, *FRAME), dtype=torch.uint8)
           for name in ("obs", "next_obs")}  # the previous release's format: whole stacks
    old.update(act=torch.zeros(2, 30, dtype=torch.int64), rew=torch.zeros(2, 30),
               terminated=torch.zeros(2, 30, dtype=torch.bool),
               truncated=torch.zeros(2, 30, dtype=torch.bool),
               ptr=torch.zeros(2, dtype=torch.int64), size=torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="buffer frame_stack"):
        buf.load_state_dict(old)
    ref.load_state_dict(old)
    with pytest.raises(ValueError, match="buffer back"):
        buf.load_state_dict(dict(state, back=state["back"] + K))


def test_sizes_count_one_frame_per_transition():
    per = ReplayBuffer.bytes_per_transition((K, 84, 84), np.uint8, (), np.int64, frame_stack=K)
    whole = ReplayBuffer.bytes_per_transition((K, 84, 84), np.uint8, (), np.int64)
    assert per == 84 * 84 + 4 * K + 8 + 4 + 1 + 1 + 4  # frame, its slots, act, rew, flags, aside
    assert whole - per == (K - 1) * 84 * 84 - 4 * K
    ref, buf = pair(2, 100)
    assert buf.nominal_bytes() == 200 * ReplayBuffer.bytes_per_transition(
        (K, *FRAME), np.uint8, (), np.int64, frame_stack=K) + 2 * (K - 1) * 64
    c = collector(Both(ref, buf), 2, AutoresetMode.SAME_STEP, seed=4, max_len=1000)
    c.collect(random_policy(c.envs, 4), n_steps=2 * 50)
    held = buf.resident_bytes() - 100 * (per - 84 * 84 + 64)
    assert 0 < held < 2 * K * 64 + 1000  # pending stacks, per-lane counters
    assert buf.resident_bytes() < 0.4 * ref.resident_bytes()  # (8, 8) frames: 64 bytes
    atari = pair(4, 50_000, frame=(84, 84))  # allocated lazily: no memory used
    assert atari[1].nominal_bytes() < 0.26 * atari[0].nominal_bytes()


# --------------------------------------------------------------------------- refused
def test_observations_that_are_not_frame_stacks_are_refused():
    with pytest.raises(ValueError, match=r"frame_stack=4 .*shape \(3, 8, 8\)"):
        ReplayBuffer(2, 10, (3, *FRAME), (), np.int64, frame_stack=K)
    _, buf = pair(2, 10)
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, (5, 2, K, *FRAME), dtype=np.uint8)
    zeros = np.zeros((5, 2), np.int64)
    flags = np.zeros((5, 2), bool)
    for valid in (None, np.array([[True, False]] * 5)):
        with pytest.raises(ValueError, match=r"env 0 at step 0 .*buffer\.frame_stack=1"):
            buf.extend(noise, zeros, zeros, noise, flags, flags, valid)
        assert len(buf) == 0 and (buf.ptr == 0).all()


def test_zero_padding_is_refused_before_anything_is_written():
    """FrameStackObservation(padding_type="zero") starts an episode with zero frames, not
    its first frame: the first episode start after data refuses the write and leaves the
    buffer as it was."""
    _, buf = pair(1, 50)
    stream = lane_stream(5, 200, padding="zero", max_len=6)
    with pytest.raises(ValueError, match="padding") as raised:
        for obs, *rest in stream:
            before = buf.state_dict()
            buf.add(obs[None], *(np.asarray(f)[None] for f in rest))
    assert "buffer.frame_stack=1" in str(raised.value)
    for key, value in buf.state_dict().items():
        assert torch.equal(value, before[key]), key
