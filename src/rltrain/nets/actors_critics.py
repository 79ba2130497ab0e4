"""Networks: MLPs with orthogonal initialisation, the actors (categorical, Gaussian, tanh-squashed
Gaussian, deterministic) and the Q(s, a) critics every algorithm builds on.

Each network starts with an observation encoder (:mod:`rltrain.nets.encoders`), which turns the
env's observations into feature vectors; the layers here never see an observation's shape.
Encoders are called through ``forward`` directly, as the layers are (see :class:`MLP`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rltrain.config.schemas import ACTIVATION_NAMES
from rltrain.nets.encoders import Encoder
from rltrain.nets.nograd import no_grad
from rltrain.spaces.masking import ActionMask

ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu}
assert tuple(ACTIVATIONS) == ACTIVATION_NAMES  # the schemas' check names the same ones
#: each activation's backward from its output, the kernels autograd itself runs for them
_ACTIVATION_BACKWARDS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "tanh": torch.ops.aten.tanh_backward,
    "relu": lambda grad, out: torch.ops.aten.threshold_backward(grad, out, 0),
}
assert tuple(_ACTIVATION_BACKWARDS) == ACTIVATION_NAMES


#: -1 as a tensor: an op with a tensor operand skips the conversion of a Python number (a 0-dim
#: CPU tensor broadcasts into tensors of any dtype and device as a number does)
_MINUS_ONE = torch.tensor(-1.0, dtype=torch.float64)


def _tanh_of_doubled_(x: torch.Tensor) -> torch.Tensor:
    """``tanh(z)`` in place, given ``x = 2z``, as ``2 sigmoid(2z) - 1``: two passes over the
    data. torch's CPU ``tanh`` kernel is about 4x slower than its ``sigmoid`` (42 against 8 us
    for 256x64 float32, one thread). The doubling comes free inside the layer's matrix
    product (:data:`_HIDDEN_LAYERS`: scaling by 2 is exact, so this is bit for bit the four
    passes ``x.mul_(2).sigmoid_().mul_(2).sub_(1)`` on ``z``, and so is ``-1 + 2s`` for
    ``2s - 1``); in the PPO minibatch step the two passes saved take 20 us of 590 at batch 256.
    The value is tanh's to 2e-7 in float32 (torch's tanh: 3e-8) and 4e-16 in float64;
    ``tanh_backward`` takes it as it takes tanh's output. Used by the forward passes written
    out for a backward by hand (:meth:`MLP.forward_kept`); the autograd path keeps
    ``torch.tanh``."""
    return torch.add(_MINUS_ONE, x.sigmoid_(), alpha=2.0, out=x)


#: each activation of a hidden layer for the forward passes written out (no autograd graph):
#: the factor the layer's matrix product and bias are scaled by, and the activation applied
#: in place to that scaled pre-activation
_HIDDEN_LAYERS: dict[str, tuple[float, Callable[[torch.Tensor], torch.Tensor]]] = {
    "tanh": (2.0, _tanh_of_doubled_), "relu": (1.0, torch.Tensor.relu_)}


class MLP(nn.Module):
    """A feed-forward network. The forward pass calls the layers' maths directly on a list of
    their (weight, bias) parameters rather than through one module call per layer: for the
    small batches an env step acts on, module dispatch costs as much as the matrix products."""

    def __init__(self, sizes: Sequence[int], activation: str, out_gain: float) -> None:
        super().__init__()
        # a typed list first: a ModuleList hands its items back as plain Modules
        linears = [nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True)]
        self.layers = nn.ModuleList(linears)
        self._act = ACTIVATIONS[activation]
        for layer in linears[:-1]:
            _init(layer, np.sqrt(2))
        _init(linears[-1], out_gain)
        # the Parameter objects themselves: .to(), load_state_dict() and deepcopy keep them
        # (the first two change their data in place, the last copies this list along)
        *self._hidden, self._last = [(layer.weight, layer.bias) for layer in linears]
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = self._act
        for weight, bias in self._hidden:
            x = act(F.linear(x, weight, bias))
        return F.linear(x, *self._last)

    # ------------------------------------------------------- backward written out
    # For the few-layer MLPs of RL on a CPU, autograd's bookkeeping (recording each op, then
    # walking the graph) costs about as much as the maths. A caller that differentiates its
    # loss by autograd only up to this network's output can run the network's own forward and
    # backward here: the same kernels autograd runs (addmm forward; mm and sum for the
    # weights' and biases' gradients; the activation's backward from its output), without the
    # graph. ``tests/test_ppo_by_hand.py`` checks the gradients against autograd's.
    @no_grad
    def forward_kept(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The forward pass without autograd: each layer's input (what :meth:`backward_into`
        needs), and the output."""
        return forward_kept(x, [*self._hidden, self._last], self.activation)

    @no_grad
    def backward_into(self, inputs: Sequence[torch.Tensor], grad_out: torch.Tensor) -> None:
        """The backward pass of :meth:`forward_kept` for the gradient ``grad_out`` of its
        output: each weight's and bias's gradient written over its ``.grad`` (which must exist,
        as a flat optimiser's views do), none for the input."""
        backward_into([*self._hidden, self._last], inputs, grad_out, self.activation)


