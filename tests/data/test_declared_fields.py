"""Fields an algorithm declares beside a transition's (``AlgoSpec.stored``): a behaviour
log-prob here, as V-trace would store it. The buffer keeps them per env stream in every write
pattern, its state carries them exactly, the read path and rollouts hand them out by name,
the collector takes them from what the policy returns, and every mismatch is refused with
nothing written."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rltrain.common.types import Acted
from rltrain.data.collector import Collector
from rltrain.data.fields import Field
from rltrain.data.reading import read
from rltrain.data.samplers.uniform import UniformSampler
from rltrain.data.storage import ReplayBuffer
from rltrain.data.transforms.nstep import NStepReturns

LOGP = Field("logp", (), np.dtype(np.float32))
MEMO = Field("memo", (3,), np.dtype(np.int16))


def buffer(lanes: int = 3, capacity: int = 16, *, circular: bool = True, frame_stack: int = 1,
           fields: tuple[Field, ...] = (LOGP, MEMO)) -> ReplayBuffer:
    shape = (frame_stack, 4) if frame_stack > 1 else (2,)
    dtype = np.uint8 if frame_stack > 1 else np.float32
    return ReplayBuffer(lanes, capacity, shape, (), np.int64, obs_dtype=dtype,
                        circular=circular, frame_stack=frame_stack, fields=fields)


def block(buf: ReplayBuffer, t0: int, steps: int) -> dict[str, np.ndarray]:
    """``steps`` steps from step ``t0``: each value names its step and lane (the declared
    ones too), no episode ends, observations a chain (next_obs is the successor)."""
    lanes = buf.num_lanes
    t = np.arange(t0, t0 + steps)[:, None] + np.zeros((1, lanes), np.int64)
    lane = np.arange(lanes)[None, :] + np.zeros((steps, 1), np.int64)
    if buf.frame_stack > 1:
        k = buf.frame_stack
        # frames of one episode from step 0, the first padded by repeating it
        frame = lambda s: (np.maximum(s[..., None, None] - np.arange(k - 1, -1, -1)[:, None],  # noqa: E731
                                      0) + 50 * lane[..., None, None]) % 251 + np.zeros(4, np.int64)
        obs, nxt = frame(t).astype(np.uint8), frame(t + 1).astype(np.uint8)
    else:
        obs = np.stack([t, lane], -1).astype(np.float32)
        nxt = np.stack([t + 1, lane], -1).astype(np.float32)
    return {"obs": obs, "act": (t * 10 + lane) % 7, "rew": t.astype(np.float32),
            "next_obs": nxt, "terminated": np.zeros_like(t, bool),
            "truncated": np.zeros_like(t, bool),
            "logp": (-0.01 * t - lane).astype(np.float32),
            "memo": np.stack([t, lane, t * lane], -1).astype(np.int16)}


def write(buf: ReplayBuffer, b: dict[str, np.ndarray], valid: np.ndarray | None = None
          ) -> None:
    buf.extend(b["obs"], b["act"], b["rew"], b["next_obs"], b["terminated"], b["truncated"],
               valid, fields={"logp": b["logp"], "memo": b["memo"]})


def expected(lanes: np.ndarray, steps: np.ndarray) -> dict[str, np.ndarray]:
    return {"logp": (-0.01 * steps - lanes).astype(np.float32),
            "memo": np.stack([steps, lanes, steps * lanes], -1).astype(np.int16)}


def check_read(buf: ReplayBuffer) -> None:
    """Every stored transition's declared fields are those of the step its reward names."""
    lanes = np.repeat(np.arange(buf.num_lanes), buf.size)
    positions = np.concatenate([(buf.oldest()[i] + np.arange(n)) % buf.lane_capacity
                                for i, n in enumerate(buf.size)])
    got = buf.declared_at(lanes, positions)
    steps = buf.codecs["rew"].take(buf._lane_base[lanes] + positions).astype(np.int64)
    want = expected(lanes, steps)
    for name in want:
        assert np.array_equal(got[name], want[name]), name
        assert got[name].dtype == want[name].dtype


