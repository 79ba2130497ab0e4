"""Algorithms by config name: their config schema and class."""

from rltrain.algorithms.base import Algorithm, OffPolicyAlgorithm, OnPolicyAlgorithm, Progress
from rltrain.algorithms.dqn import DQN
from rltrain.algorithms.ppo import PPO

__all__ = ["DQN", "PPO", "Algorithm", "OffPolicyAlgorithm", "OnPolicyAlgorithm", "Progress"]
