"""GAE and n-step returns against plain per-transition loops and known values."""

from __future__ import annotations

import numpy as np
import pytest

from rltrain.data.returns import gae, nstep_returns


def reference_gae(rew, values, next_values, terminated, truncated, valid, gamma, lam):
    """A_t = sum_k (gamma*lam)^k delta_{t+k}, summed forward from t up to and including
    the first done, and never past the last valid entry; 0 for invalid entries."""
    lanes, horizon = rew.shape
    adv = np.zeros((lanes, horizon))
    for lane in range(lanes):
        for t in range(horizon):
            if not valid[lane, t]:
                continue
            total = 0.0
            for k, u in enumerate(range(t, horizon)):
                if not valid[lane, u]:
                    break
                bootstrap = 0.0 if terminated[lane, u] else gamma * next_values[lane, u]
                delta = rew[lane, u] + bootstrap - values[lane, u]
                total += (gamma * lam) ** k * delta
                if terminated[lane, u] or truncated[lane, u]:
                    break
            adv[lane, t] = total
    return adv


def random_rollout(rng, lanes=5, horizon=24):
    rew = rng.normal(size=(lanes, horizon)).astype(np.float32)
    values = rng.normal(size=(lanes, horizon)).astype(np.float32)
    next_values = rng.normal(size=(lanes, horizon)).astype(np.float32)
    terminated = rng.random((lanes, horizon)) < 0.1
    truncated = (rng.random((lanes, horizon)) < 0.1) & ~terminated
    # lanes of different lengths: a full one, an empty one, random others
    lengths = np.concatenate([[horizon, 0], rng.integers(1, horizon, size=lanes - 2)])
    valid = np.arange(horizon)[None, :] < lengths[:, None]
    return rew, values, next_values, terminated, truncated, valid


