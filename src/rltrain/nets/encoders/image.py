"""Convolutional encoders for image observations (a Box of uint8 or bool with three axes).

Every one starts with :class:`ImageInput`: the env's raw observation in (uint8, HWC or CHW),
float32 CHW scaled to [0, 1] out. The scale is ``1 / high`` of the observation space, per
element: 1/255 for pixels, 1 for MinAtar's 0/1 channels, and MiniGrid's object, colour and
state indices each by their own largest value (``env=minigrid`` narrows the space's bounds
to those). Scaling inside the network is what lets the deployable policy, ``rltrain-eval``
and the ONNX graph take the env's observation as it is.

Channel order: an image is channels-first when its first axis is strictly smaller than its
last (Atari's frame stack (4, 84, 84)), else channels-last (MinAtar's (10, 10, n), MiniGrid's
(7, 7, 3), CarRacing's (96, 96, 3)); a channels-last image is permuted to CHW inside the
network.

- ``nature``: Mnih et al. 2015 (Nature 518:529), the Atari DQN's torso: 32 8x8/4, 64 4x4/2,
  64 3x3/1 convolutions and a 512-unit layer, ReLU throughout (as CleanRL's ``ppo_atari`` and
  Stable-Baselines3's NatureCNN). Images of at least 36x36 pixels.
- ``minatar``: Young & Tian 2019 (arXiv:1903.03176), the MinAtar network's torso: one 16
  3x3/1 convolution, ReLU, flattened (their 128-unit layer is the network's hidden layer:
  ``algo.hidden_sizes=[128]``). Chosen for images smaller than 36x36.
- ``impala``: Espeholt et al. 2018 (arXiv:1802.01561), the IMPALA ResNet: three stacks of a
  3x3 convolution, a 3x3/2 max-pool and two residual blocks (16, 32, 32 channels), then a
  256-unit layer. Only by name: ``algo.encoder=impala``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rltrain.nets.encoders.registry import Encoder, EncoderSpec, register
from rltrain.spaces.observations import is_image

#: the smallest height and width the Nature CNN's strides leave a feature map for
NATURE_MIN_SIZE = 36


def channels_last(shape: tuple[int, ...]) -> bool:
    """Whether an image of this shape is HWC (see the module's docstring)."""
    return not shape[0] < shape[-1]


def chw(shape: tuple[int, ...]) -> tuple[int, int, int]:
    c, h, w = (shape[2], shape[0], shape[1]) if channels_last(shape) else shape
    return int(c), int(h), int(w)


class ImageInput(nn.Module):
    """Raw images (uint8 or bool, the env's layout) to float32 CHW in [0, 1], laid out in
    NHWC memory for the convolutions.

    oneDNN's CPU convolutions run faster on NHWC memory (``channels_last``: the same values
    and shape, channel-fastest): the Nature CNN's step at batch 256 on one thread took
    264-283 against 311-338 ms (``scripts/bench_encoders.py``). An HWC image is that already
    once permuted; a CHW one (Atari's frame stack) is converted and laid out in one copy.
    Where every element has the same bound (255 for pixels) the scale is one number,
    multiplied in place: a scale tensor broadcast over NHWC memory was a strided kernel,
    1.4 ms a call on PPO's Atari minibatches (with the copies, a fifth of its update)."""

    scale: torch.Tensor

    def __init__(self, space: gym.spaces.Box) -> None:
        super().__init__()
        self.last = channels_last(space.shape)
        high = np.broadcast_to(np.asarray(space.high, dtype=np.float64), space.shape)
        # an element whose bound is 0 (or not finite) is left unscaled
        scale = np.where(np.isfinite(high) & (high > 0), 1.0 / np.where(high > 0, high, 1), 1.0)
        if self.last:
            scale = scale.transpose(2, 0, 1)
        self.register_buffer("scale", torch.as_tensor(np.ascontiguousarray(scale),
                                                      dtype=torch.get_default_dtype()))
        #: the scale when every element shares it (None: per element)
        self.uniform = float(scale.flat[0]) if np.all(scale == scale.flat[0]) else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.last:
            obs = obs.permute(0, 3, 1, 2)  # a channels-last view: NCHW shape, NHWC memory
        layout = torch.channels_last if obs.dim() == 4 else torch.preserve_format
        x = obs.to(self.scale.dtype, memory_format=layout)
        if self.uniform is None:
            return x * self.scale
        if x is obs:  # a float input, already so laid out: not ours to scale in place
            return x * self.uniform
        return x.mul_(self.uniform)


def _init(module: nn.Module) -> None:
    """Orthogonal weights with gain sqrt(2) and zero biases, as the MLP layers have (and as
    CleanRL's Atari agents initialise their torsos)."""
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)) and m.bias is not None:
            nn.init.orthogonal_(m.weight, np.sqrt(2))
            nn.init.zeros_(m.bias)


