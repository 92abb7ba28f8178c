"""TensorDictReplayBuffer over an ndim=2 storage, written one env step at a time ([2, 1])."""


def trigger():
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100, ndim=2))
    rb.extend(TensorDict({"obs": torch.zeros(2, 1)}, batch_size=[2, 1]))  # [num_envs, one step]
