"""Temporally correlated ("coloured") Gaussian noise for exploration with continuous actions.

White noise, drawn afresh at every env step, averages out over a few steps: in an env where
reaching the reward takes a sustained push (MountainCarContinuous: build up momentum, then
climb), an agent exploring with it rarely gets there. Noise whose power spectral density falls
off as 1/f^beta along time keeps its direction for longer: beta = 0 is white, 1 pink, 2 red
(Brownian). Eberhard et al. 2023, "Pink Noise Is All You Need: Colored Noise Exploration in
Deep Reinforcement Learning" (ICLR), find pink noise a good default for SAC, TD3 and DDPG,
and that it solves MountainCarContinuous where white noise fails.

The noise is generated in chunks of ``length`` steps per stream (one stream per env and
action dimension) by shaping white Gaussian noise in the frequency domain (Timmer & Koenig
1995, "On generating power law noise", A&A 300:707), scaled so that every step is marginally
N(0, 1). Its state (the generator, the chunk, the position in it) is plain data, so that a
checkpoint resumes it exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def colored_noise(beta: float, shape: tuple[int, ...], length: int,
                  rng: np.random.Generator) -> np.ndarray:
    """``shape + (length,)`` samples: independent streams along the last axis, each with a
    power spectral density proportional to 1/f^beta and unit marginal variance."""
    freqs = np.fft.rfftfreq(length)
    freqs[0] = 1.0 / length  # the lowest frequency the chunk can hold stands in for DC
    amplitude = freqs ** (-beta / 2.0)
    # the variance of each output step, which the result is divided by: a complex
    # coefficient k (real and imaginary parts N(0, a_k^2)) adds 4 a_k^2 / n^2; the DC term
    # and, for an even length, the Nyquist term are real, scaled by sqrt(2): 2 a_k^2 / n^2
    terms = 4.0 * amplitude**2
    terms[0] = 2.0 * amplitude[0] ** 2
    if length % 2 == 0:
        terms[-1] = 2.0 * amplitude[-1] ** 2
    sigma = np.sqrt(terms.sum()) / length
    real = rng.standard_normal((*shape, len(freqs))) * amplitude
    imag = rng.standard_normal((*shape, len(freqs))) * amplitude
    imag[..., 0] = 0.0  # a real signal's DC coefficient is real
    real[..., 0] *= np.sqrt(2.0)
    if length % 2 == 0:
        imag[..., -1] = 0.0
        real[..., -1] *= np.sqrt(2.0)
    return np.fft.irfft(real + 1j * imag, n=length, axis=-1) / sigma


class ColoredNoise:
    """One step of noise per call, shape ``shape`` (envs, action dims), from streams generated
    ``length`` steps at a time."""

    def __init__(self, beta: float, shape: tuple[int, ...], length: int, seed: int) -> None:
        self.beta, self.shape, self.length = float(beta), tuple(shape), int(length)
        self.rng = np.random.default_rng(seed)
        self.chunk: np.ndarray | None = None
        self.position = self.length

    def __call__(self) -> np.ndarray:
        if self.chunk is None or self.position >= self.length:
            self.chunk = colored_noise(self.beta, self.shape, self.length, self.rng)
            self.position = 0
        step = self.chunk[..., self.position]
        self.position += 1
        return step.astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        """Plain data (the chunk as a tensor), which checkpoints load with weights_only."""
        return {"rng": self.rng.bit_generator.state, "position": self.position,
                "chunk": None if self.chunk is None else torch.from_numpy(self.chunk.copy()),
                "shape": list(self.shape), "beta": self.beta, "length": self.length}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> ColoredNoise:
        noise = cls(state["beta"], tuple(state["shape"]), state["length"], 0)
        noise.rng.bit_generator.state = state["rng"]
        noise.position = int(state["position"])
        noise.chunk = None if state["chunk"] is None else state["chunk"].numpy().copy()
        return noise
