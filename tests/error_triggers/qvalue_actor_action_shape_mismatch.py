"""QValueActor over a Categorical(n, shape=(1,)) spec with the default strict_shape (pytorch/rl#3059,
torchrl 0.14.1)."""

import torch
from tensordict import TensorDict
from torch import nn


def trigger():
    from torchrl.data import Categorical
    from torchrl.modules import QValueActor

    actor = QValueActor(nn.Linear(3, 4), in_keys=["observation"], spec=Categorical(4, shape=(1,)))
    actor(TensorDict({"observation": torch.randn(12, 3)}, [12]))
