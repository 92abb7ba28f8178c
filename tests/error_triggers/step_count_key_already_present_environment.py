"""max_frames_per_traj on an env that already counts its steps."""


def trigger():
    from torchrl.collectors import Collector
    from torchrl.envs import PendulumEnv, StepCounter, TransformedEnv

    Collector(TransformedEnv(PendulumEnv(), StepCounter()), None, frames_per_batch=10, total_frames=10, max_frames_per_traj=5)