@no_grad
def forward_kept(x: torch.Tensor, layers: Sequence[tuple[torch.Tensor, torch.Tensor]],
                 activation: str) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Linear layers ``(weight, bias)`` with ``activation`` between them (none after the
    last), without autograd: each layer's input, what :func:`backward_into` needs, and the
    output. The maths of :meth:`MLP.forward` (and of a plain Q-network's layers)."""
    scale, act = _HIDDEN_LAYERS[activation]
    inputs = []
    for weight, bias in layers[:-1]:
        inputs.append(x)
        # F.linear's kernel for a 2-D input
        x = act(torch.addmm(bias, x, weight.t(), beta=scale, alpha=scale))
    inputs.append(x)
    weight, bias = layers[-1]
    return inputs, torch.addmm(bias, x, weight.t())


@no_grad
def backward_into(layers: Sequence[tuple[torch.Tensor, torch.Tensor]],
                  inputs: Sequence[torch.Tensor], grad_out: torch.Tensor, activation: str,
                  *, input_grad: bool = False) -> torch.Tensor | None:
    """The backward pass of :func:`forward_kept` for the gradient ``grad_out`` of its output:
    each weight's and bias's gradient written over its ``.grad``; with ``input_grad``, the
    gradient with respect to the input is returned (for an encoder in front that learns),
    else None."""
    backward = _ACTIVATION_BACKWARDS[activation]
    grad = grad_out
    for i in range(len(layers) - 1, -1, -1):
        weight, bias = layers[i]
        weight_grad(grad, inputs[i], written_over(weight))
        torch.sum(grad, 0, out=written_over(bias))
        if i:
            grad = backward(torch.mm(grad, weight), inputs[i])
    return torch.mm(grad, layers[0][0]) if input_grad else None


def weight_grad(grad: torch.Tensor, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """A linear layer's weight gradient ``grad.T @ x`` (``(out, batch) @ (batch, in)``; or
    stacked copies of it, ``(copies, batch, ...)`` by ``bmm``), written into ``out``. For a
    narrow input (observations of a few numbers) it is taken as ``(x.T @ grad).T``, the same
    sums in another layout: MKL's kernel for the first layout is about 3x slower there (64x4
    from a batch of 256: 21 against 7 us; ten stacked copies at batch 128: 93 against 20 us;
    one thread on the 2-core VM), level at 64x17 and slower for wider inputs."""
    mm, t = (torch.mm, torch.t) if x.dim() == 2 else (torch.bmm, _t3)
    if x.shape[-1] < 16 <= grad.shape[-1]:
        return t(out).copy_(mm(t(x), grad))
    return mm(t(grad), x, out=out)


def _t3(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2)


def written_over(p: torch.Tensor) -> torch.Tensor:
    """A parameter's ``.grad``, for a backward written out by hand to write over."""
    if p.grad is None:
        raise RuntimeError("a backward written out writes into existing .grad tensors; zero "
                           "the optimiser's gradients first")
    return p.grad


def stacked_mlp(x: torch.Tensor, layers: Sequence[tuple[torch.Tensor, torch.Tensor]],
                activation: str) -> torch.Tensor:
    """Several copies of one :class:`MLP` at once: ``x`` is ``(copies, batch, in)``, each
    layer a ``(copies, out, in)`` weight and a ``(copies, out)`` bias; one batched matrix
    product per layer for all copies (the seeds of a batched sweep,
    :mod:`rltrain.common.stacking`)."""
    act = ACTIVATIONS[activation]
    *hidden, (w, b) = layers
    for weight, bias in hidden:
        x = act(torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2)))
    return torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))


