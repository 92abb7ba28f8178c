"""What smoke_collector.py's worker processes unpickle: the env factories and the policy network.

A spawned collector worker unpickles the policy by reference (module name plus class
name), so the class must live in a module the worker can import: this one, found on the
``sys.path`` the parent hands to its workers (the scripts folder). Imported lazily by the
script, so ``--help`` and the stack probe never import torch.
"""

from __future__ import annotations

import torch
from tensordict.nn import TensorDictModule

# Pendulum clips its action to [-2, 2]; the policy below outputs exactly its bias.
BIAS_BEFORE = 0.0
BIAS_AFTER = 0.5


def make_env():
    """A PendulumEnv (torchrl.envs.PendulumEnv, 0.14.1): keys th, thdot [*B]; action [*B, 1]."""
    from torchrl.envs import PendulumEnv

    return PendulumEnv()


def make_batched_env():
    """SerialEnv of 2 PendulumEnv: batch_size [2]; a collector batch from it is [2, T]."""
    from torchrl.envs import SerialEnv

    return SerialEnv(2, make_env)


class BiasPolicyNet(torch.nn.Module):
    """action = Linear(2, 1)([cos th, thdot]) with zero weight: every action equals the bias."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.constant_(self.linear.bias, BIAS_BEFORE)

    def forward(self, th, thdot):
        return self.linear(torch.stack([th.cos(), thdot], -1))


def make_policy() -> TensorDictModule:
    """TensorDictModule(in_keys=["th", "thdot"], out_keys=["action"]) whose action is its bias.

    Changing ``policy.module.linear.bias`` changes every action to that value, which makes
    a weight update visible in collected data.
    """
    return TensorDictModule(BiasPolicyNet(), in_keys=["th", "thdot"], out_keys=["action"])


def set_bias(policy: TensorDictModule, value: float) -> None:
    """Set the policy's output bias in place (weights stay zero)."""
    with torch.no_grad():
        policy.module.linear.bias.fill_(value)


def actions(td) -> list[float]:
    """The distinct actions of a batch, rounded to 4 decimals, sorted."""
    return sorted({round(float(a), 4) for a in td["action"].reshape(-1).tolist()})
