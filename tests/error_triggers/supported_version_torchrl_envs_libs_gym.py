"""GymEnv with neither gymnasium nor gym importable (hidden here)."""

SUBPROCESS = "cold"  # hides what a warm interpreter imported already


def trigger():
    from _tiny import hide_modules

    hide_modules("gymnasium", "gym")
    from torchrl.envs import GymEnv

    GymEnv("CartPole-v1")