@pytest.mark.parametrize("frame_stack", [1, 3])
def test_declared_fields_follow_each_transition_through_every_write(frame_stack):
    """The collector's run of slots, a wrap-around, a masked block and lanes out of step,
    with whole observations and with frame stacks: each declared value stays with its
    transition."""
    buf = buffer(frame_stack=frame_stack)
    write(buf, block(buf, 0, 10))  # one run of slots
    check_read(buf)
    write(buf, block(buf, 10, 9))  # wraps around
    check_read(buf)
    b = block(buf, 19, 4)
    valid = np.ones((4, 3), bool)
    valid[1:, 1] = False  # lane 1 writes one step of four: the lanes go out of step
    write(buf, b, valid)
    check_read(buf)
    assert buf.size.tolist() == [16, 16, 16] and buf.added.tolist() == [23, 20, 23]


def test_the_state_carries_declared_fields_exactly_and_refuses_a_state_without_them():
    buf = buffer()
    write(buf, block(buf, 0, 21))
    state = buf.state_dict()
    assert state["logp"].shape == (48,) and state["memo"].shape == (48, 3)
    again = buffer()
    again.load_state_dict(state)
    for name in ("logp", "memo", "obs", "rew"):
        assert np.array_equal(again.codecs[name].array, buf.codecs[name].array), name
    check_read(again)

    plain = ReplayBuffer(3, 16, (2,), (), np.int64)  # a run whose algorithm stores none
    write_plain = block(plain, 0, 5)
    plain.extend(*(write_plain[k] for k in ("obs", "act", "rew", "next_obs", "terminated",
                                             "truncated")))
    with pytest.raises(ValueError, match="buffer state has no 'logp', a field this buffer "
                                         "stores beside each transition"):
        again.load_state_dict(plain.state_dict())
    check_read(again)  # refused: left as it was
    bad = dict(state, memo=state["memo"][:, :2])
    with pytest.raises(ValueError, match=r"buffer memo: stored shape \(48, 2\)"):
        again.load_state_dict(bad)


def test_rollouts_and_batches_carry_declared_fields_by_name():
    roll = buffer(circular=False)
    write(roll, block(roll, 0, 5))
    r = roll.rollout()
    assert sorted(r.fields) == ["logp", "memo"] and r.fields["logp"].shape == (3, 5)
    lanes, steps = np.meshgrid(np.arange(3), np.arange(5), indexing="ij")
    assert np.array_equal(r.fields["logp"], expected(lanes, steps)["logp"])

    buf = buffer()
    write(buf, block(buf, 0, 12))
    lanes, positions = UniformSampler(3).sample(buf, 32)
    for transforms in ([], [NStepReturns(3, 0.9)]):
        batch = read(buf, lanes, positions, transforms)
        want = expected(lanes, buf.codecs["rew"].take(
            buf._lane_base[lanes] + positions).astype(np.int64))
        assert sorted(batch.fields) == ["logp", "memo"]
        assert np.array_equal(batch.fields["logp"], want["logp"])
        assert np.array_equal(batch.fields["memo"], want["memo"])


def test_the_device_copy_holds_declared_fields_as_the_host_does():
    """``buffer.on_device``: the copy (here on the CPU device, the same code path but for
    the page-locked transfer) is written with every block, in each write pattern, and
    rebuilt from a restored state; a batch reads the declared fields from it, equal to the
    host's."""
    import torch

    buf = buffer()
    buf.mirror_on(torch.device("cpu"))
    write(buf, block(buf, 0, 10))  # one run of slots
    valid = np.ones((4, 3), bool)
    valid[1:, 1] = False
    write(buf, block(buf, 10, 4), valid)  # masked: lanes out of step
    write(buf, block(buf, 14, 9))  # wraps around, out of step
    restored = buffer()
    restored.load_state_dict(buf.state_dict())
    restored.mirror_on(torch.device("cpu"))
    lanes, positions = UniformSampler(5).sample(buf, 64)
    for b in (buf, restored):
        host = b.declared_at(lanes, positions)
        device = b.device_declared_at(lanes, positions)
        for name in ("logp", "memo"):
            assert isinstance(device[name], torch.Tensor)
            assert np.array_equal(device[name].numpy(), host[name]), name
        batch = read(b, lanes, positions, [])
        assert isinstance(batch.fields["logp"], torch.Tensor)
        assert np.array_equal(batch.fields["memo"].numpy(), host["memo"])
        assert np.array_equal(batch.rew.numpy(), b.transitions(lanes, positions)[2])


