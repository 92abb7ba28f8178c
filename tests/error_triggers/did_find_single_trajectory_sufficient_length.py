"""A SliceSampler over trajectories all shorter than slice_len (lengths 4, 6, 3; slice_len 10)."""


def trigger():
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, ReplayBuffer, SliceSampler

    episode = torch.cat([torch.full((n,), k) for k, n in enumerate((4, 6, 3))])
    rb = ReplayBuffer(storage=LazyTensorStorage(100), sampler=SliceSampler(slice_len=10, traj_key="episode"))
    rb.extend(TensorDict({"episode": episode}, batch_size=[episode.numel()]))
    rb.sample(20)