@pytest.mark.parametrize(("gamma", "lam"), [(0.99, 0.95), (0.9, 1.0), (0.8, 0.0), (1.0, 0.5)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_reference_loop(gamma, lam, seed):
    """Random rewards, values, terminations, truncations and lane lengths."""
    rng = np.random.default_rng(seed)
    rew, values, next_values, term, trunc, valid = random_rollout(rng)
    assert term.any() and trunc.any()
    adv = gae(rew, values, next_values, term, term | trunc, valid, gamma, lam)
    expected = reference_gae(rew, values, next_values, term, trunc, valid, gamma, lam)
    assert adv.shape == rew.shape
    np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-5)
    assert (adv[~valid] == 0).all()


def test_gae_invalid_tail_does_not_leak_into_valid_entries():
    """Garbage in the unused slots of a lane changes nothing."""
    rng = np.random.default_rng(3)
    rew, values, next_values, term, trunc, valid = random_rollout(rng)
    clean = gae(rew, values, next_values, term, term | trunc, valid, 0.99, 0.95)
    noisy = [a.copy() for a in (rew, values, next_values)]
    for a in noisy:
        a[~valid] = 1e6
    dirty = gae(*noisy, term, term | trunc, valid, 0.99, 0.95)
    np.testing.assert_allclose(dirty, clean, rtol=1e-6)


def test_gae_is_zero_with_true_values_of_constant_reward():
    """Reward 1 forever: V = 1 / (1 - gamma) everywhere, so every advantage is 0, also at
    truncations, which bootstrap from next_values."""
    gamma, lam = 0.9, 0.95
    lanes, horizon = 3, 50
    true_v = 1.0 / (1.0 - gamma)
    rew = np.ones((lanes, horizon), np.float32)
    values = np.full((lanes, horizon), true_v, np.float32)
    valid = np.ones((lanes, horizon), bool)
    no_term = np.zeros((lanes, horizon), bool)
    truncated = np.zeros((lanes, horizon), bool)
    truncated[:, 7::13] = True
    for dones in (no_term, truncated):
        adv = gae(rew, values, values.copy(), no_term, dones, valid, gamma, lam)
        np.testing.assert_allclose(adv, 0.0, atol=1e-4)
    # treating those truncations as terminations would be wrong by -gamma * V
    wrong = gae(rew, values, values.copy(), truncated, truncated, valid, gamma, lam)
    np.testing.assert_allclose(wrong[truncated], 1.0 - true_v, rtol=1e-5)


def test_gae_is_zero_with_true_values_of_terminating_episodes():
    """Reward 1 per step in episodes of length L that terminate: V(s_t) = (1 - gamma^(L-t)) /
    (1 - gamma); the value after termination is ignored."""
    gamma, lam, length, episodes = 0.95, 0.9, 6, 4
    t = np.tile(np.arange(length), episodes)[None, :]
    values = ((1 - gamma ** (length - t)) / (1 - gamma)).astype(np.float32)
    next_values = ((1 - gamma ** (length - t - 1)) / (1 - gamma)).astype(np.float32)
    terminated = t == length - 1
    next_values[terminated] = 1234.0  # must be ignored
    rew = np.ones_like(values)
    valid = np.ones_like(terminated)
    adv = gae(rew, values, next_values, terminated, terminated, valid, gamma, lam)
    np.testing.assert_allclose(adv, 0.0, atol=1e-4)


def test_gae_truncation_bootstraps_from_next_values():
    """Zero rewards and values except V(final obs) = 5 at a truncation: the advantage is
    gamma*5 there, decays by gamma*lam before it, and stops at the episode boundary."""
    gamma, lam = 0.9, 0.8
    z = np.zeros((1, 6), np.float32)
    next_values = z.copy()
    next_values[0, 3] = 5.0
    truncated = np.zeros((1, 6), bool)
    truncated[0, 3] = True
    adv = gae(z, z, next_values, np.zeros_like(truncated), truncated, np.ones_like(truncated),
              gamma, lam)
    g5 = gamma * 5.0
    np.testing.assert_allclose(
        adv[0], [(gamma * lam) ** 3 * g5, (gamma * lam) ** 2 * g5, gamma * lam * g5, g5, 0, 0],
        rtol=1e-6)
    # the same flag as a termination drops the bootstrap
    adv_term = gae(z, z, next_values, truncated, truncated, np.ones_like(truncated), gamma, lam)
    np.testing.assert_allclose(adv_term, 0.0)


# --------------------------------------------------------------------------- n-step
def reference_nstep(rew, terminated, dones, valid, gamma):
    batch, n = rew.shape
    returns, lasts, discounts = np.zeros(batch), np.zeros(batch, int), np.zeros(batch)
    for b in range(batch):
        total, last = 0.0, 0
        for k in range(n):
            if k > 0 and (dones[b, k - 1] or not valid[b, k]):
                break
            total += gamma**k * rew[b, k]
            last = k
        returns[b], lasts[b] = total, last
        discounts[b] = 0.0 if terminated[b, last] else gamma ** (last + 1)
    return returns, lasts, discounts


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("seed", [0, 1])
def test_nstep_returns_match_reference_loop(n, seed):
    """Random windows with dones, terminations among them, and uncollected tails."""
    rng = np.random.default_rng(seed)
    batch, gamma = 200, 0.93
    rew = rng.normal(size=(batch, n)).astype(np.float32)
    dones = rng.random((batch, n)) < 0.2
    terminated = dones & (rng.random((batch, n)) < 0.5)
    valid = rng.random((batch, n)) < 0.85
    returns, last, discount = nstep_returns(rew, terminated, dones, valid, gamma)
    exp_ret, exp_last, exp_disc = reference_nstep(rew, terminated, dones, valid, gamma)
    np.testing.assert_allclose(returns, exp_ret, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(last, exp_last)
    np.testing.assert_allclose(discount, exp_disc, rtol=1e-6)
    if n > 2:
        # the cases are all present: full windows, cut by a done, cut by an invalid entry
        assert (exp_last == n - 1).any() and (exp_last < n - 1).any()


def test_nstep_returns_with_n_1_is_one_step_td():
    """n = 1: the reward itself; discount gamma, or 0 only for terminations (a truncated
    transition keeps its bootstrap); the window's first entry is used even if not valid."""
    rng = np.random.default_rng(4)
    rew = rng.normal(size=(50, 1)).astype(np.float32)
    dones = rng.random((50, 1)) < 0.5
    terminated = dones & (rng.random((50, 1)) < 0.5)
    returns, last, discount = nstep_returns(rew, terminated, dones,
                                            np.zeros((50, 1), bool), 0.97)
    np.testing.assert_allclose(returns, rew[:, 0])
    np.testing.assert_array_equal(last, 0)
    np.testing.assert_allclose(discount, np.where(terminated[:, 0], 0.0, 0.97), rtol=1e-6)


def test_nstep_returns_hand_example():
    """gamma 0.5, rewards 1, 2, 4: full window 3 (bootstrap 1/8); a truncation after the
    first step gives 1 + 1 (bootstrap 1/4); a termination there gives 2 with no bootstrap;
    an uncollected third entry gives 2 with bootstrap 1/4."""
    rew = np.array([[1, 2, 4]] * 4, np.float32)
    dones = np.array([[0, 0, 0], [0, 1, 0], [0, 1, 0], [0, 0, 0]], bool)
    terminated = np.array([[0, 0, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0]], bool)
    valid = np.array([[1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 0]], bool)
    returns, last, discount = nstep_returns(rew, terminated, dones, valid, 0.5)
    np.testing.assert_allclose(returns, [3.0, 2.0, 2.0, 2.0])
    np.testing.assert_array_equal(last, [2, 1, 1, 1])
    np.testing.assert_allclose(discount, [0.125, 0.25, 0.0, 0.25])
