"""Trainers: epochs of training steps, each epoch closed by a test step.

The semantics and parameter names follow Tianshou 2.0's trainer documentation:

* An epoch runs training steps until ``epoch_num_steps`` env steps (online) or
  update steps (offline) are done, then one test step.
* An online training step is a collection step, then (with ``test_in_training``)
  a test step if the collected episodes already reach the stop score, then an
  update step. Offline, a training step is one update step.
* Update step: on-policy, the whole rollout ``update_step_num_repetitions``
  times in minibatches, then the rollout is cleared; off-policy,
  ``round(u * n)`` gradient steps for the n transitions just collected;
  offline, one gradient step.

A trainer orchestrates and knows nothing of an algorithm's internals, nor of
files: saving goes through the callbacks, writing through the loggers.

The package, one module a concern, each importing only those below it (its own contract in
``.importlinter``): ``onpolicy``, ``offpolicy`` (and ``offline``) over ``online`` (collection,
shared by the two online kinds), over ``base`` (the loop every kind runs), over ``storage``
(what each kind stores, planned before anything is built). This module names the kinds.

A layer under the run assembly: the trainers may import the algorithms (their base class),
the data path (the collector, storage, samplers, datasets), the loggers and the layers below;
never the assembly, a sweep or a command.
"""

from __future__ import annotations

from rltrain.trainers.base import (
    PARAMETER_CHECK_INTERVAL,
    Callbacks,
    Interrupted,
    Trainer,
    derived_seed,
    failure_text,
    learn_from_a_batch,
)
from rltrain.trainers.offline import OfflineTrainer
from rltrain.trainers.offpolicy import OffPolicyTrainer
from rltrain.trainers.online import OnlineTrainer
from rltrain.trainers.onpolicy import OnPolicyTrainer
from rltrain.trainers.storage import (
    Storage,
    StoragePlan,
    StorageRequest,
    make_buffer,
    replay_buffer,
)

#: the trainer kinds, by ``trainer=<name>``
TRAINERS: dict[str, type[Trainer]] = {
    kind.name: kind for kind in (OnPolicyTrainer, OffPolicyTrainer, OfflineTrainer)}

__all__ = ["PARAMETER_CHECK_INTERVAL", "TRAINERS", "Callbacks", "Interrupted", "OfflineTrainer",
           "OffPolicyTrainer", "OnPolicyTrainer", "OnlineTrainer", "Storage", "StoragePlan",
           "StorageRequest", "Trainer", "derived_seed", "failure_text", "learn_from_a_batch",
           "make_buffer", "replay_buffer"]
