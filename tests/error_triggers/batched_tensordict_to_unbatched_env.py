"""env.step on a [2] tensordict for a batch-locked env of batch_size () (torchrl 0.14.1)."""

from _envs_base import SixFeatureEnv


def trigger():
    import torch

    env = SixFeatureEnv()
    td = env.reset()
    batched = torch.stack([td, td.clone()], 0)
    batched["action"] = torch.zeros(2, 1)
    env.step(batched)