def mlp(
    in_dim: int,
    hidden_sizes: Sequence[int],
    out_dim: int,
    activation: str = "tanh",
    out_gain: float = 1.0,
) -> MLP:
    """Hidden layers get gain sqrt(2), the output layer ``out_gain`` (small for policy
    heads, as in Andrychowicz et al. 2021, "What matters in on-policy RL")."""
    return MLP([in_dim, *hidden_sizes, out_dim], activation, out_gain)


class EncodedMLP(MLP):
    """An MLP on an encoder's features: a state-value network, a Q-network over discrete
    actions. Its layers keep the plain MLP's names (``layers.0.weight``), so the parameters of
    a flat-observation network are named as they always were (checkpoints stay loadable)."""

    def __init__(self, encoder: Encoder, hidden_sizes: Sequence[int], out_dim: int,
                 activation: str, out_gain: float = 1.0) -> None:
        super().__init__([encoder.out_dim, *hidden_sizes, out_dim], activation, out_gain)
        self.encoder = encoder

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return super().forward(self.encoder.forward(obs))

    def head(self, features: torch.Tensor) -> torch.Tensor:
        """The layers on the encoder's output, already computed (a shared encoder)."""
        return super().forward(features)


def _init(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


# --------------------------------------------------------------------------- actors
# Each actor's forward() is its deterministic output, the input of the deployable policy's
# head: logits (argmax), a Gaussian mean (clipped and scaled), or an action in [-1, 1].

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


@no_grad
def stacked_mlp_kept(x: torch.Tensor, layers: Sequence[tuple[torch.Tensor, torch.Tensor]],
                     activation: str) -> tuple[list[torch.Tensor], torch.Tensor]:
    """:func:`stacked_mlp` without autograd, keeping each layer's input for
    :func:`stacked_mlp_backward_into` (as :meth:`MLP.forward_kept` is to :meth:`MLP.forward`)."""
    scale, act = _HIDDEN_LAYERS[activation]
    *hidden, (w, b) = layers
    inputs = []
    for weight, bias in hidden:
        inputs.append(x)
        x = act(torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2), beta=scale,
                              alpha=scale))
    inputs.append(x)
    return inputs, torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))


@no_grad
def stacked_mlp_backward_into(layers: Sequence[tuple[torch.Tensor, torch.Tensor]],
                              grads: Sequence[tuple[torch.Tensor, torch.Tensor]],
                              inputs: Sequence[torch.Tensor], grad_out: torch.Tensor,
                              activation: str) -> None:
    """The backward pass of :func:`stacked_mlp_kept`: each layer's weight and bias gradients,
    ``(copies, *shape)``, written over ``grads`` (one pair per layer)."""
    backward = _ACTIVATION_BACKWARDS[activation]
    grad = grad_out
    for i in range(len(layers) - 1, -1, -1):
        weight = layers[i][0]
        grad_weight, grad_bias = grads[i]
        weight_grad(grad, inputs[i], grad_weight)
        torch.sum(grad, 1, out=grad_bias)
        if i:
            grad = backward(torch.bmm(grad, weight), inputs[i])


