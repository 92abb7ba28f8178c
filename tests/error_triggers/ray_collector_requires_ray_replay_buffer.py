"""RayCollector given an in-process ReplayBuffer (torchrl 0.14.1): rejected in the constructor,
before Ray starts. Run in its own interpreter so ``ray`` is not imported into the test process
(src/torchrl_skill/runtime/ray_local.py must be the first to import it)."""

SUBPROCESS = True


def trigger():
    import torch
    from tensordict.nn import TensorDictModule
    from torchrl.collectors.distributed import RayCollector
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    def make_env():
        from torchrl.envs import PendulumEnv

        return PendulumEnv()

    policy = TensorDictModule(torch.nn.Linear(2, 1), ["th"], ["action"])
    RayCollector([make_env], policy, frames_per_batch=10, total_frames=20,
                 replay_buffer=ReplayBuffer(storage=LazyTensorStorage(10)))
