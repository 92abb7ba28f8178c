"""Composite with its batch shape passed positionally, as in the report's per-agent group
(pytorch/rl#3139, torchrl 0.14.1): the second positional argument is not ``shape``."""

import torch


def trigger():
    from torchrl.data import Composite, Unbounded

    Composite({"observation": Unbounded((3, 4))}, torch.Size([3]))