def test_a_buffer_without_declared_fields_hands_out_none():
    buf = ReplayBuffer(2, 8, (2,), (), np.int64)
    b = block(buf, 0, 4)
    buf.extend(*(b[k] for k in ("obs", "act", "rew", "next_obs", "terminated", "truncated")))
    assert buf.declared == () and buf.rollout is not None
    assert read(buf, np.array([0, 1]), np.array([1, 2]), []).fields == {}


@pytest.mark.parametrize("fields, message", [
    ({"logp": None}, "missing memo"),
    ({"logp": None, "memo": None, "extra": None}, "not declared: extra"),
    ({}, "missing logp, memo"),
])
def test_a_block_that_does_not_match_the_declaration_writes_nothing(fields, message):
    buf = buffer()
    write(buf, block(buf, 0, 3))
    before = buf.state_dict()
    b = block(buf, 3, 2)
    given = {k: b.get(k, b["logp"]) for k in fields}
    with pytest.raises(ValueError, match=message):
        buf.extend(b["obs"], b["act"], b["rew"], b["next_obs"], b["terminated"],
                   b["truncated"], fields=given)
    after = buf.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_a_declared_field_of_the_wrong_shape_or_name_is_refused():
    buf = buffer()
    b = block(buf, 0, 2)
    with pytest.raises(ValueError, match=r"declared field 'memo': a block of shape \(2, 3\), "
                                         r"expected \(2, 3, 3\)"):
        buf.extend(b["obs"], b["act"], b["rew"], b["next_obs"], b["terminated"],
                   b["truncated"], fields={"logp": b["logp"], "memo": b["memo"][..., 0]})
    assert len(buf) == 0
    for name in ("rew", "next_obs", "size"):
        with pytest.raises(ValueError, match=f"the declared field '{name}' takes a name"):
            ReplayBuffer(1, 4, (2,), (), np.int64, fields=(Field(name, (), np.dtype("f4")),))
    with pytest.raises(ValueError, match="declared twice"):
        ReplayBuffer(1, 4, (2,), (), np.int64, fields=(LOGP, LOGP))
    with pytest.raises(ValueError, match="Python identifier"):
        ReplayBuffer(1, 4, (2,), (), np.int64, fields=(Field("log p", (), np.dtype("f4")),))


def test_declared_fields_are_counted_in_a_transitions_bytes():
    base = ReplayBuffer.bytes_per_transition((2,), np.float32, (), np.int64)
    assert ReplayBuffer.bytes_per_transition((2,), np.float32, (), np.int64,
                                             fields=(LOGP, MEMO)) == base + 4 + 6
    assert buffer().nominal_bytes() == 3 * 16 * (base + 10)


def test_the_collector_stores_what_the_policy_returns_beside_its_actions():
    """A policy returning Acted (actions and the log-prob it drew them with) on real
    CartPole envs: each stored transition holds the value of the step it was acted on,
    across the collector's blocks and episode ends (same-step autoreset)."""
    envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    buf = ReplayBuffer(2, 200, (4,), (), np.int64, fields=(LOGP,))
    collector = Collector(envs, buf)
    collector.reset(seed=3)
    calls = [0]

    def policy(obs: np.ndarray) -> Acted:
        calls[0] += 1
        actions = (obs[:, 2] > 0).astype(np.int64)
        # the step number and the action, so each stored value can be checked
        return Acted(actions, {"logp": np.full(2, calls[0], np.float32) + actions / 10})

    collector.collect(policy, n_steps=2 * 150)
    envs.close()
    assert buf.size.tolist() == [150, 150]
    logp = buf.codecs["logp"].array[:, :150]
    act = buf.codecs["act"].array[:, :150]
    assert np.allclose(logp, np.arange(1, 151)[None, :] + act / 10)
