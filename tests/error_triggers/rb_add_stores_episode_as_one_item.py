"""ReplayBuffer.add(episode) keeps the whole [T] episode as one item; SliceSampler then sees a 2-D end
signal (pytorch/rl#2948, torchrl 0.14.1)."""

import torch
from tensordict import TensorDict


def trigger():
    from torchrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=SliceSampler(slice_len=5, traj_key="episode"))
    for i in range(2):
        rb.add(TensorDict({"obs": torch.arange(10), "episode": torch.full((10,), i)}, [10]))
    rb.sample(10)
