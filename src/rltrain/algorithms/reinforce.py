"""REINFORCE: Williams 1992, "Simple Statistical Gradient-Following Algorithms for
Connectionist Reinforcement Learning" (Machine Learning 8:229-256), with a learnt state-value
baseline (Williams' reinforcement baseline; Sutton & Barto 2018, section 13.4).

The policy gradient with Monte-Carlo returns: each transition's advantage is its discounted
return to the end of its episode minus the baseline's V(s), and one gradient step learns the
policy from it and the baseline from the mean squared error to the returns. The returns are
the whole rest of each episode, so the algorithm collects whole episodes
(``trainer.collection_step_num_episodes``, set by ``conf/trainer/defaults/reinforce.yaml``).
Unlike A2C, the baseline never stands in for rewards to come, with one exception: an episode
cut by its time limit (truncated, not terminated) ends in a state whose future the env
merely stopped showing, and its return is completed with V of that state (Pardo et al. 2018,
"Time Limits in Reinforcement Learning", arXiv:1712.00378) rather than taken to be 0 there.

Episodes span collection steps (the collector resets an env only when its episode ends), so
with several train envs the rollout holds, at the end of each lane, the beginning of an
episode still running when the collection stopped. Its return is not known yet, so those
transitions are not learnt from (the stat ``learnt_fraction`` says how many were); the rest of
that episode is learnt from in the next update. With one train env nothing is left out.
The gradient is that of the return from each state on (the usual form; Williams' and Sutton &
Barto's weigh step t by gamma^t as well, which ignores most of a long episode).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rltrain.algorithms.a2c import A2CStats, PolicyGradient, PolicyGradientConfig
from rltrain.algorithms.registry import (
    CONTINUOUS,
    DISCRETE,
    MULTIDISCRETE,
    AlgoSpec,
    register,
)
from rltrain.data.batch import Rollout
from rltrain.data.transforms import Transform
from rltrain.data.transforms.finished import FinishedEpisodes
from rltrain.data.transforms.gae import GAE


@dataclass
class ReinforceConfig(PolicyGradientConfig):
    """REINFORCE with a learnt baseline (Williams 1992), on whole episodes, on-policy."""

    name: str = "reinforce"
    lr: float = 1e-3
    optimizer: str = "adam"
    #: returns over many episodes differ in scale: each step sees them at mean 0, std 1
    normalize_advantage: bool = True


@dataclass(frozen=True)
class ReinforceStats(A2CStats):
    #: the fraction of the rollout's transitions learnt from: those whose episode ended in it
    learnt_fraction: float


class Reinforce(PolicyGradient):
    cfg: ReinforceConfig

    def transforms(self) -> tuple[Transform, ...]:
        """G_t - V(s_t), with G_t the discounted return to the episode's end: GAE with
        lambda = 1 sums the rewards to the first done (the TD errors telescope, V cancels but
        for a truncated episode's last state), and only finished episodes are learnt from."""
        return (GAE(self, self.cfg.gamma, 1.0), FinishedEpisodes())

    def update_stats(self, rollout: Rollout, learn: np.ndarray, stats: A2CStats
                     ) -> ReinforceStats:
        total = rollout.num_transitions
        return ReinforceStats(**vars(stats),
                              learnt_fraction=float(learn.sum()) / total if total else 0.0)


register(AlgoSpec(
    name="reinforce", config=ReinforceConfig, build=Reinforce, trainers=("onpolicy",),
    actions=(DISCRETE, MULTIDISCRETE, CONTINUOUS),
    console=(("pg_loss", "pg"), ("v_loss", "vf"), ("entropy", "ent")),
    paper="Williams 1992, Machine Learning 8:229-256", masks=True,
))
