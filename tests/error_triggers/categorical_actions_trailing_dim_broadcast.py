"""IQLLoss with Categorical(n, shape=(1,)) actions stored as [B, 1] and a torch Categorical policy: the
log-prob broadcasts to [B, B] (pytorch/rl#3122, torchrl 0.14.1)."""

import warnings

import torch
from tensordict import TensorDict
from torch import nn


def trigger():
    from torchrl.data import Categorical
    from torchrl.modules import ProbabilisticActor, SafeModule
    from torchrl.objectives import IQLLoss

    n_act, n_obs, B = 4, 3, 8

    class Q(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(n_obs + n_act, 1)

        def forward(self, obs, act):
            return self.lin(torch.cat([obs, nn.functional.one_hot(act.squeeze(-1), n_act).float()], -1))

    actor = ProbabilisticActor(SafeModule(nn.Linear(n_obs, n_act), in_keys=["observation"], out_keys=["logits"]),
                               in_keys=["logits"], spec=Categorical(n_act, shape=(1,)), distribution_class=torch.distributions.Categorical)
    qvalue = SafeModule(Q(), in_keys=["observation", "action"], out_keys=["state_action_value"])
    value = SafeModule(nn.Linear(n_obs, 1), in_keys=["observation"], out_keys=["state_value"])
    done = torch.zeros(B, 1, dtype=torch.bool)
    data = TensorDict({"observation": torch.randn(B, n_obs), "action": torch.randint(n_act, (B, 1)),
                       ("next", "observation"): torch.randn(B, n_obs), ("next", "reward"): torch.randn(B, 1),
                       ("next", "done"): done, ("next", "terminated"): done}, [B])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the no-target-updater warning is not the point here
        IQLLoss(actor, qvalue, value)(data)
