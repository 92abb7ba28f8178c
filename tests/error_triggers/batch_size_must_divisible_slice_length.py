"""SliceSampler(slice_len=3) asked for a batch of 10."""


def trigger():
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, ReplayBuffer, SliceSampler

    rb = ReplayBuffer(storage=LazyTensorStorage(100), sampler=SliceSampler(slice_len=3, traj_key="episode"))
    rb.extend(TensorDict({"episode": torch.zeros(30)}, batch_size=[30]))
    rb.sample(10)