def sample_categorical(logits: torch.Tensor) -> torch.Tensor:
    """One action per row, drawn with probabilities softmax(logits), by the Gumbel-max trick:
    argmax(logits + Gumbel noise), with -Gumbel noise = log(-log(U)). Four small ops, about
    2.5x cheaper than softmax + torch.multinomial at the batch sizes of an env step."""
    return (logits - torch.rand_like(logits).log_().neg_().log_()).argmax(-1)


def diagonal_gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor
                               ) -> torch.Tensor:
    """log N(x; mean, exp(log_std)^2), summed over the last dimension."""
    z = (x - mean) * torch.exp(-log_std)
    return (-0.5 * z.pow(2) - log_std - _HALF_LOG_2PI).sum(-1)


def categorical_log_prob_entropy(logits: torch.Tensor, act: torch.Tensor
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(a|s) of the actions ``act`` and the entropy, from the logits (last dimension),
    written out rather than through torch.distributions (whose bookkeeping costs more than
    this maths at these sizes)."""
    logp_all = logits.log_softmax(-1)
    logp = logp_all.gather(-1, act.unsqueeze(-1)).squeeze(-1)
    return logp, -(logp_all.exp() * logp_all).sum(-1)


def gaussian_log_prob_entropy(mean: torch.Tensor, log_std: torch.Tensor, act: torch.Tensor
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(a|s) and the entropy of a diagonal Gaussian, summed over the last dimension."""
    logp = diagonal_gaussian_log_prob(act.reshape(mean.shape), mean, log_std)
    return logp, (0.5 + _HALF_LOG_2PI + log_std).sum(-1)


#: a distribution's backward (``*_log_prob_entropy_kept``): the gradients of a loss with
#: respect to each sample's log-probability and entropy (None: the loss has no entropy term)
#: in; out, the gradient with respect to the network's output, and with respect to the
#: log-standard-deviation as expanded to the output's shape (None for a categorical), which
#: the caller sums over the samples
DistributionBackward = Callable[[torch.Tensor, "torch.Tensor | None"],
                                tuple[torch.Tensor, "torch.Tensor | None"]]


@no_grad
def categorical_log_prob_entropy_kept(logits: torch.Tensor, act: torch.Tensor
                                      ) -> tuple[torch.Tensor, torch.Tensor,
                                                 DistributionBackward]:
    """:func:`categorical_log_prob_entropy` without autograd, and its backward
    (d logp_a / dz = onehot(a) - p; dH / dz = -p (log p + H)). Any leading dimensions."""
    logp_all = logits.log_softmax(-1)
    p = logp_all.exp()
    logp = logp_all.gather(-1, act.unsqueeze(-1)).squeeze(-1)
    entropy = -(p * logp_all).sum(-1)

    def backward(grad_logp: torch.Tensor, grad_entropy: torch.Tensor | None
                 ) -> tuple[torch.Tensor, None]:
        grad = p * -grad_logp.unsqueeze(-1)
        grad.scatter_add_(-1, act.unsqueeze(-1), grad_logp.unsqueeze(-1))
        if grad_entropy is not None:
            grad -= (logp_all + entropy.unsqueeze(-1)).mul_(p).mul_(grad_entropy.unsqueeze(-1))
        return grad, None

    return logp, entropy, backward


@no_grad
def gaussian_log_prob_entropy_kept(mean: torch.Tensor, log_std: torch.Tensor,
                                   act: torch.Tensor
                                   ) -> tuple[torch.Tensor, torch.Tensor, DistributionBackward]:
    """:func:`gaussian_log_prob_entropy` without autograd (``log_std`` expanded to the mean's
    shape), and its backward: per unit of logp, (a - mean) / sigma^2 for the mean and
    z^2 - 1 for log_std; per unit of entropy, 1 for log_std."""
    inv_std = torch.exp(-log_std)
    z = (act.reshape(mean.shape) - mean) * inv_std
    logp = (-0.5 * z.pow(2) - log_std - _HALF_LOG_2PI).sum(-1)
    entropy = (0.5 + _HALF_LOG_2PI + log_std).sum(-1)

    def backward(grad_logp: torch.Tensor, grad_entropy: torch.Tensor | None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        g = grad_logp.unsqueeze(-1)
        grad_log_std = (z * z - 1.0) * g
        if grad_entropy is not None:
            grad_log_std += grad_entropy.unsqueeze(-1)
        return z * inv_std * g, grad_log_std

    return logp, entropy, backward


class Actor(nn.Module):
    """An encoder, then an MLP whose output layer starts small (gain 0.01, Andrychowicz et al.
    2021): the outputs the actors below turn into a distribution or an action."""

    def __init__(self, encoder: Encoder, hidden_sizes: Sequence[int], out_dim: int,
                 activation: str) -> None:
        super().__init__()
        self.encoder = encoder
        self.net = mlp(encoder.out_dim, hidden_sizes, out_dim, activation, 0.01)

    def outputs(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net.forward(self.encoder.forward(obs))


class CategoricalActor(Actor):
    """Discrete actions: logits over the actions. With an action ``mask``
    (:mod:`rltrain.spaces.masking`), read from the observation, a disallowed action's logit is the
    lowest float: it is never sampled nor the argmax, and has probability 0."""

    def __init__(self, encoder: Encoder, hidden_sizes: Sequence[int], out_dim: int,
                 activation: str, mask: ActionMask | None = None) -> None:
        super().__init__(encoder, hidden_sizes, out_dim, activation)
        self.mask = mask

    def logits(self, obs: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        out = self.outputs(obs) if features is None else self.net.forward(features)
        return out if self.mask is None else self.mask(out, obs)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.logits(obs)

    def sample(self, obs: torch.Tensor) -> torch.Tensor:
        return sample_categorical(self.logits(obs))

    def log_prob_entropy(self, obs: torch.Tensor, act: torch.Tensor, *,
                         features: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi(a|s) and the entropy at s, written out rather than through
        torch.distributions (whose bookkeeping costs more than this maths at these sizes).
        ``features``: the encoder's output for ``obs``, already computed (a shared encoder)."""
        return categorical_log_prob_entropy(self.logits(obs, features), act)


class GaussianActor(Actor):
    """A diagonal Gaussian with a state-independent log standard deviation (PPO); its mean is
    the deterministic action, unbounded (the env-side scaling clips it)."""

    def __init__(self, encoder: Encoder, hidden_sizes: Sequence[int], action_dim: int,
                 activation: str, init_log_std: float) -> None:
        super().__init__(encoder, hidden_sizes, action_dim, activation)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.outputs(obs)

    def sample(self, obs: torch.Tensor) -> torch.Tensor:
        """mean + std * a standard normal draw: what ``torch.normal(mean, std)`` computes (bit
        for bit on the CPU), without its check that every std is non-negative: a read back
        to the host, which a CUDA graph cannot hold (the compiled acting step failed its
        capture)."""
        mean = self.outputs(obs)
        return mean + self.log_std.exp() * torch.randn_like(mean)

    def log_prob_entropy(self, obs: torch.Tensor, act: torch.Tensor, *,
                         features: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.outputs(obs) if features is None else self.net.forward(features)
        return gaussian_log_prob_entropy(mean, self.log_std.expand_as(mean), act)


class TanhMeanGaussianActor(Actor):
    """A diagonal Gaussian whose mean tanh(f(s)) is in [-1, 1], with a state-independent log
    standard deviation clamped to [LOG_STD_MIN, LOG_STD_MAX] (IQL's policy, Kostrikov et al.
    2021, arXiv:2110.06169). The density is a plain Gaussian's around the bounded mean, not a
    squashed one, so actions at exactly -1 or 1 (a dataset's, at the env's bounds) have a
    finite log-probability. The deterministic action is the mean."""

    LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0

    def __init__(self, encoder: Encoder, hidden_sizes: Sequence[int], action_dim: int,
                 activation: str) -> None:
        super().__init__(encoder, hidden_sizes, action_dim, activation)
        self.log_std = nn.Parameter(torch.zeros(action_dim))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.outputs(obs))

    def _clamped_log_std(self) -> torch.Tensor:
        return self.log_std.clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)

    def sample(self, obs: torch.Tensor) -> torch.Tensor:
        """An action drawn around the mean (it may leave [-1, 1]; the env-side scaling
        clips it)."""
        mean = self.forward(obs)
        return torch.normal(mean, self._clamped_log_std().exp().expand_as(mean))

    def log_prob(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """log pi(a|s) of the actions ``act`` (batch, action_dim)."""
        mean = self.forward(obs)
        return diagonal_gaussian_log_prob(act, mean, self._clamped_log_std().expand_as(mean))


class SquashedGaussianActor(Actor):
    """tanh(u), u ~ N(mu(s), sigma(s)), with a state-dependent sigma (SAC). The log-density
    includes the change of variables: log pi(a|s) = log N(u) - sum log(1 - tanh(u)^2),
    written as 2 * (log 2 - u - softplus(-2u)) for numerical stability."""

    LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0

    def __init__(self, encoder: Encoder, hidden_sizes: Sequence[int], action_dim: int,
                 activation: str) -> None:
        super().__init__(encoder, hidden_sizes, 2 * action_dim, activation)
        self.action_dim = action_dim

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action: tanh of the mean."""
        return torch.tanh(self.outputs(obs)[..., : self.action_dim])

    def sample(self, obs: torch.Tensor, noise: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action in (-1, 1) and its log-probability; ``noise`` is the
        standard normal draw (default: a fresh white one)."""
        mean, log_std = self.outputs(obs).split(self.action_dim, -1)
        # a smooth squash of log_std into its bounds (as in CleanRL and SpinningUp's variants)
        log_std = self.LOG_STD_MIN + 0.5 * (self.LOG_STD_MAX - self.LOG_STD_MIN) * (
            torch.tanh(log_std) + 1)
        if noise is None:
            noise = torch.randn_like(mean)
        u = mean + noise * log_std.exp()
        logp = (-0.5 * noise.pow(2) - log_std - _HALF_LOG_2PI).sum(-1)
        logp = logp - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
        return torch.tanh(u), logp


class DeterministicActor(Actor):
    """a = tanh(f(s)) in [-1, 1] (DDPG, TD3)."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.outputs(obs))


class MultiCategoricalActor(Actor):
    """MultiDiscrete and MultiBinary actions: one categorical distribution per action entry,
    the entries independent given the state, so log pi(a|s) is the sum of the entries'
    log-probabilities and the entropy the sum of their entropies. One output layer gives the
    logits of all entries side by side (``sum(nvec)`` of them, entry after entry, as the
    action's entries lie in C order).

    :meth:`forward` returns them as ``(batch, *action_shape, max(nvec))``, an entry with fewer
    values padded with the lowest float (never the argmax, probability 0): its argmax over
    the last axis is the deterministic action, as a :class:`CategoricalActor`'s is, and every
    op is a fixed gather, so the ONNX graph needs no loop over entries."""

    def __init__(self, encoder: Encoder, hidden_sizes: Sequence[int], nvec: Sequence[int],
                 activation: str, action_shape: Sequence[int] = ()) -> None:
        super().__init__(encoder, hidden_sizes, sum(nvec), activation)
        self.nvec = tuple(int(n) for n in nvec)
        self.action_shape = tuple(action_shape) or (len(self.nvec),)
        if int(np.prod(self.action_shape)) != len(self.nvec):
            raise ValueError(f"{len(self.nvec)} entries cannot have shape {self.action_shape}")
        self.width = max(self.nvec)
        #: every entry has as many values (MultiBinary): the logits only need a reshape
        self.uniform = len(set(self.nvec)) == 1
        counts = np.asarray(self.nvec)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        values = np.arange(self.width)
        # for each (entry, value): the column of its logit; padding reads column 0 and is
        # then overwritten (a gather and a where: ONNX's Pad would add a reversed slice)
        real = values < counts[:, None]
        index = np.where(real, starts[:, None] + values, 0)
        self.index: torch.Tensor
        self.padding: torch.Tensor
        self.register_buffer("index", torch.as_tensor(index.reshape(-1)), persistent=False)
        self.register_buffer("padding", torch.as_tensor(~real.reshape(-1)), persistent=False)

    def logits(self, obs: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        """``(batch, *action_shape, max(nvec))``; ``features``: the encoder's output for
        ``obs``, already computed (a shared encoder)."""
        out = self.outputs(obs) if features is None else self.net.forward(features)
        if not self.uniform:
            out = out[..., self.index].masked_fill(self.padding, torch.finfo(out.dtype).min)
        return out.reshape(*out.shape[:-1], *self.action_shape, self.width)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.logits(obs)

    def sample(self, obs: torch.Tensor) -> torch.Tensor:
        """An action ``(batch, *action_shape)``, each entry drawn from its own logits."""
        return sample_categorical(self.logits(obs))

    def log_prob_entropy(self, obs: torch.Tensor, act: torch.Tensor, *,
                         features: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi(a|s) of the actions ``act`` (``(batch, *action_shape)``, int64) and the
        entropy at s, each summed over the entries."""
        logp_all = self.logits(obs, features).log_softmax(-1)
        logp = logp_all.gather(-1, act.reshape(logp_all.shape[:-1]).unsqueeze(-1))
        # a padded value's probability is exactly 0 and its log finite: it adds 0
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp.reshape(len(logp), -1).sum(-1), entropy.reshape(len(entropy), -1).sum(-1)


# --------------------------------------------------------------------------- critics
class _MemberMLPs(nn.Module):
    """``n`` independent MLPs over one encoder's features, evaluated as one: each layer is a
    batched matrix product over the members (one kernel instead of n). Each member's weights
    start orthogonal, as ``nn.Linear`` layers would (gain sqrt(2), 1 for the last)."""

    def __init__(self, encoder: Encoder, sizes: Sequence[int], activation: str, n: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.n = n
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            gain = 1.0 if i == len(sizes) - 2 else np.sqrt(2)
            w = torch.empty(n, a, b)
            for k in range(n):  # orthogonal per member, as nn.Linear layers would be
                nn.init.orthogonal_(w[k].T, gain)
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(torch.zeros(n, 1, b)))
        self._act = ACTIVATIONS[activation]

    def _members(self, x: torch.Tensor) -> torch.Tensor:
        """Every member's output for inputs ``x`` ``(batch, in)``: ``(n, batch, out)``."""
        x = x.expand(self.n, *x.shape)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = torch.baddbmm(b, x, w)
            if i < last:
                x = self._act(x)
        return x


class QCritics(_MemberMLPs):
    """``n`` independent Q(s, a) networks evaluated as one: each layer is a batched matrix
    product over the members (one kernel instead of n), which halves the op count of twin
    critics. ``forward(obs, act)`` returns ``(n, batch)``; n = 1 is a single critic. The
    members share one encoder: its features, with the action, are every member's input."""

    def __init__(self, encoder: Encoder, action_dim: int, hidden_sizes: Sequence[int],
                 activation: str, n: int = 2) -> None:
        super().__init__(encoder, [encoder.out_dim + action_dim, *hidden_sizes, 1], activation,
                         n)

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return self._members(torch.cat((self.encoder.forward(obs), act), -1)).squeeze(-1)


class DiscreteQCritics(_MemberMLPs):
    """``n`` independent Q(s, .) networks over ``num_actions`` discrete actions, evaluated as
    one (discrete SAC's twin critics): ``forward(obs)`` returns ``(n, batch, num_actions)``,
    every action's value from every member, so a soft value can take the policy's whole
    expectation over actions instead of a sampled one. As in :class:`QCritics`, each layer is
    one batched matrix product over the members, which share one encoder."""

    def __init__(self, encoder: Encoder, num_actions: int, hidden_sizes: Sequence[int],
                 activation: str, n: int = 2) -> None:
        super().__init__(encoder, [encoder.out_dim, *hidden_sizes, num_actions], activation, n)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self._members(self.encoder.forward(obs))
