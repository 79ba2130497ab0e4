"""``algo.compile=true``: the update's losses compiled by torch.compile (rltrain.algorithms.base
.compiled). On a CPU the compiled and the eager updates must give the same numbers, up to
floating-point reordering: in float64, parameters and stats agree to 1e-10 after several
updates, random draws (SAC's and TD3's noise) included.

Compiling costs seconds per loss on this CPU (inductor writes and builds C++), so the default
suite compiles PPO's and TD3's small networks (TD3's losses are DDPG's plus its smoothing);
SAC's comparison is slow-marked."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from algo_helpers import BOX, CPU, progress, random_batch
from conftest import refusal
from rltrain.algorithms import ALGORITHMS
from rltrain.algorithms.base import _COMPILED
from rltrain.algorithms.ppo import PPO, PPOConfig
from rltrain.algorithms.sac import SAC, SACConfig
from rltrain.algorithms.td3 import TD3, TD3Config
from rltrain.common.types import SpaceInfo

TINY = {"hidden_sizes": [16, 16]}
CARTPOLE = SpaceInfo((4,), 2, (), None, None, None, "test")


@pytest.fixture
def float64():
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    assert torch.allclose(a, b, rtol=1e-10, atol=1e-12), (a - b).abs().max()


def test_ppos_compiled_minibatch_steps_equal_eager_ones(float64):
    def make(compile_: bool) -> PPO:
        torch.manual_seed(0)
        return PPO(PPOConfig(compile=compile_, ent_coef=0.01, value_clip=0.2, **TINY),
                   CARTPOLE, CPU, 0)

    eager, compiled = make(False), make(True)
    assert not compiled.by_hand and not compiled.batchable
    eager.by_hand = False  # the autograd step the compiled one compiles
    g = torch.Generator().manual_seed(1)
    n = 64
    obs, act = torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g)
    adv, ret = torch.randn(n, generator=g), torch.randn(n, generator=g)
    old_v = ret + torch.randn(n, generator=g)
    with torch.no_grad():
        old_logp = eager.pi.log_prob_entropy(obs, act)[0] + 0.3 * torch.randn(n, generator=g)
    stats = {}
    for algo in (eager, compiled):
        stats[algo] = torch.stack([algo._minibatch(obs, act, adv, ret, old_v, old_logp)
                                   for _ in range(6)])
    assert not torch.equal(compiled.optim.flat, make(False).optim.flat)  # it learned
    assert (PPO._minibatch_loss, "default") in _COMPILED  # compiled, not run eagerly
    _close(stats[compiled], stats[eager])
    for name in ("flat", "exp_avg", "exp_avg_sq"):
        _close(getattr(compiled.optim, name), getattr(eager.optim, name))


def _off_policy_updates_agree(cls: type, cfg_cls: type, **cfg: object) -> None:
    def make(compile_: bool):
        torch.manual_seed(0)
        return cls(cfg_cls(compile=compile_, **TINY, **cfg), BOX, CPU, 0)

    algos = {False: make(False), True: make(True)}
    reports = {}
    for compile_, algo in algos.items():
        torch.manual_seed(5)  # the same noise draws for both
        reports[compile_] = [algo.update(random_batch(BOX, 32, seed=i), progress=progress(i))
                             for i in range(4)]
    for a, b in zip(reports[False], reports[True], strict=True):
        for x, y in zip(vars(a.stats).values(), vars(b.stats).values(), strict=True):
            assert (x is None) == (y is None)
            if x is not None:
                assert y == pytest.approx(x, rel=1e-10, abs=1e-12)
        _close(a.priorities, b.priorities)
    for name, optim in algos[False].optimizers().items():
        _close(algos[True].optimizers()[name].flat, optim.flat)
    assert (cls.critic_loss, "default") in _COMPILED


def test_td3s_compiled_updates_equal_eager_ones(float64):
    _off_policy_updates_agree(TD3, TD3Config, policy_delay=2)


@pytest.mark.slow
def test_sacs_compiled_updates_equal_eager_ones(float64):
    _off_policy_updates_agree(SAC, SACConfig)


@pytest.mark.parametrize("name, info", [("td3", BOX), ("ppo", BOX), ("ppo", CARTPOLE)],
                         ids=["td3", "ppo-box", "ppo-discrete"])
def test_compiled_acting_draws_eager_actings_actions(float64, name, info):
    """``algo.compile=true`` compiles the acting step too (``rltrain.algorithms.base.acting``):
    from the same random state it picks and draws eager acting's actions, to rounding, for
    the training envs' batch and the test envs' batch of another size."""
    spec = ALGORITHMS[name]
    algos = []
    for compile_ in (False, True):
        torch.manual_seed(0)
        algos.append(spec.build(spec.config(compile=compile_, **TINY), info, CPU, 0))
    rng = np.random.default_rng(0)
    for n, deterministic in ((4, False), (4, False), (3, True), (4, False)):
        obs = rng.normal(size=(n, *info.obs_shape))
        acts = []
        for algo in algos:
            torch.manual_seed(7)
            acts.append(algo.act(obs, deterministic=deterministic, progress=progress(0)))
        assert acts[1].dtype == acts[0].dtype and acts[1].shape == acts[0].shape
        np.testing.assert_allclose(acts[1], acts[0], rtol=1e-10, atol=1e-12)
    assert (type(algos[1]).action, "default") in _COMPILED  # compiled, not run eagerly


def test_only_the_algorithms_with_a_compiled_update_take_compile(tmp_path):
    assert sorted(n for n, s in ALGORITHMS.items() if s.compiles) == ["ddpg", "ppo", "sac",
                                                                     "td3"]
    message = refusal(tmp_path / "r", "algo=dqn", "env=cartpole", "algo.compile=true")
    assert ("algo.compile=true: algo=dqn has no compiled update; the algorithms that have "
            "one: ddpg, ppo, sac, td3") in message
    assert "Traceback" not in message


def test_losses_compiled_with_cuda_graphs_hand_back_copies_that_still_backpropagate():
    """On CUDA a compiled loss replays as a CUDA graph whose next replay writes over its
    outputs; rltrain hands back copies (found on an H200: SAC's stats read the critics' loss
    after the actor's loss had replayed). The copy must own its memory and keep the loss's
    gradient."""
    from rltrain.algorithms.base import _copied_out

    w = torch.ones(3, requires_grad=True)
    kept: list[torch.Tensor] = []

    def loss(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        out = (w * x).sum(), w.detach() * 2
        kept.extend(out)
        return (*out, None)

    value, stats, nothing = _copied_out(loss, torch.arange(3.0))
    assert nothing is None
    for copy, original in zip((value, stats), kept, strict=True):
        assert torch.equal(copy, original)
        assert copy.data_ptr() != original.data_ptr()
    kept[1].fill_(-1.0)  # the graph's next replay, writing over its outputs
    assert torch.equal(stats, torch.full((3,), 2.0))
    value.backward()
    assert torch.equal(w.grad, torch.arange(3.0))
    single = _copied_out(lambda: kept[0])
    assert torch.equal(single, kept[0]) and single.data_ptr() != kept[0].data_ptr()


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@CUDA
@pytest.mark.parametrize("name, info", [("sac", BOX), ("td3", BOX), ("ddpg", BOX),
                                        ("ppo", BOX), ("ppo", CARTPOLE)],
                         ids=["sac", "td3", "ddpg", "ppo-box", "ppo-discrete"])
def test_compiled_acting_on_cuda_acts_as_eager_acting(name, info):
    """With ``algo.compile=true`` on CUDA the acting step replays as a CUDA graph
    (``rltrain.algorithms.base.acting``). Its greedy actions are eager acting's, to rounding;
    its exploring ones have their shape, dtype and bounds; and batches of other sizes (the
    test envs) and repeated calls (each replay writes over the last one's output) stay right.
    Each batch size comes three times: torch runs a CUDA-graphed function plainly at its
    first call, captures it at the second and replays it from the third, and only the
    capture refuses an operation that reads back to the host."""
    cuda = torch.device("cuda")
    spec = ALGORITHMS[name]
    algos = []
    for compile_ in (False, True):
        torch.manual_seed(0)
        algos.append(spec.build(spec.config(compile=compile_, **TINY), info, cuda, 0))
    compiled_ = algos[1]
    rng = np.random.default_rng(0)
    for n in (8, 8, 8, 3, 3, 3, 8, 1, 1, 1):
        obs = rng.normal(size=(n, *info.obs_shape)).astype(np.float32)
        greedy = [a.act(obs, deterministic=True, progress=progress(0)) for a in algos]
        assert greedy[1].dtype == greedy[0].dtype and greedy[1].shape == greedy[0].shape
        np.testing.assert_allclose(greedy[1], greedy[0], rtol=1e-5, atol=1e-6)
        drawn = [a.act(obs, deterministic=False, progress=progress(0)) for a in algos]
        assert drawn[1].dtype == drawn[0].dtype and drawn[1].shape == drawn[0].shape
        assert np.isfinite(drawn[1]).all()
        if name in ("sac", "td3", "ddpg"):  # squashed or clipped into [-1, 1]
            assert np.abs(drawn[1]).max() <= 1.0
        if info.num_actions:
            assert set(np.unique(drawn[1])) <= set(range(info.num_actions))
    assert (type(compiled_).action, "reduce-overhead") in _COMPILED  # compiled, not eager
