"""GymEnv with neither gymnasium nor gym importable (hidden here)."""

SUBPROCESS = True


def trigger():
    from _tiny import hide_modules

    hide_modules("gymnasium", "gym")
    from torchrl.envs import GymEnv

    GymEnv("CartPole-v1")