def out_shape(module: nn.Module, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape (batch axis left out) ``module`` turns an input of ``shape`` into, worked out
    from its layers' arithmetic rather than by a trial pass: a trial pass over a large image
    costs real memory, and on the meta device (where rltrain.assembly.footprint sizes a run's
    networks before building them) seconds of imports. :raises TypeError: a layer it does not
    know."""
    if isinstance(module, nn.Sequential):
        for layer in module:
            shape = out_shape(layer, shape)
        return shape
    if isinstance(module, (nn.Conv2d, nn.MaxPool2d)):
        c, h, w = shape

        def pair(x: object) -> tuple[int, int]:
            if isinstance(x, int):
                return x, x
            if isinstance(x, tuple) and len(x) == 2 and all(isinstance(n, int) for n in x):
                return int(x[0]), int(x[1])
            raise TypeError(f"out_shape: {type(module).__name__} with {x!r}")

        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (pair(x) for x in (
            module.kernel_size, module.stride, module.padding, module.dilation))
        if isinstance(module, nn.MaxPool2d) and module.ceil_mode:
            raise TypeError("out_shape: a max-pool with ceil_mode")
        h = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        w = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        return (module.out_channels if isinstance(module, nn.Conv2d) else c, h, w)
    if isinstance(module, nn.Flatten):
        return (int(np.prod(shape)),)
    if isinstance(module, nn.Linear):
        return (module.out_features,)
    if isinstance(module, (nn.ReLU, _Residual)):  # shape-preserving
        return shape
    raise TypeError(f"out_shape: no arithmetic for {type(module).__name__}")


class ConvEncoder(Encoder):
    """ImageInput, a convolutional torso, flattened; its out_dim worked out from the torso's
    layers (:func:`out_shape`)."""

    def __init__(self, space: gym.spaces.Box, torso: nn.Module) -> None:
        super().__init__()
        self.input = ImageInput(space)
        self.torso = torso
        _init(self.torso)
        (self.out_dim,) = out_shape(self.torso, chw(space.shape))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.torso(self.input(obs))


def _box(space: gym.Space) -> gym.spaces.Box:
    assert isinstance(space, gym.spaces.Box)  # the specs' accepts() let only images through
    return space


def nature_cnn(space: gym.Space) -> ConvEncoder:
    space = _box(space)
    c, h, w = chw(space.shape)
    convs = nn.Sequential(
        nn.Conv2d(c, 32, 8, stride=4), nn.ReLU(),
        nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten())
    (flat,) = out_shape(convs, (c, h, w))
    return ConvEncoder(space, nn.Sequential(convs, nn.Linear(flat, 512), nn.ReLU()))


def minatar_cnn(space: gym.Space) -> ConvEncoder:
    space = _box(space)
    c, _, _ = chw(space.shape)
    return ConvEncoder(space, nn.Sequential(nn.Conv2d(c, 16, 3, stride=1), nn.ReLU(),
                                            nn.Flatten()))


class _Residual(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


def impala_cnn(space: gym.Space) -> ConvEncoder:
    space = _box(space)
    c, h, w = chw(space.shape)
    layers: list[nn.Module] = []
    for out in (16, 32, 32):
        layers += [nn.Conv2d(c, out, 3, padding=1), nn.MaxPool2d(3, stride=2, padding=1),
                   _Residual(out), _Residual(out)]
        c = out
    layers += [nn.ReLU(), nn.Flatten()]
    convs = nn.Sequential(*layers)
    (flat,) = out_shape(convs, chw(space.shape))
    return ConvEncoder(space, nn.Sequential(convs, nn.Linear(flat, 256), nn.ReLU()))


def _size(space: gym.Space) -> int:
    _, h, w = chw(tuple(space.shape or ()))
    return min(h, w)


def large_image(space: gym.Space) -> bool:
    return is_image(space) and _size(space) >= NATURE_MIN_SIZE


def too_small(space: gym.Space) -> str | None:
    if is_image(space) and _size(space) < 3:
        return f"an image of {space.shape} is smaller than a 3x3 convolution"
    return None


register(EncoderSpec(
    name="nature", accepts=large_image, build=nature_cnn, priority=20,
    description=f"the Nature DQN CNN (Mnih et al. 2015) for images of at least "
                f"{NATURE_MIN_SIZE}x{NATURE_MIN_SIZE}",
))
register(EncoderSpec(
    name="minatar", accepts=lambda s: is_image(s) and _size(s) >= 3, build=minatar_cnn,
    priority=10,
    description="the MinAtar CNN (Young & Tian 2019): one 16-channel 3x3 convolution",
    refusal=too_small,
))
register(EncoderSpec(
    name="impala", accepts=lambda s: is_image(s) and _size(s) >= 8, build=impala_cnn,
    priority=-10,
    description="the IMPALA ResNet (Espeholt et al. 2018); by name only",
))
