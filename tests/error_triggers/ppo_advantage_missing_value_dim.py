"""ClipPPOLoss on a multi-agent minibatch with a root advantage lacking its trailing value dim
(pytorch/rl#3316, torchrl 0.14.1)."""

import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn


def trigger():
    from torchrl.modules import ProbabilisticActor, TanhNormal
    from torchrl.objectives import ClipPPOLoss

    B, n = 10, 3
    actor = ProbabilisticActor(
        TensorDictModule(nn.Sequential(nn.Linear(4, 4), NormalParamExtractor()), [("agents", "observation")], [("agents", "loc"), ("agents", "scale")]),
        in_keys={"loc": ("agents", "loc"), "scale": ("agents", "scale")}, out_keys=[("agents", "action")],
        distribution_class=TanhNormal, return_log_prob=True, log_prob_key=("agents", "action_log_prob"))
    critic = TensorDictModule(nn.Linear(4, 1), [("agents", "observation")], [("agents", "state_value")])
    loss = ClipPPOLoss(actor, critic)
    loss.set_keys(action=("agents", "action"), sample_log_prob=("agents", "action_log_prob"), value=("agents", "state_value"))
    data = TensorDict({"agents": TensorDict({"observation": torch.randn(B, n, 4), "action": torch.rand(B, n, 2) * 1.8 - 0.9,
                                             "action_log_prob": torch.randn(B, n)}, [B, n]),
                       "advantage": torch.randn(B), "value_target": torch.randn(B, n, 1)}, [B])
    loss(data)
