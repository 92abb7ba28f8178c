"""A multi-process collector given a policy whose network class is defined inside a function."""

SUBPROCESS = True


def trigger():
    import torch
    from tensordict.nn import TensorDictModule
    from torchrl.collectors import MultiSyncCollector
    from torchrl.envs import PendulumEnv

    class Net(torch.nn.Module):  # local: spawn pickles classes by reference and cannot find it
        def forward(self, th):
            return torch.zeros(*th.shape, 1)

    policy = TensorDictModule(Net(), in_keys=["th"], out_keys=["action"])
    MultiSyncCollector([PendulumEnv], policy, frames_per_batch=10, total_frames=10)
