"""rltrain's Adam is torch's Adam arithmetic, without torch.optim's start-up and overhead."""

import copy
import sys

import pytest
import torch

from rltrain.nets.actors_critics import mlp
from rltrain.nets.optim import Adam


@pytest.mark.parametrize("fused", [True, False], ids=["fused kernel", "five ops"])
def test_matches_torch_adam_with_changing_lr(fused):
    torch.manual_seed(0)
    ours_net = mlp(4, [32, 32], 3)
    ref_net = copy.deepcopy(ours_net)
    ours = Adam(ours_net.parameters(), lr=1e-3, eps=1e-5)
    # torch >= 2.4 has the fused kernel on the CPU (the pinned 2.13 does); without it, or
    # with it set aside, the step runs as five ops
    version = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    assert (ours._step_t is not None) == (version >= (2, 4)) or not fused
    if not fused:
        ours._step_t = None
    ref = torch.optim.Adam(ref_net.parameters(), lr=1e-3, eps=1e-5)
    x = torch.randn(64, 4)
    for i in range(50):
        lr = 1e-3 * (1 - i / 50)
        ours.lr = lr
        for group in ref.param_groups:
            group["lr"] = lr
        for net, opt in ((ours_net, ours), (ref_net, ref)):
            opt.zero_grad()
            (net(x) ** 2).mean().backward()
            opt.step()
    for a, b in zip(ours_net.parameters(), ref_net.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert ours.steps == 50


def test_state_dict_round_trip_continues_identically():
    torch.manual_seed(1)
    net = mlp(3, [8], 1)
    opt = Adam(net.parameters(), lr=1e-2)
    x = torch.randn(16, 3)

    def step(n, o):
        o.zero_grad()
        n(x).pow(2).mean().backward()
        o.step()

    for _ in range(5):
        step(net, opt)
    twin = copy.deepcopy(net)
    twin_opt = Adam(twin.parameters(), lr=0.5)
    twin_opt.load_state_dict(copy.deepcopy(opt.state_dict()))
    for _ in range(5):
        step(net, opt)
        step(twin, twin_opt)
    for a, b in zip(net.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)


def test_training_never_imports_dynamo():
    """torch.optim's step imports torch._dynamo (~1 s of start-up); ours must not."""
    import subprocess

    code = ("import sys, torch\n"
            "from rltrain.nets.optim import Adam\n"
            "from rltrain.nets.actors_critics import mlp\n"
            "net = mlp(4, [8], 2); opt = Adam(net.parameters(), lr=1e-3)\n"
            "net(torch.randn(2, 4)).sum().backward()\n"
            "opt.clip_grad_norm_(1.0); opt.step()\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("max_norm", [0.05, 1e3])
def test_clip_grad_norm_matches_torch(max_norm):
    """Clipping the flat gradient scales exactly as torch.nn.utils.clip_grad_norm_ does
    (0.05 clips, 1e3 leaves the gradient alone)."""
    torch.manual_seed(2)
    net = mlp(4, [16, 16], 2)
    ref = copy.deepcopy(net)
    opt = Adam(net.parameters(), lr=1e-3)
    x = torch.randn(32, 4)
    opt.zero_grad()
    net(x).pow(2).sum().backward()
    ref(x).pow(2).sum().backward()
    norm = opt.clip_grad_norm_(max_norm)
    ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
    torch.testing.assert_close(norm, ref_norm)
    for a, b in zip(net.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad)


def test_parameters_live_in_the_flat_buffer():
    """The parameters keep their values, become views of one buffer, and gradients from a
    backward pass land in the flat gradient, even after module.zero_grad() dropped them."""
    torch.manual_seed(3)
    net = mlp(3, [8], 2)
    before = [p.detach().clone() for p in net.parameters()]
    opt = Adam(net.parameters(), lr=1e-2)
    for p, b in zip(net.parameters(), before, strict=True):
        assert torch.equal(p, b)
        assert p.untyped_storage().data_ptr() == opt.flat.untyped_storage().data_ptr()
    net.zero_grad()  # sets .grad to None
    opt.zero_grad()
    net(torch.randn(4, 3)).sum().backward()
    assert opt.grad.abs().sum() > 0
    opt.step()
    assert not torch.equal(next(net.parameters()), before[0])


def test_load_state_dict_refuses_other_shapes():
    opt = Adam(mlp(3, [8], 2).parameters(), lr=1e-2)
    other = Adam(mlp(3, [9], 2).parameters(), lr=1e-2)
    with pytest.raises(ValueError, match="exp_avg has shape"):
        opt.load_state_dict(other.state_dict())
