"""One-step batches of SerialEnv(2) flattened with reshape(-1) before extend: the envs interleave
in storage and a SliceSampler on ("collector", "traj_ids") sees trajectories of length 1."""


def trigger():
    import torch
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, ReplayBuffer, SliceSampler
    from torchrl.envs import PendulumEnv, SerialEnv

    torch.manual_seed(0)
    rb = ReplayBuffer(storage=LazyTensorStorage(100), sampler=SliceSampler(slice_len=4, traj_key=("collector", "traj_ids")))
    collector = Collector(SerialEnv(2, PendulumEnv), None, frames_per_batch=2, total_frames=40, max_frames_per_traj=10)
    try:
        for batch in collector:  # [2, 1]: one step of each env
            rb.extend(batch.reshape(-1))
    finally:
        collector.shutdown()
    rb.sample(8)
