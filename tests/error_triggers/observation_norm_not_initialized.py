"""A rollout through ObservationNorm built without loc/scale and never init_stats'ed."""


def trigger():
    from torchrl.envs import ObservationNorm, PendulumEnv, TransformedEnv

    env = TransformedEnv(PendulumEnv(), ObservationNorm(in_keys=["th"], standard_normal=True))
    env.rollout(3)
